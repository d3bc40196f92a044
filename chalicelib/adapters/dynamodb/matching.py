"""Runs, matches and the record side of matching in DynamoDB.

A match is written without transactions, in an order a retry can finish and a failure can undo:
1. its member items (one per record, in the match's partition), by BatchWriteItem;
2. a claim on each record: a conditional update that names the match in the record's
   `match_<reconciliation>` attribute, adds the reconciliation to `matched_in`, and moves the
   record's status (and its open-records index entry) accordingly; a claim fails when another
   match of that reconciliation holds the record, or the record is being deleted;
3. the match item, the commit marker: until it exists nothing lists or shows the match.
A failed claim releases the claims this match made and deletes its members.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.record_columns import record_attributes, record_columns
from chalicelib.adapters.dynamodb.records import OPEN_RECORD_ATTRIBUTES, RecordRepository
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, Filter
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.errors import NotFound, TransitionRefused
from chalicelib.domain.matches import Match, MatchStatus, record_status
from chalicelib.domain.records import Record, RecordStatus
from chalicelib.domain.runs import FINISHED, Run, RunKind, RunStatus, RunTrigger, sources_of

CLAIM_ATTEMPTS = 8  # a record another reconciliation keeps matching at the same moment


class RunRepository:
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
        return {run.id: run for run in map(self._from_item, self._table.get_many(keys.run(environment, i) for i in run_ids))}

    def list_page(self, environment: str, reconciliation_id: int, limit: int,
                  cursor: str | None) -> tuple[list[Run], str | None]:
        page = self._table.query_page("gsi1pk", keys.runs_of_reconciliation_pk(environment, reconciliation_id),
                                      index="gsi1", sort_attr="gsi1sk", limit=limit, cursor=cursor)
        return [self._from_item(i) for i in page.items], page.cursor

    def move(self, run: Run, target: RunStatus, **fields: Any) -> Run:
        try:
            item = self._table.move_status(keys.run(run.environment, run.id), target.value, sources_of(target),
                                           {**fields, "last_progress_at": utc_now()},
                                           leave_index="gsi2" if target in FINISHED else None)  # active runs
        except ConditionFailed:
            raise TransitionRefused(f"run {run.id} cannot move to {target.value}") from None
        return self._from_item(item)

    def save_plan(self, run: Run, *, first_match_id: int, matches_count: int, chunks: int, total_records: int,
                  rule_summary: dict[str, Any]) -> Run:
        """Fix the match phase's outcome once; a retried match phase keeps what the first stored."""
        try:
            item = self._table.update(
                keys.run(run.environment, run.id),
                "SET first_match_id = :f, matches_count = :n, chunks = :c, total_records = :t, "
                "processed_records = :t, rule_summary = :s, last_progress_at = :now",
                condition="attribute_not_exists(first_match_id) AND #status = :running",
                names={"#status": "status"},
                values={":f": first_match_id, ":n": matches_count, ":c": chunks, ":t": total_records,
                        ":s": rule_summary, ":running": RunStatus.RUNNING.value, ":now": iso(utc_now())},
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

    def take_over_slot(self, environment: str, reconciliation_id: int, holder_id: int, run_id: int) -> bool:
        """Take the slot from a holder known to be finished or missing (only if it still holds it)."""
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id), "SET current_run_id = :run",
                               condition="current_run_id = :holder AND attribute_not_exists(deleting)",
                               values={":run": run_id, ":holder": holder_id})
        except ConditionFailed:
            return False
        return True

    def release_slot(self, environment: str, reconciliation_id: int, run_id: int) -> None:
        """The finished run becomes the last run; only the run holding the slot frees it."""
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id),
                               "SET last_run_id = :run REMOVE current_run_id",
                               condition="current_run_id = :run", values={":run": run_id})
        except ConditionFailed:
            pass  # released already, or the reconciliation is gone

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

    def save_loaded(self, run: Run, total_records: int) -> None:
        self._table.update(keys.run(run.environment, run.id), "SET total_records = :t, last_progress_at = :now",
                           condition="#status = :running", names={"#status": "status"},
                           values={":t": total_records, ":running": RunStatus.RUNNING.value, ":now": iso(utc_now())})

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
        return [self._from_item(i) for i in self._table.index_items("gsi2pk", keys.ACTIVE_RUNS_PK, index="gsi2")]

    def count_restart(self, run: Run) -> bool:
        """Claim one restart of a stuck run: False when it moved meanwhile or was restarted by another sweeper."""
        condition = "#status IN (:pending, :running) AND (attribute_not_exists(restarts) OR restarts = :restarts)"
        values: dict[str, Any] = {":pending": RunStatus.PENDING.value, ":running": RunStatus.RUNNING.value,
                                  ":restarts": run.restarts, ":zero": 0, ":one": 1, ":now": iso(utc_now())}
        if run.last_progress_at is not None:
            condition += " AND last_progress_at = :seen"
            values[":seen"] = iso(run.last_progress_at)
        try:
            self._table.update(keys.run(run.environment, run.id),
                               "SET restarts = if_not_exists(restarts, :zero) + :one, last_progress_at = :now",
                               condition=condition, names={"#status": "status"}, values=values)
        except ConditionFailed:
            return False
        return True

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
            done_chunks=frozenset(item.get("done_chunks", set())),
            new_record_jobs=tuple(item.get("new_record_jobs") or ()), whole_pool=bool(item.get("whole_pool")),
            last_progress_at=parse_optional_iso(item.get("last_progress_at")), restarts=item.get("restarts", 0),
        )


class MatchRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    # Writing a match (see the module docstring for the order) --------------------------------

    def put_members_of(self, batch: Iterable[tuple[Match, Iterable[dict[str, Any]]]]) -> None:
        self._table.batch_write(puts=[
            {**keys.match_member(match.environment, match.id, m["record_id"]), "entity": "match_member",
             "record_id": m["record_id"], "side": m["side"], "data_stream_key": m["data_stream_key"]}
            for match, members in batch for m in members])

    def claim_record(self, environment: str, record_id: int, reconciliation_id: int, match_id: int,
                     users: frozenset[int], seen: dict[str, Any] | None = None) -> bool:
        """Mark the record matched by `match_id` in the reconciliation. False when another match
        of it holds the record, or the record is gone or being deleted. `seen` is the record's
        item as last read (saves a read; a stale one only costs a retry)."""
        attribute = keys.match_attribute(reconciliation_id)
        item = seen
        for _ in range(CLAIM_ATTEMPTS):
            if item is None:
                item = self._table.get(keys.record(environment, record_id))
            if item is None or item.get("deleting"):
                return False
            if item.get(attribute) is not None:
                return item[attribute] == match_id
            matched_in = set(item.get("matched_in") or ())
            status = record_status(matched_in | {reconciliation_id}, users | {reconciliation_id})
            try:
                self._table.update(
                    keys.record(environment, record_id), _status_update(status, "SET #m = :match", "ADD matched_in :r"),
                    condition="attribute_exists(pk) AND attribute_not_exists(deleting) AND attribute_not_exists(#m) "
                              "AND " + _same_matched_in(matched_in),
                    names={"#m": attribute, "#status": "status"},
                    values={":match": match_id, ":r": {reconciliation_id},
                            **_status_values(environment, item, status), **_size_value(matched_in)})
                return True
            except ConditionFailed:
                item = None  # changed meanwhile: read it again
        raise RuntimeError(f"record {record_id} kept changing while being matched")

    def release_record(self, environment: str, record_id: int, reconciliation_id: int, match_id: int,
                       users: frozenset[int]) -> None:
        """Undo `claim_record` (only if `match_id` holds the record): it is open again there."""
        attribute = keys.match_attribute(reconciliation_id)
        for _ in range(CLAIM_ATTEMPTS):
            item = self._table.get(keys.record(environment, record_id))
            if item is None or item.get(attribute) != match_id:
                return
            matched_in = set(item.get("matched_in") or ())
            status = record_status(matched_in - {reconciliation_id}, users)
            try:
                self._table.update(
                    keys.record(environment, record_id), _status_update(status, "REMOVE #m", "DELETE matched_in :r"),
                    condition="#m = :match AND " + _same_matched_in(matched_in),
                    names={"#m": attribute, "#status": "status"},
                    values={":match": match_id, ":r": {reconciliation_id},
                            **_status_values(environment, item, status), **_size_value(matched_in)})
                return
            except ConditionFailed:
                continue
        raise RuntimeError(f"record {record_id} kept changing while being unmatched")

    def commit_many(self, matches: list[Match]) -> None:
        """Write the match items, the commit markers, batched. Not conditional: a match id is
        reserved for one match only (a run's block, or a person's single id), and a retry first
        leaves out the matches already written (see `existing_ids`)."""
        self._table.batch_write(puts=[self.to_item(m) for m in matches])

    def delete_members(self, environment: str, match_id: int) -> None:
        self._table.batch_write(deletes=[
            keys.match_member(environment, match_id, m["record_id"]) for m in self.members(environment, match_id)])

    # Reading ---------------------------------------------------------------------------------

    def open_items(self, environment: str, stream_key: str, reconciliation_id: int,
                   adopted: bool) -> Iterable[dict[str, Any]]:
        """Record items of the stream not yet matched in the reconciliation, with the attributes
        the open-records index projects (OPEN_RECORD_ATTRIBUTES; `status` too when read whole).
        Once the stream is adopted they come from that sparse index alone (a record matched
        elsewhere but not here is still open here); before, from all the stream's records, since
        some may have been reconciled in every other reconciliation before this one used the stream."""
        attr, partition, index = _stream_records(environment, stream_key, adopted)
        items = self._table.query_all(attr, partition, index=index,
                                      projection=None if adopted else OPEN_RECORD_ATTRIBUTES + ("status",))
        return (item for item in items
                if reconciliation_id not in (item.get("matched_in") or ()) and not item.get("deleting"))

    def open_record_columns(self, environment: str, stream_key: str, reconciliation_id: int, adopted: bool,
                            with_metadata: bool = False) -> Iterator[dict[str, list[Any]]]:
        """The records of `open_items`, a page at a time as columns (see record_columns): what a run
        loads, a million a side, without a dict per record. `status` only when read whole."""
        attr, partition, index = _stream_records(environment, stream_key, adopted)
        projection = record_attributes(with_metadata) + (() if adopted else ("status",))
        for page in self._table.query_pages(attr, partition, index=index, filter=_open_here(reconciliation_id),
                                            projection=projection):
            yield record_columns(page, with_metadata)

    def count_open(self, environment: str, stream_key: str, reconciliation_id: int, adopted: bool,
                   deadline: float | None = None) -> tuple[int, bool]:
        """How many records `open_items` would give, and whether the count finished by `deadline`."""
        attr, partition, index = _stream_records(environment, stream_key, adopted)
        return self._table.count(attr, partition, index=index, filter=_open_here(reconciliation_id), deadline=deadline)

    def is_adopted(self, environment: str, reconciliation_id: int, stream_key: str) -> bool:
        return self._table.get(keys.stream_adoption(environment, reconciliation_id, stream_key)) is not None

    def adopt(self, environment: str, reconciliation_id: int, stream_key: str) -> None:
        self._table.put({**keys.stream_adoption(environment, reconciliation_id, stream_key), "entity": "stream_adoption"})

    def forget_adoptions(self, environment: str, reconciliation_id: int, stream_keys: Iterable[str]) -> None:
        self._table.batch_write(deletes=[keys.stream_adoption(environment, reconciliation_id, k) for k in stream_keys])

    def reopen_record(self, environment: str, item: dict[str, Any], users: frozenset[int]) -> None:
        """A record counted `reconciled` before another reconciliation used its stream is open
        again (partially reconciled, back in the open index). Nothing to do if it changed meanwhile:
        whoever changed it computed its status with the new reconciliation counted."""
        matched_in = set(item.get("matched_in") or ())
        status = record_status(matched_in, users)
        if status is RecordStatus.RECONCILED:
            return
        try:
            self._table.update(keys.record(environment, item["id"]), _status_update(status, "", ""),
                               condition="#status = :reconciled AND " + _same_matched_in(matched_in),
                               names={"#status": "status"},
                               values={":reconciled": RecordStatus.RECONCILED.value,
                                       **_status_values(environment, item, status), **_size_value(matched_in)})
        except ConditionFailed:
            pass

    def record_items(self, environment: str, record_ids: Iterable[int]) -> list[dict[str, Any]]:
        return self._table.get_many(keys.record(environment, rid) for rid in record_ids)

    @staticmethod
    def record_of(item: dict[str, Any]) -> Record:
        return RecordRepository.from_item(item)

    @staticmethod
    def match_attribute(reconciliation_id: int) -> str:
        return keys.match_attribute(reconciliation_id)

    def get(self, environment: str, match_id: int) -> Match:
        match = self.find(environment, match_id)
        if match is None or match.unmatching or match.pending_since is not None:
            raise NotFound(f"reconciliation match {match_id} not found")
        return match

    def find(self, environment: str, match_id: int) -> Match | None:
        item = self._table.get(keys.match(environment, match_id))
        return self._from_item(item) if item else None

    def members(self, environment: str, match_id: int) -> list[dict[str, Any]]:
        return list(self._table.query_all("pk", keys.match(environment, match_id)["pk"],
                                          sort_prefix=keys.MATCH_MEMBER_PREFIX))

    def member_page(self, environment: str, match_id: int, limit: int, cursor: str | None):
        page = self._table.query_page("pk", keys.match(environment, match_id)["pk"], limit=limit, cursor=cursor,
                                      sort_prefix=keys.MATCH_MEMBER_PREFIX)
        return [i["record_id"] for i in page.items], page.cursor

    def list_page(self, environment: str, reconciliation_id: int, limit: int, cursor: str | None,
                  include_unmatching: bool = False, status: MatchStatus | None = None) -> tuple[list[Match], str | None]:
        """Newest first, of one status when given; a match being unmatched is left out, except for
        whoever finishes unmatching."""
        expression = "attribute_not_exists(#fp)" + ("" if include_unmatching else " AND attribute_not_exists(#fu)")
        names = {"#fp": "pending_since", **({} if include_unmatching else {"#fu": "unmatching"})}
        values: dict[str, Any] = {}
        if status is not None:
            expression += " AND #fs = :fs"
            names["#fs"], values[":fs"] = "status", status.value
        hidden = Filter(expression, names, values)
        page = self._table.query_page("gsi1pk", keys.matches_of_reconciliation_pk(environment, reconciliation_id),
                                      index="gsi1", sort_attr="gsi1sk", limit=limit, cursor=cursor, filter=hidden)
        return [self._from_item(i) for i in page.items], page.cursor

    # Changing a committed match ---------------------------------------------------------------

    def confirm(self, match: Match) -> Match:
        try:
            item = self._table.update(
                keys.match(match.environment, match.id), "SET #status = :confirmed",
                condition="attribute_exists(pk) AND attribute_not_exists(unmatching) AND attribute_not_exists(pending_since)",
                names={"#status": "status"}, values={":confirmed": MatchStatus.CONFIRMED.value}, return_new=True)
        except ConditionFailed:
            raise NotFound(f"reconciliation match {match.id} not found") from None
        return self._from_item(item)

    def mark_unmatching(self, match: Match) -> None:
        """First step of an unmatch: hide the match; a retry finds the mark and goes on."""
        self._table.update(keys.match(match.environment, match.id), "SET unmatching = :t",
                           condition="attribute_exists(pk)", values={":t": True})

    def begin(self, match: Match) -> None:
        """Write a person's match hidden, in the sweeper's pending-matches index; the commit
        (`commit_many`) replaces it with the visible item."""
        self._table.put_new({**self.to_item(match), **keys.pending_match_index(match.environment, match.id),
                             "pending_since": iso(utc_now())})

    def pending(self) -> list[Match]:
        """Begun matches of every environment (for the sweeper)."""
        return [self._from_item(i) for i in self._table.index_items("gsi2pk", keys.PENDING_MATCHES_PK, index="gsi2")]

    def remove(self, match: Match) -> None:
        """Drop a match that was never committed (a committed one stays, as a tombstone once unmatched)."""
        self._table.delete(keys.match(match.environment, match.id), condition="attribute_exists(pending_since)")

    def mark_unmatched(self, match: Match) -> None:
        self._table.update(keys.match(match.environment, match.id), "SET unmatched_at = :now",
                           condition="attribute_exists(pk)", values={":now": iso(utc_now())})

    def existing_ids(self, environment: str, match_ids: Iterable[int]) -> set[int]:
        """Which of these matches were written already (committed, or unmatched since)."""
        return {item["id"] for item in self._table.get_many(keys.match(environment, i) for i in match_ids)}

    @staticmethod
    def to_item(match: Match) -> dict[str, Any]:
        return {
            **keys.match(match.environment, match.id),
            **keys.match_index(match.environment, match.reconciliation_id, match.id),
            "entity": "match", "environment": match.environment, "id": match.id,
            "reconciliation_id": match.reconciliation_id, "reconciliation_rule_id": match.reconciliation_rule_id,
            "status": match.status.value, "group_key": match.group_key, "record_count": match.record_count,
            "created_at": iso(match.created_at), "run_id": match.run_id,
            "differences": match.differences or None, "reason": match.reason,
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> Match:
        return Match(
            environment=item["environment"], id=item["id"], reconciliation_id=item["reconciliation_id"],
            status=MatchStatus(item["status"]), group_key=item.get("group_key", ""),
            record_count=item.get("record_count", 0), created_at=parse_iso(item["created_at"]),
            reconciliation_rule_id=item.get("reconciliation_rule_id"), run_id=item.get("run_id"),
            differences=item.get("differences") or {}, reason=item.get("reason"),
            unmatching=bool(item.get("unmatching")), unmatched_at=parse_optional_iso(item.get("unmatched_at")),
            pending_since=parse_optional_iso(item.get("pending_since")),
        )


def _stream_records(environment: str, stream_key: str, adopted: bool) -> tuple[str, str, str]:
    """Where a stream's records open in a reconciliation are read: the sparse open index once the
    stream is adopted, every record of the stream before (partition attribute, value, index)."""
    if adopted:
        return "gsi5pk", keys.open_records_of_stream_pk(environment, stream_key), "gsi5"
    return "gsi1pk", keys.records_of_stream_pk(environment, stream_key), "gsi1"


def _open_here(reconciliation_id: int) -> Filter:
    """`open_items`' test, applied by DynamoDB: not matched in this reconciliation (a record matched
    elsewhere is still open here), not being deleted."""
    return Filter("NOT contains(#fm, :fr) AND attribute_not_exists(#fd)", {"#fm": "matched_in", "#fd": "deleting"},
                  {":fr": reconciliation_id})


def _status_update(status: RecordStatus, set_clause: str, set_change: str) -> str:
    """The status, and the indexes that follow it: the matched-records index (gsi4) holds the
    record unless it is unreconciled, the open-records index (gsi5) unless it is reconciled."""
    sets, removes = ["#status = :status"], []
    if set_clause.startswith("REMOVE "):
        removes.append(set_clause.removeprefix("REMOVE "))
    elif set_clause:
        sets.insert(0, set_clause.removeprefix("SET "))
    if status is RecordStatus.UNRECONCILED:
        removes += ["gsi4pk", "gsi4sk"]
    else:
        sets += ["gsi4pk = :g4", "gsi4sk = :g4s"]
    if status is RecordStatus.RECONCILED:
        removes += ["gsi5pk", "gsi5sk"]
    else:
        sets += ["gsi5pk = :g5", "gsi5sk = :g5s"]
    expression = "SET " + ", ".join(sets)
    if removes:
        expression += " REMOVE " + ", ".join(removes)
    return f"{expression} {set_change}".rstrip()


def _status_values(environment: str, item: dict[str, Any], status: RecordStatus) -> dict[str, str]:
    """The values `_status_update` names for `status`."""
    values = {":status": status.value}
    indexes = keys.record_indexes(environment, item["id"], item["data_stream_key"], status.value)
    if "gsi4pk" in indexes:
        values.update({":g4": indexes["gsi4pk"], ":g4s": indexes["gsi4sk"]})
    if "gsi5pk" in indexes:
        values.update({":g5": indexes["gsi5pk"], ":g5s": indexes["gsi5sk"]})
    return values


def _same_matched_in(matched_in: set[int]) -> str:
    """The record's reconciliations are still those the new status was computed from."""
    return "size(matched_in) = :n" if matched_in else "attribute_not_exists(matched_in)"


def _size_value(matched_in: set[int]) -> dict[str, int]:
    return {":n": len(matched_in)} if matched_in else {}

