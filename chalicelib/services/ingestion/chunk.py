"""One chunk's engine, which both ways in share: a bulk request (bulk.py, the SQS worker) and a
file import (files.py, its state machine) are jobs whose chunks of items it validates, claims and
writes; lifecycle.py settles their results, counts and end.

Nothing lost, nothing doubled, without transactions (but for the rare chunk two executions write,
where the local stack's are used):
- the job reserves one block of record ids before it writes anything, so item i always
  becomes record `first_record_id + i`, however often it is processed;
- an item with an external_id first claims it with a guard naming the job and item as owner;
  the same owner may claim again, anyone else finds it taken. One job at a time writes a
  stream's guards (its writer lease): it reads a chunk's claims with BatchGetItem and writes the
  free ones with BatchWriteItem, which no other writer can overwrite meanwhile (`_claim_all`);
  a job that ends early releases the claims of the rows it never wrote (`release_orphan_claims`);
- records go out in BatchWriteItem calls; a chunk marks itself begun first, so that one begun
  before (an execution died after writing some of its records) writes only the records that are
  missing: those in the table stay as they are (a run may have claimed one since) and are its own.
  Such a chunk, and one that another execution began again while this one had it (a second
  delivery beside a slow first), puts each record only where none is, so that no execution writes
  a whole item over one another wrote, and a run claimed, meanwhile (`write_claimed`);
- a chunk's results and counters are claimed with the chunk's number, so they count once;
- stream record counts are read again from the analytics mirror once a job's records are
  published there (lifecycle.py, see `recount_records`).
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Container, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import NotFound
from chalicelib.domain.ingestion import (
    CHUNKS_IN_FLIGHT,
    ChunkOutcome,
    ChunkRow,
    IngestionJob,
    ItemResult,
    ItemStatus,
    JobStatus,
    OnConflict,
    records_per_stream,
)
from chalicelib.domain.record_changes import ids_by_stream
from chalicelib.domain.records import (
    ExternalIdClaim,
    ItemError,
    Record,
    RecordDraft,
    StreamContext,
    shown_external_id,
    validate_item,
    writer_lease_holder,
)
from chalicelib.observability import logger
from chalicelib.services import period_closes
from chalicelib.services.ports import Ports

# How long a stream's writer lease lasts unrenewed: far longer than writing a chunk's guards takes
# (a second), and the wait of another job's chunk when a process died holding it (its own job
# takes it back at once when it resumes).
WRITER_LEASE = timedelta(seconds=60)
LEASE_RETRY_SECONDS = 0.02
LEASE_RETRY_MAX_SECONDS = 0.5


class WriterLeaseLost(Exception):
    """A stream's writer lease lapsed and went to another job before this one wrote its guards:
    nothing was written; the chunk is processed again by the next delivery or task."""


def file_chunk_key(job: IngestionJob, chunk: int) -> str:
    """Where a file import's prepare leaves the rows of one chunk."""
    return f"imports/{job.environment}/{job.id}/chunk-{chunk:06d}.json"


# One chunk -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClaimedChunk:
    """A chunk whose rows have their results and whose external_ids are claimed: what is left is
    writing its records and its part of the mirror (`write_claimed`), then saving it."""
    index: int
    results: tuple[ItemResult, ...]
    records: list[Record]  # the chunk's records, all of them in the mirror's part
    missing: list[Record]  # those to write: the others are in the table already
    retried: bool  # an execution may have begun the chunk before this one


