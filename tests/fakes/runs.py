"""Reconciliation runs, as `adapters/dynamodb/runs.py` keeps them: status moves along the domain's
RUN_STATUSES, the plan and progress of a run, and the run slot and pending work that live on the
reconciliation (the rows of a FakeReconciliationRepository)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import NotFound, TransitionRefused
from chalicelib.domain.runs import RUN_STATUSES, Run, RunStatus
from tests.fakes._support import ConditionFailed, may_restart, moved, newest_first_page, padded, stored_time
from tests.fakes.reconciliations import FakeReconciliationRepository


@dataclass
class _RunRow:
    run: Run
    restarts_written: bool = False  # the adapter's restart claim tells "never restarted" from 0
    listed_active: bool = True  # in the adapter's index of active runs: from `add` until a move finishes it


class FakeRunRepository:
    statuses, noun = RUN_STATUSES, "run"

    def __init__(self, reconciliations: FakeReconciliationRepository | None = None) -> None:
        self.reconciliations = reconciliations or FakeReconciliationRepository()
        self.rows: dict[tuple[str, int], _RunRow] = {}

    def add(self, run: Run) -> None:
        key = (run.environment, run.id)
        if key in self.rows:
            raise ConditionFailed()  # the adapter's put_new lets it through
        self.rows[key] = _RunRow(Run(
            environment=run.environment, id=run.id, reconciliation_id=run.reconciliation_id, kind=run.kind,
            trigger=run.trigger, status=run.status, created_at=stored_time(run.created_at),
            total_records=run.total_records, processed_records=run.processed_records,
            matched_records=run.matched_records, new_record_jobs=tuple(run.new_record_jobs), whole_pool=run.whole_pool))

    def get(self, environment: str, run_id: int) -> Run:
        row = self.rows.get((environment, run_id))
        if row is None:
            raise NotFound(f"run {run_id} not found")
        return row.run

    def get_many(self, environment: str, run_ids: Iterable[int]) -> dict[int, Run]:
        rows = (self.rows.get((environment, i)) for i in run_ids)
        return {row.run.id: row.run for row in rows if row is not None}

    def list_page(self, environment: str, reconciliation_id: int, limit: int,
                  cursor: str | None) -> tuple[list[Run], str | None]:
        entries = [(padded(r.run.id), r.run) for (env, _), r in self.rows.items()
                   if env == environment and r.run.reconciliation_id == reconciliation_id]
        return newest_first_page(f"runs/{environment}/{reconciliation_id}", entries, limit, cursor)

    def move(self, run: Run, /, target: RunStatus, **fields: object) -> Run:
        """Move to `target` if the stored status allows it (RUN_STATUSES), beating the heartbeat with it."""
        row = self.rows.get((run.environment, run.id))
        if row is None or row.run.status not in self.statuses.sources_of(target):
            raise TransitionRefused(f"{self.noun} {run.id} cannot move to {target.value}")
        row.run = moved(row.run, target, {**fields, "last_progress_at": utc_now()})
        row.listed_active = row.listed_active and target not in self.statuses.finished
        return row.run

    def end_pending(self, run: Run, target: RunStatus, **fields: object) -> Run:
        """`move`, only from pending; TransitionRefused once the run runs (or ended)."""
        row = self.rows.get((run.environment, run.id))
        if row is None or row.run.status is not RunStatus.PENDING or not self.statuses.can_move(RunStatus.PENDING,
                                                                                                 target):
            raise TransitionRefused(f"run {run.id} is no longer pending")
        return self.move(run, target, **fields)

    def request_cancellation(self, run: Run, cancellable: tuple[RunStatus, ...]) -> Run:
        """Set (or move) `cancellation_requested_at` while the stored status is one of `cancellable`."""
        row = self.rows.get((run.environment, run.id))
        if row is None:
            raise NotFound(f"run {run.id} not found")
        if row.run.status not in cancellable:
            raise TransitionRefused(f"run {run.id} is {row.run.status.value}; only a pending or running run "
                                    "can be cancelled")
        row.run = replace(row.run, cancellation_requested_at=stored_time(utc_now()))
        return row.run

    def save_plan(self, run: Run, *, first_match_id: int, matches_count: int, chunk_starts: list[int],
                  total_records: int, rule_summary: dict[str, Any]) -> Run:
        """Fix the match phase's outcome once, while running; otherwise the run as stored."""
        row = self.rows.get((run.environment, run.id))
        if row is None or row.run.first_match_id is not None or row.run.status is not RunStatus.RUNNING:
            return self.get(run.environment, run.id)
        row.run = replace(row.run, first_match_id=first_match_id, matches_count=matches_count,
                          chunks=len(chunk_starts), chunk_starts=tuple(chunk_starts),
                          total_records=total_records, processed_records=total_records, rule_summary=rule_summary,
                          last_progress_at=stored_time(utc_now()))
        return row.run

    # The slot and the pending work, on the reconciliation --------------------------------------

    def claim_slot(self, environment: str, reconciliation_id: int, run_id: int) -> bool:
        row = self.reconciliations.rows.get((environment, reconciliation_id))
        if row is None or row.reconciliation.deleting or row.reconciliation.current_run_id not in (None, run_id):
            return False
        row.reconciliation = replace(row.reconciliation, current_run_id=run_id)
        return True

    def take_over_slot(self, environment: str, reconciliation_id: int, holder_id: int, run_id: int, *,
                       jobs: Iterable[int] = (), whole_pool: bool = False) -> bool:
        """Only from the holder, giving back `jobs` and a whole-pool request in the same write."""
        row = self.reconciliations.rows.get((environment, reconciliation_id))
        if row is None or row.reconciliation.deleting or row.reconciliation.current_run_id != holder_id:
            return False
        row.reconciliation = replace(row.reconciliation, current_run_id=run_id)
        self._give_back(row, jobs, whole_pool)
        return True

    def release_slot(self, environment: str, reconciliation_id: int, run_id: int, *, jobs: Iterable[int] = (),
                     whole_pool: bool = False) -> bool:
        """Only the holder frees the slot, giving back `jobs` and a whole-pool request in the same write."""
        row = self.reconciliations.rows.get((environment, reconciliation_id))
        if row is None or row.reconciliation.current_run_id != run_id:
            return False
        row.reconciliation = replace(row.reconciliation, current_run_id=None, last_run_id=run_id)
        self._give_back(row, jobs, whole_pool)
        return True

    @staticmethod
    def _give_back(row: Any, jobs: Iterable[int], whole_pool: bool) -> None:
        row.pending_jobs |= set(jobs)
        if whole_pool:
            row.whole_pool_requests = (row.whole_pool_requests or 0) + 1

    def add_pending_jobs(self, environment: str, reconciliation_id: int, job_ids: Iterable[int]) -> None:
        row = self.reconciliations.rows.get((environment, reconciliation_id))
        if row is not None:
            row.pending_jobs |= set(job_ids)

    def pending_jobs(self, environment: str, reconciliation_id: int) -> list[int]:
        return self.pending_work(environment, reconciliation_id)[0]

    def pending_work(self, environment: str, reconciliation_id: int) -> tuple[list[int], int | None]:
        row = self.reconciliations.rows.get((environment, reconciliation_id))
        if row is None:
            return [], None
        return sorted(row.pending_jobs), row.whole_pool_requests

    def request_whole_pool(self, environment: str, reconciliation_id: int) -> None:
        row = self.reconciliations.rows.get((environment, reconciliation_id))
        if row is not None:
            row.whole_pool_requests = (row.whole_pool_requests or 0) + 1

    def drop_whole_pool_request(self, environment: str, reconciliation_id: int, seen: int) -> None:
        row = self.reconciliations.rows.get((environment, reconciliation_id))
        if row is not None and row.whole_pool_requests is not None and row.whole_pool_requests == seen:
            row.whole_pool_requests = None

    def drop_pending_jobs(self, environment: str, reconciliation_id: int, job_ids: Iterable[int]) -> None:
        row = self.reconciliations.rows.get((environment, reconciliation_id))
        if row is not None:
            row.pending_jobs -= set(job_ids)

    # Progress -----------------------------------------------------------------------------------

    def discard(self, run: Run) -> None:
        """Drop a run that never got the slot; anything but a stored pending run is refused (ConditionFailed,
        which the adapter lets through)."""
        row = self.rows.get((run.environment, run.id))
        if row is None or row.run.status is not RunStatus.PENDING:
            raise ConditionFailed()
        del self.rows[(run.environment, run.id)]

    def save_loaded(self, run: Run, total_records: int, partitions: int | None = None) -> None:
        row = self.rows.get((run.environment, run.id))
        if row is None or row.run.status is not RunStatus.RUNNING:
            raise ConditionFailed()
        row.run = replace(row.run, total_records=total_records, last_progress_at=stored_time(utc_now()),
                          partitions=partitions or row.run.partitions)

    def save_partition(self, run: Run, item: str) -> None:
        """Count a matched partition once, while running."""
        row = self.rows.get((run.environment, run.id))
        if row is not None and row.run.status is RunStatus.RUNNING:
            row.run = replace(row.run, done_partitions=row.run.done_partitions | {item},
                              last_progress_at=stored_time(utc_now()))

    def save_partition_failure(self, run: Run, failure: str) -> None:
        """The first partition that failed for good, while running."""
        row = self.rows.get((run.environment, run.id))
        if row is not None and row.run.status is RunStatus.RUNNING and row.run.failed_partition is None:
            row.run = replace(row.run, failed_partition=failure)

    def save_chunk(self, run: Run, chunk: int, matched_records: int, conflicts: int) -> Run:
        """Count a persisted chunk once, and only while running; otherwise the run as stored."""
        row = self.rows.get((run.environment, run.id))
        if row is None or row.run.status is not RunStatus.RUNNING or chunk in row.run.done_chunks:
            return self.get(run.environment, run.id)
        row.run = replace(row.run, done_chunks=row.run.done_chunks | {chunk},
                          matched_records=row.run.matched_records + matched_records,
                          last_progress_at=stored_time(utc_now()))
        return row.run

    def active(self) -> list[Run]:
        """Pending and running runs of every environment, in the order of "<environment>#<id>"."""
        entries = [(f"{env}#{padded(i)}", r.run) for (env, i), r in self.rows.items() if r.listed_active]
        return [run for _, run in sorted(entries, key=lambda e: e[0])]

    def count_restart(self, run: Run, counted: bool = True) -> bool:
        """Claim one restart of a stuck run: False when it moved meanwhile or was restarted by another."""
        row = self.rows.get((run.environment, run.id))
        if row is None or not may_restart(self.statuses, row.run, run, row.restarts_written):
            return False
        row.run = replace(row.run, restarts=row.run.restarts + counted, last_progress_at=stored_time(utc_now()))
        row.restarts_written = row.restarts_written or counted
        return True
