"""Tracing a record through a story (services/story_trace.py) on the fakes: a 3-link story
orders -> charges -> payouts -> bank, followed back, forward and both ways from a shared stream;
breaks (unmatched, exception, proposed) and the caps."""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.errors import NotFound, ValidationFailed
from chalicelib.domain.matches import MatchStatus
from chalicelib.domain.stories import LinkInput
from chalicelib.domain.story_trace import BreakReason, TraceDirection
from chalicelib.domain.tallies import CurrencyAmounts
from chalicelib.services import stories
from chalicelib.services.reconciliation_rules import create_rule
from chalicelib.services.story_trace import TraceBounds, trace_record
from tests.services.conftest import ENV, matched_by_a_run, new_reconciliation, record, streams
from tests.support.crashes import Replaced

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}


class Chain:
    """Streams orders, charges, payouts, bank, other; R1 orders/charges, R2 charges/payouts, R3
    payouts/bank, chained in a story (links 1, 2, 3 sharing charges, then payouts)."""

    def __init__(self, ports, ingest):
        self.ports, self.ingest, self.serial = ports, ingest, 0
        streams(ports, "orders", "charges", "payouts", "bank", "other")
        self.recons = [new_reconciliation(ports, name=f"R{n} {a} to {b}", side_a=(a,), side_b=(b,))
                       for n, (a, b) in enumerate((("orders", "charges"), ("charges", "payouts"),
                                                   ("payouts", "bank")), start=1)]
        self.rules = [create_rule(ports, ENV, r.id, RULE) for r in self.recons]
        shared = [None, ports.data_streams.get(ENV, "charges").id, ports.data_streams.get(ENV, "payouts").id]
        self.story = stories.create_story(ports, ENV, name="Order to cash", links=[
            LinkInput(index=n, reconciliation_id=r.id, position=n + 1, shared_data_stream_id=shared[n])
            for n, r in enumerate(self.recons)])

    def records(self, stream: str, *amounts: int, **fields) -> list[int]:
        items = []
        for amount in amounts:
            self.serial += 1
            items.append(record(stream, self.serial, amount, **fields))
        return self.ingest(*items)

    def match(self, link: int, side_a: list[int], side_b: list[int], status=MatchStatus.CONFIRMED) -> int:
        return matched_by_a_run(self.ports, self.recons[link - 1], self.rules[link - 1], side_a, side_b, status).id

    def paid_orders(self, count: int, amount: int = 1000) -> tuple[list[int], list[int], list[int]]:
        """`count` orders each matched to its charge (link 1), all the charges in one payout (link 2);
        returns the orders, the charges and [payout]."""
        orders = self.records("orders", *[amount] * count)
        charges = self.records("charges", *[amount] * count)
        for order, charge in zip(orders, charges, strict=True):
            self.match(1, [order], [charge])
        payout = self.records("payouts", amount * count)
        self.match(2, charges, payout)
        return orders, charges, payout

    def trace(self, record_id: int, ports=None, **bounds):
        """The trace from `record_id`, on the chain's ports or on `ports` (some of them replaced)."""
        return trace_record(ports or self.ports, ENV, self.story.id, record_id, TraceBounds(**bounds))


@pytest.fixture
def chain(ports, ingest) -> Chain:
    return Chain(ports, ingest)


def shape(hop) -> tuple:
    """(position, direction, via stream name, match id or break reason, record ids shown, next shapes)."""
    what = hop.match.id if hop.match else hop.break_.reason.value
    return (hop.link.position, hop.direction.value, hop.via_data_stream.name if hop.via_data_stream else None, what,
            sorted(r.id for r in hop.records.data), [shape(child) for child in hop.next])


def match_of(chain, link: int, record_id: int) -> int:
    return chain.ports.claims.held_records(ENV, [record_id])[0].match_in(chain.recons[link - 1].id)


