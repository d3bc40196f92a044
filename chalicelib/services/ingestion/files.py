"""The file way in: a CSV, NACHA or bank statement file, uploaded (presigned PUT) or dropped in the
bucket (drops.py starts its import), goes through prepare (parse and validate the whole file,
split it into chunk files), a loop of chunk tasks (write rows, checkpoint, heartbeat, honour a
cancel) and finish, driven by the `file_import` state machine. Rows become records exactly as bulk
items do (same validation, guards, id blocks and per-chunk claimed counters: chunk.py), so a
crashed chunk resumes with no duplicates and no gaps.
"""
from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from chalicelib.domain.balances import StatementDay
from chalicelib.domain.bucket_layout import DROPS_PREFIX, UPLOADS_PREFIX
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import ValidationFailed, shown
from chalicelib.domain.executions import execution_name as workflow_name
from chalicelib.domain.ingestion import (
    FILE_CHUNK_ROWS,
    ChunkRow,
    IngestionJob,
    JobSource,
    JobStatus,
    OnConflict,
    StoredFile,
    chunk_ranges,
)
from chalicelib.domain.money import DEFAULT_CURRENCY, minor_units
from chalicelib.domain.parsers import FileRejected, ParsedFile
from chalicelib.domain.parsers.csv_records import CsvOptions, parse_csv
from chalicelib.domain.parsers.nacha import parse_nacha
from chalicelib.domain.records import shared_decimal_places
from chalicelib.observability import logger
from chalicelib.services.ingestion import statements
from chalicelib.services.ingestion.chunk import ChunkPipeline, WriterLeases, stream_contexts
from chalicelib.services.ingestion.chunk import file_chunk_key as _chunk_key
from chalicelib.services.ingestion.lifecycle import conclude, end_meanwhile, settle, start
from chalicelib.services.ports import Ports

NACHA_DECIMAL_PLACES = 2  # NACHA amounts are always cents
UPLOAD_URL_LIFETIME = timedelta(hours=1)
# An import waits this long for its upload; then the sweeper (sweeper.py) fails it.
UPLOAD_WAIT = UPLOAD_URL_LIFETIME + timedelta(hours=1)
# A chunk task stops starting chunks after this long and hands over to the next task, so
# every task stays well inside Lambda's 15-minute limit.
CHUNK_TASK_BUDGET = timedelta(seconds=60)
# Chunk files prepare writes side by side (one S3 PUT each).
CHUNK_FILE_THREADS = 8
SAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]+")


def execution_name(job: IngestionJob, attempt: int | str = 0) -> str:
    return workflow_name(job.environment, job.id, attempt)


# Creating ---------------------------------------------------------------------------------

def create_import(ports: Ports, environment: str, stream_key: str | None, *, filename: str, source: JobSource,
                  on_conflict: OnConflict, column_mapping: dict[str, str], date_format: str,
                  decimal_places: int | None, nacha_control_mismatch: str = "refuse",
                  control_mismatch: str = "refuse", encoding: str | None = None,
                  delimiter: str | None = None) -> tuple[IngestionJob, str]:
    """A pending import and the presigned URL to PUT its file to; the upload starts it. A bank
    statement with no stream is routed by its accounts (statements.py)."""
    if stream_key is not None:
        ports.data_streams.get(environment, stream_key)  # 404 when the stream is not there
    elif not source.is_statement:
        raise ValidationFailed.on("format", "only a bank statement (bai2, camt053, mt940) is routed by account; "
                                            "import other files into a stream")
    job_id = ports.counters.next_id(environment, "ingestion_job")
    job = IngestionJob(
        environment=environment, id=job_id, source=source, status=JobStatus.PENDING, total_items=0,
        on_conflict=on_conflict, created_at=utc_now(), filename=filename,
        decimal_places=NACHA_DECIMAL_PLACES if source is JobSource.NACHA else decimal_places,
        file_key=f"{UPLOADS_PREFIX}{environment}/{job_id}/{_safe_name(filename)}",
        data_stream_key=stream_key, file_chunk_rows=FILE_CHUNK_ROWS,
        options={"column_mapping": column_mapping, "date_format": date_format, "decimal_places": decimal_places,
                 "nacha_control_mismatch": nacha_control_mismatch, "control_mismatch": control_mismatch,
                 "encoding": encoding, "delimiter": delimiter},
    )
    ports.ingestion_jobs.add(job)
    url = ports.payloads.upload_url(job.import_file_key, int(UPLOAD_URL_LIFETIME.total_seconds()))
    return ports.ingestion_jobs.get(environment, job_id), url