def claim_chunk(ports: Ports, job: IngestionJob, index: int, rows: list[ChunkRow],
                streams: dict[str, StreamContext | None], leases: WriterLeases | None, retried: bool,
                fence: period_closes.FenceWriter | None = None) -> ClaimedChunk:
    """Validate and guard one chunk of rows, marked begun before; every row gets a result, none is
    lost. `retried`: an execution may have begun the chunk before, so a row whose record it wrote
    keeps that record as it is. `leases`: the writer leases the caller holds across chunks (else
    the chunk takes and gives back its own). `fence`: the chunk's writer behind the closing fence
    (its guard registers it; the caller leaves once the chunk's records are written)."""
    written = records_written(ports, job, [row.index for row in rows]) if retried else {}
    drafts = [ItemError("", row.error) if row.error else validate_item(row.item, streams) for row in rows]
    if fence is not None and leases is not None:
        # The streams' writer leases first: a chunk registered behind the closing fence never waits
        # for a lease another job holds while that job waits at the fence for the close to land.
        leases.hold({d.data_stream_key for d in drafts if isinstance(d, RecordDraft) and d.external_id is not None})
    drafts = period_closes.failing_closed(ports, job.environment, drafts, fence)  # dated inside a closed period: failed
    # Within a chunk, the first item with an external_id claims it; later ones are its duplicates
    # (claims are made all at once, so "first" is decided here, by position); a row with its record
    # written keeps it, duplicate or not.
    first_with: dict[tuple[str, str], int] = {}
    duplicate_of: dict[int, int] = {}
    claiming: dict[int, RecordDraft] = {}
    for row, draft in zip(rows, drafts):
        if isinstance(draft, RecordDraft) and draft.external_id is not None:
            first = first_with.setdefault((draft.data_stream_key, draft.external_id), row.index)
            if first != row.index and row.index not in written:
                duplicate_of[row.index] = first
            else:
                claiming[row.index] = draft
    claims: dict[int, ExternalIdClaim] = _claim_all(ports, job, claiming, written, leases)
    results: list[ItemResult] = []
    records: list[Record] = []
    missing: list[Record] = []
    now = utc_now()
    for row, draft in zip(rows, drafts):
        claim = claims.get(row.index)
        kept = written.get(row.index)
        if kept is not None:
            records.append(kept)
            results.append(ItemResult.written(row.index, kept, row.line))
        elif isinstance(draft, ItemError):
            results.append(ItemResult(row.index, ItemStatus.FAILED, _raw_external_id(row.item), None,
                                      draft.describe(), row.line))
        elif row.index in duplicate_of:
            first_claim = claims[duplicate_of[row.index]]
            assert first_claim is not None  # the first row with this external_id claimed it
            results.append(_conflict_result(job, row, draft, first_claim.record_id))
        elif claim is not None and not claim.claimed:
            results.append(_conflict_result(job, row, draft, claim.record_id))
        else:
            record_id = job.record_id(row.index)
            record = Record.from_draft(draft, environment=job.environment, record_id=record_id, created_at=now,
                                       file_import_id=job.id)
            missing.append(record)
            records.append(record)
            results.append(ItemResult(row.index, ItemStatus.SUCCESSFUL, draft.external_id, record_id, None, row.line))
    return ClaimedChunk(index, tuple(results), records, missing, retried)


def write_claimed(ports: Ports, job: IngestionJob, chunk: ClaimedChunk) -> None:
    """A claimed chunk's records, then its part of the mirror (staged until the job is published:
    a part is only ever written for records already in the table). Writes no guard, so it needs
    no writer lease and may run beside the next chunk's claims.

    A chunk another execution may be writing too (begun before this one, or again since) puts each
    record only where none is: one there is the other execution's, as it stands (a run may have
    claimed it). One this execution alone has begun goes out in BatchWriteItem, whose whole items
    would drop such a claim; what DynamoDB leaves unprocessed goes again only where none is
    (another execution may have begun the chunk by then)."""
    records = chunk.records
    if chunk.retried or _begun_again(ports, job, chunk.index):
        there = ports.records.put_absent(chunk.missing)
    else:
        there = ports.records.put_many(chunk.missing)
    if there:  # the mirror's part shows them as stored
        stored = ports.records.find_many(job.environment, [r.id for r in there], including_deleting=True)
        records = [stored.get(record.id, record) if record.id is not None else record for record in records]
    ports.mirror.write_part(job.environment, job.id, chunk.index, records)


def _begun_again(ports: Ports, job: IngestionJob, chunk: int) -> bool:
    """Whether another execution began this chunk after this one did (it may be writing the same
    records: a second delivery of a slow job). Read just before the records go out, which leaves
    the moment until the batch's first send lands open: one that begins the chunk after that finds
    them written. A job gone meanwhile counts as begun again (writes nothing over)."""
    begun_again = ports.ingestion_jobs.chunks_begun_again(job.environment, job.id)
    return begun_again is None or chunk in begun_again


