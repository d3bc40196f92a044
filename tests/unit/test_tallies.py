"""Money by currency and stream tallies (domain/tallies.py): exact sums across decimal places, what
counts in a tally, and a link's figures."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from chalicelib.domain.tallies import CurrencyAmounts, StreamTally, link_figures, money_of, tally_stream

NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)


@dataclass(frozen=True)
class Row:
    amount: int
    currency: str = "USD"
    direction: str = "credit"
    decimal_places: int = 2
    date: str = "2026-11-01"
    file_import_id: int | None = 1
    matched_in: frozenset[int] = frozenset()


def test_money_adds_at_the_largest_decimal_places_and_keeps_the_oldest_date():
    money = money_of([Row(150), Row(5, decimal_places=3, date="2026-10-30"), Row(20, direction="debit"),
                      Row(7, currency="JPY", decimal_places=0)], oldest=True)
    assert money == {"USD": CurrencyAmounts("USD", 3, 1505, 200, 3, "2026-10-30"),
                     "JPY": CurrencyAmounts("JPY", 1, 7, 0, 0, "2026-11-01")}


def test_a_tally_counts_open_records_of_published_imports_only_and_what_else_matched_them():
    tally = tally_stream("acme", 2, "charges", total=money_of([Row(100), Row(200), Row(300)]),
                         published_imports=[1],
                         open_records=[Row(100, matched_in=frozenset({1})), Row(300),
                                       Row(999, file_import_id=5), Row(1, file_import_id=None)], now=NOW)
    assert tally.open == {"USD": CurrencyAmounts("USD", 2, 400, 0, 2, "2026-11-01")}
    assert tally.matched == {"USD": CurrencyAmounts("USD", 1, 200, 0, 2)}
    assert tally.open_matched_in == {1: {"USD": CurrencyAmounts("USD", 1, 100, 0, 2, "2026-11-01")}}


def test_a_fully_matched_currency_shows_nothing_open_and_an_unmatched_one_nothing_matched():
    tally = tally_stream("acme", 2, "bank", total=money_of([Row(100), Row(5, currency="EUR")]), published_imports=[1],
                         open_records=[Row(5, currency="EUR")], now=NOW)
    assert tally.matched == {"USD": CurrencyAmounts("USD", 1, 100, 0, 2)}
    assert set(tally.open) == {"EUR"}


def test_a_links_figures_sum_each_side_and_name_what_passed_the_previous_link():
    charges = StreamTally("acme", 2, "charges", NOW, total=money_of([Row(100), Row(200)]),
                          open={"USD": CurrencyAmounts("USD", 1, 200, 0, 2, "2026-11-01")},
                          open_matched_in={1: {"USD": CurrencyAmounts("USD", 1, 200, 0, 2, "2026-11-01")}})
    payouts = StreamTally("acme", 2, "payouts", NOW - timedelta(hours=1), total=money_of([Row(100)]))
    stale = StreamTally("acme", 2, "old", NOW, total=money_of([Row(5)]))  # a stream the reconciliation left
    figures = link_figures(["charges"], ["payouts"], [charges, payouts, stale], previous_reconciliation_id=1,
                           shared_stream_key="charges")
    assert figures.side_a_matched == {"USD": CurrencyAmounts("USD", 1, 100, 0, 2)}
    assert figures.side_a_unmatched == charges.open
    assert figures.side_b_matched == {"USD": CurrencyAmounts("USD", 1, 100, 0, 2)} and figures.side_b_unmatched == {}
    assert figures.from_previous == charges.open_matched_in[1]
    assert figures.computed_at == NOW - timedelta(hours=1)  # the oldest of its streams
    assert [s.data_stream_key for s in figures.streams] == ["charges", "payouts"]


def test_a_link_with_a_stream_never_tallied_has_no_time_and_an_origin_nothing_from_before():
    figures = link_figures(["orders"], ["charges"], [StreamTally("acme", 1, "orders", NOW)])
    assert figures.computed_at is None
    assert figures.from_previous is None


def test_matched_money_is_never_negative_and_a_currency_with_money_left_stays():
    from chalicelib.domain.tallies import less
    assert less({"USD": CurrencyAmounts("USD", 1, 100, 0, 2)}, {"USD": CurrencyAmounts("USD", 1, 90, 0, 2)}) == {
        "USD": CurrencyAmounts("USD", 0, 10, 0, 2)}
    # The mirror lost a part: more is open than the stream holds there.
    tally = tally_stream("acme", 2, "bank", total=money_of([Row(100)]), published_imports=[1],
                         open_records=[Row(100), Row(50)], now=NOW)
    assert tally.inconsistent and tally.matched == {}
    fine = tally_stream("acme", 2, "bank", total=money_of([Row(100), Row(50)]), published_imports=[1],
                        open_records=[Row(50)], now=NOW)
    assert not fine.inconsistent
