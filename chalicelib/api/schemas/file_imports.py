"""Ingestion jobs (a file import, or a bulk request read as one), their item results, and the bodies
and answers of file imports."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from chalicelib.api.schemas.common import CursorQuery, Model, RequestModel, ResponseModel, Timestamp

FileImportStatus = Literal["pending", "processing", "replicating", "completed", "failed", "cancelled"]


class JobCountsOut(ResponseModel):
    """What every ingestion job answers first; each model built on it narrows `status` to the statuses it
    shows (it stays second in the schema's properties)."""
    id: int
    status: str
    total_items: int
    processed_items: int
    successful_items: int
    failed_items: int
    skipped_items: int
    url: str


class ItemResultOut(ResponseModel):
    index: int
    external_id: str | None
    status: Literal["successful", "failed", "skipped"]
    record_id: int | None
    error: str | None


class FileItemResultOut(ItemResultOut):
    line: int | None = Field(description="The line of the file the row starts on")


class ResultsQuery(CursorQuery):
    status: Literal["successful", "failed", "skipped"] | None = Field(
        default=None, description="Only the results of this status; all of them when absent")


class ItemResultPage(Model):
    data: list[FileItemResultOut] = Field(description="In item order. A file import keeps the line of its failed "
                                          "and skipped rows only; a successful row's result comes from the record "
                                          "it wrote (no line; no external_id once that record is deleted)")
    next_cursor: str | None = Field(description="null at the end; a page may be short when the status asked for "
                                    "is rare, so follow next_cursor, not the page's length")
    limit: int


class IngestionJobOut(JobCountsOut):
    status: FileImportStatus
    source: str | None
    filename: str | None
    expected_records_count: int | None
    progress: int
    parsing: bool
    decimal_places: int | None
    stuck: bool
    on_conflict: str | None
    error_message: str | None
    error_details: dict | None
    data_stream_ids: list[int]
    created_at: Timestamp
    started_at: Timestamp | None
    records_written_at: Timestamp | None
    completed_at: Timestamp | None
    last_progress_at: Timestamp | None
    cancellation_requested_at: Timestamp | None
    records_url: str
    results_url: str = Field(description="Every item's result, a page at a time: GET it with ?status=&cursor=")


class CreateFileImport(RequestModel):
    filename: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=255)]
    format: Literal["csv", "nacha", "bai2", "camt053", "mt940"] = Field(
        description="bai2, camt053 and mt940 are bank statements: only the stream's own account (its "
        "bank_account_id) is imported; other accounts of the file are listed in error_details")
    on_conflict: Literal["skip", "error"] = "skip"
    column_mapping: dict[Annotated[str, StringConstraints(min_length=1, max_length=255)],
                         Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        default_factory=dict, description="Source column name -> field name (date, amount, direction, "
        "description, external_id, currency) or metadata key")
    date_format: Literal["YYYY-MM-DD", "MM/DD/YYYY", "DD/MM/YYYY"] = "YYYY-MM-DD"
    decimal_places: Annotated[int, Field(ge=0, le=6)] | None = Field(
        default=None, description="Minor units of the amounts; default: the currency's")
    encoding: Literal["utf-8", "utf-16", "windows-1252", "iso-8859-1"] | None = Field(
        default=None, description="CSV only: the file's text encoding. Default: UTF-8 (or UTF-16 by its byte "
        "order mark), read as Windows-1252 where the file is not UTF-8 and that is safe (see README)")
    delimiter: Literal[",", ";", "\t", "|"] | None = Field(
        default=None, description="CSV only: the field delimiter. Default: the one the header line is split by "
        "most")
    nacha_control_mismatch: Literal["refuse", "warn"] = Field(
        default="refuse", description="NACHA only: a file whose entries and amount totals agree but whose "
        "control counts (batch, block, entry/addenda count) or entry hash do not is refused (default), or "
        "imported with each disagreement listed in error_details.warnings ('warn'). See docs/nacha.md")
    control_mismatch: Literal["refuse", "warn"] = Field(
        default="refuse", description="Bank statements (bai2, camt053, mt940): a file whose control totals, "
        "record counts or balances disagree is refused (default), or imported with each disagreement listed in "
        "error_details.warnings ('warn')")


class CreateRoutedFileImport(RequestModel):
    filename: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=255)]
    format: Literal["bai2", "camt053", "mt940"] = Field(
        description="A bank statement format: each account goes to the bank_feed stream whose bank_account_id "
        "matches it")
    on_conflict: Literal["skip", "error"] = "skip"
    control_mismatch: Literal["refuse", "warn"] = "refuse"


class FileImportOut(IngestionJobOut):
    upload_url: str | None = None


class IgnoredUploadOut(ResponseModel):
    byte_size: int | None
    received_at: Timestamp
    message: str


class FileImportDetailOut(IngestionJobOut):
    upload_url: str | None = Field(default=None, description="While the import waits for its file: a fresh "
                                   "presigned PUT URL (valid an hour at most, and never past the upload deadline)")
    results: list[FileItemResultOut] = Field(description="Rows that failed or were skipped, with their line")
    results_truncated: bool
    ignored_uploads: list[IgnoredUploadOut] = Field(
        default_factory=list, description="Files PUT to the upload URL after the import had started or "
        "ended: S3 accepted them, but they were not imported (an upload URL takes one file)")


class FileImportSummaryOut(IngestionJobOut):
    record_count: int
    total_credits: int
    total_debits: int
    net_amount: int
    date_range_start: str | None
    date_range_end: str | None
    currency: str | None


class FileImportPage(Model):
    data: list[FileImportSummaryOut]
    next_cursor: str | None
    limit: int
