"""Exports: POST /exports creates one (pending) and queues it; the worker pages through the same
reads the list routes use and writes the rows to S3 in bounded memory, then announces
`export.completed`.

CSV is streamed: rows become CSV bytes, and each 8 MiB of them one part of a multipart upload,
after which the export keeps a checkpoint (the upload, its parts, the source's cursor). A worker
that has worked `slice_seconds` queues the export again and stops at a checkpoint; the next
message continues from there, so a CSV export outlives Lambda's 15 minutes. XLSX and Parquet are
spooled to a file under /tmp and uploaded at the end: they must finish within one invocation.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from chalicelib.domain.audit import AuditQuery, system_actor
from chalicelib.domain.clock import parse_iso, utc_now
from chalicelib.domain.errors import Conflict, TransitionRefused, shown
from chalicelib.domain.exports import (
    COLUMNS,
    Export,
    ExportFormat,
    ExportKind,
    ExportStatus,
    Page,
    Part,
    audit_row,
    csv_bytes,
    exception_row,
    export_completed,
    export_file_key,
    header,
    item_result_row,
    match_record_row,
    match_row,
    period_close_rows,
    record_row,
)
from chalicelib.domain.ingestion import ItemStatus
from chalicelib.domain.matches import MatchStatus
from chalicelib.domain.reconciliation_exceptions import ExceptionStatus, QueueOrder
from chalicelib.domain.records import RecordQuery, RecordStatus
from chalicelib.observability import logger
from chalicelib.services import audit as audit_service
from chalicelib.services import matches as match_service
from chalicelib.services import period_closes as period_close_service
from chalicelib.services import reconciliation_exceptions as exception_service
from chalicelib.services.events import announce
from chalicelib.services.export_ports import ExportPorts
from chalicelib.services.ingestion.results import EVERY_STATUS, results_page

END = "<end>"  # a checkpoint's cursor once the source is read to its end
EXCEPTION_PAGE_ROWS = 100  # the queue's own page limit
MATCH_PAGE_ROWS = 100  # matches per page of match_records (each read with its records)


def message(export: Export) -> dict[str, Any]:
    """The queue message of an export (the bulk worker tells it apart by its `export_id`)."""
    return {"environment": export.environment, "export_id": export.id}


def body_hash(kind: ExportKind, fmt: ExportFormat, filters: Mapping[str, Any]) -> str:
    canonical = json.dumps({"kind": kind.value, "format": fmt.value, "filters": filters}, sort_keys=True,
                           separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


# Creating -----------------------------------------------------------------------------------------

def create(xp: ExportPorts, environment: str, kind: ExportKind, fmt: ExportFormat, filters: Mapping[str, Any],
           requested_by: str | None, idempotency_key: str | None) -> Export:
    """Check the filters as the list route would (one small read of the first page: a reconciliation
    or import that does not exist is 404, contradictory filters 422), then create and queue the
    export. With an idempotency key, a repeat of the same body returns the first export; another
    body is 409."""
    filters = {k: v for k, v in filters.items() if v is not None}
    digest = body_hash(kind, fmt, filters)
    next(_pages(xp, environment, kind, filters, None, probe=True), None)  # before anything is written
    export_id = xp.ports.counters.next_id(environment, "export")
    if idempotency_key:
        export_id, bound = xp.exports.claim_idempotency_key(environment, idempotency_key, export_id, digest)
        if bound != digest:
            raise Conflict(f"Idempotency-Key '{idempotency_key}' was already used with a different body")
        existing = xp.exports.find(environment, export_id)
        if existing is not None:
            if existing.status is ExportStatus.PENDING:
                xp.queue.send(message(existing))  # the first send may have been lost
            return existing
    export = Export(environment=environment, id=export_id, kind=kind, format=fmt, filters=filters,
                    status=ExportStatus.PENDING, created_at=utc_now(), requested_by=requested_by,
                    idempotency_key=idempotency_key, body_hash=digest,
                    file_key=export_file_key(environment, export_id, kind, fmt))
    xp.exports.add(export)
    xp.queue.send(message(export))
    return xp.exports.get(environment, export_id)


def download_url(xp: ExportPorts, export: Export) -> str | None:
    """A fresh presigned GET of a completed export's file (None before it completes)."""
    if export.status is not ExportStatus.COMPLETED or export.file_key is None:
        return None
    return xp.files.download_url(export.file_key, export.filename, xp.limits.download_url_seconds)


# Running ----------------------------------------------------------------------------------------

