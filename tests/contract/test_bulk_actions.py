"""Bulk actions: moves along BULK_STATUSES, a chunk's results stored once and counted once, the
begun mark, the comment id block fixed once, idempotency keys bound once."""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.bulk_actions import (
    BulkAction,
    BulkActionKind,
    BulkStatus,
    BulkTarget,
    ItemMark,
    ItemResult,
    ItemStatus,
)
from chalicelib.domain.clock import iso, parse_iso
from chalicelib.domain.errors import NotFound, TransitionRefused
from chalicelib.domain.users import Role
from tests.contract.builders import ENV, OTHER_ENV, T0, T0_MS


def bulk_action(action_id: int = 1, environment: str = ENV, **fields) -> BulkAction:
    return BulkAction(**{"environment": environment, "id": action_id, "target": BulkTarget.EXCEPTIONS,
                         "action": BulkActionKind.STATUS, "params": {"status": "dismissed"},
                         "status": BulkStatus.PENDING, "total_items": 3, "created_at": T0, "actor": "user:7",
                         "role": Role.PREPARER, "user_id": 7, "selection": {"filter": {"reconciliation_id": 2}},
                         "idempotency_key": "k", "body_hash": "h", **fields})


RESULTS = [ItemResult(0, 11, ItemStatus.SUCCEEDED), ItemResult(1, 12, ItemStatus.FAILED, "not found"),
           ItemResult(2, 13, ItemStatus.SKIPPED, "already dismissed")]


