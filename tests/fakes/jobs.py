"""Ingestion jobs, as `adapters/dynamodb/jobs.py` keeps them: status moves along the domain's
JOB_STATUSES, per-chunk results counted once, idempotency keys, the stream listings (a file
import's own entry, a bulk request's links), the active jobs, cancellation and restarts."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from chalicelib.adapters.dynamodb.jobs import IDEMPOTENCY_KEY_LIFETIME  # past it, a key may be bound again
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import BadRequest, NotFound, TransitionRefused
from chalicelib.domain.ingestion import (
    CHUNKS_IN_FLIGHT,
    JOB_STATUSES,
    MAX_IGNORED_UPLOADS,
    ChunkOutcome,
    IgnoredUpload,
    ImportTotals,
    IngestionJob,
    ItemResult,
    ItemStatus,
    JobSource,
    JobStatus,
    StreamTotals,
)
from tests.fakes._support import (
    NOT_THIS_LIST,
    decode_cursor,
    encode_cursor,
    may_restart,
    moved,
    newest_first_page,
    padded,
    stored_time,
)

_RESULTS_CURSOR = ("listing", "after")


@dataclass
class _ChunkResults:
    results: tuple[ItemResult, ...] | None  # every row's: bulk requests only
    problems: tuple[ItemResult, ...] | None  # the rows that failed or were skipped
    unprocessed: bool = False  # stored by the end of a job that never reached the chunk

    @classmethod
    def of(cls, job: IngestionJob, outcome: ChunkOutcome, unprocessed: bool) -> _ChunkResults:
        """As the adapter keeps them: every row's for a bulk request, its problem rows either way."""
        return cls(results=tuple(outcome.results) if job.source is JobSource.BULK_API else None,
                   problems=tuple(r for r in outcome.results if r.status is not ItemStatus.SUCCESSFUL) or None,
                   unprocessed=unprocessed)


@dataclass
class _JobRow:
    job: IngestionJob
    listed_active: bool = True  # in the adapter's index of active jobs: from `add` until a move finishes it
    restarts_written: bool = False  # the restart claim tells "never restarted" from 0


@dataclass
class _IdempotencyKey:
    job_id: int
    body_hash: str
    expires_at: int  # epoch seconds, as the table's TTL attribute