def _write_then_leave(ports: Ports, job: IngestionJob, chunk: ClaimedChunk, fence: period_closes.FenceWriter) -> None:
    """`write_claimed`, then the chunk's registration behind the closing fence goes (also when the
    write failed: what it wrote is in the table, and the chunk is processed again)."""
    try:
        write_claimed(ports, job, chunk)
    finally:
        fence.leave()


def written_outcome(ports: Ports, job: IngestionJob, chunk: ClaimedChunk,
                    leases: WriterLeases | None = None) -> ChunkOutcome:
    """What a written chunk saves. If the job ended while the chunk wrote (a late execution), its
    end may have released claims this chunk's records hold: they claim back (`_guard_late_records`).
    Replicating counts as late too: another execution wrote every chunk and the mirror is being written."""
    stored = ports.ingestion_jobs.get(job.environment, job.id)
    if chunk.missing and (stored.finished or stored.ending is not None or stored.status is JobStatus.REPLICATING):
        # Written after the job's counts and mirror were settled: no run may read these records'
        # blocks from the mirror (services/imported_records.py)
        late = ids_by_stream((record.data_stream_key, record.id) for record in chunk.missing)
        ports.data_streams.note_records_changed(job.environment, late)
        if any(r.external_id is not None for r in chunk.missing):
            _guard_late_records(ports, job, chunk.missing, leases)
    return ChunkOutcome(index=chunk.index, results=chunk.results,
                        created_per_stream=records_per_stream(chunk.records))


def _claims_of(job: IngestionJob, chunk: ClaimedChunk) -> list[tuple[int, KnownRow]]:
    """The rows of a claimed chunk whose records it was to write, with the external_ids they claimed."""
    return [(record.id - job.record_id(0), KnownRow(record.external_id, None,
                                                    (record.data_stream_key, record.external_id)))
            for record in chunk.missing if record.external_id is not None]


class ChunkPipeline:
    """Writes one execution's chunks of a job in order, CHUNKS_IN_FLIGHT at a time: while a chunk's
    records and mirror part are written (a thread of its own), the next chunk is validated and its
    external_ids are claimed under the writer leases (the caller's thread, the only one that touches
    `leases`). Each chunk is saved, in order, once its writes are done and before the chunk after
    next is claimed (see CHUNKS_IN_FLIGHT). `job` is the job as the last save left it.

    On the local stack this overlaps the guards' reads and writes of one chunk with the records of
    the one before (bench/RESULTS.md, issue 30); on AWS, their round trips. A chunk whose writes
    fail or are cut short is not saved, and the next execution processes it again, as before."""

    def __init__(self, ports: Ports, job: IngestionJob, leases: WriterLeases) -> None:
        self._ports, self.job, self._leases = ports, job, leases
        self._writing: tuple[ClaimedChunk, Future[None]] | None = None
        self._fresh: set[int] = set()  # chunks this execution's own saves marked begun
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="chunk-writes")

    def __enter__(self) -> ChunkPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self._writer.shutdown(wait=True)  # a write in flight ends; left unsaved, its chunk is processed again

    def write(self, index: int, rows: list[ChunkRow], streams: dict[str, StreamContext | None]) -> None:
        """Claim this chunk, save the one written before it, and start this one's writes."""
        # The chunk's guard registers it behind the closing fence until its records are written (the
        # write's thread leaves, not `flush`: the next chunk's guard may be waiting at a fence whose
        # close waits for this chunk): a close waits for them, and counts them (docs/period-close.md).
        fence = period_closes.FenceWriter(self._ports, period_closes.WORKER_LEASE, waits=True)
        try:
            retried = self._begin(index)
            claimed = None if retried is None else claim_chunk(self._ports, self.job, index, rows, streams,
                                                               self._leases, retried=retried, fence=fence)
            job = self.flush()
        except BaseException:
            fence.leave()
            raise
        if claimed is None:  # the job ended, or is being ended, since this execution read it
            fence.leave()
            self.job = self._ports.ingestion_jobs.get(job.environment, job.id)
            return
        if job.writes_no_more:  # ended or cancelled while this chunk was claimed: it writes nothing
            fence.leave()
            release_orphan_claims(self._ports, job, _claims_of(job, claimed), self._leases)
            return
        if self._ports.stopping():  # left claimed: the next start processes it again, its claims its own
            fence.leave()
            return
        self._writing = (claimed, self._writer.submit(_write_then_leave, self._ports, self.job, claimed, fence))

    def _begin(self, index: int) -> bool | None:
        """Mark a chunk begun before anything of it is written, unless this execution's own save
        did; whether an execution may have begun it before, None if the job no longer runs. The
        first chunk an execution reaches marks the next ones in flight too, so a job's chunks cost
        one begin mark in all."""
        if index in self._fresh:
            return False
        retried = self._ports.ingestion_jobs.begin_chunk(self.job, index, through=index + CHUNKS_IN_FLIGHT - 1)
        if retried is False:
            self._fresh.update(range(index + 1, index + CHUNKS_IN_FLIGHT))
        return retried

    def flush_last(self) -> IngestionJob:
        """`flush` once the last chunk is claimed: the writer leases go back first (a chunk's writes
        take none), so the next job of these streams claims its first chunk while this one's last
        is written. A late record still claims back under them (`written_outcome` takes them again)."""
        self._leases.release()
        return self.flush()

    def flush(self) -> IngestionJob:
        """Wait for the chunk being written and save it; the job as saved."""
        if self._writing is None:
            return self.job
        claimed, writes = self._writing
        self._writing = None
        writes.result()
        outcome = written_outcome(self._ports, self.job, claimed, self._leases)
        self.job, counted = self._ports.ingestion_jobs.save_chunk_and_begin_ahead(self.job, outcome)
        if counted:
            self._fresh.add(claimed.index + CHUNKS_IN_FLIGHT)
        return self.job