def test_from_a_bank_deposit_back_to_every_order(chain):
    orders, charges, [payout] = chain.paid_orders(3)
    [deposit] = chain.records("bank", 3000)
    deposit_match = chain.match(3, [payout], [deposit])

    trace = chain.trace(deposit)

    assert trace.record.id == deposit and not trace.truncated and trace.breaks == ()
    [start] = trace.hops
    assert start.link.reconciliation_name == "R3 payouts to bank" and start.link.role == "continuation"
    assert shape(start) == (3, "start", None, deposit_match, [payout, deposit], [
        (2, "upstream", "Payouts", match_of(chain, 2, payout), sorted(charges + [payout]), [
            (1, "upstream", "Charges", match_of(chain, 1, charge), [order, charge], [])
            for order, charge in zip(orders, charges, strict=True)])])
    payout_hop = start.next[0]
    assert payout_hop.match.record_count == 4 and payout_hop.match.reconciliation_rule_id == chain.rules[1].id
    assert payout_hop.records.data[0].id == payout  # the record it came in by first
    assert payout_hop.records.totals == (CurrencyAmounts("USD", 4, 6000, 0, 2),)


def test_from_an_order_forward_to_the_bank(chain):
    orders, charges, [payout] = chain.paid_orders(3)
    [deposit] = chain.records("bank", 3000)
    chain.match(3, [payout], [deposit])

    [start] = chain.trace(orders[1]).hops

    # Forward only: the payout's other charges are not followed back to their orders.
    assert shape(start) == (1, "start", None, match_of(chain, 1, orders[1]), [orders[1], charges[1]], [
        (2, "downstream", "Charges", match_of(chain, 2, payout), sorted(charges + [payout]), [
            (3, "downstream", "Payouts", match_of(chain, 3, payout), [payout, deposit], [])])])
    assert start.link.role == "origin" and start.via_data_stream is None


def test_a_payout_on_a_shared_stream_starts_in_both_its_links_and_goes_outwards_from_each(chain):
    orders, charges, [payout] = chain.paid_orders(2)
    [deposit] = chain.records("bank", 2000)
    chain.match(3, [payout], [deposit])

    upstream, downstream = chain.trace(payout).hops

    assert shape(upstream) == (2, "start", None, match_of(chain, 2, payout), sorted(charges + [payout]), [
        (1, "upstream", "Charges", match_of(chain, 1, charge), [order, charge], [])
        for order, charge in zip(orders, charges, strict=True)])
    # Link 3 is the last, and link 2 is a start link too: nothing further from it.
    assert shape(downstream) == (3, "start", None, match_of(chain, 3, payout), [payout, deposit], [])


def test_an_unmatched_charge_in_the_middle_link_is_a_break_where_the_trace_stops(chain):
    [order] = chain.records("orders", 500)
    [charge] = chain.records("charges", 500)
    chain.match(1, [order], [charge])

    trace = chain.trace(order)

    [start] = trace.hops
    assert shape(start) == (1, "start", None, match_of(chain, 1, order), [order, charge], [
        (2, "downstream", "Charges", "unmatched", [charge], [])])
    [the_break] = trace.breaks
    assert (the_break.link_position, the_break.reconciliation_id, the_break.reason, the_break.match_id,
            the_break.exception_id, the_break.record_ids) == (2, chain.recons[1].id, BreakReason.UNMATCHED, None,
                                                              None, (charge,))
    assert start.next[0].match is None and start.next[0].records.count == 1


def test_a_proposed_match_is_flagged_and_followed(chain):
    orders, charges, [payout] = chain.paid_orders(1)
    [deposit] = chain.records("bank", 1000)
    proposed = chain.match(3, [payout], [deposit], MatchStatus.PROPOSED)

    trace = chain.trace(deposit)

    [start] = trace.hops
    assert (start.match.status, start.break_.reason, start.break_.exception_id) == ("proposed", BreakReason.PROPOSED,
                                                                                    None)
    assert shape(start)[5][0][5][0][4] == [orders[0], charges[0]]  # followed through it to the order
    assert [(b.reason, b.match_id, b.link_position) for b in trace.breaks] == [(BreakReason.PROPOSED, proposed, 3)]


def test_a_record_an_exception_holds_names_the_exception(chain):
    [order] = chain.records("orders", 700)
    [charge] = chain.records("charges", 700)
    chain.match(1, [order], [charge])
    assert chain.ports.exceptions.hold_record(ENV, charge, chain.recons[1].id, 77)

    trace = chain.trace(order)

    [held] = trace.hops[0].next
    assert (held.match, held.break_.reason, held.break_.exception_id) == (None, BreakReason.EXCEPTION, 77)
    assert [(b.reason, b.exception_id, b.record_ids) for b in trace.breaks] == [(BreakReason.EXCEPTION, 77, (charge,))]


