"""The closing fence's item (adapters/dynamodb/period_closes.py): writers register with a lease, a
close's mark refuses new ones, and the mark sweeps the registrations whose lease ended (requests
killed mid-way) without ever removing a live writer's."""
from __future__ import annotations

from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb.period_closes import PeriodCloseRepository
from chalicelib.domain.period_closes import ClosedPeriodsChanged
from tests.contract.builders import ENV, OTHER_ENV
from tests.contract.builders import T0_MS as T0
from tests.fakes.period_closes import FakePeriodCloseRepository

STALE = T0 - timedelta(minutes=2)


@pytest.fixture
def period_closes(backend):
    if backend.name == "fake":
        return FakePeriodCloseRepository()
    return PeriodCloseRepository(backend._table)


def register(period_closes, token: str, lease_end, reconciliation_id: int = 1, environment: str = ENV):
    return period_closes.enter_fence(environment, reconciliation_id, token, lease_end, STALE)


def test_the_mark_sweeps_expired_writers_and_keeps_live_ones(period_closes):
    assert register(period_closes, "killed1", T0 + timedelta(seconds=1)) == []
    register(period_closes, "killed2", T0 + timedelta(seconds=10))  # ends exactly at the mark: over
    register(period_closes, "live", T0 + timedelta(seconds=70))
    register(period_closes, "other", T0 + timedelta(seconds=1), environment=OTHER_ENV)
    # Read as of T0 every registration counts, so what stays after the mark is what it left.
    assert period_closes.live_writers(ENV, 1, T0) == 3
    period_closes.mark_closing(ENV, 1, close_id=7, version=0, now=T0 + timedelta(seconds=10))
    assert period_closes.live_writers(ENV, 1, T0) == 1  # the live writer alone
    assert period_closes.live_writers(ENV, 1, T0 + timedelta(seconds=10)) == 1
    assert period_closes.live_writers(OTHER_ENV, 1, T0) == 1  # another environment's item: untouched
    # The fence is up: no new writer; the live one leaves as before.
    assert register(period_closes, "late", T0 + timedelta(seconds=80)) is None
    period_closes.leave_fence(ENV, 1, "live")
    assert period_closes.live_writers(ENV, 1, T0) == 0


def test_a_mark_at_a_moved_version_sweeps_nothing(period_closes):
    register(period_closes, "killed", T0 + timedelta(seconds=1))
    with pytest.raises(ClosedPeriodsChanged):
        period_closes.mark_closing(ENV, 1, close_id=7, version=3, now=T0 + timedelta(seconds=10))
    assert period_closes.live_writers(ENV, 1, T0) == 1
    assert register(period_closes, "next", T0 + timedelta(seconds=70)) == []  # no fence was put up


def test_a_mark_without_writers_puts_the_fence_up(period_closes):
    period_closes.mark_closing(ENV, 2, close_id=8, version=0, now=T0)
    assert register(period_closes, "late", T0 + timedelta(seconds=60), reconciliation_id=2) is None
    period_closes.clear_closing(ENV, 2, close_id=8)
    assert register(period_closes, "late", T0 + timedelta(seconds=60), reconciliation_id=2) == []


def test_the_sweep_is_bounded_per_mark_and_the_next_mark_goes_on(period_closes):
    for i in range(60):
        register(period_closes, f"killed{i:02d}", T0 + timedelta(seconds=1))
    period_closes.mark_closing(ENV, 1, close_id=7, version=0, now=T0 + timedelta(seconds=10))
    assert period_closes.live_writers(ENV, 1, T0) == 10
    period_closes.clear_closing(ENV, 1, close_id=7)
    period_closes.mark_closing(ENV, 1, close_id=8, version=0, now=T0 + timedelta(seconds=10))
    assert period_closes.live_writers(ENV, 1, T0) == 0


