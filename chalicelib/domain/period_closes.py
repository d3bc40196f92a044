"""Period close: a sign-off that a date range of a reconciliation is done. Once closed, no record
dated inside it (the record's `date`, the day the money moved, as stored) is matched, unmatched,
deleted or imported into the reconciliation's streams until an admin reopens the period.

Pure rules here: a period and its overlap, which closed period holds a date, what the sign-off
lists (open exceptions and unmatched money in the period, with their explanations), the message
of a refusal. Storage and the guards are in services/period_closes.py.

    closed --> reopened   (an admin, with a reason; a reopened period may be closed again by a new close)
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from chalicelib.domain.clock import iso
from chalicelib.domain.errors import Conflict, ValidationFailed
from chalicelib.domain.events import Event, make_event

if TYPE_CHECKING:
    from chalicelib.domain.matching.frames import Frame

MAX_PERIOD_DAYS = 366  # a close covers at most a year: a month or a quarter is the usual
MAX_EXPLANATION = 2_000  # characters of an explanation, of the sign-off note, of a reopen reason


class CloseStatus(StrEnum):
    CLOSED = "closed"
    REOPENED = "reopened"


@dataclass(frozen=True, order=True)
class Period:
    """Inclusive dates: `start` and `end` are both inside."""
    start: date
    end: date

    def contains(self, day: date | str) -> bool:
        moment = date.fromisoformat(day) if isinstance(day, str) else day
        return self.start <= moment <= self.end

    def overlaps(self, other: Period) -> bool:
        return self.start <= other.end and other.start <= self.end

    @property
    def label(self) -> str:
        return f"{self.start.isoformat()}..{self.end.isoformat()}"


def checked_period(start: date, end: date) -> Period:
    """A period as given, or 422 naming what is wrong."""
    if end < start:
        raise ValidationFailed.on("period_end", f"must be on or after period_start ({start.isoformat()})")
    if (end - start).days + 1 > MAX_PERIOD_DAYS:
        raise ValidationFailed.on("period_end", f"a period covers at most {MAX_PERIOD_DAYS} days")
    return Period(start, end)


@dataclass(frozen=True)
class ClosedPeriod:
    """A period in force, as the guards read it: which close made it."""
    close_id: int
    reconciliation_id: int
    period: Period


def overlapping(period: Period, closed: Iterable[ClosedPeriod]) -> ClosedPeriod | None:
    """The first closed period the new one overlaps (periods of one reconciliation may not overlap)."""
    return next((c for c in sorted(closed, key=lambda c: c.period) if c.period.overlaps(period)), None)


def holding(day: date | str, closed: Iterable[ClosedPeriod]) -> ClosedPeriod | None:
    """The closed period a record dated `day` falls inside, or None."""
    moment = date.fromisoformat(day) if isinstance(day, str) else day
    return next((c for c in closed if c.period.contains(moment)), None)


def outside_closed(frame: Frame, closed: Iterable[ClosedPeriod]) -> Frame:
    """A run's open records (a frame with a `date` column, domain/matching/frames.py) less those dated
    inside a closed period: a run leaves them where they are."""
    periods = [c.period for c in closed]
    if not periods or frame.height == 0:
        return frame
    import polars as pl  # the run's layer only: the API never loads the engine

    inside = pl.lit(False)
    for period in periods:
        inside = inside | pl.col("date").is_between(period.start, period.end, closed="both")
    return frame.filter(~inside)


class PeriodClosed(Conflict):
    """A change to a record dated inside a closed period (409)."""


class ClosedPeriodsChanged(Conflict):
    """The reconciliation's closed periods changed since they were read (another close or reopen
    was saved meanwhile): nothing was changed."""

    def __init__(self, message: str = "another close or reopen of this reconciliation was saved meanwhile; "
                                      "nothing was changed: try again") -> None:
        super().__init__(message)


def refusal(what: str, day: str, closed: ClosedPeriod) -> str:
    """The message of a refused change: it names the closed period, its close and how to go on."""
    return (f"{what} is dated {day}, inside the closed period {closed.period.label} of reconciliation "
            f"{closed.reconciliation_id} (period close {closed.close_id}); an admin must reopen it first")


def refuse_dated(what_of: Mapping[str, str], closed: Iterable[ClosedPeriod]) -> None:
    """409 for the first dated thing inside a closed period: `what_of` maps a description (`record 12`)
    to its date."""
    periods = list(closed)
    if not periods:
        return
    for what, day in what_of.items():
        found = holding(day, periods)
        if found is not None:
            raise PeriodClosed(refusal(what, day, found))


# What the sign-off lists -----------------------------------------------------------------------------

@dataclass(frozen=True)
class OpenMoney:
    """Unmatched records of one currency dated in the period: their count and sums (minor units)."""
    currency: str
    decimal_places: int
    count: int
    credits: int
    debits: int


@dataclass(frozen=True)
class OpenException:
    """An open (or investigating) exception holding records dated in the period, as it was at close."""
    id: int
    status: str
    title: str
    data_stream_key: str
    record_count: int  # its records dated in the period
    money: tuple[OpenMoney, ...]
    explanation: str
    explained_by: str  # "exception": its own explanation; "note": the close's sign-off note


@dataclass(frozen=True)
class OpenRecordInPeriod:
    """An unmatched record dated in the period (what the sign-off counts), and the exception holding it."""
    amount: int
    direction: str
    currency: str
    decimal_places: int
    exception_id: int | None


def open_money(records: Iterable[OpenRecordInPeriod]) -> tuple[OpenMoney, ...]:
    """Counts and sums per currency (each currency at the largest decimal places seen: exact)."""
    per: dict[str, list[OpenRecordInPeriod]] = {}
    for record in records:
        per.setdefault(record.currency, []).append(record)
    money = []
    for currency in sorted(per):
        rows = per[currency]
        places = max(r.decimal_places for r in rows)
        credit = sum(r.amount * 10 ** (places - r.decimal_places) for r in rows if r.direction == "credit")
        debit = sum(r.amount * 10 ** (places - r.decimal_places) for r in rows if r.direction != "credit")
        money.append(OpenMoney(currency, places, len(rows), credit, debit))
    return tuple(money)


def not_open_in(explanations: Mapping[int, str], open_ids: Iterable[int]) -> list[int]:
    """The exceptions explained that are not open with records dated in the period: an explanation
    must name one that is (the route answers 404 for an unknown one, 409 for one not open there)."""
    known = set(open_ids)
    return [exception_id for exception_id in explanations if exception_id not in known]


def not_open_refusal(exception_id: int, period: Period, open_ids: Iterable[int]) -> str:
    return (f"exception {exception_id} is not open with records dated in {period.label}; explain only those that "
            f"are (open there: {', '.join(map(str, sorted(open_ids))) or 'none'})")


def explained(exception_id: int, explanations: Mapping[int, str], note: str) -> tuple[str, str]:
    """(explanation, explained_by): the exception's own, else the sign-off note."""
    own = explanations.get(exception_id)
    return (own, "exception") if own else (note, "note")