class TestBulkActionRepository:
    def test_add_then_get_reads_what_add_writes_in_its_environment_only(self, bulk_actions):
        added = bulk_action(succeeded_items=5)
        bulk_actions.add(added)
        bulk_actions.add(replace(added, total_items=99))  # a retried request's: changes nothing
        assert bulk_actions.get(ENV, 1) == replace(added, created_at=T0_MS, succeeded_items=0)
        assert bulk_actions.find(OTHER_ENV, 1) is None
        with pytest.raises(NotFound, match="bulk action 1 not found"):
            bulk_actions.get(OTHER_ENV, 1)

    def test_moves_follow_the_status_table(self, bulk_actions, clock):
        bulk_actions.add(bulk_action())
        working = bulk_actions.move(bulk_actions.get(ENV, 1), BulkStatus.PROCESSING, started_at=clock.now)
        assert working.status is BulkStatus.PROCESSING and working.started_at is not None
        with pytest.raises(TransitionRefused):
            bulk_actions.move(working, BulkStatus.PENDING)
        done = bulk_actions.move(working, BulkStatus.COMPLETED, completed_at=clock.now)
        assert done.status is BulkStatus.COMPLETED and done.completed_at is not None
        with pytest.raises(TransitionRefused):
            bulk_actions.move(done, BulkStatus.FAILED, error="late")

    def test_a_chunks_results_are_stored_once_and_counted_once(self, bulk_actions):
        bulk_actions.add(bulk_action())
        working = bulk_actions.move(bulk_actions.get(ENV, 1), BulkStatus.PROCESSING)
        counted = bulk_actions.save_chunk(working, 0, RESULTS)
        assert (counted.succeeded_items, counted.failed_items, counted.skipped_items) == (1, 1, 1)
        assert counted.done_chunks == {0}
        # A late delivery's other results of the same chunk change neither the results nor the counts
        again = bulk_actions.save_chunk(working, 0, [replace(r, status=ItemStatus.SKIPPED) for r in RESULTS])
        assert again == counted
        assert list(bulk_actions.result_chunks(again, 0)) == [(0, RESULTS)]
        bulk_actions.save_chunk(again, 2, [ItemResult(200, 9, ItemStatus.SUCCEEDED)])
        assert [chunk for chunk, _ in bulk_actions.result_chunks(again, 1)] == [2]
        assert bulk_actions.get(ENV, 1).succeeded_items == 2

    def test_results_stored_before_an_unsaved_count_are_the_ones_counted(self, bulk_actions):
        bulk_actions.add(bulk_action())
        pending = bulk_actions.get(ENV, 1)
        # Stored while the action was not processing (not counted); counted later as stored
        assert bulk_actions.save_chunk(pending, 0, RESULTS).done_chunks == frozenset()
        working = bulk_actions.move(pending, BulkStatus.PROCESSING)
        counted = bulk_actions.save_chunk(working, 0, [replace(r, status=ItemStatus.FAILED) for r in RESULTS])
        assert (counted.succeeded_items, counted.failed_items, counted.skipped_items) == (1, 1, 1)

    def test_a_chunk_is_begun_once_in_order(self, bulk_actions):
        bulk_actions.add(bulk_action())
        action = bulk_actions.get(ENV, 1)
        assert bulk_actions.begin_chunk(action, 0) is False
        assert bulk_actions.begin_chunk(action, 0) is True  # a later delivery: begun before
        assert bulk_actions.begin_chunk(action, 1) is False

    def test_the_comment_ids_are_reserved_once(self, bulk_actions):
        bulk_actions.add(bulk_action(action=BulkActionKind.COMMENT))
        action = bulk_actions.get(ENV, 1)
        assert bulk_actions.reserve_comment_ids(action, 40).first_comment_id == 40
        assert bulk_actions.reserve_comment_ids(action, 90).first_comment_id == 40

    def test_an_idempotency_key_is_bound_once_per_environment(self, bulk_actions):
        assert bulk_actions.claim_idempotency_key(ENV, "k", 1, "h1") == (1, "h1")
        assert bulk_actions.claim_idempotency_key(ENV, "k", 2, "h2") == (1, "h1")
        assert bulk_actions.claim_idempotency_key(OTHER_ENV, "k", 3, "h3") == (3, "h3")

    def test_an_items_mark_is_claimed_once_and_keeps_its_first_result(self, bulk_actions):
        bulk_actions.add(bulk_action())
        action = bulk_actions.get(ENV, 1)
        assert bulk_actions.claim_item(action, 1, 12, "w1") is None
        assert bulk_actions.claim_item(action, 1, 12, "w1") == ItemMark(1, 12)  # begun, no result yet
        assert bulk_actions.item_marks(action, range(0, 3)) == {1: ItemMark(1, 12)}
        assert bulk_actions.item_done(action, RESULTS[1]) == RESULTS[1]
        assert bulk_actions.item_done(action, ItemResult(1, 12, ItemStatus.SUCCEEDED)) == RESULTS[1]  # the first
        assert bulk_actions.claim_item(action, 1, 12, "w1") == ItemMark(1, 12, RESULTS[1])
        assert bulk_actions.item_marks(action, range(2, 3)) == {}
        assert bulk_actions.result_chunks(action, 0) is not None and list(bulk_actions.result_chunks(action, 0)) == []

    def test_a_mark_names_its_owner_and_is_taken_over_once_from_one_read(self, bulk_actions, clock):
        bulk_actions.add(bulk_action())
        action = bulk_actions.get(ENV, 1)
        assert bulk_actions.claim_item(action, 3, 30, "first") is None
        claimed = bulk_actions.claim_item(action, 3, 30, "second")
        assert (claimed.owner, claimed.claimed_at, claimed.result) == ("first", parse_iso(iso(clock.now)), None)
        clock.advance(seconds=960)
        # Two deliveries read the same lapsed mark: the first swap wins, the second sees the winner
        assert bulk_actions.take_over_item(action, claimed, "second") is None
        lost = bulk_actions.take_over_item(action, claimed, "third")
        assert (lost.owner, lost.claimed_at) == ("second", parse_iso(iso(clock.now)))
        assert bulk_actions.item_marks(action, range(3, 4))[3].owner == "second"
        # A mark given its result is not taken over
        assert bulk_actions.item_done(action, ItemResult(3, 30, ItemStatus.SUCCEEDED)).status is ItemStatus.SUCCEEDED
        done = bulk_actions.take_over_item(action, lost, "fourth")
        assert done is not None and done.result == ItemResult(3, 30, ItemStatus.SUCCEEDED) and done.owner == "second"

    def test_active_lists_the_unfinished_and_a_restart_is_claimed_once_from_one_read(self, bulk_actions, clock):
        bulk_actions.add(bulk_action(1))
        bulk_actions.add(bulk_action(2, status=BulkStatus.COMPLETED, completed_at=T0, total_items=0))
        bulk_actions.add(bulk_action(1, environment=OTHER_ENV))
        assert sorted((a.environment, a.id) for a in bulk_actions.active()) == [(ENV, 1), (OTHER_ENV, 1)]
        seen = bulk_actions.get(ENV, 1)
        assert bulk_actions.count_restart(seen) and not bulk_actions.count_restart(seen)
        claimed = bulk_actions.get(ENV, 1)
        assert claimed.restarts == 1 and claimed.last_progress_at is not None
        working = bulk_actions.move(claimed, BulkStatus.PROCESSING, started_at=clock.now)
        bulk_actions.move(working, BulkStatus.FAILED, completed_at=clock.now, error="x")
        assert [(a.environment, a.id) for a in bulk_actions.active()] == [(OTHER_ENV, 1)]
