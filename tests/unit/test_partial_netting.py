"""Issue 37 point 3, the partial pass's direction and netting (domain/matching/partial.py,
domain/allocation.allocate_netted): the payments' direction follows the one record (and the rule's
direction condition), refunds are netted signed, no share is ever zero, negative or above what the
one record has left, every partial match balances as a person's match must, and a partition plan
says when the pass cannot run inside its partitions."""
from datetime import UTC, date, datetime, timedelta

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain.allocation import allocate_netted, share_difference
from chalicelib.domain.matching.outcome import MATCH_SCHEMA, MEMBER_SCHEMA, MatchOutcome
from chalicelib.domain.matching.partial import (
    nets_refunds,
    payment_direction,
    skipped_in_partitions,
    with_partial_matches,
)
from chalicelib.domain.matching.partition import BlockingKey, PartitionPlan, plan_partitions
from chalicelib.domain.records import Direction, Record, RecordStatus
from chalicelib.domain.rules import Condition, Operator, Rule, validate_rule

DAY = date(2026, 11, 1)


def partial_rule(*conditions, rule_id=7, cardinality="many_to_one"):
    return Rule(environment="test", id=rule_id, reconciliation_id=1, created_at=None, definition=validate_rule({
        "name": "Instalments", "cardinality": cardinality, "allocation": "partial",
        "conditions": [{"field": "description", "operator": "equals"}, *conditions]}))


NETTING = partial_rule()
SAME_SIGN = partial_rule({"field": "direction", "operator": "equals"})
MIRROR = partial_rule({"field": "direction", "operator": "opposite"})


def frame(rows):
    """rows: (id, amount, direction, description, day offset)."""
    return pl.DataFrame([{"id": i, "amount": amount, "currency": "USD", "decimal_places": 2,
                          "date": DAY + timedelta(days=day), "direction": direction, "description": text,
                          "external_id": None} for i, amount, direction, text, day in rows],
                        schema={"id": pl.Int64, "amount": pl.Int64, "currency": pl.Utf8, "decimal_places": pl.Int64,
                                "date": pl.Date, "direction": pl.Utf8, "description": pl.Utf8,
                                "external_id": pl.Utf8})


def empty_outcome(side_a, side_b):
    return MatchOutcome(matches=pl.DataFrame(schema=MATCH_SCHEMA), members=pl.DataFrame(schema=MEMBER_SCHEMA),
                        rule_summary={"unmatched": {"side_a": side_a.height, "side_b": side_b.height}},
                        unmatched_a=side_a["id"], unmatched_b=side_b["id"])


def partial_matches(side_a, side_b, rules, allocated=None):
    """{one record: (its share, None when taken whole; the many records, ids ascending)}."""
    outcome = with_partial_matches(empty_outcome(side_a, side_b), side_a, side_b, rules, allocated or {})
    found = {}
    for match_no in outcome.matches["match_no"].to_list():
        rows = outcome.members.filter(pl.col("match_no") == match_no)
        [(one, share)] = rows.filter(pl.col("side") == "b").select("record_id", "share").rows()
        found[one] = (share, sorted(rows.filter(pl.col("side") == "a")["record_id"].to_list()))
    return found


# Point 1: the payments' direction ------------------------------------------------------------------

def test_the_payments_direction_follows_the_one_record_and_the_rules_direction_condition():
    assert payment_direction(NETTING, "debit") == "credit" and payment_direction(NETTING, "credit") == "debit"
    assert payment_direction(MIRROR, "debit") == "credit"
    assert payment_direction(SAME_SIGN, "debit") == "debit" and payment_direction(SAME_SIGN, "credit") == "credit"
    assert nets_refunds(NETTING) and not nets_refunds(MIRROR) and not nets_refunds(SAME_SIGN)


def test_a_refund_dated_before_the_payments_is_never_taken_as_a_payment():
    # An invoice (a debit) paid by credits; a debit of the same reference, dated first, is a refund.
    # Before: the first candidate's direction (the refund's) decided, and the refund paid the invoice.
    side_b = frame([(100, 1000, "debit", "INV-1", 0)])
    side_a = frame([(1, 100, "debit", "INV-1", 1), (2, 300, "credit", "INV-1", 2), (3, 200, "credit", "INV-1", 3)])

    assert partial_matches(side_a, side_b, [NETTING]) == {100: (400, [1, 2, 3])}  # 300 + 200 - 100
    assert partial_matches(side_a, side_b, [MIRROR]) == {100: (500, [2, 3])}  # no netting under a condition


def test_a_refund_alone_pays_nothing():
    side_b = frame([(100, 1000, "debit", "INV-1", 0)])
    side_a = frame([(1, 300, "debit", "INV-1", 1)])

    assert partial_matches(side_a, side_b, [NETTING]) == {}