def start_uploaded(ports: Ports, job: IngestionJob) -> None:
    """Start a pending import whose file the service itself put at its upload key (a browser
    run's export); the upload's own event, where one comes, then starts nothing more."""
    ports.file_import_workflows.start(execution_name(job), {"environment": job.environment, "job_id": job.id})


def fresh_upload_url(ports: Ports, job: IngestionJob, now: datetime | None = None) -> str | None:
    """A new URL for an import still waiting for its upload, so a lost one needs no new import.
    It lasts an hour, or less: until the sweeper gives up waiting for the upload."""
    waiting = job.is_file and job.status is JobStatus.PENDING and job.cancellation_requested_at is None
    key = job.file_key
    if not waiting or key is None or not key.startswith(UPLOADS_PREFIX):
        return None  # drops have no upload
    left = min(job.created_at + UPLOAD_WAIT - (now or utc_now()), UPLOAD_URL_LIFETIME)
    seconds = int(left.total_seconds())
    return ports.payloads.upload_url(key, seconds) if seconds > 0 else None


def _safe_name(filename: str) -> str:
    """An S3 key segment that HTTP clients send unchanged (no '..', nothing outside [A-Za-z0-9._-])."""
    return SAFE_FILENAME.sub("_", filename).strip(".")[:120] or "file"


def check_create_options(source: JobSource, date_format: str, decimal_places: int | None,
                         encoding: str | None = None, delimiter: str | None = None) -> None:
    if source is not JobSource.CSV:
        for name, value in (("encoding", encoding), ("delimiter", delimiter)):
            if value is not None:
                raise ValidationFailed.on(name, "applies to CSV imports only")
    if source is JobSource.NACHA and decimal_places not in (None, 2):
        raise ValidationFailed.on("decimal_places", "NACHA amounts are always in cents (2)")
    if source.is_statement and decimal_places is not None:
        raise ValidationFailed.on("decimal_places", "a bank statement's amounts are in its currency's minor units")


# The state machine's tasks --------------------------------------------------------------

def _replaced(job: IngestionJob, stored: StoredFile) -> bool:
    """Whether the file read is not the one the import took, but a later one put under its key: that
    one is reported as not imported (an upload) or has an import of its own (a drop), so importing it
    here would import it twice and the first one never, without a word. A drop's import took the
    object its event named (its ETag). An upload's took the last PUT before it started: the events of
    PUTs made while it waited may come in any order (EventBridge), so the ETag kept last may be an
    earlier one's; a file written before the start is the one, whatever its ETag. Last-Modified has
    whole seconds, so a PUT in the start's own second reads as before it: written in that second, the
    file is a later one if it is reported as not imported (`job` is read after the file, so that
    report, if its event came by then, is on it). Written in an earlier second, it is the one even when
    its event came after the start and listed it."""
    if not job.upload_etag or stored.etag == job.upload_etag.strip('"'):
        return False
    if job.import_file_key.startswith(DROPS_PREFIX):
        return True
    if job.started_at is None or stored.last_modified > job.started_at:
        return True
    in_start_second = stored.last_modified >= job.started_at.replace(microsecond=0)
    return in_start_second and any(ignored.etag.strip('"') == stored.etag for ignored in job.ignored_uploads)


_REPLACED = ("the file was replaced under the same name before this import read it (uploaded or dropped again), "
             "so nothing was imported: a file dropped again is imported by its own import, a file uploaded "
             "again needs a new import")


