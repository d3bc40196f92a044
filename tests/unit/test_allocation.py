"""Partial payments (domain/allocation.py): no cent lost or created, whatever the order of shares
taken and given back."""
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain.allocation import (
    AllocationRefused,
    Coverage,
    allocate_in_order,
    coverage_of,
    plan_shares,
    share_difference,
)
from chalicelib.domain.errors import ValidationFailed
from chalicelib.domain.records import Direction, Record, RecordStatus

AMOUNTS = st.integers(min_value=0, max_value=10 ** 15)


def a_record(record_id, amount, direction=Direction.DEBIT, decimal_places=2, allocations=None):
    return Record(environment="test", id=record_id, data_stream_key="s", data_stream_id=1, date="2026-11-02",
                  amount=amount, direction=direction, currency="USD", decimal_places=decimal_places,
                  status=RecordStatus.UNRECONCILED, created_at=datetime(2026, 11, 2, tzinfo=UTC),
                  allocations=allocations or {})


# A step: take a share (match id, share) or give back a match's share (match id, None).
STEPS = st.lists(st.tuples(st.integers(1, 8), st.one_of(st.none(), st.integers(-5, 10 ** 15))), max_size=40)


@settings(max_examples=300, deadline=None)
@given(amount=AMOUNTS, steps=STEPS)
def test_shares_never_exceed_the_amount_and_a_release_gives_back_exactly_its_share(amount, steps):
    coverage = Coverage(amount)
    given_back = taken = 0
    for match_id, share in steps:
        before = coverage
        if share is None:
            coverage, back = coverage.release(match_id)
            assert back == before.shares.get(match_id, 0)
            given_back += back
        else:
            try:
                coverage = coverage.allocate(match_id, share)
                taken += share
            except AllocationRefused:
                assert share <= 0 or share > before.remaining or match_id in before.shares
                assert coverage == before
        assert 0 <= coverage.allocated <= amount
        assert coverage.remaining == amount - coverage.allocated
        assert coverage.allocated == taken - given_back  # nothing lost, nothing made
        assert all(s > 0 for s in coverage.shares.values())


@given(amount=st.integers(1, 10 ** 12), shares=st.lists(st.integers(1, 10 ** 6), min_size=1, max_size=10))
def test_a_share_is_taken_only_while_it_fits_and_releasing_all_restores_the_record(amount, shares):
    coverage = Coverage(amount)
    for match_id, share in enumerate(shares, start=1):
        if share <= coverage.remaining:
            coverage = coverage.allocate(match_id, share)
        else:
            with pytest.raises(AllocationRefused):
                coverage.allocate(match_id, share)
    for match_id in list(coverage.shares):
        coverage, _ = coverage.release(match_id)
    assert coverage == Coverage(amount) and coverage.remaining == amount


def test_a_match_holds_one_share_of_a_record():
    coverage = Coverage(1000).allocate(7, 400)
    with pytest.raises(AllocationRefused, match="already holds 400"):
        coverage.allocate(7, 100)
    with pytest.raises(AllocationRefused, match="only 600 of 1000 left"):
        coverage.allocate(8, 601)
    assert coverage.allocate(8, 600).remaining == 0


def test_stored_shares_are_checked_as_they_are_read():
    with pytest.raises(AllocationRefused):
        Coverage(100, {1: 60, 2: 50})
    with pytest.raises(AllocationRefused):
        Coverage(100, {1: 0})


def test_a_record_stored_before_partial_payments_reads_as_open_or_allocated_whole():
    old = a_record(1, 1000)
    assert coverage_of(old, 5).remaining == 1000
    assert coverage_of(old, 5, holder=9) == Coverage(1000, {9: 1000})
    paid_in_part = a_record(1, 1000, allocations={5: {9: 300, 11: 200}})
    assert coverage_of(paid_in_part, 5).remaining == 500 and coverage_of(paid_in_part, 6).remaining == 1000


def test_a_persons_shares_default_to_what_each_record_has_left():
    invoice, payment = a_record(1, 1000), a_record(2, 400, Direction.CREDIT)
    shares = plan_shares([(invoice, 1000), (payment, 400)], {1: 400})
    assert [(s.record_id, s.amount, s.whole) for s in shares] == [(1, 400, False), (2, 400, True)]
    rest = plan_shares([(invoice, 600), (a_record(3, 600, Direction.CREDIT), 600)], {})
    assert [(s.record_id, s.amount, s.whole) for s in rest] == [(1, 600, False), (3, 600, True)]


@pytest.mark.parametrize("asked, field", [({1: 1001}, "allocations[0].amount"), ({1: 0}, "allocations[0].amount"),
                                          ({3: 10}, "allocations[0].record_id")])
def test_a_share_above_what_is_left_or_of_another_record_is_refused(asked, field):
    with pytest.raises(ValidationFailed) as refused:
        plan_shares([(a_record(1, 1000), 1000), (a_record(2, 400), 400)], asked)
    assert refused.value.errors[0].field == field


@given(a=st.lists(st.tuples(st.integers(0, 10 ** 9), st.integers(0, 3)), min_size=1, max_size=5),
       b=st.lists(st.tuples(st.integers(0, 10 ** 9), st.integers(0, 3)), min_size=1, max_size=5))
def test_the_balance_of_shares_is_exact_across_decimal_places(a, b):
    side_a = [(a_record(n, s, Direction.CREDIT, p), s) for n, (s, p) in enumerate(a)]
    side_b = [(a_record(100 + n, s, Direction.DEBIT, p), s) for n, (s, p) in enumerate(b)]
    total_a, total_b, difference = share_difference(side_a, side_b)
    scale = max(p for _, p in a + b)
    assert total_a == sum(s * 10 ** (scale - p) for s, p in a)
    assert total_b == -sum(s * 10 ** (scale - p) for s, p in b)
    assert difference == abs(total_a + total_b)


@given(remaining=st.integers(0, 10 ** 9), offers=st.lists(st.integers(-3, 10 ** 8), max_size=20))
def test_a_rule_allocates_in_order_never_more_than_is_left(remaining, offers):
    taken, left = allocate_in_order(remaining, enumerate(offers))
    assert sum(amount for _, amount in taken) + left == remaining and left >= 0
    assert [amount for _, amount in taken] == offers[:len(taken)]
    assert all(amount > 0 for _, amount in taken)
