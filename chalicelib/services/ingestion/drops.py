"""Where an S3 object goes, the first phase of a file import: the upload of a pending import
starts its state machine (files.py); a drop under `drops/<environment>/<stream key>/` makes its
own import, its format told by its extension or its first bytes; a drop straight under
`drops/<environment>/` is a bank statement routed by account, or else a file for the
environment's file-drop agent (agent_runs.py).
"""
from __future__ import annotations

from chalicelib.domain.api_keys import ENVIRONMENT_PATTERN
from chalicelib.domain.bucket_layout import DROPS_PREFIX, UPLOADS_PREFIX
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import NotFound
from chalicelib.domain.ingestion import FILE_CHUNK_ROWS, IgnoredUpload, IngestionJob, JobSource, JobStatus, OnConflict
from chalicelib.observability import logger
from chalicelib.services import agent_runs
from chalicelib.services.ingestion.files import execution_name, start_uploaded
from chalicelib.services.ports import Ports


def on_object_created(ports: Ports, key: str, etag: str = "", size: int | None = None) -> IngestionJob | None:
    """An S3 object landed: an upload of a pending import, or a drop that makes its own import."""
    if key.startswith(UPLOADS_PREFIX):
        parts = key.split("/")
        if len(parts) < 4 or not ENVIRONMENT_PATTERN.match(parts[1]) or not parts[2].isdigit():
            return None
        job = ports.ingestion_jobs.find(parts[1], int(parts[2]))
        if job is None or job.file_key != key:
            return job
        accepted = ports.ingestion_jobs.accept_upload(job, etag)
        if job.status is JobStatus.PENDING:
            start_uploaded(ports, job)
            return accepted
        if accepted.upload_etag == etag:  # its own upload's event, again (or after a service put)
            return accepted
        return _ignore_upload(ports, accepted, etag, size)
    if key.startswith(DROPS_PREFIX):
        return _start_drop(ports, key, etag)
    return None


def _ignore_upload(ports: Ports, job: IngestionJob, etag: str, size: int | None) -> IngestionJob:
    """A file PUT to the upload URL of an import that already started or ended: the PUT answered
    200, so the import itself tells that this file was not imported (one upload URL, one file)."""
    logger.warning("an upload came after its import started; not imported",
                   extra={"job_id": job.id, "status": job.status.value, "etag": etag})
    return ports.ingestion_jobs.note_ignored_upload(job, IgnoredUpload.after(job.status, etag, size, utc_now()))


def _start_drop(ports: Ports, key: str, etag: str) -> IngestionJob | None:
    parts = key.split("/")
    if len(parts) == 3 and parts[2] and ENVIRONMENT_PATTERN.match(parts[1]):  # no stream folder
        statement = statement_format(parts[2], _head(ports, key))
        if statement is None:  # for the environment's file-drop agent
            agent_runs.on_file_dropped(ports, parts[1], key, etag)
            return None
        return _drop_import(ports, key, etag, parts[1], None, parts[2], statement)
    if len(parts) < 4 or not parts[3]:
        return None
    environment, stream_key, filename = parts[1], parts[2], "/".join(parts[3:])
    if not ENVIRONMENT_PATTERN.match(environment):
        return None
    try:
        ports.data_streams.get(environment, stream_key)
    except NotFound:
        return None  # a drop for a stream that is not there: nothing to import into
    return _drop_import(ports, key, etag, environment, stream_key, filename, _format_of(filename, _head(ports, key)))


def _head(ports: Ports, key: str) -> bytes:
    try:
        return ports.payloads.head_bytes(key, SNIFF_BYTES)
    except Exception:  # an empty object has no byte 0; prepare then fails it with "file is empty"
        return b""


def _drop_import(ports: Ports, key: str, etag: str, environment: str, stream_key: str | None, filename: str,
                 source: JobSource) -> IngestionJob:
    """The import of a dropped object (routed by account when it has no stream), one per object
    however often its event arrives."""
    job_id = ports.counters.next_id(environment, "ingestion_job")
    job_id, _ = ports.ingestion_jobs.claim_idempotency_key(environment, f"drop:{key}:{etag}", job_id, etag)
    job = ports.ingestion_jobs.find(environment, job_id)
    if job is None:
        job = IngestionJob(
            environment=environment, id=job_id, source=source, status=JobStatus.PENDING, total_items=0,
            on_conflict=OnConflict.SKIP, created_at=utc_now(), filename=filename.rsplit("/", 1)[-1], file_key=key,
            data_stream_key=stream_key, options={"column_mapping": {}, "date_format": "YYYY-MM-DD"},
            file_chunk_rows=FILE_CHUNK_ROWS,
        )
        ports.ingestion_jobs.add(job)
        job = ports.ingestion_jobs.get(environment, job_id)
    if etag and job.upload_etag is None:  # the object it imports: one dropped again later is not it
        job = ports.ingestion_jobs.accept_upload(job, etag)
    if job.status is JobStatus.PENDING:
        ports.file_import_workflows.start(execution_name(job), {"environment": environment, "job_id": job_id})
    return job


# A dropped file's format ----------------------------------------------------------------

STATEMENT_EXTENSIONS = {".bai": JobSource.BAI2, ".bai2": JobSource.BAI2, ".sta": JobSource.MT940,
                        ".mt940": JobSource.MT940, ".940": JobSource.MT940, ".camt": JobSource.CAMT053}
SNIFF_BYTES = 512


def statement_format(filename: str, head: bytes) -> JobSource | None:
    """A bank statement's format from its extension or its first bytes, or None: BAI2 opens with a
    `01,` file header, MT940 with a SWIFT block `{1:` or its `:20:` tag, camt.053 is XML naming
    its namespace."""
    lowered = filename.lower()
    for extension, source in STATEMENT_EXTENSIONS.items():
        if lowered.endswith(extension):
            return source
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if text.startswith(b"01,"):
        return JobSource.BAI2
    if text.startswith((b"{1:", b":20:")):
        return JobSource.MT940
    if text.startswith(b"<") and b"camt.053" in head:
        return JobSource.CAMT053
    return None


def _format_of(filename: str, head: bytes) -> JobSource:
    """From the extension, else by sniffing: a NACHA file opens with a '101' file header; the
    statement formats as statement_format() tells."""
    lowered = filename.lower()
    if lowered.endswith((".ach", ".nacha")):
        return JobSource.NACHA
    if lowered.endswith(".csv") and not head.startswith(b"101"):  # a CSV may well open with "01,"
        return JobSource.CSV
    statement = statement_format(filename, head)  # banks send MT940 and BAI2 as .txt too
    if statement is not None:
        return statement
    if lowered.endswith(".txt") and not head.startswith(b"101"):
        return JobSource.CSV
    return JobSource.NACHA if head.lstrip(b"\xef\xbb\xbf").startswith(b"101") else JobSource.CSV
