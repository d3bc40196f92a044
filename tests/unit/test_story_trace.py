"""The pure part of a story trace (domain/story_trace.py): leads, caps, totals, break order and names."""
from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from chalicelib.domain.matches import Match, MatchStatus
from chalicelib.domain.records import Direction, HeldRecord, Record, RecordStatus
from chalicelib.domain.story_trace import (
    MAX_HOP_RECORDS,
    BreakReason,
    HopLink,
    Lead,
    StartLinks,
    TraceDirection,
    breaks_in,
    currency_totals,
    hop,
    hop_records,
    leads,
    match_records,
    omitted,
    shown_order,
)
from chalicelib.domain.tallies import CurrencyAmounts

T0 = datetime(2026, 11, 2, tzinfo=UTC)
RECON = 7
LINK = HopLink(id=1, position=2, role="continuation", reconciliation_id=RECON, reconciliation_name="Charges")


def record(record_id: int, amount: int = 100, direction: Direction = Direction.CREDIT, currency: str = "USD",
           decimal_places: int = 2) -> Record:
    return Record(environment="acme", id=record_id, data_stream_key="charges", data_stream_id=1, date="2026-11-02",
                  amount=amount, direction=direction, currency=currency, decimal_places=decimal_places,
                  status=RecordStatus.RECONCILED, created_at=T0)


def held(record_id: int, match_id: int | None = None, exception_id: int | None = None, **kw) -> HeldRecord:
    return HeldRecord(record=record(record_id, **kw), match_ids={RECON: match_id} if match_id else {},
                      exception_ids={RECON: exception_id} if exception_id else {})


def match(match_id: int, status: MatchStatus = MatchStatus.CONFIRMED, **kw) -> Match:
    return Match(**{"environment": "acme", "id": match_id, "reconciliation_id": RECON, "status": status,
                    "group_key": "", "record_count": 2, "created_at": T0, "reconciliation_rule_id": 3, **kw})


def describe(found: list[Lead]) -> list[tuple]:
    return [(lead.match.id if lead.match else None, lead.reason, lead.break_.exception_id if lead.break_ else None,
             sorted(h.record.id for h in lead.entering)) for lead in found]


def test_entering_records_group_by_their_match_breaks_first_then_proposed_then_the_others_by_id():
    matches = {12: match(12), 11: match(11), 13: match(13, MatchStatus.PROPOSED), 14: match(14, unmatching=True),
               15: match(15, pending_since=T0), 16: match(16, reconciliation_id=99)}
    entering = [held(1, 12), held(2, 11), held(3, 12), held(4, 13), held(5), held(6, exception_id=40),
                held(7, 14), held(8, 15), held(9, 16), held(10, 17), held(20, exception_id=30)]
    assert describe(leads(entering, RECON, matches)) == [
        # A match missing, being unmatched, begun or of another reconciliation: its records are open here.
        (None, BreakReason.UNMATCHED, None, [5, 7, 8, 9, 10]),
        (None, BreakReason.EXCEPTION, 30, [20]),
        (None, BreakReason.EXCEPTION, 40, [6]),
        (13, BreakReason.PROPOSED, None, [4]),
        (11, None, None, [2]),
        (12, None, None, [1, 3]),
    ]


def test_totals_per_currency_sum_at_the_largest_decimal_places_of_each_exactly():
    records = [record(1, 125, decimal_places=2), record(2, 5, decimal_places=3),
               record(3, 40, Direction.DEBIT, decimal_places=1), record(4, 700, currency="JPY", decimal_places=0),
               record(5, 999_999_999_999_999, currency="JPY", decimal_places=0, direction=Direction.DEBIT)]
    assert currency_totals(records) == (
        CurrencyAmounts("JPY", 2, 700, 999_999_999_999_999, 0),
        CurrencyAmounts("USD", 3, 1250 + 5, 4000, 3),
    )
    assert currency_totals([]) == ()


def test_a_hop_shows_twenty_records_those_it_came_in_by_first_and_counts_and_totals_all():
    records = [record(i, amount=i) for i in range(1, 26)]
    shown = hop_records(records, entering_ids=[25, 24])
    assert [r.id for r in shown.data] == [24, 25] + list(range(1, MAX_HOP_RECORDS - 1))
    assert shown.count == 25 and shown.totals == (CurrencyAmounts("USD", 25, sum(range(1, 26)), 0, 2),)