# A job's end: the claims of rows it never wrote, and records written late -----------------

def release_orphan_claims(ports: Ports, job: IngestionJob, rows: list[tuple[int, KnownRow]],
                          leases: WriterLeases | None = None) -> None:
    """A begun chunk's execution may have claimed the external_ids of rows whose records it never
    wrote: the job will not write them now, so each claim this row still owns goes (a delete
    conditioned on the owner being exactly this job's row: a claim another job or row holds stays;
    one whose record exists is not asked for), and the id can be ingested again. A row whose
    external_id is unknown (its payload or chunk file is gone) keeps its claim, if it made one:
    claims are found by external id only, so there is nothing to look it up by.

    An execution still inside the chunk (a duplicate delivery) may write a record right after its
    claim went: the records are read again once the claims are released, and each one that came
    meanwhile claims its id back (its own owner), so that no record is left unguarded; one whose id
    another job took in between goes (it would be that one's duplicate). A record written later still
    is the late-writer race the notes of issue 13 describe."""
    released = []
    # Under the streams' writer leases: a claim made back here must not meet another job's write.
    streams = {row.claim[0] for _, row in rows if row.claim is not None}
    with _writer_leases(ports, job, streams, leases) as held:
        held.still_held(streams)
        for index, row in rows:
            if row.claim is not None:
                stream_key, external_id = row.claim
                if ports.records.release_external_id(job.environment, stream_key, external_id,
                                                     owner=_owner(job, index)):
                    released.append((index, stream_key, external_id))
        came = records_written(ports, job, [index for index, _, _ in released]) if released else {}
        for index, stream_key, external_id in released:
            if index in came and not ports.records.claim_external_id(
                    job.environment, stream_key, external_id, owner=_owner(job, index),
                    record_id=job.record_id(index)).claimed:
                # another job's id meanwhile: this record is its duplicate (a run reads its block from the table)
                ports.data_streams.note_records_changed(job.environment, {stream_key: [came[index].id]})
                ports.records.remove(came[index])


def _guard_late_records(ports: Ports, job: IngestionJob, written: list[Record],
                        leases: WriterLeases | None = None) -> None:
    """The job ended while this execution wrote (a duplicate delivery, late): its end may have
    released the claims of rows it found no record for. Each external_id written claims its id back
    (this row's own claim holds again); one another job claimed meanwhile means the record would
    be its duplicate, and goes."""
    streams = {r.data_stream_key for r in written if r.external_id is not None}
    with _writer_leases(ports, job, streams, leases) as held:
        held.still_held(streams)
        for record in written:
            if record.external_id is None or record.id is None:
                continue
            row = record.id - job.record_id(0)
            claim = ports.records.claim_external_id(job.environment, record.data_stream_key, record.external_id,
                                                    owner=_owner(job, row), record_id=record.id)
            if not claim.claimed:  # (its stream's mark is gone already: `written_outcome`)
                ports.records.remove(record)


