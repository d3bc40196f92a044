"""Bulk actions in DynamoDB: the action's item, its results a chunk an item, and idempotency keys.

Each bulk action has a partition of its own (keys.bulk_action): its item and its result chunks;
nothing every action writes to. A chunk's results are put once (the first write wins) and counted
once (the chunk joins `done_chunks` in the conditional update that adds its counts), so a chunk
worked again after a redelivery changes neither.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, StatusMoves
from chalicelib.domain.bulk_actions import (
    BULK_STATUSES,
    BulkAction,
    BulkActionKind,
    BulkStatus,
    BulkTarget,
    ItemMark,
    ItemResult,
    ItemStatus,
    counts,
)
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.errors import NotFound
from chalicelib.domain.users import Role

IDEMPOTENCY_KEY_LIFETIME = timedelta(hours=48)
LAST_RESULTS_SK = f"{keys.RESULTS_PREFIX}999999"


def _row(result: ItemResult) -> list[Any]:
    return [result.index, result.id, result.status.value, result.error]


def _result_of(row: list[Any]) -> ItemResult:
    return ItemResult(index=int(row[0]), id=int(row[1]), status=ItemStatus(row[2]), error=row[3])


def _mark_of(index: int, item: dict[str, Any]) -> ItemMark:
    return ItemMark(index, int(item["id"]), _result_of(item["result"]) if item.get("result") else None,
                    owner=item.get("owner"), claimed_at=parse_optional_iso(item.get("claimed_at")))


class BulkActionRepository(StatusMoves[BulkAction, BulkStatus]):
    statuses, noun, key = BULK_STATUSES, "bulk action", staticmethod(keys.bulk_action)

    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def add(self, action: BulkAction) -> None:
        """Write a new bulk action; the same again (a retried request) changes nothing."""
        try:
            self._table.put_new(self._to_item(action))
        except ConditionFailed:
            pass

    def claim_idempotency_key(self, environment: str, key: str, action_id: int, body_hash: str) -> tuple[int, str]:
        """Bind `key` to `action_id` unless it is bound already; the (id, body hash) it is bound to."""
        now = utc_now()
        item = {**keys.bulk_action_idempotency_key(environment, key), "entity": "bulk_action_idempotency_key",
                "bulk_action_id": action_id, "body_hash": body_hash, "created_at": iso(now),
                "expires_at": int((now + IDEMPOTENCY_KEY_LIFETIME).timestamp())}
        try:
            self._table.put(item, condition="attribute_not_exists(pk) OR expires_at < :now",
                            values={":now": int(now.timestamp())})
            return action_id, body_hash
        except ConditionFailed:
            existing = self._table.get(keys.bulk_action_idempotency_key(environment, key))
            if existing is None:  # expired and removed in between
                return self.claim_idempotency_key(environment, key, action_id, body_hash)
            return int(existing["bulk_action_id"]), existing["body_hash"]

    def get(self, environment: str, action_id: int) -> BulkAction:
        found = self.find(environment, action_id)
        if found is None:
            raise NotFound(f"bulk action {action_id} not found")
        return found

    def find(self, environment: str, action_id: int) -> BulkAction | None:
        item = self._table.get(keys.bulk_action(environment, action_id))
        return self._from_item(item) if item else None

    def reserve_comment_ids(self, action: BulkAction, first_id: int) -> BulkAction:
        """Fix the action's block of comment ids once; a retry keeps the first block."""
        try:
            item = self._table.update(keys.bulk_action(action.environment, action.id), "SET first_comment_id = :f",
                                      condition="attribute_exists(pk) AND attribute_not_exists(first_comment_id)",
                                      values={":f": first_id}, return_new=True)
            return self._from_item(item)
        except ConditionFailed:
            return self.get(action.environment, action.id)

    def begin_chunk(self, action: BulkAction, chunk: int) -> bool:
        """Mark a chunk begun before its first item; whether an earlier delivery began it (its items
        may be applied then, and one left part-way is finished). Chunks begin in order: the mark is
        the highest begun, one small conditional update."""
        try:
            self._table.update(keys.bulk_action(action.environment, action.id), "SET chunks_begun = :n",
                               condition="attribute_exists(pk) AND "
                                         "(attribute_not_exists(chunks_begun) OR chunks_begun < :n)",
                               values={":n": chunk})
            return False
        except ConditionFailed:
            return True

    def save_chunk(self, action: BulkAction, chunk: int, results: list[ItemResult]) -> BulkAction:
        """Store a chunk's results (the first write wins), then count what is stored, once."""
        results_key = keys.bulk_action_results(action.environment, action.id, chunk)
        try:
            self._table.put({**results_key, "entity": "bulk_action_results",
                             "results": [_row(r) for r in results]}, condition="attribute_not_exists(pk)")
        except ConditionFailed:  # an earlier delivery stored them: those are the results, and counted so
            stored = self._table.get(results_key)
            results = [_result_of(r) for r in (stored or {}).get("results") or ()]
        succeeded, failed, skipped = counts(results)
        try:
            item = self._table.update(
                keys.bulk_action(action.environment, action.id),
                "SET last_progress_at = :now ADD done_chunks :chunk, succeeded_items :s, failed_items :f, "
                "skipped_items :k",
                condition="NOT contains(done_chunks, :n) AND #status = :processing",
                names={"#status": "status"},
                values={":now": iso(utc_now()), ":chunk": {chunk}, ":n": chunk, ":s": succeeded, ":f": failed,
                        ":k": skipped, ":processing": BulkStatus.PROCESSING.value},
                return_new=True)
        except ConditionFailed:  # counted by an earlier delivery, or the action ended
            return self.get(action.environment, action.id)
        return self._from_item(item)

    def active(self) -> list[BulkAction]:
        """Pending and processing bulk actions of every environment (for the sweeper)."""
        return [self._from_item(i) for i in self._table.index_items(keys.GSI2, keys.ACTIVE_BULK_ACTIONS_PK)]

    def count_restart(self, action: BulkAction, counted: bool = True) -> bool:
        """Claim one restart of a stuck action: False when it moved meanwhile (its last_progress_at)
        or another sweeper restarted it (its restarts)."""
        return self._claim_restart(action, action.restarts, action.last_progress_at, counted)

    def claim_item(self, action: BulkAction, index: int, item_id: int, owner: str) -> ItemMark | None:
        """Mark item `index` as being done by `owner` (one delivery), before its change: None when
        this call marked it; otherwise the mark another delivery left (its owner and since when, and
        its result once it was given one)."""
        key = keys.bulk_action_item(action.environment, action.id, index)
        now = utc_now()
        try:
            self._table.put({**key, "entity": "bulk_action_item", "id": item_id, "owner": owner,
                             "claimed_at": iso(now)}, condition="attribute_not_exists(pk)")
            return None
        except ConditionFailed:
            stored = self._table.get(key)
            return _mark_of(index, stored) if stored else ItemMark(index, item_id, owner=owner, claimed_at=now)

    def take_over_item(self, action: BulkAction, mark: ItemMark, owner: str) -> ItemMark | None:
        """Make `owner` the worker of a result-less mark as it was read (its claimed_at, its owner):
        None when this call took it over; otherwise the mark as it is now (another delivery took it
        over, or its worker gave it its result)."""
        key = keys.bulk_action_item(action.environment, action.id, mark.index)
        condition = "attribute_exists(pk) AND attribute_not_exists(#result) AND "
        values: dict[str, Any] = {":owner": owner, ":now": iso(utc_now())}
        if mark.claimed_at is None:
            condition += "attribute_not_exists(claimed_at)"
        else:
            condition += "claimed_at = :claimed"
            values[":claimed"] = iso(mark.claimed_at)
        try:
            self._table.update(key, "SET #owner = :owner, claimed_at = :now", condition=condition,
                               names={"#result": "result", "#owner": "owner"}, values=values)
            return None
        except ConditionFailed:
            stored = self._table.get(key)
            return _mark_of(mark.index, stored) if stored else mark

    def item_done(self, action: BulkAction, result: ItemResult) -> ItemResult:
        """Give a marked item its result, once: the result stored (a first one wins)."""
        key = keys.bulk_action_item(action.environment, action.id, result.index)
        try:
            self._table.update(key, "SET #result = :r",
                               condition="attribute_exists(pk) AND attribute_not_exists(#result)",
                               names={"#result": "result"}, values={":r": _row(result)})
            return result
        except ConditionFailed:
            stored = self._table.get(key)
            return _result_of(stored["result"]) if stored and stored.get("result") else result

    def item_marks(self, action: BulkAction, indexes: range) -> dict[int, ItemMark]:
        """The marks of the items `indexes` (a chunk's), by index: one query of the action's partition."""
        if not indexes:
            return {}
        listing = keys.bulk_action(action.environment, action.id)["pk"]
        first = keys.bulk_action_item(action.environment, action.id, indexes[0])["sk"]
        last = keys.bulk_action_item(action.environment, action.id, indexes[-1])["sk"]
        marks: dict[int, ItemMark] = {}
        for item in self._table.query_between(keys.BASE_TABLE, listing, first, last, page_size=100,
                                              consistent=True):
            index = int(item["sk"].removeprefix(keys.BULK_ITEM_PREFIX))
            marks[index] = _mark_of(index, item)
        return marks

    def result_chunks(self, action: BulkAction, from_chunk: int,
                      page_size: int = 4) -> Iterator[tuple[int, list[ItemResult]]]:
        """Each stored chunk's results from `from_chunk` on, in chunk order, a few chunks a read."""
        listing = keys.bulk_action(action.environment, action.id)["pk"]
        first = keys.bulk_action_results(action.environment, action.id, from_chunk)["sk"]
        for item in self._table.query_between(keys.BASE_TABLE, listing, first, LAST_RESULTS_SK,
                                              page_size=page_size, projection=("sk", "results")):
            yield (int(item["sk"].removeprefix(keys.RESULTS_PREFIX)),
                   [_result_of(r) for r in item.get("results") or ()])

    @staticmethod
    def _to_item(action: BulkAction) -> dict[str, Any]:
        return {
            **keys.bulk_action(action.environment, action.id), "entity": "bulk_action",
            "environment": action.environment, "id": action.id, "target": action.target.value,
            "action": action.action.value, "params": action.params, "status": action.status.value,
            "total_items": action.total_items, "created_at": iso(action.created_at), "actor": action.actor,
            "role": action.role.value, "user_id": action.user_id, "selection": action.selection,
            "idempotency_key": action.idempotency_key, "body_hash": action.body_hash,
            "succeeded_items": 0, "failed_items": 0, "skipped_items": 0,
            "completed_at": iso(action.completed_at) if action.completed_at else None,
            **({} if action.finished else keys.active_bulk_action_index(action.environment, action.id)),
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> BulkAction:
        return BulkAction(
            environment=item["environment"], id=int(item["id"]), target=BulkTarget(item["target"]),
            action=BulkActionKind(item["action"]), params=dict(item.get("params") or {}),
            status=BulkStatus(item["status"]), total_items=int(item["total_items"]),
            created_at=parse_iso(item["created_at"]), actor=item["actor"], role=Role(item["role"]),
            user_id=int(item["user_id"]) if item.get("user_id") is not None else None,
            selection=dict(item.get("selection") or {}), idempotency_key=item.get("idempotency_key"),
            body_hash=item.get("body_hash"), done_chunks=frozenset(int(c) for c in item.get("done_chunks") or ()),
            succeeded_items=int(item.get("succeeded_items", 0)), failed_items=int(item.get("failed_items", 0)),
            skipped_items=int(item.get("skipped_items", 0)),
            first_comment_id=int(item["first_comment_id"]) if item.get("first_comment_id") is not None else None,
            started_at=parse_optional_iso(item.get("started_at")),
            completed_at=parse_optional_iso(item.get("completed_at")), error=item.get("error"),
            last_progress_at=parse_optional_iso(item.get("last_progress_at")), restarts=int(item.get("restarts") or 0),
        )
