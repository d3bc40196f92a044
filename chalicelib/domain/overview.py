"""The overview of an environment: per reconciliation its open exceptions (how many, and what they
amount to in each currency), its runs, and what changed since a moment (a day ago, for the web app's
front page). Pure: the service reads the inputs, this adds them up."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from chalicelib.domain.reconciliation_exceptions import ExceptionStatus, ExceptionSummary, money_by_currency
from chalicelib.domain.runs import Run, RunStatus

ACTIVE = (ExceptionStatus.OPEN, ExceptionStatus.INVESTIGATING)


@dataclass(frozen=True)
class Amount:
    """|credits - debits| of some exceptions, in minor units at `decimal_places`."""
    currency: str
    decimal_places: int
    amount: int


@dataclass(frozen=True)
class OpenExceptions:
    count: int  # open and investigating
    amounts: tuple[Amount, ...]  # one per currency, largest scale of its exceptions
    mixed_currency: int  # exceptions in no single currency (several, or not recorded yet): counted, in no amount
    investigating: int = 0  # of `count`, those being investigated (the rest are open)


@dataclass(frozen=True)
class Changes:
    runs_completed: int
    runs_failed: int
    exceptions_opened: int
    exceptions_closed: int  # resolved or dismissed


@dataclass(frozen=True)
class ReconciliationOverview:
    reconciliation_id: int
    open_exceptions: OpenExceptions
    changes: Changes
    # The last run that completed before `since`: the match rate then, beside the last run's now.
    run_before: Run | None


def open_exceptions(summaries: Iterable[ExceptionSummary]) -> OpenExceptions:
    """How many active exceptions, and their amounts summed per currency (exact: each amount is
    scaled up to the currency's largest decimal places before adding)."""
    active = [summary for summary in summaries if summary.status in ACTIVE]
    money, mixed = money_by_currency(active)
    investigating = sum(1 for summary in active if summary.status is ExceptionStatus.INVESTIGATING)
    return OpenExceptions(len(active), tuple(Amount(m.currency, m.decimal_places, m.amount) for m in money), mixed,
                          investigating)


def changes(summaries: Iterable[ExceptionSummary], runs: Iterable[Run], since: datetime) -> Changes:
    """What happened at or after `since`: runs that ended, exceptions opened and closed."""
    ended = [r for r in runs if r.completed_at is not None and r.completed_at >= since]
    listed = list(summaries)
    return Changes(
        runs_completed=sum(r.status is RunStatus.COMPLETED for r in ended),
        runs_failed=sum(r.status is RunStatus.FAILED for r in ended),
        exceptions_opened=sum(s.opened_at is not None and s.opened_at >= since for s in listed),
        exceptions_closed=sum(s.closed_at is not None and s.closed_at >= since and s.status not in ACTIVE
                              for s in listed))


def run_before(runs: Iterable[Run], since: datetime) -> Run | None:
    """The newest run that completed before `since` (runs come newest first)."""
    return next((r for r in runs if r.status is RunStatus.COMPLETED and r.completed_at is not None
                 and r.completed_at < since), None)


def by_reconciliation(summaries: Iterable[ExceptionSummary]) -> dict[int, list[ExceptionSummary]]:
    """The summaries grouped by their reconciliation, in one pass (the overview reads them all once)."""
    grouped: dict[int, list[ExceptionSummary]] = defaultdict(list)
    for summary in summaries:
        grouped[summary.reconciliation_id].append(summary)
    return grouped


def overview_of(reconciliation_id: int, summaries: list[ExceptionSummary], runs: list[Run],
                since: datetime) -> ReconciliationOverview:
    """One reconciliation's overview from its exceptions' summaries (others' are skipped: pass the
    groups of by_reconciliation to read the environment's once) and its newest runs."""
    own = [s for s in summaries if s.reconciliation_id == reconciliation_id]
    return ReconciliationOverview(reconciliation_id, open_exceptions(own), changes(own, runs, since),
                                  run_before(runs, since))
