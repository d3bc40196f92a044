"""Reconciliation exceptions: the work queue of unmatched money. Their statuses and the moves
allowed between them, their aggregates (exact, integer minor units), and the filters of their
records.

    open <-> investigating
      |          |
      +----------+--> dismissed, resolved --> open (a reopen)
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from enum import StrEnum
from fractions import Fraction
from typing import Any

from chalicelib.domain.errors import TransitionRefused, ValidationFailed
from chalicelib.domain.status_machine import StatusMachine


class ExceptionStatus(StrEnum):
    OPEN = "open"
    INVESTIGATING = "investigating"
    DISMISSED = "dismissed"
    RESOLVED = "resolved"


EXCEPTION_STATUSES = StatusMachine({  # none is finished: a closed exception may be reopened
    ExceptionStatus.OPEN: {ExceptionStatus.INVESTIGATING, ExceptionStatus.DISMISSED, ExceptionStatus.RESOLVED},
    ExceptionStatus.INVESTIGATING: {ExceptionStatus.OPEN, ExceptionStatus.DISMISSED, ExceptionStatus.RESOLVED},
    ExceptionStatus.DISMISSED: {ExceptionStatus.OPEN},
    ExceptionStatus.RESOLVED: {ExceptionStatus.OPEN},
})
ACTIVE = frozenset({ExceptionStatus.OPEN, ExceptionStatus.INVESTIGATING})  # records still join these
CLOSED = frozenset({ExceptionStatus.DISMISSED, ExceptionStatus.RESOLVED})


class AgeBucket(StrEnum):
    LT_7D = "lt_7d"
    D7_30 = "7_30d"
    D30_90 = "30_90d"
    GT_90D = "gt_90d"


AGE_BUCKET_DAYS: dict[AgeBucket, tuple[int, int | None]] = {  # [from, to) in days of age
    AgeBucket.LT_7D: (0, 7), AgeBucket.D7_30: (7, 30), AgeBucket.D30_90: (30, 90), AgeBucket.GT_90D: (90, None),
}


@dataclass(frozen=True)
class Assignee:
    id: int
    idp_user_id: str
    user_id: int | None = None  # the user's id; None on an assignment made before users existed


@dataclass(frozen=True)
class ReconciliationException:
    environment: str
    id: int
    reconciliation_id: int
    data_stream_key: str
    data_stream_id: int
    title: str
    description: str
    status: ExceptionStatus
    created_at: datetime
    updated_at: datetime
    opened_at: datetime
    closed_at: datetime | None = None
    decimal_places: int = 2
    assignees: tuple[Assignee, ...] = ()
    totals: dict[str, Any] = field(default_factory=dict)  # see `totals()`
    version: int = 1
    currency: str | None = None  # its records' one currency, kept with the totals; None when mixed

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def moved(self, target: ExceptionStatus, now: datetime) -> ReconciliationException:
        """The exception after a status change; a move the table does not allow is a 409."""
        if target is self.status:
            return self
        if not EXCEPTION_STATUSES.can_move(self.status, target):
            raise TransitionRefused(f"an exception that is {self.status.value} cannot become {target.value}")
        if target in CLOSED:
            return replace(self, status=target, closed_at=now, updated_at=now)
        if self.status in CLOSED:  # a reopen
            return replace(self, status=target, opened_at=now, closed_at=None, updated_at=now)
        return replace(self, status=target, updated_at=now)


@dataclass(frozen=True)
class ExceptionSummary:
    """What the exception queue filters on, read for every exception of an environment before
    only the page's exceptions are read whole."""
    id: int
    reconciliation_id: int
    status: ExceptionStatus
    data_stream_key: str
    assignees: tuple[Assignee, ...] = ()
    decimal_places: int = 2
    totals: dict[str, Any] = field(default_factory=dict)  # see `totals()`: the amount and age filters read it
    # The overview's: what the amounts are in (None: mixed, or not yet recorded), and when it opened and closed.
    currency: str | None = None
    opened_at: datetime | None = None
    closed_at: datetime | None = None

    @property
    def amount(self) -> Fraction:
        """What the exception amounts to, as a size: |credits - debits|, exact at any scale."""
        return Fraction(abs(self.totals.get("credit_sum", 0) - self.totals.get("debit_sum", 0)),
                        10 ** self.decimal_places)

    @property
    def oldest(self) -> str | None:
        """Its oldest record's date: an exception is as old as that record (the age rule of `age_days`)."""
        return self.totals.get("oldest")


