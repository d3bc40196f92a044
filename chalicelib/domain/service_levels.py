"""Service levels of a reconciliation's exceptions (pure): how severe an exception is (from its
amount and its age), when it is due (from when it opened, by severity), whether it is overdue, and
its aging bucket. docs/service-levels.md says why each rule is as it is.

- Amounts: a policy's thresholds are integers in minor units at the policy's
  `amount_decimal_places` (2 by default), per currency (`"USD"`), with `"*"` for any currency not
  listed; they are compared exactly (Fraction) with |credits - debits| of the exception at its own
  decimal places. An exception whose records mix currencies has no one amount: only its age rates it.
- Age: an exception is as old as its oldest record (counted from the record's date, the rule of
  the queue's `older_than_days`); none when it holds no record.
- Severity: the highest whose amount threshold or age threshold the exception reaches; `low` else.
- Due: `opened_at` plus the severity's `due_in_hours` (a reopen starts the clock again); overdue
  when an open or investigating exception is past it (a closed one never is).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from enum import StrEnum
from fractions import Fraction

from chalicelib.domain.errors import FieldError, ValidationFailed
from chalicelib.domain.reconciliation_exceptions import ExceptionMoney, ExceptionSummary, money_by_currency

MAX_AMOUNT = 10 ** 18
MAX_DUE_HOURS = 24 * 366
MAX_AGE_DAYS = 36_500
ANY_CURRENCY = "*"
CURRENCY = re.compile(r"^[A-Z]{3}$")


class Severity(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return SEVERITIES.index(self)


SEVERITIES: tuple[Severity, ...] = (Severity.LOW, Severity.MEDIUM, Severity.HIGH, Severity.CRITICAL)
RATED = SEVERITIES[1:]  # the severities a threshold reaches (low is what is left)


class AgeBucket(StrEnum):
    """The aging buckets of the queue and the aggregates: an exception's age in whole days."""
    D0_1 = "0_1d"
    D1_3 = "1_3d"
    D3_7 = "3_7d"
    D7_30 = "7_30d"
    D30_PLUS = "30d_plus"


AGE_BUCKETS: dict[AgeBucket, tuple[int, int | None]] = {  # [from, to) in whole days of age
    AgeBucket.D0_1: (0, 1), AgeBucket.D1_3: (1, 3), AgeBucket.D3_7: (3, 7), AgeBucket.D7_30: (7, 30),
    AgeBucket.D30_PLUS: (30, None),
}


def age_bucket(age_days: int) -> AgeBucket:
    for bucket, (low, high) in AGE_BUCKETS.items():
        if age_days >= low and (high is None or age_days < high):
            return bucket
    raise ValueError(f"negative age {age_days}")


@dataclass(frozen=True)
class ServiceLevelPolicy:
    """A reconciliation's policy. `version` 0: the default, never stored (DEFAULT_POLICY)."""
    environment: str
    reconciliation_id: int
    amount_decimal_places: int = 2
    # currency (or "*") -> severity -> the least amount of that severity, in minor units
    amount_thresholds: dict[str, dict[Severity, int]] = field(default_factory=dict)
    age_thresholds: dict[Severity, int] = field(default_factory=dict)  # severity -> the least age in days
    due_in_hours: dict[Severity, int] = field(default_factory=dict)  # every severity's
    version: int = 0
    updated_at: datetime | None = None

    @property
    def is_default(self) -> bool:
        return self.version == 0


def default_policy(environment: str, reconciliation_id: int) -> ServiceLevelPolicy:
    """What a reconciliation without a policy of its own gets (docs/service-levels.md)."""
    return ServiceLevelPolicy(
        environment=environment, reconciliation_id=reconciliation_id, amount_decimal_places=2,
        amount_thresholds={ANY_CURRENCY: {Severity.MEDIUM: 100_000, Severity.HIGH: 1_000_000,
                                          Severity.CRITICAL: 10_000_000}},
        age_thresholds={Severity.MEDIUM: 7, Severity.HIGH: 30, Severity.CRITICAL: 90},
        due_in_hours={Severity.LOW: 24 * 14, Severity.MEDIUM: 24 * 5, Severity.HIGH: 48, Severity.CRITICAL: 8})


def check_policy(policy: ServiceLevelPolicy) -> ServiceLevelPolicy:
    """422 naming each problem: every severity has a due time (1 hour to a year); thresholds are
    non-negative (a more severe level may have a lower one: the highest reached decides)."""
    errors: list[FieldError] = []
    if not 0 <= policy.amount_decimal_places <= 18:
        errors.append(FieldError("amount_decimal_places", "must be 0 to 18"))
    for severity in SEVERITIES:
        hours = policy.due_in_hours.get(severity)
        if hours is None:
            errors.append(FieldError(f"due_in_hours.{severity.value}", "is required"))
        elif not 1 <= hours <= MAX_DUE_HOURS:
            errors.append(FieldError(f"due_in_hours.{severity.value}", f"must be 1 to {MAX_DUE_HOURS}"))
    for currency, levels in policy.amount_thresholds.items():
        if currency != ANY_CURRENCY and not CURRENCY.match(currency):
            errors.append(FieldError(f"amount_thresholds.{currency[:8]}",
                                     "must be a three-letter currency code (upper case) or \"*\""))
        errors += _thresholds(f"amount_thresholds.{currency[:8]}", levels, MAX_AMOUNT)
    errors += _thresholds("age_thresholds", policy.age_thresholds, MAX_AGE_DAYS)
    if errors:
        raise ValidationFailed(errors)
    return policy


