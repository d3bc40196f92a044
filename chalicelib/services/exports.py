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
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from chalicelib.domain.audit import AuditQuery, system_actor
from chalicelib.domain.clock import parse_iso, utc_now
from chalicelib.domain.errors import TransitionRefused, failure_reason
from chalicelib.domain.events import Event
from chalicelib.domain.exports import (
    COLUMNS,
    Export,
    ExportFormat,
    ExportKind,
    ExportStatus,
    ExportTooLarge,
    Page,
    Part,
    SpoolFull,
    Superseded,
    audit_row,
    csv_bytes,
    exception_row,
    export_completed,
    export_file_key,
    frame_csv_bytes,
    header,
    item_result_row,
    match_record_row,
    match_row,
    period_close_rows,
    record_row,
)
from chalicelib.domain.ingestion import ItemStatus
from chalicelib.domain.matches import MatchStatus
from chalicelib.domain.reconciliation_exceptions import ExceptionStatus, QueueOrder, queue_key
from chalicelib.domain.records import RecordQuery, RecordStatus
from chalicelib.observability import logger
from chalicelib.services import audit as audit_service
from chalicelib.services import export_unreconciled, idempotency, sweeping
from chalicelib.services import matches as match_service
from chalicelib.services import period_closes as period_close_service
from chalicelib.services import reconciliation_exceptions as exception_service
from chalicelib.services.events import announce
from chalicelib.services.export_ports import ExportPorts
from chalicelib.services.ingestion.results import EVERY_STATUS, results_page
from chalicelib.services.sweeping import SweptKind

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
    export_id, existing = idempotency.claim_id(
        environment, idempotency_key, digest, next_id=lambda: xp.ports.counters.next_id(environment, "export"),
        claim=xp.exports.claim_idempotency_key, find=xp.exports.find,
        send_again=lambda found: xp.queue.send({"environment": environment, "export_id": found}))
    if existing is not None:
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
    try:
        if export.format is ExportFormat.CSV:
            finished = _run_csv(xp, export)
            if finished is None:
                return xp.exports.get(environment, export_id)
            size, rows = finished
        else:
            size, rows = _run_spooled(xp, export)
    except Superseded:  # another worker moved it on (a redelivery beside a restart): it is that one's now
        logger.warning("export moved on without this worker; it stops", extra={"export_id": export_id})
        return xp.exports.get(environment, export_id)
    except ExportTooLarge as too_large:  # no retry would do better: it fails now, saying why
        fail(xp, environment, export_id, str(too_large))
        return xp.exports.get(environment, export_id)
    try:
        export = xp.exports.move(export, ExportStatus.COMPLETED, completed_at=utc_now(), byte_size=size,
                                 rows_written=rows, last_progress_at=utc_now())
    except TransitionRefused:
        export = xp.exports.get(environment, export_id)
    _announce(xp, export)
    return export


def fail(xp: ExportPorts, environment: str, export_id: int, error: Exception | str) -> None:
    """The export ends failed, saying why (an error: a message's last delivery; a reason: the
    sweeper's, or a size no run can write), its multipart upload aborted; announced."""
    export = xp.exports.find(environment, export_id)
    if export is None:
        return
    if not export.finished:
        if export.upload_id and export.file_key:
            xp.files.abort_upload(export.file_key, export.upload_id)
        try:
            export = xp.exports.move(export, ExportStatus.FAILED, completed_at=utc_now(),
                                     error_message=failure_reason(error))
        except TransitionRefused:
            export = xp.exports.get(environment, export_id)
    _announce(xp, export)


# Sweeping ---------------------------------------------------------------------------------------

EXPORT_DECISIONS = "export"  # the sweeper's held decisions on exports (events.deciding)


