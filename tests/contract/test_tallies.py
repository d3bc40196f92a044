"""Stream tallies: one per (reconciliation, stream), a later one replaces it, an older one never
does, and a reconciliation's delete takes them all; money survives the trip exactly (128-bit sums)."""
from __future__ import annotations

from datetime import timedelta

from chalicelib.domain.tallies import CurrencyAmounts, StreamTally
from tests.contract.builders import ENV, OTHER_ENV
from tests.contract.builders import T0_MS as T0

BIG = 2**63 - 1


def tally(stream_key="bank", reconciliation_id=1, at=T0, credits=500, environment=ENV):
    return StreamTally(environment, reconciliation_id, stream_key, at,
                       total={"USD": CurrencyAmounts("USD", 3, BIG * 3, 7, 2)},
                       open={"USD": CurrencyAmounts("USD", 1, credits, 0, 2, "2026-01-02")},
                       open_matched_in={4: {"USD": CurrencyAmounts("USD", 1, credits, 0, 2, "2026-01-02")}})


def test_a_tally_reads_back_as_saved_and_per_reconciliation(tallies):
    saved = [tally("bank"), tally("ledger"), tally("bank", reconciliation_id=2)]
    for t in saved + [tally("bank", environment=OTHER_ENV)]:
        tallies.save(t)
    assert sorted(tallies.of_reconciliation(ENV, 1), key=lambda t: t.data_stream_key) == saved[:2]
    assert tallies.of_reconciliation(ENV, 2) == saved[2:]
    assert saved[0].matched == {"USD": CurrencyAmounts("USD", 2, BIG * 3 - 500, 7, 2)}


def test_a_later_tally_replaces_the_stream_and_an_older_one_does_not(tallies):
    tallies.save(tally(credits=1))
    tallies.save(tally(at=T0 + timedelta(minutes=1), credits=2))
    tallies.save(tally(at=T0 - timedelta(minutes=1), credits=3))  # a slow refresh that began first
    [kept] = tallies.of_reconciliation(ENV, 1)
    assert kept.open["USD"].credits == 2


def test_a_reconciliation_delete_removes_its_tallies_only(tallies):
    tallies.save(tally("bank"))
    tallies.save(tally("bank", reconciliation_id=2))
    tallies.remove_all_of_reconciliation(ENV, 1)
    assert tallies.of_reconciliation(ENV, 1) == []
    assert len(tallies.of_reconciliation(ENV, 2)) == 1
