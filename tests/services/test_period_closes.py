"""Period closes on fakes: what a close lists, the race of two closes (the closed periods are
written conditionally on their version) and what an attempt that never took effect leaves: nothing."""
from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.period_closes import ClosedPeriod, ClosedPeriodsChanged, CloseStatus, Period, PeriodClose
from chalicelib.services import period_closes as service
from tests.fakes.period_closes import FakePeriodCloseRepository
from tests.services.conftest import ENV, record

SEPTEMBER = Period(date(2026, 9, 1), date(2026, 9, 30))


class RacedOnce(FakePeriodCloseRepository):
    """Another close of the reconciliation lands between a close's read and its write, once."""

    def __init__(self, other: Period) -> None:
        super().__init__()
        self.other = other

    def set_closed(self, environment, reconciliation_id, closed, version, pending_event=None):
        if self.other is not None:
            other, self.other = self.other, None
            super().set_closed(environment, reconciliation_id, [ClosedPeriod(999, reconciliation_id, other)], version)
        super().set_closed(environment, reconciliation_id, closed, version, pending_event)


def close(ports, reconciliation, period=SEPTEMBER):
    return service.close(ports, ENV, reconciliation.id, period, "signed", {}, "user:1")


def test_a_close_counts_the_unmatched_money_dated_inside_per_currency(ports, ingest, reconciliation):
    ingest(record("bank", 1, 1000, "2026-09-01"), record("bank", 2, 250, "2026-09-30", direction="debit"),
           record("ledger", 1, 7, "2026-10-01"), record("ledger", 2, 5, "2026-09-15", currency="EUR"))

    made = close(ports, reconciliation)

    assert [(m.currency, m.count, m.credits, m.debits) for m in made.unmatched] == [
        ("EUR", 1, 5, 0), ("USD", 2, 1000, 250)]
    assert ports.events.published[-1][1].type == "period.closed"


def test_a_close_raced_by_an_overlapping_one_is_a_conflict_and_leaves_no_close(ports, reconciliation):
    ports = _with(ports, RacedOnce(Period(date(2026, 9, 20), date(2026, 10, 10))))

    with pytest.raises(Conflict, match="overlaps the closed period 2026-09-20..2026-10-10"):
        close(ports, reconciliation)

    assert ports.period_closes.closes == {}
    assert [c.close_id for c in service.closed_of(ports, ENV, reconciliation.id)] == [999]


def test_a_close_raced_by_one_elsewhere_in_time_is_written_after_it(ports, reconciliation):
    ports = _with(ports, RacedOnce(Period(date(2026, 11, 1), date(2026, 11, 30))))

    made = close(ports, reconciliation)

    assert sorted(c.close_id for c in service.closed_of(ports, ENV, reconciliation.id)) == sorted([999, made.id])
    assert service.get(ports, ENV, reconciliation.id, made.id).period == SEPTEMBER


def test_a_close_that_loses_every_race_leaves_nothing(ports, reconciliation):
    class AlwaysRaced(FakePeriodCloseRepository):
        def set_closed(self, *args, **kwargs):
            raise ClosedPeriodsChanged()

    ports = _with(ports, AlwaysRaced())
    with pytest.raises(ClosedPeriodsChanged):
        close(ports, reconciliation)
    assert ports.period_closes.closes == {}


def test_a_close_whose_process_died_before_its_closed_periods_is_shown_nowhere_and_guards_nothing(
        ports, reconciliation):
    attempt = _attempt(reconciliation)
    ports.period_closes.add(attempt)  # its item only: the closed periods never took it

    with pytest.raises(NotFound):
        service.get(ports, ENV, reconciliation.id, attempt.id)
    assert service.list_page(ports, ENV, reconciliation.id, 10, None) == ([], None)
    assert service.closed_of(ports, ENV, reconciliation.id) == []


def _attempt(reconciliation):
    return PeriodClose(environment=ENV, id=77, reconciliation_id=reconciliation.id, period=SEPTEMBER,
                       status=CloseStatus.CLOSED, note="signed", closed_by="user:1", closed_at=utc_now())


def _with(ports, repository):
    repository.store = ports.records.store
    return replace(ports, period_closes=repository)


def test_only_a_stream_taken_out_of_a_reconciliation_with_a_closed_period_is_refused(ports, reconciliation):
    made = close(ports, reconciliation)
    now = utc_now()
    swapped = reconciliation.changed(now, side_a=list(reconciliation.side_b_stream_keys),
                                     side_b=list(reconciliation.side_a_stream_keys))
    service.refuse_dropping_streams(ports, ENV, reconciliation, swapped)  # both streams still used: allowed
    dropped = reconciliation.changed(now, side_b=["fees"])
    with pytest.raises(Conflict, match=rf"removing data stream '{reconciliation.side_b_stream_keys[0]}' .* closed "
                                       rf"period 2026-09-01..2026-09-30 \(period close {made.id}\); an admin must"):
        service.refuse_dropping_streams(ports, ENV, reconciliation, dropped)
    with pytest.raises(Conflict, match=f"deleting reconciliation {reconciliation.id} is refused"):
        service.refuse_deleting_reconciliation(ports, ENV, reconciliation.id)

    service.reopen(ports, ENV, reconciliation.id, made.id, "moving the ledger", "user:1")
    service.refuse_dropping_streams(ports, ENV, reconciliation, dropped)
    service.refuse_deleting_reconciliation(ports, ENV, reconciliation.id)