@pytest.mark.moto
def test_a_writer_that_renews_between_the_read_and_the_mark_is_never_removed(backend):
    """The adapter reads the item, then writes: a request registering again with the same token in
    between (a second guard of the same request) renews a lease the read saw as ended. The sweep's
    condition fails, the fence still goes up, and the renewed registration stays."""
    if backend.name == "fake":
        pytest.skip("the fake's mark is one step: nothing comes between its read and its write")
    period_closes = PeriodCloseRepository(backend._table)
    register(period_closes, "slow", T0 + timedelta(seconds=1))
    table_get = backend._table.get

    def get_then_renew(key):
        item = table_get(key)
        register(period_closes, "slow", T0 + timedelta(seconds=90))
        return item

    backend._table.get = get_then_renew
    try:
        period_closes.mark_closing(ENV, 1, close_id=7, version=0, now=T0 + timedelta(seconds=10))
    finally:
        backend._table.get = table_get
    assert period_closes.live_writers(ENV, 1, T0 + timedelta(seconds=10)) == 1
    assert register(period_closes, "late", T0 + timedelta(seconds=80)) is None  # the fence is up


def test_the_fence_is_read_as_entering_it_finds_it(period_closes):
    assert period_closes.fence_up(ENV, 3, STALE) is False  # no item yet
    register(period_closes, "writer", T0 + timedelta(seconds=60), reconciliation_id=3)
    assert period_closes.fence_up(ENV, 3, STALE) is False
    period_closes.mark_closing(ENV, 3, close_id=9, version=0, now=T0)
    assert period_closes.fence_up(ENV, 3, STALE) is True
    assert period_closes.fence_up(OTHER_ENV, 3, STALE) is False
    assert period_closes.fence_up(ENV, 3, T0 + timedelta(seconds=1)) is False  # a mark gone stale: as entering finds it
    period_closes.clear_closing(ENV, 3, close_id=9)
    assert period_closes.fence_up(ENV, 3, STALE) is False


def test_held_run_chunks_are_kept_apart_from_held_matches_until_let_go(period_closes):
    period_closes.hold_run_chunk(ENV, 3, 12, 0, T0)
    period_closes.hold_run_chunk(ENV, 3, 12, 10, T0)
    period_closes.hold_run_chunk(ENV, 3, 5, 2, T0)
    period_closes.hold_match(ENV, 3, 12, T0)
    period_closes.hold_run_chunk(OTHER_ENV, 3, 12, 0, T0)
    assert period_closes.held_run_chunks(ENV, 3) == [(5, 2), (12, 0), (12, 10)]
    assert period_closes.held_matches(ENV, 3) == [12]

    period_closes.let_go_run_chunk(ENV, 3, 12, 10)
    period_closes.let_go_run_chunk(ENV, 3, 12, 10)  # again: nothing to let go
    assert period_closes.held_run_chunks(ENV, 3) == [(5, 2), (12, 0)]
    assert period_closes.held_run_chunks(OTHER_ENV, 3) == [(12, 0)]
    assert period_closes.held_matches(ENV, 3) == [12]


def test_held_matches_are_kept_beside_the_writers_until_let_go(period_closes):
    period_closes.hold_match(ENV, 3, 41, T0)
    period_closes.hold_match(ENV, 3, 7, T0)
    period_closes.hold_match(ENV, 3, 7, T0 + timedelta(seconds=5))  # a retry holds it again: still one
    period_closes.hold_match(OTHER_ENV, 3, 9, T0)
    assert register(period_closes, "live", T0 + timedelta(seconds=70), reconciliation_id=3) == []
    assert period_closes.held_matches(ENV, 3) == [7, 41]
    assert period_closes.live_writers(ENV, 3, T0) == 1  # a hold is no writer, nor swept as one by a mark
    period_closes.mark_closing(ENV, 3, close_id=9, version=0, now=T0 + timedelta(minutes=5))
    assert period_closes.held_matches(ENV, 3) == [7, 41]

    period_closes.let_go_match(ENV, 3, 41)
    period_closes.let_go_match(ENV, 3, 41)  # again: nothing to let go
    assert period_closes.held_matches(ENV, 3) == [7]
    assert period_closes.held_matches(OTHER_ENV, 3) == [9]
    assert period_closes.closed_periods(ENV, [3]) == {3: []}
