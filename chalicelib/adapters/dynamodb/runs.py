"""Reconciliation runs in DynamoDB: status moves, the reconciliation's one run slot, the work
waiting on it (ingestions, whole-pool requests), and the run's plan and progress."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, StatusMoves, status_in
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.errors import NotFound, TransitionRefused
from chalicelib.domain.runs import RUN_STATUSES, Run, RunKind, RunStatus, RunTrigger


class RunRepository(StatusMoves[Run, RunStatus]):
    statuses, noun, key = RUN_STATUSES, "run", staticmethod(keys.run)

    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def add(self, run: Run) -> None:
        self._table.put_new(self.to_item(run))

    def get(self, environment: str, run_id: int) -> Run:
        item = self._table.get(keys.run(environment, run_id))
        if item is None:
            raise NotFound(f"run {run_id} not found")
        return self._from_item(item)

    def get_many(self, environment: str, run_ids: Iterable[int]) -> dict[int, Run]:
        items = self._table.get_many(keys.run(environment, i) for i in run_ids)
        return {run.id: run for run in map(self._from_item, items)}

    def list_page(self, environment: str, reconciliation_id: int, limit: int,
                  cursor: str | None) -> tuple[list[Run], str | None]:
        page = self._table.query_page(keys.GSI1, keys.runs_of_reconciliation_pk(environment, reconciliation_id),
                                      limit=limit, cursor=cursor)
        return [self._from_item(i) for i in page.items], page.cursor

    def move(self, run: Run, /, target: RunStatus, **fields: object) -> Run:
        """StatusMoves' move, which beats the run's heartbeat with it."""
        return super().move(run, target, **{**fields, "last_progress_at": utc_now()})

    def end_pending(self, run: Run, target: RunStatus, **fields: object) -> Run:
        """`move`, only from pending (a run whose execution has not begun): TransitionRefused once it runs."""
        if not self.statuses.can_move(RunStatus.PENDING, target):
            raise TransitionRefused(f"run {run.id} cannot move to {target.value}")
        try:
            item = self._table.move_status(keys.run(run.environment, run.id), target.value, (RunStatus.PENDING.value,),
                                           {**fields, "last_progress_at": utc_now()},
                                           leave_index=keys.GSI2 if target in self.statuses.finished else None)
        except ConditionFailed:
            raise TransitionRefused(f"run {run.id} is no longer pending") from None
        return self._from_item(item)

    def request_cancellation(self, run: Run, cancellable: tuple[RunStatus, ...]) -> Run:
        """Set (or move) `cancellation_requested_at`, only while the run is in one of `cancellable`."""
        allowed, values = status_in(cancellable)
        try:
            item = self._table.update(keys.run(run.environment, run.id), "SET cancellation_requested_at = :now",
                                      condition=allowed, names={"#status": "status"},
                                      values={":now": iso(utc_now()), **values}, return_new=True)
        except ConditionFailed:
            current = self.get(run.environment, run.id)
            raise TransitionRefused(f"run {run.id} is {current.status.value}; only a pending or running run "
                                    "can be cancelled") from None
        return self._from_item(item)

    def save_plan(self, run: Run, *, first_match_id: int, matches_count: int, chunk_starts: list[int],
                  total_records: int, rule_summary: dict[str, Any]) -> Run:
        """Fix the match phase's outcome once; a retried match phase keeps what the first stored.
        The chunk starts, a number per chunk (a few thousand for the largest runs: some 30 KB of
        the item's 400), tell the fail phase a chunk's matches without the plan's files."""
        try:
            item = self._table.update(
                keys.run(run.environment, run.id),
                "SET first_match_id = :f, matches_count = :n, chunks = :c, chunk_starts = :cs, "
                "total_records = :t, processed_records = :t, rule_summary = :s, last_progress_at = :now",
                condition="attribute_not_exists(first_match_id) AND #status = :running",
                names={"#status": "status"},
                values={":f": first_match_id, ":n": matches_count, ":c": len(chunk_starts),
                        ":cs": list(chunk_starts), ":t": total_records, ":s": rule_summary,
                        ":running": RunStatus.RUNNING.value, ":now": iso(utc_now())},
                return_new=True)
            return self._from_item(item)
        except ConditionFailed:
            return self.get(run.environment, run.id)

    def claim_slot(self, environment: str, reconciliation_id: int, run_id: int) -> bool:
        """Take the reconciliation's one slot for a pending or running run; False when taken."""
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id), "SET current_run_id = :run",
                               condition="attribute_exists(pk) AND attribute_not_exists(deleting) AND "
                                         "(attribute_not_exists(current_run_id) OR current_run_id = :run)",
                               values={":run": run_id})
        except ConditionFailed:
            return False
        return True

    def take_over_slot(self, environment: str, reconciliation_id: int, holder_id: int, run_id: int, *,
                       jobs: Iterable[int] = (), whole_pool: bool = False) -> bool:
        """Take the slot from a holder known to be finished or missing (only if it still holds it),
        giving back in the same write what the holder never gave back (as `release_slot` would)."""
        expression, values = self._giving_back("SET current_run_id = :run", jobs, whole_pool)
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id), expression,
                               condition="current_run_id = :holder AND attribute_not_exists(deleting)",
                               values={":run": run_id, ":holder": holder_id, **values})
        except ConditionFailed:
            return False
        return True

    @staticmethod
    def _giving_back(expression: str, jobs: Iterable[int], whole_pool: bool) -> tuple[str, dict[str, Any]]:
        """`expression` that also ADDs `jobs` to the pending ones and, with `whole_pool`, a whole-pool
        request (DynamoDB refuses an empty set: only what there is)."""
        job_ids = set(jobs)
        adds = [*(["pending_jobs :jobs"] if job_ids else []), *(["whole_pool_requests :one"] if whole_pool else [])]
        values = {**({":jobs": job_ids} if job_ids else {}), **({":one": 1} if whole_pool else {})}
        return expression + (f" ADD {', '.join(adds)}" if adds else ""), values

    def release_slot(self, environment: str, reconciliation_id: int, run_id: int, *, jobs: Iterable[int] = (),
                     whole_pool: bool = False) -> bool:
        """The finished run becomes the last run; only the run holding the slot frees it (False when it
        does not). The same write gives back what the run took, `jobs` pending again and, with
        `whole_pool`, a whole-pool request: once, since only one write frees the slot."""
        expression, values = self._giving_back("SET last_run_id = :run REMOVE current_run_id", jobs, whole_pool)
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id), expression,
                               condition="current_run_id = :run", values={":run": run_id, **values})
        except ConditionFailed:
            return False  # released already, or the reconciliation is gone
        return True

    def add_pending_jobs(self, environment: str, reconciliation_id: int, job_ids: Iterable[int]) -> None:
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id), "ADD pending_jobs :jobs",
                               condition="attribute_exists(pk)", values={":jobs": set(job_ids)})
        except ConditionFailed:
            pass  # the reconciliation is gone

    def pending_jobs(self, environment: str, reconciliation_id: int) -> list[int]:
        return self.pending_work(environment, reconciliation_id)[0]

    def pending_work(self, environment: str, reconciliation_id: int) -> tuple[list[int], int | None]:
        """The ingestions waiting on the reconciliation, and its whole-pool request (a count that
        every request raises, so that taking it never drops one made meanwhile), or None."""
        item = self._table.get(keys.reconciliation(environment, reconciliation_id)) or {}
        return sorted(item.get("pending_jobs") or ()), item.get("whole_pool_requests")

    def request_whole_pool(self, environment: str, reconciliation_id: int) -> None:
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id), "ADD whole_pool_requests :one",
                               condition="attribute_exists(pk)", values={":one": 1})
        except ConditionFailed:
            pass  # the reconciliation is gone

    def drop_whole_pool_request(self, environment: str, reconciliation_id: int, seen: int) -> None:
        """A run took the request; one made since it was read stays for the next run."""
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id), "REMOVE whole_pool_requests",
                               condition="whole_pool_requests = :seen", values={":seen": seen})
        except ConditionFailed:
            pass

    def drop_pending_jobs(self, environment: str, reconciliation_id: int, job_ids: Iterable[int]) -> None:
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id), "DELETE pending_jobs :jobs",
                               condition="attribute_exists(pk)", values={":jobs": set(job_ids)})
        except ConditionFailed:
            pass

    def discard(self, run: Run) -> None:
        """Drop a run that never got the slot (nobody saw it)."""
        self._table.delete(keys.run(run.environment, run.id), condition="#status = :pending",
                           names={"#status": "status"}, values={":pending": RunStatus.PENDING.value})

    def save_loaded(self, run: Run, total_records: int, partitions: int | None = None) -> None:
        """The records loaded; a run that fans out, its first round's partitions too."""
        expression = "SET total_records = :t, last_progress_at = :now" + (", #partitions = :p" if partitions else "")
        self._table.update(keys.run(run.environment, run.id), expression,
                           condition="#status = :running",
                           names={"#status": "status", **({"#partitions": "partitions"} if partitions else {})},
                           values={":t": total_records, ":running": RunStatus.RUNNING.value, ":now": iso(utc_now()),
                                   **({":p": partitions} if partitions else {})})

    def save_partition(self, run: Run, item: str) -> None:
        """Count a matched partition (a `partition_item` id) once: a set, so a retried one is not
        counted again; only while running."""
        try:
            self._table.update(keys.run(run.environment, run.id),
                               "ADD done_partitions :item SET last_progress_at = :now",
                               condition="#status = :running", names={"#status": "status"},
                               values={":item": {item}, ":running": RunStatus.RUNNING.value, ":now": iso(utc_now())})
        except ConditionFailed:
            pass  # finished meanwhile: nothing to count

    def save_partition_failure(self, run: Run, failure: str) -> None:
        """The first partition that failed for good, while running: the run's error names it."""
        try:
            self._table.update(keys.run(run.environment, run.id), "SET failed_partition = :f",
                               condition="#status = :running AND attribute_not_exists(failed_partition)",
                               names={"#status": "status"}, values={":f": failure, ":running": RunStatus.RUNNING.value})
        except ConditionFailed:
            pass

    def save_chunk(self, run: Run, chunk: int, matched_records: int, conflicts: int) -> Run:
        """Count a persisted chunk once (claimed by its number), and only while running."""
        try:
            item = self._table.update(
                keys.run(run.environment, run.id),
                "ADD done_chunks :chunk, matched_records :m, conflicted_matches :x SET last_progress_at = :now",
                condition="#status = :running AND NOT contains(done_chunks, :n)",
                names={"#status": "status"},
                values={":chunk": {chunk}, ":n": chunk, ":m": matched_records, ":x": conflicts,
                        ":running": RunStatus.RUNNING.value, ":now": iso(utc_now())},
                return_new=True)
            return self._from_item(item)
        except ConditionFailed:
            return self.get(run.environment, run.id)

    def active(self) -> list[Run]:
        """Pending and running runs of every environment (for the sweeper)."""
        return [self._from_item(i) for i in self._table.index_items(keys.GSI2, keys.ACTIVE_RUNS_PK)]

    def count_restart(self, run: Run, counted: bool = True) -> bool:
        """Claim one restart of a stuck run: False when it moved meanwhile or was restarted by another
        sweeper. Not `counted`: its restarts stay."""
        return self._claim_restart(run, run.restarts, run.last_progress_at, counted)

    @staticmethod
    def to_item(run: Run) -> dict[str, Any]:
        return {
            **keys.run(run.environment, run.id), **keys.run_index(run.environment, run.reconciliation_id, run.id),
            **keys.active_run_index(run.environment, run.id),
            "entity": "run", "environment": run.environment, "id": run.id,
            "reconciliation_id": run.reconciliation_id, "kind": run.kind.value, "trigger": run.trigger.value,
            "status": run.status.value, "created_at": iso(run.created_at), "total_records": run.total_records,
            "processed_records": run.processed_records, "matched_records": run.matched_records,
            "new_record_jobs": list(run.new_record_jobs) or None, "whole_pool": run.whole_pool or None,
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> Run:
        return Run(
            environment=item["environment"], id=item["id"], reconciliation_id=item["reconciliation_id"],
            kind=RunKind(item["kind"]), trigger=RunTrigger(item["trigger"]), status=RunStatus(item["status"]),
            created_at=parse_iso(item["created_at"]), started_at=parse_optional_iso(item.get("started_at")),
            completed_at=parse_optional_iso(item.get("completed_at")),
            total_records=item.get("total_records", 0), processed_records=item.get("processed_records", 0),
            matched_records=item.get("matched_records", 0), rule_summary=item.get("rule_summary") or {},
            error_message=item.get("error_message"), matches_count=item.get("matches_count"),
            first_match_id=item.get("first_match_id"), chunks=item.get("chunks"),
            chunk_starts=tuple(item.get("chunk_starts") or ()),
            done_chunks=frozenset(item.get("done_chunks", set())),
            new_record_jobs=tuple(item.get("new_record_jobs") or ()), whole_pool=bool(item.get("whole_pool")),
            last_progress_at=parse_optional_iso(item.get("last_progress_at")), restarts=item.get("restarts", 0),
            partitions=item.get("partitions"), done_partitions=frozenset(item.get("done_partitions", set())),
            failed_partition=item.get("failed_partition"),
            cancellation_requested_at=parse_optional_iso(item.get("cancellation_requested_at")),
        )