class KnownRow(NamedTuple):
    """What can still be read of an ended job's row: the external_id as its result shows it, the
    line, the (stream key, external_id) it would have claimed, if any, and the stream it names."""
    external_id: str | None
    line: int | None
    claim: tuple[str, str] | None
    stream_key: str | None = None


UNKNOWN_ROW = KnownRow(None, None, None)


def rows_of(ports: Ports, job: IngestionJob, chunks: list[int]) -> dict[int, KnownRow]:
    """The rows of these chunks, as far as they can still be read."""
    rows: dict[int, KnownRow] = {}
    try:
        if not job.is_file:
            items = ports.payloads.get_json(job.bulk_payload_key)["records"]
            for index in (i for n in chunks for i in job.chunk_range(n) if i < len(items)):
                item = items[index]
                stream_key = item.get("data_stream_key") if isinstance(item, dict) else None
                rows[index] = _known_row(item, None, stream_key if isinstance(stream_key, str) else None)
            return rows
        for number in chunks:
            for index, line, item, _ in ports.payloads.get_json(file_chunk_key(job, number))["rows"]:
                own = item.get("data_stream_key") if isinstance(item, dict) else None  # a routed statement's
                rows[index] = _known_row(item, line, own if isinstance(own, str) else job.import_stream_key)
    except Exception:  # the payload is gone (the reason the job failed, perhaps): results without them
        logger.warning("rows of an ended job cannot be read", extra={"job_id": job.id})
    return rows


def _known_row(item: Any, line: int | None, stream_key: str | None) -> KnownRow:
    value = item.get("external_id") if isinstance(item, dict) else None
    claimed = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None  # as validated
    return KnownRow(_raw_external_id(item), line, (stream_key, claimed) if stream_key and claimed else None,
                    stream_key)

# Helpers ----------------------------------------------------------------------------------


def records_written(ports: Ports, job: IngestionJob, indexes: Iterable[int]) -> dict[int, Record]:
    """The records of these rows that are in the table, by row index (the job's block of ids is
    its own; a record being deleted is still its own, and its tombstone counts against it)."""
    rows = {job.record_id(i): i for i in indexes}
    found = ports.records.find_many(job.environment, rows, including_deleting=True)
    return {rows[record_id]: record for record_id, record in found.items()}


def _claim_all(ports: Ports, job: IngestionJob, drafts: dict[int, RecordDraft],
               written: Container[int], leases: WriterLeases | None = None) -> dict[int, ExternalIdClaim]:
    """Claim the external_id of each row (row index: its draft), for the job's row. A row whose
    record is in the table made its claim before. The others are claimed under their streams'
    writer leases: one BatchGetItem per 100 reads who holds them, one BatchWriteItem per 25 claims
    those no one does (a claim its own row made before stands). No one else writes these streams'
    guards meanwhile, so an unconditional write cannot overwrite another job's claim; the lease is
    renewed just before if it was taken a while ago, and one that lapsed and went to another job
    writes nothing."""
    claims = {row: ExternalIdClaim(True, job.record_id(row)) for row in drafts if row in written}
    wanted = {row: (d.data_stream_key, d.external_id) for row, d in drafts.items()
              if row not in written and d.external_id is not None}
    if not wanted:
        return claims
    with _writer_leases(ports, job, {stream_key for stream_key, _ in wanted.values()}, leases) as held_leases:
        # Only the guards that may exist are read: an external_id outside its stream's ranges has none.
        held = ports.records.external_id_claims(job.environment, [key for key in wanted.values()
                                                                  if held_leases.may_be_claimed(*key)])
        new: list[tuple[str, str, str, int]] = []
        for row, key in wanted.items():
            owner, record_id = held.get(key, (None, None))
            if owner is None:
                new.append((*key, _owner(job, row), job.record_id(row)))
            if owner is None or owner == _owner(job, row):
                claims[row] = ExternalIdClaim(True, job.record_id(row))
            else:
                claims[row] = ExternalIdClaim(False, record_id)
        if new:
            held_leases.renew()
            held_leases.cover([(stream_key, external_id) for stream_key, external_id, _, _ in new])
            ports.records.put_external_id_guards(job.environment, new)
    return claims