def test_a_payout_of_25_charges_shows_20_records_and_counts_and_totals_all(chain):
    charges = chain.records("charges", *range(101, 126), decimal_places=2)
    [payout] = chain.records("payouts", sum(range(101, 126)))
    chain.match(2, charges, [payout])

    [start, _] = chain.trace(payout).hops

    assert len(start.records.data) == 20 and start.records.count == 26
    assert start.records.totals == (CurrencyAmounts("USD", 26, 2 * sum(range(101, 126)), 0, 2),)
    # Upstream, every charge is open in link 1: one break hop holds them all.
    [unmatched] = start.next
    assert (unmatched.break_.reason, unmatched.records.count, len(unmatched.records.data)) == (
        BreakReason.UNMATCHED, 25, 20)
    assert chain.trace(payout).breaks[0].record_ids == tuple(sorted(charges)[:20])


def test_twelve_matched_charges_upstream_show_ten_hops_breaks_first_and_summarise_the_rest(chain):
    orders = chain.records("orders", *[250] * 12)
    charges = chain.records("charges", *[250] * 12)
    for order, charge in zip(orders, charges, strict=True):
        chain.match(1, [order], [charge])
    [loose] = chain.records("charges", 40)  # paid out too, but open in link 1
    [payout] = chain.records("payouts", 3040)
    payout_match = chain.match(2, charges + [loose], [payout])

    [start, _] = chain.trace(payout).hops

    assert start.match.id == payout_match and start.records.count == 14
    assert [hop.break_.reason if hop.break_ else hop.match.id for hop in start.next] == [
        BreakReason.UNMATCHED] + [match_of(chain, 1, charge) for charge in charges[:9]]
    assert all(hop.direction is TraceDirection.UPSTREAM for hop in start.next)
    left = start.next_omitted
    assert (left.hops, left.records, left.totals) == (3, 3, (CurrencyAmounts("USD", 3, 750, 0, 2),))
    assert left.breaks == {"unmatched": 0, "proposed": 0, "exception": 0}


def test_the_budget_of_followed_hops_truncates_and_says_so(chain):
    orders, charges, [payout] = chain.paid_orders(5)

    trace = chain.trace(payout, followed_hops=4)

    start = trace.hops[0]
    assert trace.truncated and len(start.next) == 3 and start.next_omitted.hops == 2


def test_unknown_story_or_record_is_not_found_and_a_record_outside_the_story_is_422(chain, ingest):
    [order] = chain.records("orders", 1)
    [stray] = chain.records("other", 1)
    with pytest.raises(NotFound):
        trace_record(chain.ports, ENV, 999, order)
    with pytest.raises(NotFound):
        chain.trace(999_999)
    with pytest.raises(NotFound):
        trace_record(chain.ports, "globex", chain.story.id, order)
    with pytest.raises(ValidationFailed) as refused:
        chain.trace(stray)
    assert (refused.value.errors[0].field, refused.value.errors[0].message) == (
        "record_id", f"record {stray}'s data stream is not in this story")


def test_a_big_match_keeps_its_money_and_the_next_trace_reads_only_the_records_it_shows(chain):
    orders, charges, [payout] = chain.paid_orders(25, amount=120)
    [deposit] = chain.records("bank", 3000)
    chain.match(3, [payout], [deposit])
    read: list[int] = []
    held_records = chain.ports.claims.held_records
    reading = replace(chain.ports, claims=Replaced(
        chain.ports.claims, held_records=lambda environment, ids: read.extend(ids) or held_records(environment, ids)))

    first = chain.trace(orders[0], reading, keep_money_from=20)
    read_first, read[:] = len(read), []
    second = chain.trace(orders[0], reading, keep_money_from=20)

    assert second == first
    payout_hop = second.hops[0].next[0]
    assert payout_hop.records.count == 26 and payout_hop.records.totals == (CurrencyAmounts("USD", 26, 6000, 0, 2),)
    assert chain.ports.matches.members_and_money(ENV, payout_hop.match.id)[1] == {
        "USD": CurrencyAmounts("USD", 26, 6000, 0, 2)}
    # Both read the order, its charge and the deposit; the first the payout's 25 other records too, the
    # second only the 19 others it shows and the payout it goes on by.
    assert (read_first, len(read)) == (1 + 1 + 25 + 1, 1 + 1 + 20 + 1)


