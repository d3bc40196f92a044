"""Exports: a list the API serves (records, matches, exceptions, ...) written whole to a file in
S3 (CSV, XLSX or Parquet) by a job, then fetched through a short-lived download URL.

This module is the pure part: the kinds and formats, the export entity and its statuses, the
column set of each kind and how one entity becomes one row, and the cells a spreadsheet would run
as formulas neutralised. docs/exports.md documents the columns; a test holds the two together.
"""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

from chalicelib.domain.audit import AuditEntry
from chalicelib.domain.clock import iso, optional_iso, utc_now
from chalicelib.domain.csv_cells import neutralised_cell
from chalicelib.domain.events import Event, make_event
from chalicelib.domain.ingestion import ItemResult
from chalicelib.domain.matches import Match
from chalicelib.domain.money import decimal_string
from chalicelib.domain.period_closes import OpenMoney, PeriodClose
from chalicelib.domain.reconciliation_exceptions import ReconciliationException
from chalicelib.domain.records import Record
from chalicelib.domain.status_machine import StatusMachine


class ExportKind(str, Enum):
    MATCHES = "matches"
    MATCH_RECORDS = "match_records"
    UNMATCHED_RECORDS = "unmatched_records"
    EXCEPTIONS = "exceptions"
    RECORDS = "records"
    FILE_IMPORT_RESULTS = "file_import_results"
    AUDIT_EVENTS = "audit_events"
    PERIOD_CLOSE_REPORT = "period_close_report"