class WriterLeases:
    """The writer leases of data streams one job holds while it writes their guards (see
    `_claim_all`). A caller may hold them across a whole job or chunk task: one take and one
    release, not one per chunk. Taken in key order, all again when a stream is added, so that no
    two jobs wait on each other; a lease another job holds is waited for by reading it (a failed
    take writes nothing). Given back at the end of the `with`, even on an error. Each instance is a
    holder of its own: executions of one job hold a stream's lease together, and it goes back only
    when the last of them gives it back (one leaving on an error must not free it under another)."""

    def __init__(self, ports: Ports, job: IngestionJob) -> None:
        self._ports, self._job = ports, job
        self._holder = writer_lease_holder(job.id, uuid.uuid4().hex[:12])
        self._taken: list[str] = []
        self._since = 0.0
        # The external_id ranges of the streams held, as read under the leases (None: the stream
        # keeps none). Only the holder widens them, so they hold until the leases go back.
        self._ranges: dict[str, list[tuple[str, str]] | None] = {}

    def may_be_claimed(self, stream_key: str, external_id: str) -> bool:
        """Whether a guard of this external_id may exist: every guard's external_id lies in one of
        its stream's ranges (`cover` widens them before any guard is written), so one outside them
        all has none, and its read is saved. A stream without ranges: any may."""
        ranges = self._ranges_of(stream_key)
        return ranges is None or any(low <= external_id <= high for low, high in ranges)

    def cover(self, claims: Iterable[tuple[str, str]]) -> None:
        """Widen the ranges of the streams that keep them to every (stream key, external_id) of
        `claims`, written before the guards that need them (a crash between leaves ranges wider
        than the guards: only reads more)."""
        by_stream: dict[str, list[str]] = {}
        for stream_key, external_id in claims:
            by_stream.setdefault(stream_key, []).append(external_id)
        for stream_key, external_ids in by_stream.items():
            ranges = self._ranges_of(stream_key)
            if ranges is None:
                continue
            outside = [e for e in external_ids if not any(low <= e <= high for low, high in ranges)]
            if not outside:
                continue
            widened = widen(ranges, min(outside), max(outside))
            if self._ports.records.put_external_id_ranges(self._job.environment, stream_key, widened, ranges):
                self._ranges[stream_key] = widened
                continue
            # Another writer widened them since they were read (a lease lapsed under one of us): its
            # guards may lie where this chunk read none. Its ranges stay, and the chunk writes no guard:
            # the next delivery or task claims it again, reading afresh.
            self._ranges.pop(stream_key, None)
            raise WriterLeaseLost(f"another writer widened the external_id ranges of data stream '{stream_key}'")

    def _ranges_of(self, stream_key: str) -> list[tuple[str, str]] | None:
        assert stream_key in self._taken, "ranges are read and widened under the stream's lease only"
        if stream_key not in self._ranges:
            self._ranges[stream_key] = self._ports.records.external_id_ranges(self._job.environment, stream_key)
        return self._ranges[stream_key]

    def __enter__(self) -> WriterLeases:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def hold(self, stream_keys: Iterable[str]) -> None:
        wanted, held = set(stream_keys), set(self._taken)
        if wanted <= held:
            return
        self.release()  # then all in key order again
        records, env = self._ports.records, self._job.environment
        for stream_key in sorted(wanted | held):
            wait = LEASE_RETRY_SECONDS
            while not records.take_writer_lease(env, stream_key, self._holder, WRITER_LEASE):
                time.sleep(wait)
                wait = min(wait * 2, LEASE_RETRY_MAX_SECONDS)
            if not self._taken:  # the first lease may lapse while a later one is waited for: `renew` knows
                self._since = time.monotonic()
            self._taken.append(stream_key)

    def renew(self) -> None:
        """Before guards are written: renew leases taken a while ago; raises WriterLeaseLost if one
        lapsed and went to another job."""
        if time.monotonic() - self._since < WRITER_LEASE.total_seconds() / 2:  # surely still held: no write
            return
        for key in self._taken:
            if not self._ports.records.renew_writer_lease(self._job.environment, key, self._holder, WRITER_LEASE):
                raise WriterLeaseLost(f"the writer lease of data stream '{key}' went to another job")
        self._since = time.monotonic()

    def still_held(self, stream_keys: Iterable[str]) -> None:
        """Before claims are made back under leases an execution may have held a while: renewed, or, if
        one lapsed and went to another job, all given back and taken again (waiting for that job), so
        that no claim made here meets another holder's unconditional guard writes."""
        try:
            self.renew()
        except WriterLeaseLost:
            self.release()
            self.hold(stream_keys)

    def release(self) -> None:
        taken, self._taken = self._taken, []
        self._ranges.clear()  # another job may widen them once the leases are back
        for stream_key in taken:
            self._ports.records.release_writer_lease(self._job.environment, stream_key, self._holder)


