"""The overview's sums: open exceptions per currency, exact across decimal places; what changed since."""
from datetime import UTC, datetime, timedelta

from chalicelib.domain.overview import by_reconciliation, changes, open_exceptions, overview_of, run_before
from chalicelib.domain.reconciliation_exceptions import ExceptionStatus, ExceptionSummary
from chalicelib.domain.runs import Run, RunKind, RunStatus, RunTrigger

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
SINCE = NOW - timedelta(days=1)


def summary(n, status=ExceptionStatus.OPEN, currency="USD", places=2, credits=0, debits=0, opened=NOW, closed=None):
    return ExceptionSummary(id=n, reconciliation_id=1, status=status, data_stream_key="bank", decimal_places=places,
                            totals={"credit_sum": credits, "debit_sum": debits}, currency=currency,
                            opened_at=opened, closed_at=closed)


def run(n, status, completed):
    return Run(environment="acme", id=n, reconciliation_id=1, kind=RunKind.BATCH, trigger=RunTrigger.MANUAL,
               status=status, created_at=completed - timedelta(minutes=1), completed_at=completed)


def test_amounts_add_up_per_currency_at_the_largest_scale_without_rounding():
    found = open_exceptions([summary(1, credits=1001), summary(2, places=3, debits=5),  # 10.01 + 0.005 USD
                             summary(3, currency="JPY", places=0, credits=7, debits=10),
                             summary(4, currency=None, credits=99),  # mixed: counted, not summed
                             summary(5, status=ExceptionStatus.RESOLVED, credits=10**18),
                             summary(6, status=ExceptionStatus.INVESTIGATING, credits=2**63 - 1)])
    assert found.count == 5 and found.mixed_currency == 1 and found.investigating == 1
    assert [(a.currency, a.decimal_places, a.amount) for a in found.amounts] == [
        ("JPY", 0, 3), ("USD", 3, 10010 + 5 + (2**63 - 1) * 10)]


def test_changes_count_what_ended_opened_and_closed_since():
    summaries = [summary(1, opened=SINCE + timedelta(hours=1)), summary(2, opened=SINCE - timedelta(hours=1)),
                 summary(3, status=ExceptionStatus.DISMISSED, opened=SINCE - timedelta(days=3), closed=NOW),
                 summary(4, status=ExceptionStatus.RESOLVED, opened=SINCE - timedelta(days=3),
                         closed=SINCE - timedelta(seconds=1))]
    runs = [run(3, RunStatus.FAILED, NOW), run(2, RunStatus.COMPLETED, SINCE), run(1, RunStatus.COMPLETED,
                                                                                    SINCE - timedelta(hours=2))]
    found = changes(summaries, runs, SINCE)
    assert (found.runs_completed, found.runs_failed, found.exceptions_opened, found.exceptions_closed) == (1, 1, 1, 1)
    assert run_before(runs, SINCE).id == 1


def test_summaries_are_grouped_by_reconciliation_once_and_each_overview_counts_its_own():
    from dataclasses import replace
    summaries = [summary(1), replace(summary(2), reconciliation_id=2), summary(3, status=ExceptionStatus.INVESTIGATING)]
    grouped = by_reconciliation(summaries)
    assert sorted(grouped) == [1, 2] and [s.id for s in grouped[1]] == [1, 3]
    first = overview_of(1, grouped[1], [], SINCE).open_exceptions
    assert (first.count, first.investigating) == (2, 1)
    assert overview_of(2, grouped[2], [], SINCE).open_exceptions.count == 1