@dataclass(frozen=True)
class PeriodClose:
    environment: str
    id: int
    reconciliation_id: int
    period: Period
    status: CloseStatus
    note: str  # the sign-off: what the closer states of what is still open
    closed_by: str  # user:<id> or api_key:<id>
    closed_at: datetime
    unmatched: tuple[OpenMoney, ...] = ()  # unmatched records dated in the period, per currency
    open_exceptions: tuple[OpenException, ...] = ()
    reopened_by: str | None = None
    reopened_at: datetime | None = None
    reopen_reason: str | None = None

    @property
    def in_force(self) -> ClosedPeriod:
        return ClosedPeriod(self.id, self.reconciliation_id, self.period)


def period_event(close: PeriodClose, verb: str) -> Event:
    """`period.closed` or `period.reopened` (`verb`): what was closed, or why it was reopened."""
    data: dict[str, object] = {
        "id": close.id, "url": f"/v1/reconciliations/{close.reconciliation_id}/period_closes/{close.id}",
        "reconciliation_id": close.reconciliation_id, "period_start": close.period.start.isoformat(),
        "period_end": close.period.end.isoformat(), "status": close.status.value, "closed_by": close.closed_by,
        "closed_at": iso(close.closed_at), "open_exceptions": len(close.open_exceptions),
        "unmatched": [{"currency": m.currency, "count": m.count} for m in close.unmatched]}
    at = close.closed_at
    if verb == "reopened":
        assert close.reopened_at is not None
        data.update(reopened_by=close.reopened_by, reopened_at=iso(close.reopened_at),
                    reopen_reason=close.reopen_reason)
        at = close.reopened_at
    return make_event(close.environment, f"period.{verb}", f"period close {close.id}", at, data)