# How many ranges a stream keeps: past it, the two lowest become one (their hull: wider, so
# still true, only more is read). Ids that grow (payouts, statement lines) keep one range
# below every new chunk's, so a new chunk reads no guard; random ids soon span everything and
# are all read, as before the ranges. 8 ranges of 255-byte ids stay within a few write units.
MAX_EXTERNAL_ID_RANGES = 8


def widen(ranges: list[tuple[str, str]], low: str, high: str) -> list[tuple[str, str]]:
    """`ranges` with [low, high] added: sorted, overlapping ones joined, at most
    MAX_EXTERNAL_ID_RANGES (the first two joined while there are more: the oldest ids of a
    growing sequence). Every id in `ranges` or in [low, high] stays in one of the result's."""
    merged: list[tuple[str, str]] = []
    for start, end in sorted([*ranges, (low, high)]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    while len(merged) > MAX_EXTERNAL_ID_RANGES:
        (first_low, first_high), (_, second_high) = merged[0], merged[1]
        merged[0:2] = [(first_low, max(first_high, second_high))]
    return merged


@contextmanager
def _writer_leases(ports: Ports, job: IngestionJob, stream_keys: Iterable[str],
                   held: WriterLeases | None = None) -> Iterator[WriterLeases]:
    """The leases of these streams for a block that writes their guards: added to those the
    caller holds (`held`, kept at the end), else taken for the block alone."""
    if held is not None:
        held.hold(stream_keys)
        yield held
        return
    with WriterLeases(ports, job) as leases:
        leases.hold(stream_keys)
        yield leases


def _owner(job: IngestionJob, row: int) -> str:
    """Who claims a row's external_id: the job's row, the same in every execution of its chunk."""
    return f"job:{job.id}:{row}"


def _conflict_result(job: IngestionJob, row: ChunkRow, draft: RecordDraft, existing_id: int | None) -> ItemResult:
    if job.on_conflict is OnConflict.SKIP:
        return ItemResult(row.index, ItemStatus.SKIPPED, draft.external_id, existing_id, None, row.line)
    return ItemResult(row.index, ItemStatus.FAILED, draft.external_id, None,
                      f"external_id: '{draft.external_id}' already exists in data stream '{draft.data_stream_key}'",
                      row.line)


def _raw_external_id(item: Any) -> str | None:
    """The external_id a failed item carried, as far as it can be shown (results stay small)."""
    value = item.get("external_id") if isinstance(item, dict) else None
    return shown_external_id(str(value)) if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def stream_contexts(ports: Ports, environment: str, items: list[Any]) -> dict[str, StreamContext | None]:
    keys = {i["data_stream_key"] for i in items if isinstance(i, dict) and isinstance(i.get("data_stream_key"), str)}
    contexts: dict[str, StreamContext | None] = {}
    for key in keys:
        try:
            stream = ports.data_streams.get(environment, key)
        except NotFound:
            contexts[key] = None
            continue
        contexts[key] = StreamContext(id=stream.id, key=key,
                                      properties=tuple(ports.property_definitions.list(environment, key)))
    return contexts