def test_a_match_whose_money_is_known_shows_the_records_read_and_counts_its_members():
    money = {"USD": CurrencyAmounts("USD", 30, 9000, 0, 2)}
    member_ids = list(range(30, 0, -1))
    assert shown_order(member_ids, [17])[:3] == [17, 1, 2]
    read = {i: record(i) for i in shown_order(member_ids, [17])[:MAX_HOP_RECORDS]}
    shown = match_records(member_ids, read, [17], money)
    assert [r.id for r in shown.data] == [17] + [i for i in range(1, MAX_HOP_RECORDS + 1) if i != 17]
    assert (shown.count, shown.totals) == (30, (money["USD"],))


def test_the_leads_left_out_are_summarised_with_their_records_and_breaks():
    left = leads([held(1, 11, amount=10), held(2, 12, amount=20), held(3, 12, amount=30, currency="EUR"),
                  held(4, 13), held(5), held(6, exception_id=9, direction=Direction.DEBIT, amount=6)],
                 RECON, {11: match(11), 12: match(12), 13: match(13, MatchStatus.PROPOSED)})
    summary = omitted(left)
    assert (summary.hops, summary.records) == (5, 6)
    assert summary.breaks == {"unmatched": 1, "proposed": 1, "exception": 1}
    assert summary.totals == (CurrencyAmounts("EUR", 1, 30, 0, 2), CurrencyAmounts("USD", 5, 10 + 20 + 100 + 100, 6, 2))
    assert omitted([]) is None


def test_a_proposed_match_is_a_break_that_goes_on_and_breaks_are_listed_in_tree_order():
    open_, excepted, proposed = leads([held(1, 13), held(2), held(3, exception_id=5)], RECON,
                                      {13: match(13, MatchStatus.PROPOSED)})
    start = hop(LINK, TraceDirection.START, None, proposed, hop_records([record(1), record(8)], [1]))
    assert (start.match.status, start.break_.reason, start.break_.exception_id) == ("proposed", BreakReason.PROPOSED,
                                                                                      None)
    child_open = hop(LINK, TraceDirection.UPSTREAM, None, open_)
    child_exception = hop(LINK, TraceDirection.UPSTREAM, None, excepted)
    assert child_open.match is None and child_open.records.count == 1
    plain = hop(LINK, TraceDirection.DOWNSTREAM, None, Lead((held(4, 11),), match=match(11)),
                hop_records([record(4)], [4]))
    assert plain.break_ is None
    tree = replace(start, next=(child_exception, plain, child_open))
    assert [(b.reason, b.match_id, b.exception_id, b.record_ids) for b in breaks_in([tree])] == [
        (BreakReason.PROPOSED, 13, None, (1, 8)), (BreakReason.EXCEPTION, None, 5, (3,)),
        (BreakReason.UNMATCHED, None, None, (2,))]


def test_a_record_goes_outwards_from_each_link_it_starts_in():
    on_shared_stream = StartLinks(frozenset({2, 3}), link_count=4)
    assert on_shared_stream.directions(2) == (TraceDirection.UPSTREAM,)
    assert on_shared_stream.directions(3) == (TraceDirection.DOWNSTREAM,)
    in_one = StartLinks(frozenset({2}), link_count=3)
    assert in_one.directions(2) == (TraceDirection.UPSTREAM, TraceDirection.DOWNSTREAM)
    assert StartLinks(frozenset({1}), link_count=1).directions(1) == ()


def test_dense_runs_of_ids_are_read_as_ranges_and_the_rest_by_key():
    from chalicelib.domain.story_trace import dense_runs
    ids = [*range(100, 110), 120, *range(200, 220, 2), 500, 501]
    runs, rest = dense_runs(ids, min_run=5, max_gap=2, per_range=4)
    assert runs == [(100, 103), (104, 107), (108, 109), (200, 206), (208, 214), (216, 218)]
    assert rest == [120, 500, 501]
    assert dense_runs([], min_run=5) == ([], [])