def run(xp: ExportPorts, environment: str, export_id: int) -> Export | None:
    """Work on one export until it ends, or until its slice is used up (a CSV export then queues
    itself again). Safe to call any number of times: a finished export is only announced again
    (idempotent), a running one resumes from its checkpoint."""
    export = xp.exports.find(environment, export_id)
    if export is None:
        logger.warning("export not found; message dropped", extra={"export_id": export_id})
        return None
    if export.finished:
        _announce(xp, export)
        return export
    if export.status is ExportStatus.PENDING:
        try:
            export = xp.exports.move(export, ExportStatus.PROCESSING, started_at=utc_now(), last_progress_at=utc_now())
        except TransitionRefused:
            export = xp.exports.get(environment, export_id)
            if export.finished:
                _announce(xp, export)
                return export
    export = xp.exports.count_slice(export)
    if export.format is ExportFormat.CSV:
        finished = _run_csv(xp, export)
        if finished is None:
            return xp.exports.get(environment, export_id)
        size, rows = finished
    else:
        size, rows = _run_spooled(xp, export)
    try:
        export = xp.exports.move(export, ExportStatus.COMPLETED, completed_at=utc_now(), byte_size=size,
                                 rows_written=rows, last_progress_at=utc_now())
    except TransitionRefused:
        export = xp.exports.get(environment, export_id)
    _announce(xp, export)
    return export


def fail(xp: ExportPorts, environment: str, export_id: int, error: Exception) -> None:
    """The worker's, on a message's last delivery: the export ends failed, saying why."""
    export = xp.exports.find(environment, export_id)
    if export is None:
        return
    if not export.finished:
        if export.upload_id and export.file_key:
            xp.files.abort_upload(export.file_key, export.upload_id)
        try:
            export = xp.exports.move(export, ExportStatus.FAILED, completed_at=utc_now(),
                                     error_message=shown(f"{type(error).__name__}: {error}", 500))
        except TransitionRefused:
            export = xp.exports.get(environment, export_id)
    _announce(xp, export)


def _announce(xp: ExportPorts, export: Export) -> None:
    if export.finished:
        announce(xp.ports, export_completed(export), export.environment, actor=system_actor("export", export.id),
                 summary_fields=("status", "kind", "format", "rows_written", "error_message"))


class _Progress:
    """rows_written saved at most every `progress_seconds` while a worker runs."""

    def __init__(self, xp: ExportPorts, export: Export) -> None:
        self._xp, self._export = xp, export
        self._saved_at = time.monotonic()

    def note(self, rows: int) -> None:
        if time.monotonic() - self._saved_at >= self._xp.limits.progress_seconds:
            self._xp.exports.progress(self._export, rows)
            self._saved_at = time.monotonic()


def _run_csv(xp: ExportPorts, export: Export) -> tuple[int, int] | None:
    """Stream the rows as CSV parts; (size, rows) once complete, None when the slice ended first
    (the export is queued again and continues from its checkpoint)."""
    assert export.file_key is not None
    key, files, limits = export.file_key, xp.files, xp.limits
    started = time.monotonic()
    if export.upload_id is None:
        upload_id = files.start_upload(key, export.format.content_type)
        export = xp.exports.checkpoint(export, upload_id, (), None, 0)
    assert export.upload_id is not None
    upload_id = export.upload_id
    parts: list[Part] = list(export.parts)
    cursor, rows = (export.source_cursor, export.checkpoint_rows) if parts else (None, 0)
    buffer = bytearray() if parts else bytearray(csv_bytes([header(export.kind)]))
    progress = _Progress(xp, export)

    def flush(after: str) -> None:
        nonlocal export
        parts.append(files.upload_part(key, upload_id, len(parts) + 1, bytes(buffer)))
        buffer.clear()
        export = xp.exports.checkpoint(export, upload_id, tuple(parts), after, rows)

    if cursor != END:
        for page in _pages(xp, export.environment, export.kind, export.filters, cursor):
            buffer += csv_bytes(page.rows)
            rows += len(page.rows)
            progress.note(rows)
            if len(buffer) >= limits.part_bytes:
                flush(page.cursor or END)
                if page.cursor is not None and (xp.ports.stopping()
                                                or time.monotonic() - started >= limits.slice_seconds):
                    xp.queue.send(message(export))
                    logger.info("export continues in a new message", extra={"export_id": export.id, "rows": rows})
                    return None
    if buffer or not parts:
        flush(END)
    size = files.complete_upload(key, upload_id, parts)
    return size, rows


def _run_spooled(xp: ExportPorts, export: Export) -> tuple[int, int]:
    assert export.file_key is not None
    progress = _Progress(xp, export)
    count = 0

    def pages() -> Iterator[list[tuple[Any, ...]]]:
        nonlocal count
        for page in _pages(xp, export.environment, export.kind, export.filters, None):
            count += len(page.rows)
            progress.note(count)
            yield page.rows

    size = xp.files.write_spooled(export.file_key, export.format, COLUMNS[export.kind], pages(), xp.ports.stopping)
    return size, count


# Sources: the reads of the list routes, a page at a time ---------------------------------------