@dataclass(frozen=True)
class ExceptionMoney:
    """What some exceptions amount to in one currency: each one's size (|credits - debits| of its
    records) summed, in minor units at `decimal_places` (the largest of theirs: exact)."""
    currency: str
    decimal_places: int
    amount: int
    count: int


def money_by_currency(summaries: Iterable[ExceptionSummary]) -> tuple[list[ExceptionMoney], int]:
    """The summaries' sizes summed per currency (sorted by currency; never one currency added to
    another), and how many are summed in none (their records are in several currencies, or their
    currency is not recorded yet)."""
    parts: dict[str, list[tuple[int, int]]] = {}
    unpriced = 0
    for summary in summaries:
        if summary.currency is None:
            unpriced += 1
            continue
        size = abs(summary.totals.get("credit_sum", 0) - summary.totals.get("debit_sum", 0))
        parts.setdefault(summary.currency, []).append((size, summary.decimal_places))
    money = []
    for currency, sizes in sorted(parts.items()):
        places = max(p for _, p in sizes)
        money.append(ExceptionMoney(currency, places, sum(size * 10 ** (places - p) for size, p in sizes), len(sizes)))
    return money, unpriced


class QueueOrder(StrEnum):
    NEWEST = "newest"  # newest exception first (by id)
    OLDEST = "oldest"  # the oldest record first: the longest waiting money
    AMOUNT = "amount"  # the largest |credits - debits| first


def queue_key(order: QueueOrder) -> Callable[[ExceptionSummary], Any]:
    """How the queue sorts summaries (ascending keys); ties go newest first, so an order is total."""
    if order is QueueOrder.OLDEST:
        return lambda s: (s.oldest is None, s.oldest or "", -s.id)
    if order is QueueOrder.AMOUNT:
        return lambda s: (-s.amount, -s.id)
    return lambda s: -s.id


@dataclass(frozen=True)
class ExceptionComment:
    id: int
    body: str
    author_idp_id: str
    mentions: tuple[int, ...]
    created_at: datetime


@dataclass(frozen=True)
class ExceptionRecord:
    """What an exception keeps of each of its records: enough for aggregates and filters."""
    record_id: int
    amount: int
    direction: str
    date: str
    currency: str
    pending_confirmation: bool = False  # a proposed match holds it: counted here until confirmed


@dataclass(frozen=True)
class RecordFilter:
    amount_min: int | None = None
    amount_max: int | None = None
    date_from: str | None = None
    date_to: str | None = None
    direction: str | None = None
    age_bucket: AgeBucket | None = None
    pending_confirmation: bool | None = None  # the records a proposed match holds (True), or the others

    @property
    def empty(self) -> bool:
        return self == RecordFilter()

    def as_date_window(self, today: date) -> RecordFilter:
        """The filter as storage can apply it: its age bucket becomes a range of record dates
        ending `today`, narrowing any dates given."""
        if self.age_bucket is None:
            return self
        date_from, date_to = self.date_from, self.date_to
        low, high = AGE_BUCKET_DAYS[self.age_bucket]
        newest = (today - timedelta(days=low)).isoformat()
        date_to = min(date_to, newest) if date_to else newest
        if high is not None:
            oldest = (today - timedelta(days=high - 1)).isoformat()
            date_from = max(date_from, oldest) if date_from else oldest
        return replace(self, date_from=date_from, date_to=date_to, age_bucket=None)

    def admits(self, record: ExceptionRecord, today: date) -> bool:
        if self.amount_min is not None and record.amount < self.amount_min:
            return False
        if self.amount_max is not None and record.amount > self.amount_max:
            return False
        if self.date_from is not None and record.date < self.date_from:
            return False
        if self.date_to is not None and record.date > self.date_to:
            return False
        if self.direction is not None and record.direction != self.direction:
            return False
        if self.pending_confirmation is not None and record.pending_confirmation is not self.pending_confirmation:
            return False
        if self.age_bucket is not None:
            low, high = AGE_BUCKET_DAYS[self.age_bucket]
            age = age_days(record, today)
            if age < low or (high is not None and age >= high):
                return False
        return True