def test_books_of_the_same_sign_take_payments_of_the_invoices_own_direction_under_direction_equals():
    side_b = frame([(100, 1000, "debit", "INV-1", 0)])
    side_a = frame([(1, 300, "credit", "INV-1", 1), (2, 400, "debit", "INV-1", 2), (3, 100, "debit", "INV-1", 3)])

    assert partial_matches(side_a, side_b, [SAME_SIGN]) == {100: (500, [2, 3])}


def test_one_to_many_takes_the_one_record_on_side_a():
    rule = partial_rule(cardinality="one_to_many")
    side_a = frame([(1, 1000, "credit", "PAYOUT-1", 0)])
    side_b = frame([(100, 700, "debit", "PAYOUT-1", 0), (101, 200, "credit", "PAYOUT-1", 1),
                    (102, 300, "debit", "PAYOUT-1", 2)])

    outcome = with_partial_matches(empty_outcome(side_a, side_b), side_a, side_b, [rule], {})

    members = outcome.members.sort("side", "record_id")
    assert members.select("side", "record_id", "share").rows() == [
        ("a", 1, 800), ("b", 100, None), ("b", 101, None), ("b", 102, None)]  # 700 - 200 + 300


# Point 2: netting -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("offers", "remaining", "taken", "left"), [
    ([(1, 600, False), (2, 100, True), (3, 600, False)], 1000, [(1, 600), (2, -100)], 500),  # 3 would overpay
    ([(1, 300, False), (2, 400, True)], 1000, [(1, 300)], 700),  # the refund would leave -100: left open
    ([(1, 200, True), (2, 100, False)], 1000, [], 1000),  # never positive: nothing taken
    ([(1, 600, False), (2, 100, True)], 500, [(1, 600), (2, -100)], 0),  # a payout net of its refund
    ([(1, 300, False), (2, 0, False), (3, 200, False)], 1000, [(1, 300)], 700),  # no amount ends it
    ([(1, 600, False), (2, 600, False), (3, 300, True), (4, 300, True)], 1000,
     [(1, 600), (2, -0 + 600), (3, -300), (4, -300)], 400),
    ([], 1000, [], 1000),
    ([(1, 1, False)], 0, [], 0),
])
def test_netting_takes_the_longest_start_whose_net_is_positive_and_fits(offers, remaining, taken, left):
    assert allocate_netted(remaining, offers) == (taken, left)


OFFERS = st.lists(st.tuples(st.integers(0, 10 ** 6), st.booleans()), max_size=25)


@settings(max_examples=400, deadline=None)
@given(remaining=st.integers(0, 3 * 10 ** 6), offers=OFFERS)
def test_netting_never_allocates_more_than_is_left_nor_a_share_of_zero_or_less(remaining, offers):
    listed = [(n, amount, refund) for n, (amount, refund) in enumerate(offers)]

    taken, left = allocate_netted(remaining, listed)

    net = sum(signed for _, signed in taken)
    assert net + left == remaining  # no cent lost or created
    assert (0 < net <= remaining) if taken else net == 0
    assert [n for n, _ in taken] == list(range(len(taken)))  # a start of the offers, in their order
    assert all(signed == (-amount if refund else amount) and amount > 0
               for (_, signed), (_, amount, refund) in zip(taken, listed, strict=False))
    # the longest such start: no longer one, before a record of no amount, fits
    usable = next((n for n, (_, amount, _) in enumerate(listed) if amount <= 0), len(listed))
    for end in range(len(taken) + 1, usable + 1):
        longer = sum(-a if r else a for _, a, r in listed[:end])
        assert not 0 < longer <= remaining


def a_record(record_id, amount, direction):
    return Record(environment="test", id=record_id, data_stream_key="s", data_stream_id=1, date="2026-11-02",
                  amount=amount, direction=Direction(direction), currency="USD", decimal_places=2,
                  status=RecordStatus.UNRECONCILED, created_at=datetime(2026, 11, 2, tzinfo=UTC))


INVOICES = st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 4999), st.sampled_from(["debit", "credit"])),
                    min_size=1, max_size=4)
PAYMENTS = st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3), st.booleans(), st.integers(0, 20)),
                    max_size=14)


