"""Bulk actions, as `adapters/dynamodb/bulk_actions.py` keeps them: status moves along the domain's
BULK_STATUSES, a chunk's results stored once (the first write wins) and counted once, the begun
mark, the comment id block fixed once, and idempotency keys."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from chalicelib.adapters.dynamodb.bulk_actions import IDEMPOTENCY_KEY_LIFETIME
from chalicelib.domain.bulk_actions import BULK_STATUSES, BulkAction, BulkStatus, ItemMark, ItemResult, counts
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import NotFound, TransitionRefused
from tests.fakes._support import moved, stored_time


class FakeBulkActionRepository:
    def __init__(self) -> None:
        self.actions: dict[tuple[str, int], BulkAction] = {}
        self.results: dict[tuple[str, int], dict[int, list[ItemResult]]] = {}
        self.begun: dict[tuple[str, int], int] = {}
        self.keys: dict[tuple[str, str], dict[str, Any]] = {}
        self.marks: dict[tuple[str, int], dict[int, ItemMark]] = {}
        self._lock = threading.Lock()  # the items of a chunk are worked on threads: conditional writes

    def add(self, action: BulkAction) -> None:
        self.actions.setdefault((action.environment, action.id), replace(
            action, created_at=stored_time(action.created_at), completed_at=stored_time(action.completed_at),
            succeeded_items=0, failed_items=0, skipped_items=0))

    def claim_idempotency_key(self, environment: str, key: str, action_id: int, body_hash: str) -> tuple[int, str]:
        now = utc_now()
        bound = self.keys.get((environment, key))
        if bound is None or bound["expires_at"] < now:
            self.keys[(environment, key)] = {"id": action_id, "body_hash": body_hash,
                                             "expires_at": now + IDEMPOTENCY_KEY_LIFETIME}
            return action_id, body_hash
        return bound["id"], bound["body_hash"]

    def get(self, environment: str, action_id: int) -> BulkAction:
        found = self.find(environment, action_id)
        if found is None:
            raise NotFound(f"bulk action {action_id} not found")
        return found

    def find(self, environment: str, action_id: int) -> BulkAction | None:
        return self.actions.get((environment, action_id))

    def move(self, action: BulkAction, /, target: BulkStatus, **fields: object) -> BulkAction:
        stored = self.get(action.environment, action.id)
        if stored.status not in BULK_STATUSES.sources_of(target):
            raise TransitionRefused(f"bulk action {action.id} cannot move to {target.value}")
        self.actions[(action.environment, action.id)] = moved(stored, target, dict(fields))
        return self.actions[(action.environment, action.id)]

    def reserve_comment_ids(self, action: BulkAction, first_id: int) -> BulkAction:
        stored = self.get(action.environment, action.id)
        if stored.first_comment_id is None:
            stored = self.actions[(action.environment, action.id)] = replace(stored, first_comment_id=first_id)
        return stored

    def begin_chunk(self, action: BulkAction, chunk: int) -> bool:
        key = (action.environment, action.id)
        if key in self.begun and self.begun[key] >= chunk:
            return True
        self.begun[key] = chunk
        return False

    def save_chunk(self, action: BulkAction, chunk: int, results: list[ItemResult]) -> BulkAction:
        key = (action.environment, action.id)
        stored_results = self.results.setdefault(key, {}).setdefault(chunk, list(results))
        stored = self.get(action.environment, action.id)
        if chunk in stored.done_chunks or stored.status is not BulkStatus.PROCESSING:
            return stored
        succeeded, failed, skipped = counts(stored_results)
        self.actions[key] = replace(stored, done_chunks=stored.done_chunks | {chunk},
                                    succeeded_items=stored.succeeded_items + succeeded,
                                    failed_items=stored.failed_items + failed,
                                    skipped_items=stored.skipped_items + skipped,
                                    last_progress_at=stored_time(utc_now()))
        return self.actions[key]

    def result_chunks(self, action: BulkAction, from_chunk: int,
                      page_size: int = 4) -> Iterator[tuple[int, list[ItemResult]]]:
        stored = self.results.get((action.environment, action.id), {})
        for chunk in sorted(c for c in stored if c >= from_chunk):
            yield chunk, list(stored[chunk])

    # The sweeper's: the active ones, a restart claimed once; items marked before their change.

    def active(self) -> list[BulkAction]:
        return [a for a in self.actions.values() if not a.finished]

    def count_restart(self, action: BulkAction, counted: bool = True) -> bool:
        stored = self.get(action.environment, action.id)
        if stored.finished or stored.restarts != action.restarts or stored.last_progress_at != action.last_progress_at:
            return False
        self.actions[(action.environment, action.id)] = replace(
            stored, restarts=stored.restarts + (1 if counted else 0), last_progress_at=stored_time(utc_now()))
        return True

    def claim_item(self, action: BulkAction, index: int, item_id: int, owner: str) -> ItemMark | None:
        with self._lock:
            marks = self.marks.setdefault((action.environment, action.id), {})
            if index in marks:
                return marks[index]
            marks[index] = ItemMark(index, item_id, owner=owner, claimed_at=stored_time(utc_now()))
            return None

    def take_over_item(self, action: BulkAction, mark: ItemMark, owner: str) -> ItemMark | None:
        with self._lock:
            marks = self.marks.setdefault((action.environment, action.id), {})
            stored = marks.get(mark.index)
            if stored is None or stored.result is not None or stored.claimed_at != mark.claimed_at:
                return stored or mark
            marks[mark.index] = replace(stored, owner=owner, claimed_at=stored_time(utc_now()))
            return None

    def item_done(self, action: BulkAction, result: ItemResult) -> ItemResult:
        marks = self.marks.setdefault((action.environment, action.id), {})
        with self._lock:
            mark = marks[result.index]
            if mark.result is None:
                marks[result.index] = replace(mark, result=result)
            return marks[result.index].result or result

    def item_marks(self, action: BulkAction, indexes: range) -> dict[int, ItemMark]:
        marks = self.marks.get((action.environment, action.id), {})
        return {i: m for i, m in marks.items() if i in indexes}