def test_a_trace_answers_when_keeping_a_matchs_money_fails(chain):
    orders, _, _ = chain.paid_orders(25, amount=120)

    def refuse(*_):
        raise RuntimeError("throttled")
    refusing = replace(chain.ports, matches=Replaced(chain.ports.matches, keep_money=refuse))

    payout_hop = chain.trace(orders[0], refusing, keep_money_from=20).hops[0].next[0]
    assert payout_hop.records.totals == (CurrencyAmounts("USD", 26, 6000, 0, 2),)


def test_dense_runs_of_ids_read_by_range_give_the_trace_read_by_key(chain):
    orders, charges, [payout] = chain.paid_orders(12, amount=100)
    by_key = chain.trace(payout)
    ranges: list[tuple[str, int, int]] = []
    claims, matches = chain.ports.claims, chain.ports.matches
    records_between, matches_between = claims.held_records_between, matches.matches_between
    by_range = replace(chain.ports, claims=Replaced(
        claims, held_records_between=lambda env, key, low, high: ranges.append(
            ("records", low, high)) or records_between(env, key, low, high)), matches=Replaced(
        matches, matches_between=lambda env, rid, low, high: ranges.append(
            ("matches", low, high)) or matches_between(env, rid, low, high)))

    assert chain.trace(payout, by_range, dense_run=3, range_ids=5) == by_key
    assert {kind for kind, _, _ in ranges} == {"records", "matches"}  # the charges, then their order matches


def test_a_match_two_branches_reach_is_shown_once_under_the_first(chain):
    [order] = chain.records("orders", 3000)
    charges = chain.records("charges", 1000, 2000)
    order_match = chain.match(1, [order], charges)  # one order paid by two charges...
    payouts = chain.records("payouts", 1000, 2000)
    chain.match(2, [charges[0]], [payouts[0]])  # ...paid out in two payouts...
    chain.match(2, [charges[1]], [payouts[1]])
    [deposit] = chain.records("bank", 3000)
    chain.match(3, payouts, [deposit])  # ...that land in one deposit

    [start] = chain.trace(deposit).hops

    first, second = start.next
    assert [h.match.id for h in first.next] == [order_match] and second.next == ()


def test_many_records_gone_on_by_are_read_projected_and_give_the_trace_read_whole(chain):
    orders = chain.records("orders", *[250] * 24)
    charges = chain.records("charges", *[250] * 24)
    for order, charge in zip(orders, charges, strict=True):
        chain.match(1, [order], [charge])
    loose = chain.records("charges", 40, 41)  # open in link 1: breaks, their records read projected, shown whole
    [held] = chain.records("charges", 42)
    assert chain.ports.exceptions.hold_record(ENV, held, chain.recons[0].id, 77)
    [payout] = chain.records("payouts", 6000 + 40 + 41 + 42)
    chain.match(2, charges + loose + [held], [payout])
    first = chain.trace(payout, keep_money_from=5)  # keeps the payout's money: the next read only what they show
    whole = chain.trace(payout, keep_money_from=5)
    projected: list[int] = []
    claims = chain.ports.claims
    passing, passing_between = claims.passing, claims.passing_between
    projecting = replace(chain.ports, claims=Replaced(
        claims, passing=lambda env, ids, recons: projected.extend(ids) or passing(env, ids, recons),
        passing_between=lambda env, key, low, high, reconciliation_ids: projected.extend(
            range(low, high + 1)) or passing_between(env, key, low, high, reconciliation_ids)))

    assert chain.trace(payout, projecting, keep_money_from=5, whole_up_to=0) == whole == first
    # The payout's hop shows 19 charges, read whole; the 8 others are read projected.
    assert set(projected) & set(charges + loose + [held]) == set(charges[19:] + loose + [held])
    assert [hop.break_.reason for hop in whole.hops[0].next[:2]] == [BreakReason.UNMATCHED, BreakReason.EXCEPTION]
