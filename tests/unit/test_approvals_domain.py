"""The rules of four-eyes approvals (domain/approvals.py): when an action waits, how its amount is
measured, who may decide, the status table and the events."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.domain.approvals import (
    APPROVAL_STATUSES,
    Amount,
    Approval,
    ApprovalAction,
    ApprovalPolicy,
    ApprovalStatus,
    amount_of_exception,
    amount_of_sides,
    approval_decided,
    approval_requested,
    check_decider,
    check_policy,
)
from chalicelib.domain.errors import Forbidden
from chalicelib.domain.records import Direction, Record, RecordStatus

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def rec(amount: int, direction: str = "credit", decimal_places: int = 2, currency: str = "USD") -> Record:
    return Record(environment="acme", id=amount, data_stream_key="bank", data_stream_id=1, date="2026-11-01",
                  amount=amount, direction=Direction(direction), currency=currency, decimal_places=decimal_places,
                  status=RecordStatus.UNRECONCILED, created_at=NOW)


def approval(**fields) -> Approval:
    values = dict(environment="acme", id=7, reconciliation_id=1, action=ApprovalAction.MANUAL_MATCH, params={},
                  description="Match 2 records by hand", amount=5001, amount_decimal_places=2, currency="USD",
                  threshold=5000, threshold_decimal_places=2, status=ApprovalStatus.PENDING,
                  requested_by="user:1", requested_at=NOW, expires_at=NOW + timedelta(hours=1))
    values.update(fields)
    return Approval(**values)


def usd(minor: int, places: int = 2) -> list[Amount]:
    return [Amount(minor, places, "USD")]


def waits(policy: ApprovalPolicy, action: ApprovalAction, amounts: list[Amount]) -> bool:
    return policy.holding(action, amounts) is not None


def test_an_action_waits_only_when_listed_and_strictly_above_the_threshold():
    policy = ApprovalPolicy("acme", 1, actions=frozenset({ApprovalAction.DISMISSAL}), thresholds={"*": 5000})
    assert policy.holding(ApprovalAction.DISMISSAL, usd(5001)) == (Amount(5001, 2, "USD"), 5000)
    assert not waits(policy, ApprovalAction.DISMISSAL, usd(5000))  # at the threshold: through
    assert not waits(policy, ApprovalAction.MANUAL_MATCH, usd(10 ** 9))  # not listed
    assert not waits(ApprovalPolicy("acme", 1), ApprovalAction.UNMATCH, usd(10 ** 9))  # the default


def test_a_policy_holding_manual_matches_holds_accepted_investigations_too():
    """An accept makes a manual match whose gate the accept opens: listing either holds it."""
    matches_only = ApprovalPolicy("acme", 1, actions=frozenset({ApprovalAction.MANUAL_MATCH}), thresholds={"*": 5000})
    assert waits(matches_only, ApprovalAction.ACCEPT_INVESTIGATION, usd(5001))
    assert not waits(matches_only, ApprovalAction.ACCEPT_INVESTIGATION, usd(5000))
    accepts_only = ApprovalPolicy("acme", 1, actions=frozenset({ApprovalAction.ACCEPT_INVESTIGATION}))
    assert waits(accepts_only, ApprovalAction.ACCEPT_INVESTIGATION, usd(1))
    assert not waits(accepts_only, ApprovalAction.MANUAL_MATCH, usd(10 ** 9))  # not the other way round


def test_the_threshold_is_compared_exactly_across_decimal_places():
    policy = ApprovalPolicy("acme", 1, actions=frozenset(ApprovalAction), thresholds={"*": 50},
                            threshold_decimal_places=0)
    assert not waits(policy, ApprovalAction.UNMATCH, amount_of_sides([rec(50000, decimal_places=3)]))
    assert waits(policy, ApprovalAction.UNMATCH, amount_of_sides([rec(50001, decimal_places=3)]))


def test_thresholds_are_per_currency_and_a_currency_without_one_waits():
    policy = ApprovalPolicy("acme", 1, actions=frozenset(ApprovalAction),
                            thresholds={"USD": 100000, "JPY": 10000000})  # 1,000.00 USD; 100,000 JPY
    assert not waits(policy, ApprovalAction.UNMATCH, [Amount(50000, 0, "JPY")])  # 50,000 JPY: through
    assert waits(policy, ApprovalAction.UNMATCH, [Amount(100001, 0, "JPY")])
    assert not waits(policy, ApprovalAction.UNMATCH, usd(100000))
    assert policy.holding(ApprovalAction.UNMATCH, [Amount(1, 2, "EUR")]) == (Amount(1, 2, "EUR"), None)
    assert policy.holding(ApprovalAction.UNMATCH, [Amount(1, 2, None)]) == (Amount(1, 2, None), None)
    # Several currencies: each against its own; the one furthest above (or without a threshold) is named
    both = [Amount(90000, 2, "USD"), Amount(90000, 0, "JPY")]
    assert not waits(policy, ApprovalAction.UNMATCH, both)  # never 900 USD + 90,000 JPY added
    assert policy.holding(ApprovalAction.UNMATCH, [Amount(200001, 2, "USD"), Amount(100001, 0, "JPY")])[0].currency \
        == "USD"
    assert policy.holding(ApprovalAction.UNMATCH, [Amount(10 ** 9, 2, "USD"), Amount(1, 2, "EUR")])[1] is None
    # "*" covers the currencies not named
    fallback = ApprovalPolicy("acme", 1, actions=frozenset(ApprovalAction), thresholds={"USD": 100, "*": 5000})
    assert (fallback.threshold, fallback.threshold_of("EUR"), fallback.threshold_of("USD")) == (5000, 5000, 100)
    assert not waits(fallback, ApprovalAction.UNMATCH, [Amount(5000, 2, "EUR")])


def test_the_amount_is_the_larger_gross_side_whatever_the_directions_per_currency():
    side_a = [rec(3000), rec(2001, "debit")]  # nets 9.99; gross 50.01
    side_b = [rec(5001)]
    assert amount_of_sides(side_a, side_b) == [Amount(5001, 2, "USD")]
    assert amount_of_sides([rec(100, decimal_places=0)], [rec(1, decimal_places=3)]) == [Amount(100_000, 3, "USD")]
    assert amount_of_sides([rec(1, currency="USD"), rec(7, currency="EUR")], [rec(2, currency="EUR")]) == [
        Amount(7, 2, "EUR"), Amount(1, 2, "USD")]
    assert amount_of_sides([], []) == []


def test_an_exceptions_amount_is_its_records_gross_total():
    totals = {"credit_sum": 2500, "debit_sum": 1500, "record_count": 2}
    assert amount_of_exception(totals, 2, "USD") == [Amount(4000, 2, "USD")]
    assert amount_of_exception({}, 2, None)[0].minor == 0


def test_a_policys_numbers_are_checked():
    assert check_policy({"*": 0, "USD": 5}, 2, 60) == []
    assert [field for field, _ in check_policy({"usd": 1, "EUR": -1}, 9, 0)] == [
        "thresholds.usd", "thresholds.EUR", "threshold_decimal_places", "expires_after_minutes"]
    assert check_policy({}, 2, 30 * 24 * 60 + 1)[0][0] == "expires_after_minutes"


def test_only_another_person_decides():
    pending = approval()
    check_decider(pending, "user:2", "approving")
    with pytest.raises(Forbidden, match="another approver or admin"):
        check_decider(pending, "user:1", "approving")
    with pytest.raises(Forbidden, match="a person's decision"):
        check_decider(pending, "api_key:3", "rejecting")
    with pytest.raises(Forbidden, match="a person's decision"):  # a key's own request: still no key decides
        check_decider(approval(requested_by="api_key:3"), "api_key:3", "approving")
    check_decider(approval(requested_by="api_key:3"), "user:1", "approving")


def test_the_status_table():
    assert APPROVAL_STATUSES.sources_of(ApprovalStatus.EXECUTING) == (ApprovalStatus.PENDING,)
    assert APPROVAL_STATUSES.sources_of(ApprovalStatus.APPROVED) == (ApprovalStatus.EXECUTING,)
    assert APPROVAL_STATUSES.sources_of(ApprovalStatus.EXPIRED) == (ApprovalStatus.PENDING,)
    assert APPROVAL_STATUSES.finished == {ApprovalStatus.APPROVED, ApprovalStatus.FAILED, ApprovalStatus.REJECTED,
                                          ApprovalStatus.EXPIRED}


def test_a_pending_approval_is_overdue_from_its_expiry_on():
    pending = approval()
    assert not pending.overdue(NOW + timedelta(minutes=59))
    assert pending.overdue(NOW + timedelta(hours=1))
    assert not approval(status=ApprovalStatus.REJECTED).overdue(NOW + timedelta(days=1))


def test_each_end_tells_its_event_with_a_stable_id():
    requested = approval_requested(approval())
    assert requested.type == "approval.requested" and requested.data["url"] == "/v1/approvals/7"
    approved = approval_decided(approval(status=ApprovalStatus.APPROVED, completed_at=NOW))
    failed = approval_decided(approval(status=ApprovalStatus.FAILED, failure_reason="matched elsewhere"))
    assert approved.type == failed.type == "approval.approved" and failed.data["status"] == "failed"
    assert approval_decided(approval(status=ApprovalStatus.REJECTED)).type == "approval.rejected"
    assert approval_decided(approval(status=ApprovalStatus.EXPIRED)).type == "approval.expired"
    assert approval_decided(approval(status=ApprovalStatus.EXPIRED)).id == \
        approval_decided(approval(status=ApprovalStatus.EXPIRED, completed_at=NOW)).id
