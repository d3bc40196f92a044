"""Bodies and answers of /exports."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from chalicelib.api.schemas.audit_events import AuditEventsQuery
from chalicelib.api.schemas.common import (
    CursorQuery,
    Id,
    QueryModel,
    RequestModel,
    ResponseModel,
    Timestamp,
    documented,
    when,
)
from chalicelib.api.schemas.file_imports import ResultsQuery
from chalicelib.api.schemas.matches import MatchesQuery
from chalicelib.api.schemas.reconciliation_exceptions import ExceptionsQuery
from chalicelib.api.schemas.records import RecordsQuery

Kind = Literal["matches", "match_records", "unmatched_records", "exceptions", "records", "file_import_results",
               "audit_events", "period_close_report"]


class ExportResultsFilters(ResultsQuery):
    """file_import_results: the import's results route's filters, and the import."""
    file_import_id: Id


class UnmatchedRecordsFilters(RecordsQuery):
    """unmatched_records: GET /records' filters; the status is unreconciled (open, matched nowhere)."""


class PeriodCloseReportFilters(QueryModel):
    """period_close_report: the close, by its reconciliation and id (GET .../period_closes/{close_id})."""
    reconciliation_id: Id
    period_close_id: Id


PAGING = frozenset({"cursor", "limit", "offset"})
# Each kind's filters: its list route's query model, less its paging and what the kind fixes itself.
FILTER_MODELS: dict[str, tuple[type[BaseModel], frozenset[str]]] = {
    "records": (RecordsQuery, frozenset()),
    "unmatched_records": (UnmatchedRecordsFilters, frozenset({"status", "reconciliation_match_id"})),
    "matches": (MatchesQuery, frozenset()), "match_records": (MatchesQuery, frozenset()),
    "exceptions": (ExceptionsQuery, frozenset()), "file_import_results": (ExportResultsFilters, frozenset()),
    "audit_events": (AuditEventsQuery, frozenset()),
    "period_close_report": (PeriodCloseReportFilters, frozenset()),
}
# GET /records needs one of these (chalicelib/api/records.py STANDALONE_FILTERS); so does a records export.
RECORDS_NEED_ONE_OF = ("data_stream_key", "status", "reconciliation_match_id", "file_import_id", "external_id")


def filter_names(kind: str) -> frozenset[str]:
    model, dropped = FILTER_MODELS[kind]
    return frozenset(f.alias or name for name, f in model.model_fields.items()) - PAGING - dropped


def _filters_schema(kind: str) -> dict[str, Any]:
    """The kind's filters as the document states them: its list route's query parameters."""
    model, _ = FILTER_MODELS[kind]
    schema = model.model_json_schema(by_alias=True)
    names = filter_names(kind)
    stated: dict[str, Any] = {"type": "object", "additionalProperties": False,
                              "properties": {k: v for k, v in schema["properties"].items() if k in names}}
    required = [name for name in schema.get("required", []) if name in names]
    if required:
        stated["required"] = required
    if kind == "records":
        stated["anyOf"] = [{"required": [name]} for name in RECORDS_NEED_ONE_OF]
    return stated


def _filter_rules() -> list[dict[str, Any]]:
    rules = []
    for kind in FILTER_MODELS:
        stated = _filters_schema(kind)
        needed = "required" in stated or "anyOf" in stated
        rules.append(when({"properties": {"kind": {"const": kind}}, "required": ["kind"]},
                          {"properties": {"filters": stated}, **({"required": ["filters"]} if needed else {})}))
    return rules


class CreateExport(RequestModel):
    """The filters of each kind are checked as its list route checks its query (the rules below state them)."""
    model_config = ConfigDict(json_schema_extra=documented(allOf=_filter_rules()))
    kind: Kind = Field(description="What to export; docs/exports.md lists each kind's columns")
    format: Literal["csv", "xlsx", "parquet"] = Field(default="csv")
    filters: dict[str, Any] = Field(
        default_factory=dict,
        description="The query parameters the kind's list route takes (JSON values), without its paging "
                    "(cursor, limit, offset): records and unmatched_records as GET /records (unmatched_records: "
                    "no status, no reconciliation_match_id), matches and match_records as GET "
                    "/reconciliation_matches, exceptions as GET /reconciliation_exceptions (sort too), "
                    "file_import_results as GET /file_imports/{id}/results with file_import_id, audit_events as "
                    "GET /audit_events (an admin's only), period_close_report with reconciliation_id and "
                    "period_close_id")


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


__all__ = ["CursorQuery", "CreateExport", "ExportOut", "ExportPage"]
