"""One pending approval per action and target: a manual match's target is its records and the shares
it takes of them, so a request for other shares of the same records is another approval."""
from chalicelib.domain.approvals import ApprovalAction
from chalicelib.services.approvals import dedupe_key

MATCH = ApprovalAction.MANUAL_MATCH


def test_the_same_records_in_any_order_are_one_target():
    assert dedupe_key(MATCH, 4, {"record_ids": [3, 1, 2]}, None) == dedupe_key(MATCH, 4, {"record_ids": [1, 2, 3]},
                                                                             None)
    assert dedupe_key(MATCH, 4, {"record_ids": [1, 2]}, None) != dedupe_key(MATCH, 5, {"record_ids": [1, 2]}, None)


def test_other_shares_of_the_same_records_are_another_target():
    whole = dedupe_key(MATCH, 4, {"record_ids": [1, 2]}, None)
    share = dedupe_key(MATCH, 4, {"record_ids": [1, 2], "allocations": [[2, 400]]}, None)
    assert len({whole, share, dedupe_key(MATCH, 4, {"record_ids": [1, 2], "allocations": [[2, 500]]}, None)}) == 3
    assert share == dedupe_key(MATCH, 4, {"record_ids": [2, 1], "allocations": [[2, 400]]}, None)


def test_a_resource_acted_on_is_its_own_target():
    assert dedupe_key(ApprovalAction.UNMATCH, 4, {}, ("match", 9)) == "unmatch#match#9"
