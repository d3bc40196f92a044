"""A run's open records read from the analytics mirror instead of the table, where both give the
same records.

The table is the truth of what is open: a run reads each stream's records through an index, one
item at a time on the server (about 18 s a million on the local stack's DynamoDB). The mirror
holds each import's rows in one compressed Parquet object, read in a second or two, but only the
rows as the import wrote them: not which were claimed by a match since, nor which were deleted.
So it serves a stream only while both hold:

- nothing has changed a record of the stream since its import wrote it: the stream carries the
  mark it was created with (`DataStreams.records_as_imported`), which whatever claims, deletes or
  takes back a record removes first (services/matches.py `write_matches`, services/records.py,
  services/ingestion/chunk.py). Every record is then open in every reconciliation, unreconciled.
  A stream created before the mark existed never has it.
- the mirror holds every record of the stream: each import that wrote into it is published
  (replicating, completed, or an early end once settled), and its row marker names exactly the
  records it created there (a part the mirror lost makes it name fewer). An import still writing
  is left out of a run either way (its records wait for the run after it completes), and one that
  failed or was cancelled before a chunk began wrote nothing; one that ended early and is not
  settled yet sends the stream to the table. A chunk that writes after its job ended (a late
  execution) counts its records nowhere: it removes the mark (services/ingestion/chunk.py).

A record claimed or deleted after the mark was read is the race the table's read has too: its
claim is conditional, so the match that wanted it is undone and its partners wait for a run.
"""
from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from chalicelib.domain.ingestion import IngestionJob, JobStatus
from chalicelib.domain.records import RecordColumns, rows_in
from chalicelib.observability import logger
from chalicelib.services.matches import WRITING
from chalicelib.services.ports import Ports

MIRROR_READ_THREADS = 8  # imports read at once (a GET each, and the listing of its prefix)
JOBS_PAGE = 100


def open_pages(ports: Ports, environment: str, stream_key: str, with_metadata: bool,
               limit: int | None = None) -> list[RecordColumns] | None:
    """Every record of the stream as pages of record columns (one an import, each open in every
    reconciliation), read from the analytics mirror; None when the mirror cannot be trusted to give
    the table's records (see above), or when they are more than `limit`: then the table is read."""
    if not ports.data_streams.records_as_imported(environment, stream_key):
        return None
    expected = _rows_expected(ports, environment, stream_key)
    if not expected or (limit is not None and sum(expected.values()) > limit):
        return None  # (no import: the table's read of nothing costs nothing, and proves it)

    from chalicelib.domain.matching.frames import imported_page  # polars: only the engine's functions have it

    def read(job_id: int) -> RecordColumns | None:
        rows = ports.mirror.import_rows(environment, stream_key, job_id)
        return None if rows is None else imported_page(rows, with_metadata)

    try:
        published = ports.mirror.published_imports(environment, stream_key)
        if any(published.get(job_id) != rows for job_id, rows in expected.items()):
            return None
        with ThreadPoolExecutor(MIRROR_READ_THREADS) as pool:
            pages = list(pool.map(read, expected))
    except Exception:  # an object gone under a repair of the mirror, say: the table still answers
        logger.warning("reading a stream's records from the analytics mirror failed; reading the table",
                       extra={"environment": environment, "data_stream_key": stream_key}, exc_info=True)
        return None
    if any(page is None or rows_in(page) != expected[job_id] for job_id, page in zip(expected, pages)):
        return None
    logger.info("open records read from the analytics mirror", extra={
        "environment": environment, "data_stream_key": stream_key, "imports": len(expected),
        "records": sum(expected.values())})
    return [page for page in pages if page is not None]


def _rows_expected(ports: Ports, environment: str, stream_key: str) -> dict[int, int] | None:
    """The records each import created in the stream, by import id, if every import that may have
    written into it is published (replicating or done, an early end once settled) or still
    writing (whose records a run leaves out); else None."""
    expected: dict[int, int] = {}
    for job in _imports_of(ports, environment, stream_key):
        if job.status in WRITING:
            job = ports.ingestion_jobs.get(environment, job.id)  # the listing's copy may lag behind (an index)
            if job.status in WRITING:
                continue
        published = job.status in (JobStatus.REPLICATING, JobStatus.COMPLETED) or job.counts_rolled_up
        if not published and job.chunks_begun is not None:
            return None  # ended early and not settled: what it wrote is not in the mirror yet
        if created := job.created_per_stream.get(stream_key, 0):
            expected[job.id] = created
    return expected


def _imports_of(ports: Ports, environment: str, stream_key: str) -> Iterator[IngestionJob]:
    cursor: str | None = None
    while True:
        jobs, cursor = ports.ingestion_jobs.list_of_stream(environment, stream_key, JOBS_PAGE, cursor)
        yield from jobs
        if cursor is None:
            return
