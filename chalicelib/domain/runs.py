"""Reconciliation runs: statuses, the moves allowed between them, and their progress.

    pending -> running -> completed
       |          |
       +----------+--> failed
       |          |
       +----------+--> cancelled

A cancel (`cancellation_requested_at`) is asked of a pending or running run. A pending run ends
`cancelled` at once (a conditional write from pending: nothing runs for it yet); a running one at
its next step (load, match, each partition, merge, each persist call), never from the request: that
would race with a persist in flight. Matches committed before then stay, as an import keeps what it
wrote; those not committed are undone, as for a failed run. Once every chunk is written the cancel
comes too late and the run completes (`Run.cancel_requested`).

A run goes through phases (load the open records, match them, persist the matches in
chunks, finish); `progress` weighs them so that a client sees it move all along.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from chalicelib.domain.errors import BrokenInvariant
from chalicelib.domain.status_machine import StatusMachine


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RunKind(StrEnum):
    BATCH = "batch"
    CONTINUOUS = "continuous"


class RunTrigger(StrEnum):
    MANUAL = "manual"
    SCHEDULE = "schedule"
    AGENT = "agent"
    RECORDS_INGESTED = "records_ingested"
    # A continuous reconciliation's rules or sides changed: its whole open pool is matched again.
    RECONCILIATION_CHANGED = "reconciliation_changed"


RUN_STATUSES = StatusMachine({  # completed, failed and cancelled are finished
    RunStatus.PENDING: {RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELLED},
    RunStatus.RUNNING: {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED},
})
CANCELLABLE = (RunStatus.PENDING, RunStatus.RUNNING)
# A cancel answers 202 from these: a repeat on a run its cancel already ended only moves
# cancellation_requested_at (as for file imports).
CANCEL_ANSWERED = (*CANCELLABLE, RunStatus.CANCELLED)

# Longer than the state machine may keep one phase going: 4 attempts of a 15-minute Lambda
# call plus their backoff. Any sooner, and a restart could overlap an execution still alive.
STUCK_AFTER = timedelta(minutes=75)
MAX_RESTARTS = 3


class RunInputsLost(Exception):
    """A working file of the run is gone from S3 (expired, deleted): the run cannot go on. The
    state machine sends it to the fail phase at once, unretried (reconciliation_run.asl.json
    names this class), and that phase needs no file: it undoes from the table."""

    def __init__(self, run_id: int, name: str) -> None:
        super().__init__(f"run {run_id}'s working file {name} is gone; the run cannot go on (what it had "
                         "not committed is undone, and a new run matches what is still open)")


class RunTooLarge(Exception):
    """More open records than one match function holds: every retry would run out of memory the
    same way, so the state machine fails the run at once (reconciliation_run.asl.json names this
    class). The message names the count and the limit."""


# What one match function holds (bench/RESULTS.md, issue 10: 969 MB at its peak for 2,000,000 open
# records, 87 MB of it imports, so about 450 bytes a record; the Chalice app adds about 50 MB),
# keeping a third of its memory spare: a rule with many candidates a record costs the engine more.
MATCH_BYTES_PER_RECORD = 450
MATCH_BASE_MB = 140
MATCH_MEMORY_MB = 3008  # reconciliation_run_match in infra/functions.py (a test holds them together)


def records_a_match_holds(memory_mb: int) -> int:
    return int((memory_mb * 2 / 3 - MATCH_BASE_MB) * 2 ** 20 / MATCH_BYTES_PER_RECORD)


# Open records one match function holds, both sides together (settings.max_run_records): about 4.3M.
# A run with more fans out (docs/partitioned-matching.md), when its rules allow a partition plan.
RUN_RECORDS = records_a_match_holds(MATCH_MEMORY_MB)
# Records a partition of a fanned-out run aims at (settings.run_partition_records): half of what one
# match function holds (reconciliation_run_partition has the match function's memory), since a hash
# spreads records unevenly and a range plan copies side B's records near a cut into two partitions.
PARTITION_RECORDS = RUN_RECORDS // 2
# Open records a fanned-out run loads at most (settings.max_fanout_run_records): 10M a side. Two
# functions hold the whole run and set this ceiling: the load (both sides, then the split) and the
# merge (every match, then the plan's chunks: 7.3-8.6 GB of Lambda's 10,240 MB at 20M, bench/RESULTS.md).
FANOUT_RECORDS = 20_000_000
# Partitions matched at once on AWS (settings.run_map_concurrency: the Distributed Map's MaxConcurrency).
MAP_CONCURRENCY = 64
# Records of a persist chunk (settings.run_chunk_records): its matches are read, claimed and counted
# together. A run holds at most MAX_RUN_CHUNKS chunks: what one execution's history holds
# (tests/unit/test_run_state_machine.py), so smaller chunks need a smaller max_run_records.
CHUNK_RECORDS = 2_000
MAX_RUN_CHUNKS = 5_000


def chunk_records_for(matched_records: int, chunk_records: int) -> int:
    """The records of a persist chunk for a plan of `matched_records`: `chunk_records`, grown only
    when the plan would need more than MAX_RUN_CHUNKS chunks filled half (a fanned-out run past
    what the settings allow one piece): one execution's history holds that many."""
    return max(chunk_records, -(-2 * matched_records // MAX_RUN_CHUNKS))
# A dry run answers inside the API call (API Gateway waits 29 s): past this many open records in
# all it refuses. 100,000 a side took 5.9 s of CPU and 284 MB in bench/run_memory.py: about 14 s
# on a 1,024 MB function (0.58 of a vCPU) with DynamoDB's 50 pages, half the limit (bench/RESULTS.md).
DRY_RUN_RECORDS = 200_000


# Share of `progress` each phase ends at.
LOADED_AT = 10
MATCHED_AT = 40


@dataclass(frozen=True)
class Run:
    environment: str
    id: int
    reconciliation_id: int
    kind: RunKind
    trigger: RunTrigger
    status: RunStatus
    created_at: datetime
    started_at: datetime | None = None
    completed_at: datetime | None = None
    total_records: int = 0
    processed_records: int = 0
    matched_records: int = 0
    rule_summary: dict[str, Any] = field(default_factory=dict)
    error_message: str | None = None
    # Set by the match phase: how many matches, their reserved ids, and the persist chunks, each
    # a contiguous range of match numbers starting at its `chunk_starts` entry.
    matches_count: int | None = None
    first_match_id: int | None = None
    chunks: int | None = None
    chunk_starts: tuple[int, ...] = ()
    done_chunks: frozenset[int] = frozenset()
    # Continuous runs: the ingestion jobs whose records are the new ones. A run over the whole
    # open pool (`whole_pool`: after the reconciliation's rules or sides changed) pairs every
    # open record with every other, as a batch run does; otherwise only pairs with a new record count.
    new_record_jobs: tuple[int, ...] = ()
    whole_pool: bool = False
    last_progress_at: datetime | None = None  # every phase beats it; the sweeper reads it
    restarts: int = 0
    # A fanned-out run: its first round's partitions, the partitions matched (`partition_item`
    # ids, every round's), and the partition that failed for good (its error, for the run's).
    partitions: int | None = None
    done_partitions: frozenset[str] = frozenset()
    failed_partition: str | None = None
    cancellation_requested_at: datetime | None = None

    @property
    def cancel_requested(self) -> bool:
        """A cancel was asked for, the run has not ended yet, and some of its matches are still to be
        written: its next step ends it cancelled. Once every chunk is written the cancel comes too
        late and the run completes (the one place for that rule: every step, the fail phase and the
        sweeper read it here)."""
        all_written = self.chunks is not None and self.next_chunk() is None
        return self.cancellation_requested_at is not None and not self.finished and not all_written

    @property
    def heartbeat(self) -> datetime:
        return self.last_progress_at or self.created_at

    def stuck(self, now: datetime) -> bool:
        return not self.finished and now - self.heartbeat > STUCK_AFTER

    @property
    def finished(self) -> bool:
        return self.status in RUN_STATUSES.finished

    @property
    def progress(self) -> float:
        if self.status is RunStatus.COMPLETED:
            return 100.0
        if self.chunks is None and self.partitions:  # fanned out: the first round's partitions matched
            done = sum(1 for item in self.done_partitions if item.startswith("0/"))
            return round(LOADED_AT + (MATCHED_AT - LOADED_AT) * min(done, self.partitions) / self.partitions, 1)
        if self.chunks is None:
            return float(LOADED_AT if self.total_records else 0)
        if self.chunks == 0:
            return float(MATCHED_AT)
        return round(MATCHED_AT + (100 - MATCHED_AT) * len(self.done_chunks) / self.chunks, 1)

    @property
    def only_new(self) -> bool:
        return self.kind is RunKind.CONTINUOUS and not self.whole_pool

    @property
    def plan_first_match_id(self) -> int:
        """The first id of the block the match phase reserved: match number n of the run's plan is
        match `first_match_id + n`, and the plan's files are named by it. Set with the plan, so
        every phase after match (a chunk to persist or undo) has it."""
        if self.first_match_id is None:
            raise BrokenInvariant(f"run {self.id} has no plan yet: its first_match_id is not set")
        return self.first_match_id

    def chunk_match_ids(self, chunk: int) -> range:
        """The ids of the chunk's matches, known from the run alone (the plan's files may be lost).
        A run planned before chunk starts were kept: its whole block, a wider range as correct
        (the matches of written chunks are committed, or were undone whole)."""
        first, count = self.plan_first_match_id, self.matches_count or 0
        if not self.chunk_starts:
            return range(first, first + count)
        end = self.chunk_starts[chunk + 1] if chunk + 1 < len(self.chunk_starts) else count
        return range(first + self.chunk_starts[chunk], first + end)

    def next_chunk(self) -> int | None:
        remaining = self.next_chunks(1)
        return remaining[0] if remaining else None

    def next_chunks(self, count: int) -> list[int]:
        """The first `count` chunks not yet persisted. A persist call writes these at once, so a
        chunk begun and not counted stays among them until it is (chunks only ever get counted):
        they are the only chunks that can hold half-written matches."""
        remaining: list[int] = []
        for chunk in range(self.chunks or 0):
            if len(remaining) == count:
                break
            if chunk not in self.done_chunks:
                remaining.append(chunk)
        return remaining


def partition_item(round_: int, partition: int) -> str:
    """A partition of a fanned-out run, as its progress counts it: a round's partitions are matched once each."""
    return f"{round_}/{partition}"