def _pages(xp: ExportPorts, environment: str, kind: ExportKind, filters: Mapping[str, Any], cursor: str | None,
           probe: bool = False) -> Iterator[Page]:
    """The kind's rows, a page at a time from `cursor` (None: the first page). `probe` reads one
    small page: the checks a list route makes on its filters, at the export's creation."""
    ports = xp.ports
    rows_per_page = 1 if probe else xp.limits.page_rows
    read: Callable[[str | None], Page]
    if kind in (ExportKind.RECORDS, ExportKind.UNMATCHED_RECORDS):
        query = _record_query(kind, filters)
        match_id = filters.get("reconciliation_match_id")

        def read(at: str | None) -> Page:
            if match_id is not None:
                found, after = match_service.records_of_match(ports, environment, int(match_id), query,
                                                              rows_per_page, at)
            else:
                found, after = ports.records.list_page(environment, query, rows_per_page, at)
            return Page([record_row(r) for r in found], after)
    elif kind in (ExportKind.MATCHES, ExportKind.MATCH_RECORDS):
        reconciliation = ports.reconciliations.get(environment, int(filters["reconciliation_id"]))
        status = MatchStatus(filters["status"]) if filters.get("status") else None
        per_page = 1 if probe else (xp.limits.page_rows if kind is ExportKind.MATCHES else MATCH_PAGE_ROWS)

        def read(at: str | None) -> Page:
            found, after = ports.matches.list_page(environment, reconciliation.id, per_page, at, status=status)
            if kind is ExportKind.MATCHES:
                return Page([match_row(m) for m in found], after)
            return Page([match_record_row(m, side, r) for m in found
                         for side, r in match_service.member_records(ports, m)], after)
    elif kind is ExportKind.EXCEPTIONS:
        queue_query, order = _exception_query(filters)
        per_page = 1 if probe else EXCEPTION_PAGE_ROWS

        def read(at: str | None) -> Page:
            offset = int(at or 0)
            found, total = exception_service.queue_page(ports, environment, queue_query, order, offset, per_page)
            after = str(offset + len(found)) if found and offset + len(found) < total else None
            return Page([exception_row(e, exception_service.view_aggregates(e)) for e in found], after)
    elif kind is ExportKind.PERIOD_CLOSE_REPORT:
        close = period_close_service.get(ports, environment, int(filters["reconciliation_id"]),
                                         int(filters["period_close_id"]))

        def read(at: str | None) -> Page:  # what was open at close: a few rows, one page
            return Page(period_close_rows(close), None)
    elif kind is ExportKind.FILE_IMPORT_RESULTS:
        job = ports.ingestion_jobs.get(environment, int(filters["file_import_id"]))
        statuses = frozenset({ItemStatus(filters["status"])}) if filters.get("status") else EVERY_STATUS

        def read(at: str | None) -> Page:
            page = results_page(ports, job, statuses, int(at) if at is not None else -1, rows_per_page)
            return Page([item_result_row(r) for r in page.results],
                        str(page.after) if page.after is not None else None)
    else:
        audit_query = AuditQuery(resource_type=filters.get("resource_type"), resource_id=filters.get("resource_id"),
                                 actor=filters.get("actor"),
                                 at_from=parse_iso(filters["from"]) if filters.get("from") else None,
                                 at_to=parse_iso(filters["to"]) if filters.get("to") else None)

        def read(at: str | None) -> Page:
            found, after = audit_service.list_page(ports, environment, audit_query, rows_per_page, at)
            return Page([audit_row(e) for e in found], after)

    while True:
        page = read(cursor)
        yield page
        if probe or page.cursor is None:
            return
        cursor = page.cursor


def _record_query(kind: ExportKind, filters: Mapping[str, Any]) -> RecordQuery:
    status = (RecordStatus.UNRECONCILED if kind is ExportKind.UNMATCHED_RECORDS
              else RecordStatus(filters["status"]) if filters.get("status") else None)
    return RecordQuery(data_stream_key=filters.get("data_stream_key"), status=status,
                       file_import_id=filters.get("file_import_id"), external_id=filters.get("external_id"),
                       date_from=filters.get("date_from"), date_to=filters.get("date_to"))


def _exception_query(filters: Mapping[str, Any]) -> tuple[exception_service.ExceptionQuery, QueueOrder]:
    days = filters.get("older_than_days")
    oldest_before = None if days is None else (utc_now().date() - timedelta(days=int(days))).isoformat()
    return exception_service.ExceptionQuery(
        reconciliation_id=filters.get("reconciliation_id"),
        status=ExceptionStatus(filters["status"]) if filters.get("status") else None,
        data_stream_key=filters.get("data_stream_key"), assignee=filters.get("assignee"),
        assignee_user_id=filters.get("assignee_user_id"), unassigned=bool(filters.get("unassigned", False)),
        amount_min=filters.get("amount_min"), amount_max=filters.get("amount_max"),
        amount_decimal_places=int(filters.get("amount_decimal_places", 2)), oldest_before=oldest_before,
    ), QueueOrder(filters.get("sort", QueueOrder.NEWEST.value))