def sweep(xp: ExportPorts, now: datetime | None = None) -> dict[str, int]:
    """No export stays pending or processing for ever: a lost first message (pending past 5
    minutes) or a worker that died (no progress for 16 minutes, on its last delivery too) has its
    message sent again (a conditional claim: one sweeper, and only if it did not move meanwhile),
    at most MAX_QUEUED_RESTARTS times; then it fails saying why, its multipart upload aborted."""
    return sweeping.sweep(xp.ports, SweptKind[Export](
        decisions=EXPORT_DECISIONS, noun="export", outcomes=("restarted", "started", "failed"),
        active=lambda ports: xp.exports.active(),
        judge=lambda ports, export, at: sweeping.queued_verdict(
            pending=export.status is ExportStatus.PENDING, created_at=export.created_at,
            last_progress_at=export.last_progress_at, restarts=export.restarts, now=at),
        give_up=lambda ports, export, verdict: fail(xp, export.environment, export.id, verdict.reason),
        finish_if_ended=lambda ports, environment, export_id: _finish_if_ended(xp, environment, export_id),
        restart=lambda ports, export: _restart(xp, export)), now)


def _restart(xp: ExportPorts, export: Export) -> str | None:
    return sweeping.resend_queued(
        xp.exports.count_restart, export, noun="export", pending=export.status is ExportStatus.PENDING,
        send=lambda: xp.queue.send(message(export)),
        progress={"status": export.status.value, "rows_written": export.rows_written,
                  "last_progress_at": str(export.last_progress_at)})


def _finish_if_ended(xp: ExportPorts, environment: str, export_id: int) -> Event | None:
    export = sweeping.ended(xp.exports.get, environment, export_id)
    if export is None:
        return None
    _announce(xp, export)
    return export_completed(export)


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
        # A number no other worker was given: a second worker on this upload (a redelivery beside a
        # restart) never replaces a part the winning checkpoint names (its own checkpoint is Superseded)
        parts.append(files.upload_part(key, upload_id, xp.exports.claim_part_number(export), bytes(buffer)))
        buffer.clear()
        export = xp.exports.checkpoint(export, upload_id, tuple(parts), after, rows)

    if cursor != END:
        for page in _pages(xp, export.environment, export.kind, export.filters, cursor, export.id):
            buffer += csv_bytes(page.rows) if page.frame is None else frame_csv_bytes(page.frame)
            rows += page.row_count
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
    """Write the whole file under /tmp, then upload it: within `spool_seconds` of this invocation
    (its close and upload follow) and `spool_bytes` of /tmp, or the export fails (ExportTooLarge)
    with a message naming CSV, which has neither limit. A previous attempt's upload is aborted."""
    assert export.file_key is not None
    if export.upload_id:  # a worker that died while uploading: its upload goes, the file is written again
        xp.files.abort_upload(export.file_key, export.upload_id)
    limits, started = xp.limits, time.monotonic()
    progress = _Progress(xp, export)
    count = 0

    def too_large(why: str) -> ExportTooLarge:
        return ExportTooLarge(
            f"{why} after {count:,} rows: an {export.format.value.upper()} export is written within one run of the "
            f"worker ({limits.spool_seconds / 60:g} minutes of its 15) and {limits.spool_bytes // 2 ** 20} MiB of "
            f"its disk; ask for this export as CSV, which has no size or time limit, or narrow the filters")

    def pages() -> Iterator[list[tuple[Any, ...]]]:
        nonlocal count
        for page in _pages(xp, export.environment, export.kind, export.filters, None, export.id):
            if time.monotonic() - started >= limits.spool_seconds:
                raise too_large("too large to finish in time")
            count += page.row_count
            progress.note(count)
            yield page.all_rows()

    def uploading(upload_id: str) -> None:
        nonlocal export
        export = xp.exports.note_upload(export, upload_id)

    try:
        size = xp.files.write_spooled(export.file_key, export.format, COLUMNS[export.kind], pages(),
                                      xp.ports.stopping, limits.spool_bytes, uploading)
    except SpoolFull:
        raise too_large("too large for the worker's disk") from None
    return size, count


# Sources: the reads of the list routes, a page at a time ---------------------------------------