def check_filter(record_filter: RecordFilter) -> RecordFilter:
    if (record_filter.amount_min is not None and record_filter.amount_max is not None
            and record_filter.amount_min > record_filter.amount_max):
        raise ValidationFailed.on("amount_min", "must not be above amount_max")
    if record_filter.date_from and record_filter.date_to and record_filter.date_from > record_filter.date_to:
        raise ValidationFailed.on("date_from", "must not be after date_to")
    return record_filter


def age_days(record: ExceptionRecord, today: date) -> int:
    """Age counts from the record's own date (the issue's rule), never negative."""
    return max(0, (today - date.fromisoformat(record.date)).days)


def totals(records: Iterable[ExceptionRecord]) -> dict[str, Any]:
    """What an exception keeps of its records' amounts and dates: integers and dates only, so
    it can be stored and stays true whatever day it is read on (see `aggregates`)."""
    records = list(records)
    credits = [r.amount for r in records if r.direction == "credit"]
    debits = [r.amount for r in records if r.direction != "credit"]
    dates = sorted(r.date for r in records)
    return {"record_count": len(records), "credit_count": len(credits), "credit_sum": sum(credits),
            "debit_count": len(debits), "debit_sum": sum(debits),
            "pending_confirmation_count": sum(1 for r in records if r.pending_confirmation),
            "date_ordinal_sum": sum(date.fromisoformat(d).toordinal() for d in dates),
            "oldest": dates[0] if dates else None, "newest": dates[-1] if dates else None}


def aggregates(kept: dict[str, Any], today: date) -> dict[str, Any]:
    """The spec's aggregates, exact: sums are integers in minor units. `total_amount` is credits
    minus debits (what the records amount to); `avg_age_days` is today's distance to the mean
    record date, rounded to two decimals; `oldest_at`/`newest_at` are the earliest and latest
    record dates at midnight UTC."""
    count = kept.get("record_count", 0)
    mean_ordinal = kept["date_ordinal_sum"] / count if count else None
    avg_age_days = round(max(0.0, today.toordinal() - mean_ordinal), 2) if mean_ordinal is not None else 0
    return {
        "record_count": count, "total_amount": kept.get("credit_sum", 0) - kept.get("debit_sum", 0),
        "debit_count": kept.get("debit_count", 0), "debit_sum": kept.get("debit_sum", 0),
        "credit_count": kept.get("credit_count", 0), "credit_sum": kept.get("credit_sum", 0),
        "pending_confirmation_count": kept.get("pending_confirmation_count", 0),
        "avg_age_days": avg_age_days,
        "oldest_at": f"{kept['oldest']}T00:00:00Z" if kept.get("oldest") else None,
        "newest_at": f"{kept['newest']}T00:00:00Z" if kept.get("newest") else None,
    }


def aggregate(records: Iterable[ExceptionRecord], today: date) -> dict[str, Any]:
    return aggregates(totals(records), today)


def default_title(stream_name: str) -> str:
    return f"{stream_name}: unmatched records"


def describe(kept: dict[str, Any], currency: str | None, decimal_places: int) -> str:
    """The default description: how many records and how much."""
    count, net = kept["record_count"], kept["credit_sum"] - kept["debit_sum"]
    unit = f" {currency}" if currency else ""
    return (f"{counted(count, 'unmatched record')} totalling {'-' if net < 0 else ''}"
            f"{format_amount(abs(net), decimal_places)}{unit} ({counted(kept['credit_count'], 'credit')}, "
            f"{counted(kept['debit_count'], 'debit')})")


def counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def format_amount(minor: int, decimal_places: int) -> str:
    """1234567 with 2 decimal places -> '12,345.67' (integer arithmetic only)."""
    if decimal_places == 0:
        return f"{minor:,}"
    whole, fraction = divmod(minor, 10 ** decimal_places)
    return f"{whole:,}.{fraction:0{decimal_places}d}"


def is_overdue(record: ExceptionRecord, today: date, exception_after_days: int) -> bool:
    """Unmatched for longer than the reconciliation's grace period, counted from the record's date."""
    return age_days(record, today) > exception_after_days