def prepare(ports: Ports, environment: str, job_id: int) -> str:
    """Parse and validate the whole file, then split its rows into chunk files. Nothing is
    written as records here, so a file that fails validation leaves nothing behind."""
    job = ports.ingestion_jobs.get(environment, job_id)
    if job.writes_no_more:
        return _step_after(end_meanwhile(ports, job))
    if job.status is JobStatus.PENDING:
        job = start(ports, job)
        if job.status is not JobStatus.PROCESSING:
            return "stop"
    if job.chunk_count is not None:
        return "chunk" if job.chunk_count else "finish"
    try:
        size, limit = ports.payloads.size(job.import_file_key), ports.limits.max_import_bytes
        if size > limit:  # the one limit a client meets, whatever the format (the parsers' own guards are larger)
            raise FileRejected(f"file is {size} bytes; imports accept up to {limit} bytes: split it",
                               {"bytes": size, "limit": limit})
        stored = ports.payloads.read_file(job.import_file_key)
        read_after = ports.ingestion_jobs.get(environment, job_id)
        if _replaced(read_after, stored):
            raise FileRejected(_REPLACED, {"upload_etag": job.upload_etag, "etag_found": stored.etag})
        if read_after.upload_etag and stored.etag != read_after.upload_etag.strip('"'):
            # a PUT before the start whose event came late: this file is the one imported, not "ignored"
            ports.ingestion_jobs.take_upload_read(read_after, stored.etag)
        parsed = _parse(ports, job, stored.body)
    except FileRejected as rejected:
        conclude(ports, job, JobStatus.FAILED, error_message=rejected.message, error_details=rejected.details)
        return "stop"
    if parsed.summary.get("warnings"):  # shown once the import completes (a lenient control, an account left out)
        ports.payloads.put_json(_warnings_key(job), {
            "warnings": parsed.summary["warnings"], "warning_count": parsed.summary["warning_count"],
            **({"accounts_not_imported": parsed.summary["accounts_not_imported"]}
               if "accounts_not_imported" in parsed.summary else {})})
    if job.source.is_statement:  # written when the import completes
        ports.payloads.put_json(_balances_key(job), parsed.summary.get("balances", []))
        streams_written = sorted({row.item["data_stream_key"] for row in parsed.rows if row.item})
        ports.ingestion_jobs.link_to_streams(job, [k for k in streams_written if k != job.data_stream_key])
    ranges = chunk_ranges(len(parsed.rows), job.chunk_rows)

    def put_chunk(number: int) -> None:
        ports.payloads.put_json(_chunk_key(job, number), {"rows": [
            [i, parsed.rows[i].line, parsed.rows[i].item, parsed.rows[i].error] for i in ranges[number]]})
    with ThreadPoolExecutor(CHUNK_FILE_THREADS) as pool:  # a million rows are 2,000 chunk files
        list(pool.map(put_chunk, range(len(ranges))))
    ids = ports.counters.next_ids(environment, "record", max(len(parsed.rows), 1))
    ports.ingestion_jobs.record_preparation(job, len(ranges), len(parsed.rows), ids.start,
                                            _decimal_places_of(job, parsed))
    return "chunk" if ranges else "finish"


def write_chunks(ports: Ports, environment: str, job_id: int, budget: timedelta = CHUNK_TASK_BUDGET) -> str:
    """Write chunks until the budget is spent; each chunk is claimed once (its checkpoint),
    beats the heartbeat and checks for a cancel first."""
    job = ports.ingestion_jobs.get(environment, job_id)
    if job.writes_no_more:
        return _step_after(end_meanwhile(ports, job))
    deadline = time.monotonic() + budget.total_seconds()
    # A statement routed by account feeds several streams: each row names its own.
    streams = stream_contexts(ports, environment, [{"data_stream_key": job.data_stream_key}]
                              if job.data_stream_key else [])
    written = 0
    # One take and one release of the leases per task, not per chunk; chunks in flight two at a time.
    with WriterLeases(ports, job) as leases, ChunkPipeline(ports, job, leases) as chunks:
        for number in range(job.chunk_count or 0):
            # The job read above, then as the last save left it.
            if number in chunks.job.done_chunks:
                continue
            if ports.stopping() or (written and time.monotonic() > deadline):
                chunks.flush()
                return "chunk"  # at least one chunk per task, then hand over to the next task (or the next start)
            if chunks.job.writes_no_more:  # ended (the sweeper), being ended or cancelled meanwhile
                return _step_after(end_meanwhile(ports, chunks.flush()))
            rows = [ChunkRow(index, item, line, error)
                    for index, line, item, error in ports.payloads.get_json(_chunk_key(job, number))["rows"]]
            streams.update(stream_contexts(ports, environment, [r.item for r in rows if isinstance(r.item, dict)
                                                                and r.item.get("data_stream_key") not in streams]))
            chunks.write(number, rows, streams)
            written += 1
        job = chunks.flush_last()
    if len(job.done_chunks) < (job.chunk_count or 0):  # the last chunk claimed, then not written: see why
        return _step_after(end_meanwhile(ports, job)) if job.writes_no_more else "chunk"
    return "finish"


