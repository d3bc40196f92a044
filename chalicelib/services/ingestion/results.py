"""Results of an ingestion job, every item's, in item order and a page at a time: what its chunks
(chunk.py) and an early end (lifecycle.py) leave for a client to read, at any phase.

A bulk request stores every item's result. A file import stores only its problem rows (failed
or skipped): a stored result per row would cost a write unit per 25 rows for rows that became
records anyway. A file import's successful row i is the record it wrote, `first_record_id + i`,
so its result is made from that record: a row of a chunk with results that is not a problem row
succeeded. Such a result has no `line` (only the problem rows keep theirs), and once its record
is deleted, no `external_id`.
"""
from __future__ import annotations

from dataclasses import dataclass

from chalicelib.domain.ingestion import IngestionJob, ItemResult, ItemStatus
from chalicelib.services.ports import Ports, Records

EVERY_STATUS = frozenset(ItemStatus)
# A page reads at most this many chunks of results (250 or 500 rows each): a page of a status
# that is rare may come back short, with a cursor to read on from.
MAX_CHUNKS_PER_PAGE = 20


@dataclass(frozen=True)
class ResultsPage:
    results: list[ItemResult]
    after: int | None  # the index the next page starts after; None at the end


def results_page(ports: Ports, job: IngestionJob, statuses: frozenset[ItemStatus] = EVERY_STATUS,
                 after: int = -1, limit: int = 50, max_chunks: int = MAX_CHUNKS_PER_PAGE) -> ResultsPage:
    """Results of `job` with one of `statuses`, of the items after index `after`, at most `limit`.
    Only chunks with results are listed: those processed so far, and once a job ended early, the
    rest (failed as not processed)."""
    found: list[ItemResult] = []
    start = (after + 1) // job.chunk_rows
    last_index = after
    for read, (chunk, stored) in enumerate(ports.ingestion_jobs.result_chunks(job, start), start=1):
        found += _chunk_results(job, chunk, stored, statuses, after)
        last_index = job.chunk_range(chunk)[-1] if job.chunk_range(chunk) else last_index
        if len(found) > limit:
            page = found[:limit]
            return ResultsPage(_with_records(ports.records, job, page), page[-1].index)
        if read >= max_chunks:
            more = any(True for _ in ports.ingestion_jobs.result_chunks(job, chunk + 1, page_size=1))
            return ResultsPage(_with_records(ports.records, job, found), last_index if more else None)
    return ResultsPage(_with_records(ports.records, job, found), None)


def _chunk_results(job: IngestionJob, chunk: int, stored: list[ItemResult], statuses: frozenset[ItemStatus],
                   after: int) -> list[ItemResult]:
    if not job.is_file:
        return [r for r in stored if r.index > after and r.status in statuses]
    problems = {r.index: r for r in stored}
    results = []
    for index in job.chunk_range(chunk):
        if index <= after:
            continue
        result = problems.get(index) or ItemResult(index, ItemStatus.SUCCESSFUL, None, job.record_id(index))
        if result.status in statuses:
            results.append(result)
    return results


def _with_records(records: Records, job: IngestionJob, results: list[ItemResult]) -> list[ItemResult]:
    """A file import's successful rows take their external_id from the records they wrote."""
    made = {r.index: r.record_id for r in results
            if job.is_file and r.status is ItemStatus.SUCCESSFUL and r.record_id is not None}  # a success has one
    if not made:
        return results
    written = records.find_many(job.environment, made.values())
    return [ItemResult(r.index, r.status, written[r.record_id].external_id, r.record_id)
            if r.index in made and r.record_id in written else r for r in results]