class ExportFormat(str, Enum):
    CSV = "csv"
    XLSX = "xlsx"
    PARQUET = "parquet"

    @property
    def content_type(self) -> str:
        return {ExportFormat.CSV: "text/csv; charset=utf-8",
                ExportFormat.XLSX: "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                ExportFormat.PARQUET: "application/vnd.apache.parquet"}[self]


class ExportStatus(str, Enum):
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"


EXPORT_STATUSES = StatusMachine({
    ExportStatus.PENDING: (ExportStatus.PROCESSING, ExportStatus.FAILED),
    ExportStatus.PROCESSING: (ExportStatus.COMPLETED, ExportStatus.FAILED),
})

# A CSV export is uploaded in parts of at least this size (S3 takes 5 MiB at least for every part
# but the last); the worker holds at most one part and one page of rows.
CSV_PART_BYTES = 8 * 1024 * 1024
# An XLSX sheet holds 1,048,576 rows: the header and this many rows, then the next sheet.
XLSX_ROWS_PER_SHEET = 1_048_575
# Rows of one Parquet row group (the worker spools this many rows at a time).
PARQUET_ROWS_PER_GROUP = 100_000
# Excel keeps 15 significant digits of a number: larger minor units are written as text.
XLSX_EXACT_INTEGER = 2 ** 53
# An XLSX cell holds at most this many characters (Excel's limit: XlsxWriter would cut a longer one short).
XLSX_CELL_CHARS = 32_767


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # "int" or "str": a Parquet column's type, an XLSX cell's (numbers stay numbers)
    description: str


@dataclass(frozen=True)
class Part:
    number: int
    etag: str


@dataclass(frozen=True)
class Export:
    environment: str
    id: int
    kind: ExportKind
    format: ExportFormat
    filters: Mapping[str, Any]
    status: ExportStatus
    created_at: datetime
    requested_by: str | None = None
    idempotency_key: str | None = None
    body_hash: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    last_progress_at: datetime | None = None
    rows_written: int = 0  # rows written so far (in parts uploaded, or spooled)
    byte_size: int | None = None
    file_key: str | None = None
    error_message: str | None = None
    # A CSV export's checkpoint: its multipart upload, the parts uploaded, the source's cursor after
    # the last row in them and how many rows they hold. A worker that stops resumes from there.
    upload_id: str | None = None
    parts: tuple[Part, ...] = ()
    source_cursor: str | None = None
    checkpoint_rows: int = 0
    slices: int = 0  # invocations that worked on it (a long CSV export continues in the next)
    restarts: int = 0  # the sweeper's re-sends of its message (a lost start, a worker that died)

    @property
    def finished(self) -> bool:
        return self.status in EXPORT_STATUSES.finished

    @property
    def filename(self) -> str:
        return f"{self.kind.value}-{self.id}.{self.format.value}"


class Superseded(Exception):
    """Another worker moved the export on (its checkpoint is not the one this worker started from):
    this one stops and leaves it to that one."""


class SpoolFull(Exception):
    """A spooled file and its working files passed the bound set on them (ExportLimits.spool_bytes)."""


class ExportTooLarge(Exception):
    """A spooled export (XLSX, Parquet) that would not finish within one invocation or fit its
    working space: it fails at once, naming CSV (no retry would do better)."""


def export_completed(export: Export) -> Event:
    """`export.completed` when an export ends, a failed one too (its status says which): the client
    fetches GET /v1/exports/{id} for a fresh download URL (a URL in an event would expire)."""
    return make_event(export.environment, "export.completed", f"export {export.id}",
                      export.completed_at or utc_now(), {
                          "id": export.id, "url": f"/v1/exports/{export.id}", "kind": export.kind.value,
                          "format": export.format.value, "status": export.status.value,
                          "rows_written": export.rows_written, "byte_size": export.byte_size,
                          "error_message": export.error_message, "completed_at": optional_iso(export.completed_at)})


def export_file_key(environment: str, export_id: int, kind: ExportKind, fmt: ExportFormat) -> str:
    return f"exports/{environment}/{export_id}/{kind.value}-{export_id}.{fmt.value}"


# Cells ------------------------------------------------------------------------------------------

def cell_text(value: Any) -> str:
    """A cell of a CSV file: empty for None, a neutralised string (a formula a spreadsheet would run
    gets a leading `'`), integers as they are."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return neutralised_cell(str(value))


def csv_bytes(rows: Iterable[Sequence[Any]]) -> bytes:
    """Rows as CSV lines (RFC 4180: CRLF, minimal quoting), every text cell neutralised."""
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n")
    for row in rows:
        writer.writerow([cell_text(v) for v in row])
    return out.getvalue().encode("utf-8")


def spreadsheet_cell(value: Any, column: Column) -> Any:
    """A cell of an XLSX sheet: an int column's value a number (as text past Excel's 15 digits),
    text as it is, None empty. The sheet writes text as a string cell, never a formula; one a
    spreadsheet would read as a formula if it were typed in (csv_cells.runs_as_formula) gets the
    quote-prefix style (Excel's own leading `'`, not part of the value): editing it keeps it text.
    Text longer than a cell holds: ExportTooLarge (the export fails, naming the formats that keep it)."""
    if value is None:
        return None
    if column.type == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value if abs(value) < XLSX_EXACT_INTEGER else str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if len(text) > XLSX_CELL_CHARS:  # cut short, the cell would hold another value (and no JSON)
        raise ExportTooLarge(f"a '{column.name}' cell of {len(text):,} characters is longer than an XLSX cell "
                             f"holds ({XLSX_CELL_CHARS:,}): ask for this export as CSV or Parquet, which keep "
                             "every value whole")
    return text


def _json(value: Any) -> str | None:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str) if value else None


def _when(value: datetime | None) -> str | None:
    return iso(value) if value is not None else None


# Columns ----------------------------------------------------------------------------------------

def _int(name: str, description: str) -> Column:
    return Column(name, "int", description)


def _str(name: str, description: str) -> Column:
    return Column(name, "str", description)


_RECORD_COLUMNS = (
    _int("id", "The record's id"),
    _str("data_stream_key", "Its data stream"),
    _str("date", "Its date, as stored (YYYY-MM-DD)"),
    _str("direction", "credit or debit"),
    _int("amount_minor", "The whole amount in minor units at decimal_places (never negative; direction says "
                         "which way), also when a match took a share of it (the record's `allocations` say how much)"),
    _str("amount", "The same amount as an exact decimal string, e.g. 123.45"),
    _str("currency", "ISO 4217 code"),
    _int("decimal_places", "The scale of amount_minor"),
    _str("status", "unreconciled, partially_reconciled, pending_confirmation or reconciled"),
    _str("external_id", "The sender's id, if any"),
    _str("description", "Its description, if any"),
    _int("file_import_id", "The import that wrote it, if one did"),
    _str("created_at", "When it was stored (ISO 8601, UTC)"),
    _str("metadata", "Its metadata as compact JSON, if any"),
)

COLUMNS: dict[ExportKind, tuple[Column, ...]] = {
    ExportKind.RECORDS: _RECORD_COLUMNS,
    ExportKind.UNMATCHED_RECORDS: _RECORD_COLUMNS,
    ExportKind.MATCHES: (
        _int("id", "The match's id"),
        _int("reconciliation_id", "Its reconciliation"),
        _str("status", "proposed or confirmed"),
        _int("record_count", "Records in it, both sides"),
        _int("reconciliation_rule_id", "The rule that made it; empty for a manual match"),
        _int("run_id", "The run that made it, if one did"),
        _str("group_key", "The key its rule grouped the records by"),
        _str("reason", "Why a manual match's difference was accepted"),
        _str("differences", "What differs between the sides, as compact JSON"),
        _str("created_at", "When it was made (ISO 8601, UTC)"),
    ),
    ExportKind.MATCH_RECORDS: (
        _int("match_id", "The match"),
        _int("reconciliation_id", "Its reconciliation"),
        _str("match_status", "proposed or confirmed"),
        _str("side", "a or b: the side of the reconciliation it is on"),
        _int("record_id", "The record"),
        _str("data_stream_key", "The record's data stream"),
        _str("date", "The record's date, as stored"),
        _str("direction", "credit or debit"),
        _int("amount_minor", "Minor units at decimal_places"),
        _str("amount", "The same amount as an exact decimal string"),
        _str("currency", "ISO 4217 code"),
        _int("decimal_places", "The scale of amount_minor"),
        _str("external_id", "The sender's id, if any"),
        _str("description", "The record's description, if any"),
        _str("match_created_at", "When the match was made (ISO 8601, UTC)"),
    ),
    ExportKind.EXCEPTIONS: (
        _int("id", "The exception's id"),
        _int("reconciliation_id", "Its reconciliation"),
        _str("data_stream_key", "The stream whose records it holds"),
        _str("title", "Its title"),
        _str("description", "Its description"),
        _str("status", "open, investigating, dismissed or resolved"),
        _int("record_count", "Records in it"),
        _int("total_amount_minor", "Credits minus debits, minor units at decimal_places"),
        _str("total_amount", "The same total as an exact decimal string"),
        _int("credit_sum_minor", "Sum of its credits, minor units"),
        _str("credit_sum", "The same sum as an exact decimal string"),
        _int("debit_sum_minor", "Sum of its debits, minor units"),
        _str("debit_sum", "The same sum as an exact decimal string"),
        _str("currency", "The currency its records share; empty when they mix currencies"),
        _int("decimal_places", "The scale of the amounts"),
        _str("oldest_at", "Its oldest record's date"),
        _str("newest_at", "Its newest record's date"),
        _str("assignees", "Assigned users' ids (user:<id>, or the provider's id), separated by ;"),
        _str("opened_at", "When it opened (ISO 8601, UTC)"),
        _str("closed_at", "When it was dismissed or resolved, if it was"),
        _str("updated_at", "Its last change"),
    ),
    ExportKind.FILE_IMPORT_RESULTS: (
        _int("index", "The item's place in the import or bulk request, from 0"),
        _int("line", "The file's line the row starts on (failed and skipped rows of a file)"),
        _str("status", "successful, failed or skipped"),
        _str("external_id", "The item's external id, if any"),
        _int("record_id", "The record it wrote or met"),
        _str("error", "Why it failed or was skipped"),
    ),
    ExportKind.AUDIT_EVENTS: (
        _int("seq", "The entry's place in the environment's chain (its id)"),
        _str("at", "When (ISO 8601, UTC)"),
        _str("actor", "user:<id>, api_key:<id>, agent:<id> or system:<kind>[:<id>]"),
        _str("action", "resource.verb"),
        _str("resource_type", "What it changed"),
        _str("resource_id", "Its id as its routes name it"),
        _str("summary", "The entry's summary as compact JSON"),
        _str("prev_hash", "The chain's previous hash"),
        _str("hash", "This entry's hash"),
    ),
    ExportKind.PERIOD_CLOSE_REPORT: (
        _int("period_close_id", "The close"),
        _int("reconciliation_id", "Its reconciliation"),
        _str("period_start", "The period's first day (YYYY-MM-DD)"),
        _str("period_end", "The period's last day (YYYY-MM-DD)"),
        _str("close_status", "closed, or reopened (then reopened_at and reopen_reason say when and why)"),
        _str("line", "exception: an open exception at close, one row per currency of its records in the period; "
                     "unmatched: all unmatched records dated in the period, one row per currency"),
        _int("exception_id", "The exception (exception lines)"),
        _str("exception_status", "open or investigating, at close (exception lines)"),
        _str("title", "The exception's title (exception lines)"),
        _str("data_stream_key", "The exception's stream (exception lines)"),
        _str("currency", "ISO 4217 code"),
        _int("decimal_places", "The scale of the amounts"),
        _int("record_count", "Records dated in the period"),
        _int("credits_minor", "Their credits, minor units at decimal_places"),
        _str("credits", "The same sum as an exact decimal string"),
        _int("debits_minor", "Their debits, minor units at decimal_places"),
        _str("debits", "The same sum as an exact decimal string"),
        _str("explanation", "Why it is still open: the exception's own explanation, else the close's note"),
        _str("explained_by", "exception or note (exception lines)"),
        _str("note", "The close's sign-off note"),
        _str("closed_by", "Who closed it: user:<id> or api_key:<id>"),
        _str("closed_at", "When (ISO 8601, UTC)"),
        _str("reopened_at", "When it was reopened, if it was"),
        _str("reopen_reason", "Why it was reopened, if it was"),
    ),
}


def header(kind: ExportKind) -> list[str]:
    return [c.name for c in COLUMNS[kind]]


# Rows -------------------------------------------------------------------------------------------

def record_row(record: Record) -> tuple[Any, ...]:
    return (record.id, record.data_stream_key, record.date, record.direction.value, record.amount,
            decimal_string(record.amount, record.decimal_places), record.currency, record.decimal_places,
            record.status.value, record.external_id, record.description, record.file_import_id,
            iso(record.created_at), _json(record.metadata))


def match_row(match: Match) -> tuple[Any, ...]:
    return (match.id, match.reconciliation_id, match.status.value, match.record_count,
            match.reconciliation_rule_id, match.run_id, match.group_key, match.reason, _json(match.differences),
            iso(match.created_at))


def match_record_row(match: Match, side: str, record: Record) -> tuple[Any, ...]:
    return (match.id, match.reconciliation_id, match.status.value, side, record.id, record.data_stream_key,
            record.date, record.direction.value, record.amount, decimal_string(record.amount, record.decimal_places),
            record.currency, record.decimal_places, record.external_id, record.description, iso(match.created_at))


def exception_row(exception: ReconciliationException, aggregates: Mapping[str, Any]) -> tuple[Any, ...]:
    """`aggregates` as the queue shows them (services/reconciliation_exceptions.view_aggregates)."""
    places = exception.decimal_places
    total, credits, debits = (int(aggregates.get(k, 0)) for k in ("total_amount", "credit_sum", "debit_sum"))
    assignees = ";".join(f"user:{a.user_id}" if a.user_id is not None else a.idp_user_id
                         for a in exception.assignees) or None
    return (exception.id, exception.reconciliation_id, exception.data_stream_key, exception.title,
            exception.description, exception.status.value, int(aggregates.get("record_count", 0)),
            total, decimal_string(total, places), credits, decimal_string(credits, places), debits,
            decimal_string(debits, places), exception.currency, places, aggregates.get("oldest_at"),
            aggregates.get("newest_at"), assignees, _when(exception.opened_at), _when(exception.closed_at),
            _when(exception.updated_at))


def item_result_row(result: ItemResult) -> tuple[Any, ...]:
    return (result.index, result.line, result.status.value, result.external_id, result.record_id, result.error)


def audit_row(entry: AuditEntry) -> tuple[Any, ...]:
    return (entry.seq, iso(entry.at), entry.actor, entry.action, entry.resource_type, entry.resource_id,
            _json(dict(entry.summary)) or "{}", entry.prev_hash, entry.hash)


@dataclass(frozen=True)
class Page:
    """One page of an export's source: its rows, and the cursor after it (None: the last page). A
    source of millions gives its rows as a polars `frame` instead (the kind's columns, in order),
    which `frame_csv_bytes` writes without a Python object per cell."""
    rows: list[tuple[Any, ...]]
    cursor: str | None
    extra: dict[str, Any] = field(default_factory=dict)
    frame: Any = None

    @property
    def row_count(self) -> int:
        return len(self.rows) if self.frame is None else int(self.frame.height)

    def all_rows(self) -> list[tuple[Any, ...]]:
        return self.rows if self.frame is None else self.frame.rows()


def frame_csv_bytes(frame: Any) -> bytes:
    """`csv_bytes` of a frame's rows (Int64 and UTF-8 columns), byte for byte, written by polars.
    Text cells go through the same `neutralised_cell`, but only those a coarse test finds (a first
    character that is not an ASCII letter or digit: every formula start and every blank is one), a
    few in a million; an empty text is written as the csv module writes it (nothing, not `""`)."""
    import polars as pl

    for name, dtype in frame.schema.items():
        if dtype != pl.Utf8:
            continue
        column = frame[name]
        suspect = column.str.contains(r"^[^A-Za-z0-9]").fill_null(False)
        if suspect.any():
            at = suspect.arg_true()
            column = column.scatter(at, [neutralised_cell(cell) for cell in column.gather(at).to_list()])
        frame = frame.with_columns(pl.when(column == "").then(None).otherwise(column).alias(name))
    text: str = frame.write_csv(include_header=False, line_terminator="\r\n", quote_style="necessary")
    return text.encode("utf-8")


def period_close_rows(close: PeriodClose) -> list[tuple[Any, ...]]:
    """What was open at close: a row per open exception and currency, then a row per currency of
    the unmatched records dated in the period (an empty period: no row)."""
    head = (close.id, close.reconciliation_id, close.period.start.isoformat(), close.period.end.isoformat(),
            close.status.value)
    tail = (close.note, close.closed_by, iso(close.closed_at), _when(close.reopened_at), close.reopen_reason)

    def money(m: OpenMoney) -> tuple[Any, ...]:
        return (m.currency, m.decimal_places, m.count, m.credits, decimal_string(m.credits, m.decimal_places),
                m.debits, decimal_string(m.debits, m.decimal_places))

    rows = [(*head, "exception", e.id, e.status, e.title, e.data_stream_key, *money(m), e.explanation,
             e.explained_by, *tail) for e in close.open_exceptions for m in e.money]
    rows += [(*head, "unmatched", None, None, None, None, *money(m), None, None, *tail) for m in close.unmatched]
    return rows
