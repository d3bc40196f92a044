"""The life of every job, bulk request or file import: start it (pending -> processing), ask it
to stop (cancel), then conclude it: completed (replicated to the mirror, its aggregates and
stream counts read from there, announced), or ended early, cancelled or failed (every unreached
item gets its result, what was written is kept and settled).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from chalicelib.domain import event_data
from chalicelib.domain.audit import system_actor
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import shown
from chalicelib.domain.ingestion import (
    CANCEL_ANSWERED,
    ENDED_EARLY,
    ChunkOutcome,
    ImportTotals,
    IngestionJob,
    ItemResult,
    ItemStatus,
    JobSource,
    JobStatus,
    records_per_stream,
)
from chalicelib.observability import logger
from chalicelib.services.data_streams import recount_records
from chalicelib.services.events import announce
from chalicelib.services.ingestion.chunk import UNKNOWN_ROW, KnownRow, records_written, release_orphan_claims, rows_of
from chalicelib.services.ingestion.results import results_page
from chalicelib.services.ports import Ports
from chalicelib.services.reconciliation_runs import on_records_ingested
from chalicelib.services.status_moves import move_or_reload


def start(ports: Ports, job: IngestionJob) -> IngestionJob:
    """pending -> processing, with its first heartbeat; whoever comes second gets the job as it is."""
    now = utc_now()
    return move_or_reload(ports.ingestion_jobs, job, JobStatus.PROCESSING, started_at=now, last_progress_at=now)


def finish(ports: Ports, job: IngestionJob) -> IngestionJob:
    return conclude(ports, job, JobStatus.COMPLETED)


def end_meanwhile(ports: Ports, job: IngestionJob) -> IngestionJob:
    """Where an execution that finds its job `writes_no_more` leaves it: settled if it ended (the
    sweeper), its end seen through if being ended, cancelled if a cancel was asked for before its
    rows were all written; a replicating job is left to its finish."""
    if job.finished:
        return settle(ports, job)
    if job.ending is not None:
        return conclude(ports, job, job.ending)
    if job.status is JobStatus.REPLICATING:
        return job
    return conclude(ports, job, JobStatus.CANCELLED)


def fail(ports: Ports, environment: str, job_id: int, error: Exception, attempts: int) -> IngestionJob:
    """Give up on a job that failed on every delivery: it ends `failed`, with what it wrote counted."""
    job = ports.ingestion_jobs.get(environment, job_id)
    if job.finished:
        return settle(ports, job)
    return conclude(ports, job, JobStatus.FAILED,
                    error_message=f"processing failed {attempts} times; the last error was {type(error).__name__}",
                    error_details={"error": type(error).__name__, "detail": shown(error, 500),
                                   "attempts": attempts})


def cancel(ports: Ports, environment: str, job_id: int) -> IngestionJob:
    """Ask a pending or processing job to stop (repeats only move cancellation_requested_at, on a
    job already cancelled too). A running job stops at its next heartbeat; a job nothing is running
    for stops at once."""
    job = ports.ingestion_jobs.request_cancellation(ports.ingestion_jobs.get(environment, job_id),
                                                    tuple(CANCEL_ANSWERED))
    if job.status is JobStatus.PENDING and job.is_file and not ports.payloads.exists(job.import_file_key):
        job = conclude(ports, job, JobStatus.CANCELLED)  # waiting for an upload that may never come
    return job


def conclude(ports: Ports, job: IngestionJob, target: JobStatus, before_completed: Callable[[], None] | None = None,
             **fields: Any) -> IngestionJob:
    """End a job. Completed: turn `replicating` (no chunk is counted after that), replicate its
    records to the mirror, read the import's aggregates and its streams' record counts from
    there, run `before_completed` (what a client reading `completed` must find written), then
    `completed`. Cancelled or failed: mark the ending (so no worker writes or counts more), give
    every unreached item its result, then move, counts final (see `_end_early`), and settle what
    was written. Records written before a cancel or a failure are kept."""
    job = _conclude(ports, job, target, before_completed, **fields)
    # Again on a retry that finds the job ended: it finishes an announcement a crash cut short
    # (services/events.py announce), and does nothing for one that was made.
    kind = "bulk_request" if job.source is JobSource.BULK_API else "file_import"
    announce(ports, event_data.ingestion_ended(job), job.environment, actor=system_actor(kind, job.id),
             summary_fields=("status", "total_items", "successful_items", "failed_items", "skipped_items",
                             "data_stream_ids", "error_message"))
    return job


def _conclude(ports: Ports, job: IngestionJob, target: JobStatus, before_completed: Callable[[], None] | None,
              **fields: Any) -> IngestionJob:
    now = utc_now()
    if target is not JobStatus.COMPLETED:
        return _end_early(ports, job, target, fields)
    if job.status is JobStatus.PROCESSING:
        job = move_or_reload(ports.ingestion_jobs, job, JobStatus.REPLICATING, records_written_at=now,
                             last_progress_at=now)
    if job.ending is not None and not job.finished:  # something ends it early: that end wins
        return _end_early(ports, job, job.ending, {})
    if job.status is not JobStatus.REPLICATING:
        return job
    job = ports.ingestion_jobs.get(job.environment, job.id)  # the counts as stored, now that they are final
    aggregates = _replicate(ports, job)
    _recount_streams(ports, job)
    _announce(ports, job)
    target, outcome = _outcome(ports, job, fields.pop("error_details", None))
    if target is JobStatus.COMPLETED and before_completed is not None:
        before_completed()
    return move_or_reload(ports.ingestion_jobs, job, target, completed_at=utc_now(), last_progress_at=utc_now(),
                          data_stream_ids=_stream_ids(ports, job), aggregates=aggregates, **outcome, **fields)


def _end_early(ports: Ports, job: IngestionJob, target: JobStatus, fields: dict[str, Any]) -> IngestionJob:
    """Cancelled or failed, in three steps that a retry resumes: mark the ending (whoever marks
    first decides the end, and its fields); give each item the job never reached its result,
    counted while the status still says the job runs; then move, in a write allowed only with the
    counts final, so a client never reads the final status with counts still to come."""
    job = ports.ingestion_jobs.begin_ending(job, target, fields)
    if job.finished:
        return settle(ports, job)
    if job.ending is None:  # the status allows no such end (a cancel once replicating)
        return job
    _fail_unprocessed(ports, job)
    now = utc_now()
    job = move_or_reload(ports.ingestion_jobs, ports.ingestion_jobs.get(job.environment, job.id), job.ending,
                         completed_at=now, last_progress_at=now, **job.ending_fields)
    if not job.finished:
        logger.error("an ending job's counts are not final; left for a retry", extra={"job_id": job.id})
    return settle(ports, job)


FIRST_ERRORS_SHOWN = 3


def _outcome(ports: Ports, job: IngestionJob, details: dict[str, Any] | None) -> tuple[JobStatus, dict[str, Any]]:
    """How a job whose items all have results ends: completed, unless every item failed (then
    failed). Either way a job with failed items says how many in its error_message, with the
    first errors."""
    if not job.failed_items:
        return JobStatus.COMPLETED, {"error_details": details} if details else {}
    unit = "row" if job.is_file else "item"
    first = results_page(ports, job, frozenset({ItemStatus.FAILED}),
                         limit=FIRST_ERRORS_SHOWN).results
    errors = "; ".join(f"{_place(job, r)}: {r.error}" for r in first)
    every = job.failed_items == job.total_items
    counted = f"every {unit} failed ({job.failed_items} of {job.total_items})" if every else \
        f"{job.failed_items} of {job.total_items} {unit}s failed"
    summary = {"failed_items": job.failed_items,
               "first_errors": [{"index": r.index, "line": r.line, "external_id": r.external_id, "error": r.error}
                                for r in first]}
    return (JobStatus.FAILED if every else JobStatus.COMPLETED), {
        "error_message": f"{counted}; first errors: {errors}" if errors else counted,
        "error_details": {**(details or {}), **summary},
    }


def _place(job: IngestionJob, result: ItemResult) -> str:
    return f"line {result.line}" if result.line is not None else f"{'row' if job.is_file else 'item'} {result.index}"


def settle(ports: Ports, job: IngestionJob) -> IngestionJob:
    """For a job that ended cancelled or failed: replicate what it wrote and recount its streams,
    once. Every entry point calls it on a finished job, so a crash right after the move is made
    good."""
    if job.status is JobStatus.COMPLETED or job.counts_rolled_up or not job.finished:
        return job
    job = ports.ingestion_jobs.get(job.environment, job.id)  # its counts were final when it moved
    try:
        ports.ingestion_jobs.set_aggregates(job, _replicate(ports, job))
        _recount_streams(ports, job)
        _announce(ports, job)
    except Exception:  # the mirror is analytics: a failure there must not keep the job from ending
        logger.exception("replicating an ended job failed", extra={"job_id": job.id})  # recounts are swept
    return ports.ingestion_jobs.get(job.environment, job.id)


def _fail_unprocessed(ports: Ports, job: IngestionJob) -> None:
    """Every item of a job that ends early gets a result, so its totals add up. A chunk it never
    finished may have written records (an execution died before saving it): those rows succeeded
    and their records are counted and mirrored like a processed chunk's; the other rows fail,
    saying why, and the external_ids they may have claimed are released (see chunk.py
    `release_orphan_claims`). Each chunk is counted once, like a processed one."""
    end = job.ending or job.status
    missing = [n for n in job.chunk_numbers if n not in job.done_chunks] if end in ENDED_EARLY else []
    if not missing:
        return
    what, unit = ("import", "row") if job.is_file else ("bulk request", "item")
    why = "was cancelled" if end is JobStatus.CANCELLED else "failed"
    error = f"not processed: the {what} {why} before this {unit} was reached"
    known = rows_of(ports, job, missing)
    if may_be_writing := [n for n in missing if job.may_have_written(n)]:
        # An execution may still be writing one (the sweeper ends a slow job; a duplicate runs on):
        # records it writes after this count are in neither the counts nor the mirror, and it may die
        # before saying so, so no run reads their blocks of ids from the mirror (imported_records.py).
        ids = [job.record_id(i) for n in may_be_writing for i in job.chunk_range(n)]
        ports.data_streams.note_records_changed(job.environment,
                                                {key: ids for key in sorted(_streams_of(ports, job, known,
                                                                                        may_be_writing))})
    for number in missing:
        begun = job.may_have_written(number)
        written = records_written(ports, job, job.chunk_range(number)) if begun else {}
        results = []
        for index in job.chunk_range(number):
            row = known.get(index, UNKNOWN_ROW)
            record = written.get(index)
            results.append(ItemResult.written(index, record, row.line) if record is not None else
                           ItemResult(index, ItemStatus.FAILED, row.external_id, None, error, row.line))
        outcome, ours = ports.ingestion_jobs.keep_unprocessed_results(job, ChunkOutcome(number, tuple(results), {}))
        if not ours:  # a late execution's results, stored after its records were all written (or an earlier
            # try's): what is counted and mirrored is what they say, not what this end read before
            succeeded = [r.index for r in outcome.results if r.status is ItemStatus.SUCCESSFUL]
            written = records_written(ports, job, succeeded)
        if begun:  # before the chunk is saved: a crash in between releases again (a no-op by then)
            release_orphan_claims(ports, job, [(i, known[i]) for i in job.chunk_range(number)
                                                if i in known and i not in written])
        if written:
            try:  # as in `settle`, the mirror is analytics: the job's results must not wait for it
                ports.mirror.write_part(job.environment, job.id, number, written.values())
            except Exception:
                logger.exception("mirroring an unfinished chunk's records failed", extra={"job_id": job.id})
        outcome = replace(outcome, created_per_stream=records_per_stream(written.values()))
        job = ports.ingestion_jobs.save_chunk(job, outcome, unprocessed=True)


def _streams_of(ports: Ports, job: IngestionJob, known: dict[int, KnownRow], chunks: list[int]) -> set[str]:
    """The streams these chunks' rows may write into: those their rows name, as far as they can be
    read, those the job has written into so far (a file's own stream too), and those it is listed
    under (a bulk request's streams, linked before it wrote: all of them when its payload is gone)."""
    named = {known[i].stream_key for n in chunks for i in job.chunk_range(n) if i in known}
    return {key for key in named if key} | set(job.created_per_stream) | set(ports.ingestion_jobs.linked_streams(job)) \
        | ({job.data_stream_key} if job.data_stream_key else set())


def _replicate(ports: Ports, job: IngestionJob) -> ImportTotals:
    ports.mirror.publish(job.environment, job.id, job.created_per_stream)
    return ports.mirror.summarize(job.environment, job.id, job.created_per_stream)


def _announce(ports: Ports, job: IngestionJob) -> None:
    """Continuous reconciliations match the records the job wrote (a retry tells again; the
    listener is idempotent)."""
    streams = [key for key, created in job.created_per_stream.items() if created]
    if streams:
        on_records_ingested(ports, job.environment, job.id, streams)


def _recount_streams(ports: Ports, job: IngestionJob) -> None:
    """Read the counts of the job's streams from the mirror it was just published to; once."""
    if not job.counts_rolled_up:
        for stream_key in job.created_per_stream:
            recount_records(ports, job.environment, stream_key)
        ports.ingestion_jobs.mark_counts_rolled_up(job)


def _stream_ids(ports: Ports, job: IngestionJob) -> list[int]:
    ids = []
    for key in sorted(job.created_per_stream):
        stream = ports.data_streams.find_including_deleting(job.environment, key)
        if stream is not None:
            ids.append(stream.id)
    return ids