class FakeIngestionJobRepository:
    statuses, noun = JOB_STATUSES, "ingestion job"

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], _JobRow] = {}
        self.chunk_results: dict[tuple[str, int], dict[int, _ChunkResults]] = {}
        self.stream_links: dict[tuple[str, str], set[int]] = {}  # (environment, stream key): bulk requests
        self.idempotency_keys: dict[tuple[str, str], _IdempotencyKey] = {}

    # Creating ------------------------------------------------------------------------------

    def add(self, job: IngestionJob) -> None:
        """Write a new job; writing the same job again changes nothing."""
        key = (job.environment, job.id)
        if key in self.rows:
            return
        self.rows[key] = _JobRow(IngestionJob(
            environment=job.environment, id=job.id, source=job.source, status=job.status,
            total_items=job.total_items, on_conflict=job.on_conflict, created_at=stored_time(job.created_at),
            payload_key=job.payload_key, filename=job.filename, body_hash=job.body_hash,
            idempotency_key=job.idempotency_key, expected_records_count=job.expected_records_count,
            decimal_places=job.decimal_places, data_stream_ids=tuple(job.data_stream_ids), file_key=job.file_key,
            data_stream_key=job.data_stream_key, options=dict(job.options or {}), bulk_chunk_rows=job.bulk_chunk_rows,
            file_chunk_rows=job.file_chunk_rows))

    def claim_idempotency_key(self, environment: str, key: str, job_id: int, body_hash: str) -> tuple[int, str]:
        """Bind `key` to `job_id` unless it is bound already (and not expired); the binding that holds."""
        now = utc_now()
        existing = self.idempotency_keys.get((environment, key))
        if existing is None or existing.expires_at < int(now.timestamp()):
            self.idempotency_keys[(environment, key)] = _IdempotencyKey(
                job_id, body_hash, int((now + IDEMPOTENCY_KEY_LIFETIME).timestamp()))
            return job_id, body_hash
        return existing.job_id, existing.body_hash

    # Reading -------------------------------------------------------------------------------

    def get(self, environment: str, job_id: int) -> IngestionJob:
        row = self.rows.get((environment, job_id))
        if row is None:
            raise NotFound(f"file import {job_id} not found")  # a bulk request is one too
        return row.job

    def find(self, environment: str, job_id: int) -> IngestionJob | None:
        row = self.rows.get((environment, job_id))
        return row.job if row else None

    def results(self, environment: str, job_id: int, problems_only: bool = False) -> list[ItemResult]:
        """Every item's result in submission order, or only those that failed or were skipped."""
        stored = self.chunk_results.get((environment, job_id), {})
        rows = [r for _, chunk in sorted(stored.items())
                for r in (chunk.problems if problems_only else chunk.results) or ()]
        return sorted(rows, key=lambda r: r.index)

    @staticmethod
    def results_cursor(job: IngestionJob, listing: str, after: int) -> str:
        return encode_cursor(f"{job.environment}/{job.id}/{listing}", str(after), _RESULTS_CURSOR)

    @staticmethod
    def results_after(job: IngestionJob, listing: str, cursor: str) -> int:
        after = decode_cursor(cursor, f"{job.environment}/{job.id}/{listing}", _RESULTS_CURSOR)["after"]
        if not (after.isascii() and after.isdigit() and len(after) <= 12 and int(after) < max(job.total_items, 1)):
            raise BadRequest(NOT_THIS_LIST)
        return int(after)

    def result_chunks(self, job: IngestionJob, from_chunk: int, page_size: int = 4
                      ) -> Iterator[tuple[int, list[ItemResult]]]:
        """The stored results of each chunk from `from_chunk` on, in chunk order: every row's (bulk
        requests) or the problem rows' only (file imports)."""
        stored = self.chunk_results.get((job.environment, job.id), {})
        for number in sorted(n for n in stored if from_chunk <= n <= 999_999):
            chunk = stored[number]
            yield number, list((chunk.problems if job.is_file else chunk.results) or ())

    # Moving --------------------------------------------------------------------------------

    def move(self, job: IngestionJob, /, target: JobStatus, **fields: object) -> IngestionJob:
        """Move to `target` if the stored status allows it (JOB_STATUSES), setting `fields` with it."""
        row = self.rows.get((job.environment, job.id))
        if row is None or row.job.status not in self.statuses.sources_of(target) or not _may_move(row.job, target):
            raise TransitionRefused(f"{self.noun} {job.id} cannot move to {target.value}")
        if isinstance(fields.get("aggregates"), ImportTotals):
            fields["aggregates"] = _stored_totals(fields["aggregates"])  # type: ignore[arg-type]
        row.job = moved(row.job, target, fields)
        row.listed_active = row.listed_active and target not in self.statuses.finished
        return row.job

    def reserve_record_ids(self, job: IngestionJob, first_id: int) -> IngestionJob:
        """Fix the job's block of record ids once; a retry keeps the first block it got."""
        row = self._row_written_anyway(job)
        if row.job.first_record_id is None:
            row.job = replace(row.job, first_record_id=first_id)
        return row.job

    def begin_chunk(self, job: IngestionJob, chunk: int, through: int | None = None) -> bool | None:
        """Mark a chunk begun (the highest begun: `through` if given); whether an execution may have
        begun it before (then it is added to `chunks_begun_again`). None, and nothing marked, unless
        the job is processing with no end marked (a missing job is left missing)."""
        row = self.rows.get((job.environment, job.id))
        if row is None or row.job.status is not JobStatus.PROCESSING or row.job.ending is not None:
            return None
        if row.job.chunks_begun is not None and chunk <= row.job.chunks_begun:
            row.job = replace(row.job, chunks_begun_again=row.job.chunks_begun_again | {chunk})
            return True
        row.job = replace(row.job, chunks_begun=max(chunk, through or chunk))
        return False

    def chunks_begun_again(self, environment: str, job_id: int) -> frozenset[int] | None:
        row = self.rows.get((environment, job_id))
        return None if row is None else row.job.chunks_begun_again

    def save_chunk(self, job: IngestionJob, outcome: ChunkOutcome, unprocessed: bool = False) -> IngestionJob:
        return self._save_chunk(job, outcome, unprocessed, begin_ahead=False)[0]

    def save_chunk_and_begin_ahead(self, job: IngestionJob, outcome: ChunkOutcome) -> tuple[IngestionJob, bool]:
        return self._save_chunk(job, outcome, False, begin_ahead=True)

    def keep_unprocessed_results(self, job: IngestionJob, outcome: ChunkOutcome) -> tuple[ChunkOutcome, bool]:
        """These results, stored now (True), or those stored before (False)."""
        stored = self.chunk_results.setdefault((job.environment, job.id), {})
        if outcome.index in stored:
            return self._stored_outcome(job, outcome.index, outcome.created_per_stream), False
        stored[outcome.index] = _ChunkResults.of(job, outcome, unprocessed=True)
        return outcome, True

    def _save_chunk(self, job: IngestionJob, outcome: ChunkOutcome, unprocessed: bool,
                    begin_ahead: bool) -> tuple[IngestionJob, bool]:
        """Store a chunk's results, then count it once, only while processing (or, `unprocessed`,
        once the job ended early); what is counted is what is stored. `begin_ahead`: the chunk
        CHUNKS_IN_FLIGHT ahead is marked begun by the same write; and whether this call counted the chunk."""
        stored = self.chunk_results.setdefault((job.environment, job.id), {})
        existing = stored.get(outcome.index)
        if unprocessed:
            outcome, _ = self.keep_unprocessed_results(job, outcome)
        elif existing is not None and existing.unprocessed:
            return self.get(job.environment, job.id), False
        else:
            stored[outcome.index] = _ChunkResults.of(job, outcome, unprocessed=False)
        row = self.rows.get((job.environment, job.id))
        allowed = _UNFINISHED if unprocessed else (JobStatus.PROCESSING,)
        if (row is None or outcome.index in row.job.done_chunks or row.job.status not in allowed
                or (row.job.ending is not None) is not unprocessed):
            return self.get(job.environment, job.id), False
        created = dict(row.job.created_per_stream)
        for stream_key, count in outcome.created_per_stream.items():
            created[stream_key] = created.get(stream_key, 0) + count
        row.job = replace(
            row.job, done_chunks=row.job.done_chunks | {outcome.index},
            processed_items=row.job.processed_items + len(outcome.results),
            successful_items=row.job.successful_items + outcome.count(ItemStatus.SUCCESSFUL),
            failed_items=row.job.failed_items + outcome.count(ItemStatus.FAILED),
            skipped_items=row.job.skipped_items + outcome.count(ItemStatus.SKIPPED),
            created_per_stream=created, last_progress_at=stored_time(utc_now()),
            chunks_begun=outcome.index + CHUNKS_IN_FLIGHT if begin_ahead else row.job.chunks_begun)
        return row.job, True

    def _stored_outcome(self, job: IngestionJob, chunk: int, created: dict[str, int]) -> ChunkOutcome:
        stored = self.chunk_results.get((job.environment, job.id), {}).get(chunk)
        if job.source is JobSource.BULK_API:
            return ChunkOutcome(chunk, tuple(stored.results or ()) if stored else (), created)
        problems = {r.index: r for r in (stored.problems or () if stored else ())}
        results = tuple(problems.get(i) or ItemResult(i, ItemStatus.SUCCESSFUL, None, None, None, None)
                        for i in job.chunk_range(chunk))
        return ChunkOutcome(chunk, results, created)

    def record_preparation(self, job: IngestionJob, chunk_count: int, expected: int, first_id: int,
                           decimal_places: int | None = None) -> IngestionJob:
        """A parsed file's chunks, rows, block of record ids and decimal places (set once)."""
        row = self._row_written_anyway(job)
        if row.job.chunk_count is None and row.job.ending is None:
            row.job = replace(row.job, chunk_count=chunk_count, expected_records_count=expected, total_items=expected,
                              first_record_id=first_id, last_progress_at=stored_time(utc_now()),
                              decimal_places=decimal_places)
        return row.job

    def list_of_stream(self, environment: str, stream_key: str, limit: int,
                       cursor: str | None) -> tuple[list[IngestionJob], str | None]:
        """The stream's file imports and the bulk requests linked to it, newest first; a link whose
        job is missing takes its place on the page but shows nothing."""
        entries: list[tuple[str, tuple[str, int]]] = [
            (padded(i), (env, i)) for (env, i), r in self.rows.items()
            if env == environment and r.job.data_stream_key == stream_key]
        entries += [(padded(i), (environment, i)) for i in self.stream_links.get((environment, stream_key), ())]
        keys, next_cursor = newest_first_page(f"jobs/{environment}/{stream_key}", entries, limit, cursor)
        rows = (self.rows.get(key) for key in keys)
        return [row.job for row in rows if row is not None], next_cursor

    def link_to_streams(self, job: IngestionJob, stream_keys: list[str]) -> None:
        for stream_key in stream_keys:
            self.stream_links.setdefault((job.environment, stream_key), set()).add(job.id)

    def linked_streams(self, job: IngestionJob) -> list[str]:
        return sorted(key for (env, key), ids in self.stream_links.items() if env == job.environment and job.id in ids)

    def active(self) -> list[IngestionJob]:
        """Jobs listed as active (from `add` until a move finishes them), in the order of "<environment>#<id>"."""
        entries = [(f"{env}#{padded(i)}", r.job) for (env, i), r in self.rows.items() if r.listed_active]
        return [job for _, job in sorted(entries, key=lambda e: e[0])]

    def active_in(self, environment: str) -> list[IngestionJob]:
        return [job for job in self.active() if job.environment == environment]

    def count_restart(self, job: IngestionJob, counted: bool = True) -> bool:
        """Claim one restart of a stuck job: False when its heartbeat or restarts moved meanwhile."""
        row = self.rows.get((job.environment, job.id))
        if row is None or not may_restart(self.statuses, row.job, job, row.restarts_written):
            return False
        row.job = replace(row.job, restarts=row.job.restarts + counted, last_progress_at=stored_time(utc_now()))
        if counted:
            row.job = replace(row.job, idle_restarts=job.idle_restarts_after_next(),
                              processed_at_restart=job.processed_items)
        row.restarts_written = row.restarts_written or counted
        return True

    def set_aggregates(self, job: IngestionJob, aggregates: ImportTotals) -> None:
        row = self.rows.get((job.environment, job.id))
        if row is not None:  # the adapter's unconditional update writes a bare item otherwise
            row.job = replace(row.job, aggregates=_stored_totals(aggregates))

    def mark_counts_rolled_up(self, job: IngestionJob) -> None:
        row = self.rows.get((job.environment, job.id))
        if row is not None:  # the adapter's unconditional update writes a bare item otherwise
            row.job = replace(row.job, counts_rolled_up=True)

    def request_cancellation(self, job: IngestionJob, cancellable: tuple[JobStatus, ...]) -> IngestionJob:
        row = self.rows.get((job.environment, job.id))
        if row is None or row.job.status not in cancellable:
            current = self.get(job.environment, job.id)
            raise TransitionRefused(f"ingestion job {job.id} is {current.status.value}; only pending or "
                                    "processing jobs can be cancelled")
        row.job = replace(row.job, cancellation_requested_at=stored_time(utc_now()))
        return row.job

    def begin_ending(self, job: IngestionJob, target: JobStatus, fields: dict[str, Any]) -> IngestionJob:
        """Mark the early end the job is brought to, once, while its status allows that end."""
        row = self.rows.get((job.environment, job.id))
        if row is None:
            raise NotFound(f"ingestion job {job.id} not found")
        if row.job.ending is None and row.job.status in self.statuses.sources_of(target):
            row.job = replace(row.job, ending=target, ending_fields=dict(fields))
        return row.job

    def accept_upload(self, job: IngestionJob, etag: str) -> IngestionJob:
        """The etag of the upload the import takes: any while pending, else only the first seen."""
        row = self.rows.get((job.environment, job.id))
        if row is None:
            raise NotFound(f"ingestion job {job.id} not found")
        if row.job.status is JobStatus.PENDING or row.job.upload_etag is None:
            row.job = replace(row.job, upload_etag=etag)
        return row.job

    def take_upload_read(self, job: IngestionJob, etag: str) -> IngestionJob:
        """The file a started import read is this one: its etag replaces the one `job` held, only."""
        row = self.rows.get((job.environment, job.id))
        if row is None:
            raise NotFound(f"ingestion job {job.id} not found")
        if row.job.upload_etag is not None and row.job.upload_etag == job.upload_etag:
            row.job = replace(row.job, upload_etag=etag)
        return row.job

    def note_ignored_upload(self, job: IngestionJob, upload: IgnoredUpload) -> IngestionJob:
        """Keep a file that came after the import started, once per etag, at most MAX_IGNORED_UPLOADS."""
        row = self.rows.get((job.environment, job.id))
        if row is None:
            raise NotFound(f"ingestion job {job.id} not found")
        kept = row.job.ignored_uploads
        if all(u.etag != upload.etag for u in kept) and len(kept) < MAX_IGNORED_UPLOADS:
            row.job = replace(row.job, ignored_uploads=(*kept, replace(upload, received_at=stored_time(
                upload.received_at))))
        return row.job

    def _row_written_anyway(self, job: IngestionJob) -> _JobRow:
        """The adapter's update-once of a missing job writes a bare item and fails reading it back
        (KeyError); the fake fails the same way without the item."""
        row = self.rows.get((job.environment, job.id))
        if row is None:
            raise KeyError("environment")
        return row


_UNFINISHED = tuple(s for s in JobStatus if s not in JOB_STATUSES.finished)


def _may_move(job: IngestionJob, target: JobStatus) -> bool:
    """The adapter's condition beside the status: a job being ended moves only to its ending; a
    finished status needs its counts final."""
    if target not in JOB_STATUSES.finished:
        return job.ending is None
    return job.ending in (None, target) and job.processed_items == job.total_items


def _stored_totals(totals: ImportTotals) -> ImportTotals:
    """Totals as they read back: sequences as tuples."""
    def part(stream: StreamTotals) -> StreamTotals:
        return replace(stream, currencies=tuple(stream.currencies))
    return ImportTotals(part(totals.total), {key: part(p) for key, p in totals.per_stream.items()})
