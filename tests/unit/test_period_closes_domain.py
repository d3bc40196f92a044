"""The pure rules of period close: inclusive periods, overlap, which closed period holds a date,
the refusal's message, the money per currency and the explanations of a sign-off."""
from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.domain.errors import ValidationFailed
from chalicelib.domain.period_closes import (
    MAX_PERIOD_DAYS,
    ClosedPeriod,
    OpenRecordInPeriod,
    Period,
    PeriodClosed,
    checked_period,
    explained,
    holding,
    not_open_in,
    not_open_refusal,
    open_money,
    overlapping,
    refuse_dated,
)

OCTOBER = Period(date(2026, 10, 1), date(2026, 10, 31))
CLOSED_OCTOBER = ClosedPeriod(7, 3, OCTOBER)


def test_a_period_holds_both_of_its_ends_and_nothing_beside_them():
    assert OCTOBER.contains("2026-10-01") and OCTOBER.contains("2026-10-31") and OCTOBER.contains(date(2026, 10, 15))
    assert not OCTOBER.contains("2026-09-30") and not OCTOBER.contains("2026-11-01")


def test_periods_that_share_a_single_day_overlap_and_adjacent_ones_do_not():
    assert OCTOBER.overlaps(Period(date(2026, 10, 31), date(2026, 11, 30)))
    assert OCTOBER.overlaps(Period(date(2026, 9, 1), date(2026, 12, 31)))  # around it
    assert not OCTOBER.overlaps(Period(date(2026, 11, 1), date(2026, 11, 30)))
    assert overlapping(Period(date(2026, 11, 1), date(2026, 11, 30)), [CLOSED_OCTOBER]) is None
    assert overlapping(Period(date(2026, 10, 20), date(2026, 11, 30)), [CLOSED_OCTOBER]) == CLOSED_OCTOBER


@given(st.dates(), st.integers(0, 60), st.dates(), st.integers(0, 60))
def test_overlap_is_symmetric_and_means_a_shared_day(a_start, a_days, b_start, b_days):
    a = Period(a_start, date.fromordinal(min(a_start.toordinal() + a_days, date.max.toordinal())))
    b = Period(b_start, date.fromordinal(min(b_start.toordinal() + b_days, date.max.toordinal())))
    shared = max(a.start, b.start) <= min(a.end, b.end)
    assert a.overlaps(b) == b.overlaps(a) == shared


def test_a_period_must_end_on_or_after_its_start_and_cover_at_most_a_year():
    assert checked_period(date(2026, 10, 1), date(2026, 10, 1)) == Period(date(2026, 10, 1), date(2026, 10, 1))
    with pytest.raises(ValidationFailed) as backwards:
        checked_period(date(2026, 10, 2), date(2026, 10, 1))
    assert backwards.value.errors[0].field == "period_end"
    with pytest.raises(ValidationFailed):
        checked_period(date(2026, 1, 1), date.fromordinal(date(2026, 1, 1).toordinal() + MAX_PERIOD_DAYS))


def test_a_date_inside_a_closed_period_is_refused_naming_the_period_and_its_close():
    assert holding("2026-10-31", [CLOSED_OCTOBER]) == CLOSED_OCTOBER and holding("2026-11-01", [CLOSED_OCTOBER]) is None
    refuse_dated({"record 1": "2026-11-01"}, [CLOSED_OCTOBER])  # outside: nothing
    refuse_dated({"record 1": "2026-10-05"}, [])  # nothing closed: nothing
    with pytest.raises(PeriodClosed) as refused:
        refuse_dated({"record 1": "2026-11-01", "record 2": "2026-10-05"}, [CLOSED_OCTOBER])
    assert refused.value.message == ("record 2 is dated 2026-10-05, inside the closed period 2026-10-01..2026-10-31 "
                                     "of reconciliation 3 (period close 7); an admin must reopen it first")


def test_open_money_is_counted_and_summed_per_currency_at_its_largest_scale():
    records = [OpenRecordInPeriod(1050, "credit", "EUR", 2, 4), OpenRecordInPeriod(7, "debit", "EUR", 1, None),
               OpenRecordInPeriod(5, "credit", "JPY", 0, None)]
    [eur, jpy] = open_money(records)
    assert (eur.currency, eur.count, eur.credits, eur.debits, eur.decimal_places) == ("EUR", 2, 1050, 70, 2)
    assert (jpy.currency, jpy.count, jpy.credits, jpy.debits) == ("JPY", 1, 5, 0)
    assert open_money([]) == ()


def test_an_exception_is_explained_by_its_own_explanation_else_by_the_sign_off_note():
    assert explained(4, {4: "bank delay"}, "signed") == ("bank delay", "exception")
    assert explained(5, {4: "bank delay"}, "signed") == ("signed", "note")
    assert not_open_in({4: "bank delay"}, [4, 5]) == [] and not_open_in({4: "x", 9: "y", 8: "z"}, [4]) == [9, 8]
    assert not_open_refusal(9, OCTOBER, [5, 4]) == ("exception 9 is not open with records dated in "
                                                    "2026-10-01..2026-10-31; explain only those that are (open "
                                                    "there: 4, 5)")