def finish(ports: Ports, environment: str, job_id: int) -> str:
    job = ports.ingestion_jobs.get(environment, job_id)
    statement = job.source.is_statement and ports.payloads.exists(_balances_key(job))
    if job.finished or job.ending is not None:  # ended, or being ended early: no balances, no completion
        end_meanwhile(ports, job)
        if job.status is JobStatus.COMPLETED and statement:  # a finish retried after completing: its days
            statements.keep_balances(ports, job, ports.payloads.get_json(_balances_key(job)))
    else:
        days: list[StatementDay] = []
        left_out: list[str] = []  # statement days inside a closed period: not kept, told as warnings
        if statement:
            days, left_out = statements.balances_to_keep(ports, job, ports.payloads.get_json(_balances_key(job)))
        # Balances only from a completed import, never a failed one's; written before the move to
        # `completed`, so that a client (the imports page) reading `completed` finds them.
        conclude(ports, job, JobStatus.COMPLETED, before_completed=lambda: ports.balances.put_many(days),
                 **statements.with_warnings(_parse_warnings(ports, job), left_out))
    return "stop"


def _warnings_key(job: IngestionJob) -> str:
    return f"imports/{job.environment}/{job.id}/warnings.json"


def _balances_key(job: IngestionJob) -> str:
    return f"imports/{job.environment}/{job.id}/balances.json"


def _parse_warnings(ports: Ports, job: IngestionJob) -> dict[str, Any]:
    """error_details of a completed import accepted with warnings (only an import that asked
    for them, a statement, or a CSV whose encoding was not given can have any, so no other
    import pays for the look)."""
    options = job.options or {}
    lenient_nacha = job.source is JobSource.NACHA and options.get("nacha_control_mismatch") == "warn"
    guessed_csv = job.source is JobSource.CSV and not options.get("encoding")
    if not (lenient_nacha or guessed_csv or job.source.is_statement):
        return {}
    if not ports.payloads.exists(_warnings_key(job)):
        return {}
    return {"error_details": ports.payloads.get_json(_warnings_key(job))}


def give_up(ports: Ports, environment: str, job_id: int, error: dict[str, Any] | None) -> str:
    """The state machine's catch-all: a task failed after its retries; the import fails with why."""
    job = ports.ingestion_jobs.get(environment, job_id)
    if job.finished:
        settle(ports, job)
    else:
        detail = error or {}
        # The cause is the store's or the runtime's own words (a botocore message, a stack trace):
        # for the operators' log, never for the client.
        logger.error("file import stopped", extra={"error": detail.get("Error"),
                                                   "cause": shown(detail.get("Cause", ""), 1000)})
        reason = "timeout" if detail.get("Error") == "States.Timeout" else "internal_error"
        conclude(ports, job, JobStatus.FAILED, error_message=STOPPED_MESSAGES[reason],
                 error_details={"reason": reason})
    return "stop"


STOPPED_MESSAGES = {
    "timeout": "the import stopped: a step ran out of time after its retries; the records written before it are "
               "kept, the rest are failed results",
    "internal_error": "the import stopped on an internal error after its retries; the records written before it "
                      "are kept, the rest are failed results",
}


def _step_after(job: IngestionJob) -> str:
    """The state machine's next step once a task stopped writing a job (`end_meanwhile`): its finish
    if the rows are all written, else none."""
    return "finish" if job.status is JobStatus.REPLICATING else "stop"


def _decimal_places_of(job: IngestionJob, parsed: ParsedFile) -> int | None:
    """The import's option, else what its rows' currencies say (None when they mix decimal places)."""
    if job.decimal_places is not None:
        return job.decimal_places
    items = [row.item for row in parsed.rows if row.error is None and row.item is not None]
    return shared_decimal_places(items) if items else minor_units(DEFAULT_CURRENCY)


def _parse(ports: Ports, job: IngestionJob, data: bytes) -> ParsedFile:
    if job.source.is_statement:
        return statements.parse_statement(ports, job, data)
    if job.source is JobSource.NACHA:
        parsed = parse_nacha(data, control_mismatch=(job.options or {}).get("nacha_control_mismatch") or "refuse")
        for row in parsed.rows:
            assert row.item is not None  # a NACHA row is always an entry's item (the file fails whole, never a row)
            row.item["data_stream_key"] = job.import_stream_key
        return parsed
    options = job.options or {}
    return parse_csv(data, CsvOptions(
        data_stream_key=job.import_stream_key, column_mapping=options.get("column_mapping") or {},
        date_format=options.get("date_format") or "YYYY-MM-DD", decimal_places=options.get("decimal_places"),
        encoding=options.get("encoding"), delimiter=options.get("delimiter"),
    ))