def _pages(xp: ExportPorts, environment: str, kind: ExportKind, filters: Mapping[str, Any], cursor: str | None,
           export_id: int | None = None, probe: bool = False) -> Iterator[Page]:
    """The kind's rows, a page at a time from `cursor` (None: the first page). `probe` reads one
    small page: the checks a list route makes on its filters, at the export's creation."""
    ports = xp.ports
    rows_per_page = 1 if probe else xp.limits.page_rows
    read: Callable[[str | None], Page]
    if kind in (ExportKind.RECORDS, ExportKind.UNMATCHED_RECORDS):
        query = _record_query(kind, filters)
        match_id = filters.get("reconciliation_match_id")
        if match_id is None and not probe and export_unreconciled.serves(query, cursor):
            yield from export_unreconciled.pages(ports, environment, query, cursor)
            return

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

        snapshot, ids = (None, None) if probe or export_id is None else _exception_ids(
            xp, environment, export_id, queue_query, order, cursor)

        def read(at: str | None) -> Page:
            offset = 0 if at is None else _exception_offset(at)
            if ids is None:  # the probe: the queue's own first page, its checks
                found, _ = exception_service.queue_page(ports, environment, queue_query, order, offset, per_page)
                return Page([exception_row(e, exception_service.view_aggregates(e)) for e in found], None)
            wanted = ids[offset:offset + per_page]
            by_id = ports.exceptions.find_many(environment, wanted)
            after = (_exception_cursor(snapshot, offset + len(wanted)) if offset + len(wanted) < len(ids)
                     else None)
            return Page([exception_row(by_id[i], exception_service.view_aggregates(by_id[i]))
                         for i in wanted if i in by_id], after)
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


def exception_ids_key(environment: str, export_id: int, snapshot: str | None = None) -> str:
    """Where a snapshot of an `exceptions` export's ids is kept (bulk/: the worker's grants, a 7-day
    expiry); None: the one key of an export begun before snapshots were named."""
    name = f"{export_id}-exceptions" if snapshot is None else f"{export_id}-exceptions-{snapshot}"
    return f"bulk/exports/{environment}/{name}.json"


def _exception_cursor(snapshot: str | None, offset: int) -> str:
    """A checkpoint's cursor into a snapshot: `<snapshot>:<offset>` (a bare offset: the unnamed one)."""
    return str(offset) if snapshot is None else f"{snapshot}:{offset}"


def _exception_offset(cursor: str) -> int:
    return int(cursor.rpartition(":")[2])


def _exception_ids(xp: ExportPorts, environment: str, export_id: int, query: exception_service.ExceptionQuery,
                   order: QueueOrder, cursor: str | None) -> tuple[str | None, list[int]]:
    """The exceptions an `exceptions` export writes, in the queue's order, fixed when it starts (as a
    bulk action's filter is): one read of the environment's exception index, kept in S3 so that each
    slice pages through the same ids (by offset into them), whatever opens, closes or moves in the
    queue meanwhile. A deleted exception is left out; each row is the exception as its page reads it.

    Only a start (cursor None) takes the list, under a name of its own that its cursors carry
    (`<snapshot>:<offset>`): a second worker starting beside it writes its own list and never the one
    the first is paging (only one of them checkpoints: the other is Superseded). A later slice reads
    the list its cursor names; a failure to read it (S3 unavailable, or the list gone) fails this
    delivery, to be retried: a fresh list with the old offset would drop or repeat rows."""
    if cursor is None:
        exception_service.check_query(query)
        kept = [s for s in xp.ports.exceptions.summaries(environment) if query.admits(s)]
        ids = [s.id for s in sorted(kept, key=queue_key(order))]
        taken = uuid.uuid4().hex
        xp.ports.payloads.put_json(exception_ids_key(environment, export_id, taken), {"ids": ids})
        return taken, ids
    named, _, _ = cursor.rpartition(":")
    snapshot = named or None  # a bare offset: an export begun before snapshots were named
    return snapshot, [int(i) for i in xp.ports.payloads.get_json(exception_ids_key(environment, export_id,
                                                                                   snapshot))["ids"]]


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

