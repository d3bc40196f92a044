"""The rules of bulk actions that need no storage: who may do which item, the ids a request may
name, the cap of a filter, chunks, counts and progress."""
from __future__ import annotations

import pytest

from chalicelib.domain.bulk_actions import (
    BULK_STATUSES,
    CHUNK_ITEMS,
    MAX_FILTERED,
    BulkAction,
    BulkActionKind,
    BulkStatus,
    BulkTarget,
    ItemResult,
    ItemStatus,
    check_ids,
    chunk_range,
    counts,
    over_cap,
    refusal,
)
from chalicelib.domain.clock import utc_now
from chalicelib.domain.users import Role


@pytest.mark.parametrize("action", [BulkActionKind.ASSIGN, BulkActionKind.STATUS, BulkActionKind.COMMENT])
def test_a_preparer_and_above_work_exceptions_a_viewer_does_not(action):
    verb = {"assign": "assigning an exception", "status": "changing an exception's status",
            "comment": "commenting on an exception"}[action.value]
    assert refusal(Role.VIEWER, action) == f"forbidden: {verb} needs the preparer role or above; yours is viewer"
    assert all(refusal(role, action) is None for role in (Role.PREPARER, Role.APPROVER, Role.ADMIN))


@pytest.mark.parametrize("action", [BulkActionKind.CONFIRM, BulkActionKind.REJECT])
def test_confirming_and_rejecting_a_match_are_an_approvers_as_the_single_routes_are(action):
    from chalicelib.api.route_roles import ROUTE_ROLES

    single = {BulkActionKind.CONFIRM: ("POST", "/v1/reconciliation_matches/{id}/confirm"),
              BulkActionKind.REJECT: ("DELETE", "/v1/reconciliation_matches/{id}")}[action]
    assert ROUTE_ROLES[single] is Role.APPROVER
    assert refusal(Role.PREPARER, action) is not None and "needs the approver role" in refusal(Role.PREPARER, action)
    assert refusal(Role.APPROVER, action) is None and refusal(Role.ADMIN, action) is None


def test_the_role_of_each_exception_action_is_its_single_routes():
    from chalicelib.api.route_roles import ROUTE_ROLES
    from chalicelib.domain.bulk_actions import ROLE_NEEDED

    assert ROLE_NEEDED[BulkActionKind.STATUS] is ROUTE_ROLES[("PATCH", "/v1/reconciliation_exceptions/{id}")]
    assert ROLE_NEEDED[BulkActionKind.ASSIGN] is ROUTE_ROLES[("POST", "/v1/reconciliation_exceptions/{id}/assignees")]
    assert ROLE_NEEDED[BulkActionKind.COMMENT] is ROUTE_ROLES[("POST", "/v1/reconciliation_exceptions/{id}/comments")]


def test_ids_are_one_to_a_thousand_none_repeated():
    assert check_ids([1]) == [] and check_ids(list(range(1, 1001))) == []
    assert check_ids([]) == ["must hold 1 to 1000 ids"]
    assert check_ids(list(range(1, 1002))) == ["must hold 1 to 1000 ids"]
    assert check_ids([5, 6, 5]) == ["ids[2]: 5 is repeated"]


def test_a_filter_selects_at_most_the_cap():
    assert over_cap(MAX_FILTERED, "exceptions") is None
    assert over_cap(MAX_FILTERED + 1, "exceptions") == (
        "the filter selects more than 10000 exceptions; a bulk action takes at most 10000: narrow the filter")


def test_chunks_cover_every_item_once():
    total = 2 * CHUNK_ITEMS + 7
    covered = [i for chunk in range(-(-total // CHUNK_ITEMS)) for i in chunk_range(chunk, total)]
    assert covered == list(range(total))


def action(**fields) -> BulkAction:
    return BulkAction(**{"environment": "acme", "id": 1, "target": BulkTarget.EXCEPTIONS,
                         "action": BulkActionKind.COMMENT, "params": {}, "status": BulkStatus.PROCESSING,
                         "total_items": 250, "created_at": utc_now(), "actor": "user:1", "role": Role.PREPARER,
                         **fields})


def test_counts_progress_and_the_comment_id_of_each_item():
    results = [ItemResult(0, 1, ItemStatus.SUCCEEDED), ItemResult(1, 2, ItemStatus.FAILED, "x"),
               ItemResult(2, 3, ItemStatus.SKIPPED, "y"), ItemResult(3, 4, ItemStatus.SUCCEEDED)]
    assert counts(results) == (2, 1, 1)
    working = action(succeeded_items=100, failed_items=20, skipped_items=5)
    assert working.processed_items == 125 and working.progress == 50 and working.chunk_count == 3
    assert action(status=BulkStatus.COMPLETED, total_items=0).progress == 100
    assert action(first_comment_id=40).comment_id(7) == 47  # the same id on every retry of item 7
    with pytest.raises(ValueError):
        action().comment_id(0)


def test_completed_and_failed_are_final():
    assert BULK_STATUSES.finished == {BulkStatus.COMPLETED, BulkStatus.FAILED}
    assert not BULK_STATUSES.can_move(BulkStatus.PROCESSING, BulkStatus.PENDING)