def _thresholds(name: str, levels: dict[Severity, int], most: int) -> list[FieldError]:
    errors = [FieldError(f"{name}.{s.value}", "low has no threshold: it is what no threshold reaches")
              for s in levels if s is Severity.LOW]
    errors += [FieldError(f"{name}.{s.value}", f"must be 0 to {most}") for s, v in levels.items()
               if not 0 <= v <= most]
    return errors


@dataclass(frozen=True)
class Standing:
    """An exception as its policy sees it, now."""
    severity: Severity
    due_at: datetime
    overdue: bool
    age_days: int | None
    age_bucket: AgeBucket | None


def exception_age(oldest: str | None, today: date) -> int | None:
    """Whole days since its oldest record's date (never negative); None when it holds no record."""
    return None if oldest is None else max(0, (today - date.fromisoformat(oldest)).days)


def severity_of(policy: ServiceLevelPolicy, *, amount: Fraction, currency: str | None,
                age_days: int | None) -> Severity:
    """The highest severity whose amount or age threshold the exception reaches; `low` else."""
    levels = None
    if currency is not None:
        levels = policy.amount_thresholds.get(currency, policy.amount_thresholds.get(ANY_CURRENCY))
    scale = 10 ** policy.amount_decimal_places
    for severity in reversed(RATED):
        least = (levels or {}).get(severity)
        if least is not None and amount >= Fraction(least, scale):
            return severity
        days = policy.age_thresholds.get(severity)
        if days is not None and age_days is not None and age_days >= days:
            return severity
    return Severity.LOW


def standing(policy: ServiceLevelPolicy, *, amount: Fraction, currency: str | None, oldest: str | None,
             opened_at: datetime, active: bool, now: datetime) -> Standing:
    age = exception_age(oldest, now.date())
    severity = severity_of(policy, amount=amount, currency=currency, age_days=age)
    due_at = opened_at + timedelta(hours=policy.due_in_hours[severity])
    return Standing(severity=severity, due_at=due_at, overdue=active and now >= due_at, age_days=age,
                    age_bucket=None if age is None else age_bucket(age))


BucketMoney = ExceptionMoney  # what one aging bucket's exceptions amount to in one currency


@dataclass(frozen=True)
class Aging:
    """Counts of a set of exceptions by aging bucket, by severity, and how many are overdue; and
    per bucket what they amount to in each currency (`unpriced`: exceptions counted but summed in
    no currency, their records being in several or their currency not yet recorded)."""
    by_age_bucket: dict[AgeBucket, int]
    by_severity: dict[Severity, int]
    overdue: int
    count: int
    money_by_age_bucket: dict[AgeBucket, list[BucketMoney]] = field(default_factory=dict)
    unpriced: int = 0


def aging(standings: list[Standing], summaries: list[ExceptionSummary] | None = None) -> Aging:
    """`summaries`, when given, are the exceptions the standings are of (same order): their sizes
    are summed per bucket and currency, in integers (`money_by_currency`)."""
    buckets = dict.fromkeys(AgeBucket, 0)
    severities = dict.fromkeys(SEVERITIES, 0)
    for s in standings:
        if s.age_bucket is not None:
            buckets[s.age_bucket] += 1
        severities[s.severity] += 1
    money: dict[AgeBucket, list[BucketMoney]] = {}
    unpriced = 0
    if summaries is not None:
        of_bucket: dict[AgeBucket, list[ExceptionSummary]] = {bucket: [] for bucket in AgeBucket}
        for s, summary in zip(standings, summaries, strict=True):
            if s.age_bucket is not None:
                of_bucket[s.age_bucket].append(summary)
        for bucket, bucketed in of_bucket.items():
            money[bucket], none = money_by_currency(bucketed)
            unpriced += none
    return Aging(by_age_bucket=buckets, by_severity=severities, overdue=sum(1 for s in standings if s.overdue),
                 count=len(standings), money_by_age_bucket=money, unpriced=unpriced)


@dataclass(frozen=True)
class SlaSummary:
    """An exception's summary with what service levels and routing read beside it."""
    summary: ExceptionSummary
    created_at: datetime | None
    overdue_notified_for: str | None  # the `opened_at` whose overdue event was sent
    routed_by: int | None  # the routing rule that assigned it
