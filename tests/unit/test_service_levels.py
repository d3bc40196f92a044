"""Service levels (domain/service_levels.py): severity from amount and age, due times, overdue,
aging buckets, and the policy's checks."""
from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest

from chalicelib.domain.errors import ValidationFailed
from chalicelib.domain.reconciliation_exceptions import ExceptionStatus, ExceptionSummary
from chalicelib.domain.service_levels import (
    AgeBucket,
    BucketMoney,
    ServiceLevelPolicy,
    Severity,
    age_bucket,
    aging,
    check_policy,
    default_policy,
    severity_of,
    standing,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
DUE = {Severity.LOW: 240, Severity.MEDIUM: 72, Severity.HIGH: 24, Severity.CRITICAL: 4}


def policy(**fields) -> ServiceLevelPolicy:
    base = dict(environment="acme", reconciliation_id=1, amount_decimal_places=2,
                amount_thresholds={"*": {Severity.MEDIUM: 10_000, Severity.HIGH: 100_000},
                                   "JPY": {Severity.HIGH: 1_000_000}},
                age_thresholds={Severity.MEDIUM: 3, Severity.CRITICAL: 30}, due_in_hours=DUE, version=1)
    return ServiceLevelPolicy(**{**base, **fields})


@pytest.mark.parametrize("amount, currency, age, expected", [
    (Fraction(99_99, 100), "USD", 0, Severity.LOW),  # 99.99 < 100.00
    (Fraction(100), "USD", 0, Severity.MEDIUM),  # exactly the threshold reaches it
    (Fraction(1000), "EUR", 0, Severity.HIGH),
    (Fraction(1000), "JPY", 0, Severity.LOW),  # JPY has its own thresholds: 10,000.00 for high
    (Fraction(10_000), "JPY", 0, Severity.HIGH),
    (Fraction(5), "USD", 3, Severity.MEDIUM),  # by age
    (Fraction(1000), "USD", 30, Severity.CRITICAL),  # age outranks amount when higher
    (Fraction(10 ** 9), None, 0, Severity.LOW),  # mixed currencies: rated by age only
    (Fraction(10 ** 9), None, 45, Severity.CRITICAL),
    (Fraction(0), "USD", None, Severity.LOW),  # no record: no age
])
def test_severity_is_the_highest_that_amount_or_age_reaches(amount, currency, age, expected):
    assert severity_of(policy(), amount=amount, currency=currency, age_days=age) is expected


def test_amounts_compare_exactly_at_any_scale():
    four_places = policy(amount_decimal_places=4, amount_thresholds={"*": {Severity.MEDIUM: 1_000_001}})
    assert severity_of(four_places, amount=Fraction(100_0000, 10_000), currency="USD", age_days=0) is Severity.LOW
    assert severity_of(four_places, amount=Fraction(100_0001, 10_000), currency="USD", age_days=0) is Severity.MEDIUM


def test_due_counts_from_the_opening_and_only_an_active_exception_is_overdue():
    opened = NOW - timedelta(hours=25)
    high = standing(policy(), amount=Fraction(1000), currency="USD", oldest="2026-11-28", opened_at=opened,
                    active=True, now=NOW)
    assert (high.severity, high.due_at, high.overdue) == (Severity.HIGH, opened + timedelta(hours=24), True)
    assert (high.age_days, high.age_bucket) == (1, AgeBucket.D1_3)
    closed = standing(policy(), amount=Fraction(1000), currency="USD", oldest="2026-11-28", opened_at=opened,
                      active=False, now=NOW)
    assert closed.overdue is False and closed.due_at == high.due_at
    just_due = standing(policy(), amount=Fraction(1000), currency="USD", oldest=None,
                        opened_at=NOW - timedelta(hours=24), active=True, now=NOW)
    assert just_due.overdue is True and just_due.age_bucket is None


@pytest.mark.parametrize("days, bucket", [(0, AgeBucket.D0_1), (1, AgeBucket.D1_3), (2, AgeBucket.D1_3),
                                          (3, AgeBucket.D3_7), (6, AgeBucket.D3_7), (7, AgeBucket.D7_30),
                                          (29, AgeBucket.D7_30), (30, AgeBucket.D30_PLUS), (4000, AgeBucket.D30_PLUS)])
def test_aging_buckets_cover_every_age_once(days, bucket):
    assert age_bucket(days) is bucket


def test_aging_counts_by_bucket_severity_and_overdue():
    standings = [standing(policy(), amount=Fraction(a), currency="USD", oldest=o, opened_at=NOW - timedelta(hours=h),
                          active=True, now=NOW)
                 for a, o, h in ((1, "2026-11-29", 1), (1000, "2026-11-20", 30), (5, "2026-10-01", 1))]
    found = aging(standings)
    assert found.count == 3 and found.overdue == 1  # the high one, 30 h after opening (due in 24)
    assert found.by_age_bucket[AgeBucket.D0_1] == 1 and found.by_age_bucket[AgeBucket.D7_30] == 1
    assert found.by_age_bucket[AgeBucket.D30_PLUS] == 1
    assert found.by_severity == {Severity.LOW: 1, Severity.MEDIUM: 0, Severity.HIGH: 1, Severity.CRITICAL: 1}


def test_aging_sums_each_buckets_exception_sizes_per_currency_in_integers():
    def summary(n, currency, places, credits, debits):
        return ExceptionSummary(id=n, reconciliation_id=1, status=ExceptionStatus.OPEN, data_stream_key="bank",
                                decimal_places=places, currency=currency,
                                totals={"credit_sum": credits, "debit_sum": debits})

    summaries = [summary(1, "USD", 2, 1050, 0), summary(2, "USD", 3, 0, 2005),  # 10.50 and -2.005: sizes
                 summary(3, "JPY", 0, 700, 200), summary(4, None, 2, 99, 0), summary(5, "USD", 2, 1, 0)]
    standings = [standing(policy(), amount=Fraction(1), currency=s.currency, oldest=o, opened_at=NOW, active=True,
                          now=NOW) for s, o in zip(summaries, ["2026-10-01"] * 4 + ["2026-11-29"])]
    found = aging(standings, summaries)
    assert found.money_by_age_bucket[AgeBucket.D30_PLUS] == [BucketMoney("JPY", 0, 500, 1),
                                                            BucketMoney("USD", 3, 10_500 + 2_005, 2)]
    assert found.money_by_age_bucket[AgeBucket.D0_1] == [BucketMoney("USD", 2, 1, 1)]
    assert found.unpriced == 1 and found.by_age_bucket[AgeBucket.D30_PLUS] == 4  # counted, in no currency
    assert aging(standings).money_by_age_bucket == {}  # counts alone when no summary is given


def test_the_default_policy_is_valid_and_not_stored():
    default = default_policy("acme", 4)
    assert check_policy(default) is default and default.is_default


def test_a_policy_is_refused_naming_each_problem():
    bad = policy(due_in_hours={Severity.LOW: 0, Severity.MEDIUM: 1, Severity.HIGH: 1},
                 amount_thresholds={"usd": {Severity.LOW: 5}, "*": {Severity.HIGH: -1}},
                 age_thresholds={Severity.MEDIUM: 40_000}, amount_decimal_places=19)
    with pytest.raises(ValidationFailed) as refused:
        check_policy(bad)
    fields = sorted(e.field for e in refused.value.errors)
    assert fields == sorted(["amount_decimal_places", "due_in_hours.low", "due_in_hours.critical",
                             "amount_thresholds.usd", "amount_thresholds.usd.low", "amount_thresholds.*.high",
                             "age_thresholds.medium"])