@settings(max_examples=200, deadline=None)
@given(invoices=INVOICES, payments=PAYMENTS, rule=st.sampled_from([NETTING, MIRROR, SAME_SIGN]))
def test_partial_matches_with_refunds_balance_and_never_overpay(invoices, payments, rule):
    # Two invoices share each reference: a record offered to both is taken by one at most.
    side_b = frame([(100 + n, amount, direction, f"INV-{n // 2}", 0)
                    for n, (amount, _, direction) in enumerate(invoices)])
    # Each record pays (or refunds) an invoice: its direction is the invoice's payments' or the other.
    rows = []
    for n, (amount, target, refund, day) in enumerate(payments):
        invoice = target % len(invoices)
        pays = payment_direction(rule, invoices[invoice][2])
        rows.append((n + 1, amount, ({"debit": "credit", "credit": "debit"}[pays] if refund else pays),
                     f"INV-{invoice // 2}", day))
    side_a = frame(rows)
    allocated = {100 + n: min(paid, amount - 1) for n, (amount, paid, _) in enumerate(invoices) if min(paid, amount - 1)}

    outcome = with_partial_matches(empty_outcome(side_a, side_b), side_a, side_b, [rule], allocated)

    members = outcome.members
    assert members["record_id"].n_unique() == members.height  # a record in one match at most
    records = {r[0]: a_record(r[0], r[1], r[2]) for r in rows} | {
        100 + n: a_record(100 + n, amount, direction) for n, (amount, _, direction) in enumerate(invoices)}
    for match_no in outcome.matches["match_no"].to_list():
        of_match = members.filter(pl.col("match_no") == match_no)
        [(invoice, share)] = of_match.filter(pl.col("side") == "b").select("record_id", "share").rows()
        many = [records[r] for r in of_match.filter(pl.col("side") == "a")["record_id"].to_list()]
        left = records[invoice].amount - allocated.get(invoice, 0)
        taken = left if share is None else share
        assert 0 < taken <= left  # never a share of zero or less, never above what the invoice has left
        assert share is not None or (invoice not in allocated and taken == left)
        pays = payment_direction(rule, records[invoice].direction.value)
        assert rule is NETTING or all(r.direction.value == pays for r in many)
        assert sum(r.amount if r.direction.value == pays else -r.amount for r in many) == taken  # no cent lost
        # it balances as a person's match must (signed by direction, a mirror image balancing too)
        assert share_difference(((r, r.amount) for r in many), [(records[invoice], taken)])[2] == 0
    assert outcome.rule_summary["unmatched"]["side_a"] + members.filter(pl.col("side") == "a").height == side_a.height


@settings(max_examples=150, deadline=None)
@given(invoices=st.lists(st.integers(1, 5000), min_size=1, max_size=5),
       payments=st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 4), st.booleans(), st.integers(0, 9)),
                         max_size=16))
def test_the_columnar_pass_allocates_as_allocate_netted_walks_each_invoice(invoices, payments):
    # One reference an invoice: no record is offered to two, so the pass allocates in columns.
    side_b = frame([(100 + n, amount, "debit", f"INV-{n}", 0) for n, amount in enumerate(invoices)])
    side_a = frame([(n + 1, amount, "debit" if refund else "credit", f"INV-{target % len(invoices)}", day)
                    for n, (amount, target, refund, day) in enumerate(payments)])

    found = partial_matches(side_a, side_b, [NETTING])

    for n, amount in enumerate(invoices):
        offers = sorted((day, i, a, refund) for i, (a, target, refund, day) in enumerate(payments, start=1)
                        if target % len(invoices) == n)
        taken, left = allocate_netted(amount, [(i, a, refund) for _, i, a, refund in offers])
        expected = (None if left == 0 else amount - left, sorted(i for i, _ in taken)) if taken else None
        assert found.get(100 + n) == expected


# Point 4: partitions -----------------------------------------------------------------------------------

WHOLE = Rule(environment="test", id=3, reconciliation_id=1, created_at=None, definition=validate_rule({
    "name": "Same reference", "cardinality": "one_to_one", "priority": 1,
    "conditions": [{"field": "description", "operator": "equals"}, {"field": "amount", "operator": "equals"}]}))


def test_a_hash_plan_on_the_partial_rules_own_condition_lets_its_pass_run_in_each_partition():
    plan = plan_partitions([WHOLE, NETTING], 4)

    assert plan.keys and skipped_in_partitions([WHOLE, NETTING], plan) == {}


def test_a_plan_on_a_key_the_partial_pass_does_not_apply_skips_it_and_says_why():
    by_reference = PartitionPlan(4, keys=(BlockingKey.of(Condition("external_id", Operator.EQUALS)),))
    by_date = PartitionPlan(3, axis="date", cuts=(10, 20), days=2)

    [reason] = skipped_in_partitions([WHOLE, NETTING], by_reference).values()
    assert "external_id" in reason and "rule 7" in reason
    assert "date ranges" in skipped_in_partitions([NETTING], by_date)["7"]
    assert skipped_in_partitions([WHOLE], by_reference) == {}  # no partial rule: nothing to say
