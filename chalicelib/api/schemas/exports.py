"""Bodies and answers of /exports."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from chalicelib.api.schemas.common import CursorQuery, Id, RequestModel, ResponseModel, Timestamp
from chalicelib.api.schemas.file_imports import ResultsQuery
from chalicelib.api.schemas.records import RecordsQuery

Kind = Literal["matches", "match_records", "unmatched_records", "exceptions", "records", "file_import_results",
               "audit_events"]


class CreateExport(RequestModel):
    kind: Kind = Field(description="What to export; docs/exports.md lists each kind's columns")
    format: Literal["csv", "xlsx", "parquet"] = Field(default="csv")
    filters: dict[str, Any] = Field(
        default_factory=dict,
        description="The query parameters the kind's list route takes (JSON values), without its paging "
                    "(cursor, limit, offset): records and unmatched_records as GET /records (unmatched_records: "
                    "no status, no reconciliation_match_id), matches and match_records as GET "
                    "/reconciliation_matches, exceptions as GET /reconciliation_exceptions (sort too), "
                    "file_import_results as GET /file_imports/{id}/results with file_import_id, audit_events as "
                    "GET /audit_events")


class ExportResultsFilters(ResultsQuery):
    """file_import_results: the import's results route's filters, and the import."""
    file_import_id: Id


class UnmatchedRecordsFilters(RecordsQuery):
    """unmatched_records: GET /records' filters; the status is unreconciled (open, matched nowhere)."""


class ExportOut(ResponseModel):
    id: int
    kind: Kind
    format: Literal["csv", "xlsx", "parquet"]
    filters: dict[str, Any]
    status: Literal["pending", "processing", "completed", "failed"]
    rows_written: int = Field(description="Rows written so far; all of them once completed")
    byte_size: int | None = Field(description="The file's size once completed")
    filename: str
    columns: list[str] = Field(description="The file's columns, in order (docs/exports.md)")
    created_at: Timestamp
    started_at: Timestamp | None
    completed_at: Timestamp | None
    last_progress_at: Timestamp | None
    error_message: str | None
    download_url: str | None = Field(description="Once completed: a presigned GET of the file, valid for "
                                     "download_url_expires_in seconds; GET the export again for a fresh one")
    download_url_expires_in: int | None


class ExportPage(ResponseModel):
    data: list[ExportOut]
    next_cursor: str | None
    limit: int


__all__ = ["CursorQuery", "CreateExport", "ExportOut", "ExportPage", "ExportResultsFilters",
           "UnmatchedRecordsFilters"]
