"""A run's open records read from the analytics mirror instead of the table, where both give the
same records.

The table is the truth of what is open: a run reads each stream's records through an index, one
item at a time on the server (about 18 s a million on the local stack's DynamoDB). The mirror
holds each import's rows in one compressed Parquet object, read in a second or two, but only the
rows as the import wrote them: not which were claimed by a match since, nor which were deleted.
So the mirror serves a block of record ids (domain/record_changes.py) while both hold:

- nothing has changed a record of the block since its import wrote it: whatever claims, deletes
  or writes a record after its import was counted notes its block first
  (`DataStreams.note_records_changed`: services/matches.py `write_matches`, services/records.py,
  services/ingestion/chunk.py and lifecycle.py). Every record of an untouched block is open in
  every reconciliation, unreconciled. The noted blocks are read from the table, which holds few
  open records of an import a run has matched. A stream created before the blocks were noted
  (`changed_since_import` None) is read from the table whole.
- the mirror holds every record the import wrote there: each import that wrote into the stream is
  published (replicating, completed, or an early end once settled), and its row marker names
  exactly the records it created there (a part the mirror lost makes it name fewer). An import
  still writing is left out of a run either way (its records wait for the run after it
  completes), and one that failed or was cancelled before a chunk began wrote nothing; one that
  ended early and is not settled yet sends the stream to the table. A chunk that writes after its
  job ended (a late execution) counts its records nowhere: it notes their blocks, which are read
  from the table even where its import counted no record in the stream. The ids of an import still
  writing are read from neither.

A record claimed or deleted after the blocks were read is the race the table's read has too: its
claim is conditional, so the match that wanted it is undone and its partners wait for a run.
"""
from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from itertools import chain

from chalicelib.domain.ingestion import IngestionJob, JobStatus
from chalicelib.domain.record_changes import Held, ImportSpan, plan_reads
from chalicelib.domain.records import RecordColumns
from chalicelib.observability import logger
from chalicelib.services.data_streams import imports_of_stream
from chalicelib.services.matches import WRITING
from chalicelib.services.ports import Ports

MIRROR_READ_THREADS = 8  # imports read at once (a GET each, and the listing of its prefix)
# More ranges of changed blocks than this between mirrored ones (scattered deletes, say), and the
# table is read whole: each range is a query of every partition of the stream's listing.
MAX_TABLE_RANGES = 32


def open_pages(ports: Ports, environment: str, stream_key: str, reconciliation_id: int, adopted: bool,
               with_metadata: bool, limit: int | None = None) -> Iterable[RecordColumns] | None:
    """Every record of the stream open in the reconciliation, as pages of record columns: one an
    import from the analytics mirror, then the changed blocks' from the table (as
    `Claims.open_record_columns` reads them); None when the mirror cannot be trusted to give the
    table's records (see above), or when the imports it is read for created more than `limit`: then
    the table is read whole."""
    changed = ports.data_streams.changed_since_import(environment, stream_key)
    if changed is None:
        return None
    imports = imports_held(ports, environment, stream_key)
    if imports is None:
        return None
    expected = {job.id: job.created_per_stream[stream_key] for job, held in imports if held is Held.MIRRORED}
    if not expected:
        return None  # (no import: the table's read of nothing costs nothing, and proves it)
    if any(job.first_record_id is None for job, held in imports if held is Held.MIRRORED):
        return None  # an import that created records without ids reserved: not one this module knows
    plan = plan_reads(import_spans(imports), changed)
    if len(plan.from_table) > MAX_TABLE_RANGES:
        return None  # changes scattered over many blocks: a range costs a query a partition
    if limit is not None and sum(expected[job_id] for job_id in plan.from_mirror) > limit:
        return None  # (the imports matched before count what they left open, which the table gives)

    from chalicelib.domain.matching.frames import imported_page  # polars: only the engine's functions have it

    def read(job_id: int) -> RecordColumns | None:
        rows = ports.mirror.import_rows(environment, stream_key, job_id)
        if rows is None:
            return None
        page, held = imported_page(rows, with_metadata, changed)
        return page if held == expected[job_id] else None

    try:
        published = ports.mirror.published_imports(environment, stream_key)
        if any(published.get(job_id) != expected[job_id] for job_id in plan.from_mirror):
            return None
        with ThreadPoolExecutor(MIRROR_READ_THREADS) as pool:
            pages = list(pool.map(read, plan.from_mirror))
    except Exception:  # an object gone under a repair of the mirror, say: the table still answers
        logger.warning("reading a stream's records from the analytics mirror failed; reading the table",
                       extra={"environment": environment, "data_stream_key": stream_key}, exc_info=True)
        return None
    if any(page is None for page in pages):
        return None
    logger.info("open records read from the analytics mirror", extra={
        "environment": environment, "data_stream_key": stream_key, "imports": len(pages),
        "table_ranges": len(plan.from_table)})
    from_table = ports.claims.open_record_columns(environment, stream_key, reconciliation_id, adopted,
                                                  with_metadata=with_metadata, id_ranges=plan.from_table) \
        if plan.from_table else ()
    return chain((page for page in pages if page is not None), from_table)


def imports_held(ports: Ports, environment: str, stream_key: str) -> list[tuple[IngestionJob, Held]] | None:
    """Every import that may have written into the stream, with what is known of its records there
    (domain/record_changes.py `Held`), if each is published (replicating or done, an early end once
    settled) or still writing (whose records a run leaves out); else None."""
    found: list[tuple[IngestionJob, Held]] = []
    for job in imports_of_stream(ports, environment, stream_key):
        if job.status in WRITING:
            job = ports.ingestion_jobs.get(environment, job.id)  # the listing's copy may lag behind (an index)
            if job.status in WRITING:
                found.append((job, Held.WRITING))
                continue
        published = job.status in (JobStatus.REPLICATING, JobStatus.COMPLETED) or job.counts_rolled_up
        if not published and job.chunks_begun is not None:
            return None  # ended early and not settled: what it wrote is not in the mirror yet
        found.append((job, Held.MIRRORED if job.created_per_stream.get(stream_key, 0) else Held.NONE_COUNTED))
    return found


def import_spans(imports: Iterable[tuple[IngestionJob, Held]]) -> list[ImportSpan]:
    """The block of ids of each import that reserved one, with what is known of its records."""
    return [ImportSpan(job.id, ids.start, ids.stop - 1, held) for job, held in imports
            if (ids := job.record_ids) is not None]
