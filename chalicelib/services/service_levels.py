"""Service levels: a reconciliation's policy (GET/PUT/DELETE), each exception's severity, due time
and whether it is overdue (computed when read, from the policy and the exception's totals: nothing
is stored on the exception but the mark of its overdue event), the queue's filters on them, the
aging counts, and the `reconciliation_exception.overdue` event, once per opening of an exception.
The rules themselves are in domain/service_levels.py; docs/service-levels.md tells the whole."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from fractions import Fraction
from typing import Any

from chalicelib.domain import event_data
from chalicelib.domain.audit import system_actor
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.errors import Conflict
from chalicelib.domain.events import ANNOUNCEMENT_LEASE, Announcer, EventOrigin
from chalicelib.domain.reconciliation_exceptions import ACTIVE, Assignee, ExceptionSummary, ReconciliationException
from chalicelib.domain.service_levels import (
    AgeBucket,
    Aging,
    ServiceLevelPolicy,
    Severity,
    SlaSummary,
    Standing,
    aging,
    check_policy,
    default_policy,
    standing,
)
from chalicelib.observability import logger
from chalicelib.services import audit
from chalicelib.services.events import save_and_emit
from chalicelib.services.ports import Ports
from chalicelib.services.service_level_ports import ServiceLevelStore


def store(ports: Ports) -> ServiceLevelStore:
    if ports.service_levels is None:
        raise RuntimeError("service levels are not wired in these ports")
    return ports.service_levels


# The active exceptions, read once ---------------------------------------------------------------

class ActiveExceptions:
    """The environment's open and investigating exceptions as routing and the overdue event see
    them: read ONCE per sweep (or per refresh, or per deactivation) and passed down, never once
    per reconciliation or per pick. The assignments and marks written meanwhile are noted here, so
    that the loads of the picks that follow count them."""

    def __init__(self, summaries: Iterable[SlaSummary]) -> None:
        self._by_id = {s.summary.id: s for s in summaries if s.summary.status in ACTIVE}

    def __iter__(self) -> Iterator[SlaSummary]:
        return iter(sorted(self._by_id.values(), key=lambda s: -s.summary.id))

    def __len__(self) -> int:
        return len(self._by_id)

    def assigned(self, exception_id: int, assignees: tuple[Assignee, ...], routed_by: int | None = None) -> None:
        found = self._by_id.get(exception_id)
        if found is not None:
            self._by_id[exception_id] = replace(
                found, summary=replace(found.summary, assignees=assignees),
                routed_by=routed_by if routed_by is not None else found.routed_by)


def active_exceptions(ports: Ports, environment: str) -> ActiveExceptions:
    """One read of the environment's open and investigating exceptions (the sparse read of the
    active exception guards, not the queue's whole index: docs/service-levels.md)."""
    return ActiveExceptions(store(ports).active_summaries(environment))


# The policy -----------------------------------------------------------------------------------

def policy_of(ports: Ports, environment: str, reconciliation_id: int) -> ServiceLevelPolicy:
    """The reconciliation's policy, or the default one (version 0) when it has none."""
    stored = store(ports).policy(environment, reconciliation_id)
    return stored if stored is not None else default_policy(environment, reconciliation_id)


def policies_of(ports: Ports, environment: str, reconciliation_ids: Iterable[int]) -> dict[int, ServiceLevelPolicy]:
    wanted = set(reconciliation_ids)
    stored = store(ports).policies_of(environment, wanted) if wanted else {}
    return {i: stored.get(i) or default_policy(environment, i) for i in wanted}


def get_policy(ports: Ports, environment: str, reconciliation_id: int) -> ServiceLevelPolicy:
    ports.reconciliations.get(environment, reconciliation_id)  # 404 for one that does not exist
    return policy_of(ports, environment, reconciliation_id)


def put_policy(ports: Ports, environment: str, reconciliation_id: int, *, amount_decimal_places: int,
               amount_thresholds: dict[str, dict[Severity, int]], age_thresholds: dict[Severity, int],
               due_in_hours: dict[Severity, int], expected_version: int | None = None) -> ServiceLevelPolicy:
    """Replace the policy (the whole of it). `expected_version`: the version read before (409 when
    it changed since; 0 for the default); without it, the last write wins."""
    ports.reconciliations.get(environment, reconciliation_id)
    current = policy_of(ports, environment, reconciliation_id)
    if expected_version is not None and expected_version != current.version:
        raise Conflict(f"the service level policy is at version {current.version}, not {expected_version}; "
                       "read it again and retry")
    updated = check_policy(ServiceLevelPolicy(
        environment=environment, reconciliation_id=reconciliation_id, amount_decimal_places=amount_decimal_places,
        amount_thresholds=amount_thresholds, age_thresholds=age_thresholds, due_in_hours=due_in_hours,
        version=current.version + 1, updated_at=utc_now()))
    store(ports).save_policy(updated)
    audit.note(**audit.changes(_audited(current), _audited(updated)))
    return updated


def reset_policy(ports: Ports, environment: str, reconciliation_id: int) -> ServiceLevelPolicy:
    """Back to the default policy."""
    ports.reconciliations.get(environment, reconciliation_id)
    current = policy_of(ports, environment, reconciliation_id)
    store(ports).delete_policy(environment, reconciliation_id)
    default = default_policy(environment, reconciliation_id)
    audit.note(**audit.changes(_audited(current), _audited(default)))
    return default


def _audited(policy: ServiceLevelPolicy) -> dict[str, Any]:
    return {"default": policy.is_default, "amount_decimal_places": policy.amount_decimal_places,
            "amount_thresholds": {c: {s.value: v for s, v in levels.items()}
                                  for c, levels in sorted(policy.amount_thresholds.items())},
            "age_thresholds": {s.value: v for s, v in policy.age_thresholds.items()},
            "due_in_hours": {s.value: v for s, v in policy.due_in_hours.items()}}


# Standings ------------------------------------------------------------------------------------

def of_exception(policy: ServiceLevelPolicy, exception: ReconciliationException, now: datetime) -> Standing:
    """An exception's standing: its amount (|credits - debits|, exact at its scale), its oldest record."""
    kept = exception.totals or {}
    amount = Fraction(abs(kept.get("credit_sum", 0) - kept.get("debit_sum", 0)), 10 ** exception.decimal_places)
    return standing(policy, amount=amount, currency=exception.currency, oldest=kept.get("oldest"),
                    opened_at=exception.opened_at, active=exception.active, now=now)


def of_summary(policy: ServiceLevelPolicy, summary: ExceptionSummary, now: datetime) -> Standing:
    return standing(policy, amount=summary.amount, currency=summary.currency, oldest=summary.oldest,
                    opened_at=summary.opened_at or now, active=summary.status in ACTIVE, now=now)


def standings_of(ports: Ports, environment: str, exceptions: list[ReconciliationException],
                 now: datetime | None = None) -> dict[int, Standing]:
    """The standing of each exception (a page of the queue: one batch read of their policies)."""
    now = now or utc_now()
    policies = policies_of(ports, environment, (e.reconciliation_id for e in exceptions))
    return {e.id: of_exception(policies[e.reconciliation_id], e, now) for e in exceptions}


@dataclass(frozen=True)
class StandingFilter:
    """The queue's service level filters (None: any)."""
    overdue: bool | None = None
    severity: Severity | None = None
    age_bucket: AgeBucket | None = None

    @property
    def empty(self) -> bool:
        return self == StandingFilter()


def queue_filter(ports: Ports, environment: str, wanted: StandingFilter,
                 now: datetime | None = None) -> Callable[[ExceptionSummary], bool] | None:
    """A predicate of the queue's summaries (None when no filter is given): each reconciliation's
    policy is read once, on its first summary, with whether it is still there: an exception of a
    deleted reconciliation (or one being deleted) has no service level, so no filter keeps it."""
    if wanted.empty:
        return None
    now = now or utc_now()
    policies: dict[int, ServiceLevelPolicy | None] = {}

    def admits(summary: ExceptionSummary) -> bool:
        if summary.reconciliation_id not in policies:
            there = live_reconciliations(ports, environment, [summary.reconciliation_id])
            policies[summary.reconciliation_id] = policy_of(ports, environment, summary.reconciliation_id) \
                if there else None
        policy = policies[summary.reconciliation_id]
        if policy is None:
            return False
        found = of_summary(policy, summary, now)
        return ((wanted.overdue is None or found.overdue is wanted.overdue)
                and (wanted.severity is None or found.severity is wanted.severity)
                and (wanted.age_bucket is None or found.age_bucket is wanted.age_bucket))
    return admits


def aging_of(ports: Ports, environment: str, reconciliation_id: int | None = None,
             now: datetime | None = None) -> Aging:
    """The open and investigating exceptions (of one reconciliation, or all) by aging bucket, by
    severity, and how many are overdue: from the sparse read of the active exceptions (of the one
    reconciliation's guards alone, when given), never the queue's whole index. Those of a deleted
    reconciliation (or one being deleted) are not counted."""
    now = now or utc_now()
    sla = store(ports)
    active = sla.active_summaries(environment) if reconciliation_id is None else \
        sla.active_summaries_of(environment, [reconciliation_id])
    summaries = _of_live([s.summary for s in active if s.summary.status in ACTIVE
                          and (reconciliation_id is None or s.summary.reconciliation_id == reconciliation_id)],
                         ports, environment)
    policies = policies_of(ports, environment, (s.reconciliation_id for s in summaries))
    return aging([of_summary(policies[s.reconciliation_id], s, now) for s in summaries], summaries)


def agings(ports: Ports, environment: str, now: datetime | None = None) -> dict[int, Aging]:
    """`aging_of` for every reconciliation with open exceptions, from one sparse read of the active
    exceptions (the overview's); a deleted reconciliation (or one being deleted) has none."""
    now = now or utc_now()
    summaries = _of_live([s.summary for s in store(ports).active_summaries(environment)
                          if s.summary.status in ACTIVE], ports, environment)
    policies = policies_of(ports, environment, (s.reconciliation_id for s in summaries))
    mine = {rid: [s for s in summaries if s.reconciliation_id == rid] for rid in policies}
    return {rid: aging([of_summary(policies[rid], s, now) for s in mine[rid]], mine[rid]) for rid in policies}


def live_reconciliations(ports: Ports, environment: str, reconciliation_ids: Iterable[int]) -> set[int]:
    """Those of the reconciliations still there, neither deleted nor being deleted (one batch read).
    Their exceptions alone have service levels: a deleted reconciliation's open exceptions stay in
    the queue but leave routing and the overdue event (the active read finds no guard of theirs),
    the aging counts, the overview and the queue's service level filters (docs/service-levels.md)."""
    wanted = set(reconciliation_ids)
    return set(ports.reconciliations.visible(environment, wanted)) if wanted else set()


def _of_live(summaries: list[ExceptionSummary], ports: Ports, environment: str) -> list[ExceptionSummary]:
    live = live_reconciliations(ports, environment, (s.reconciliation_id for s in summaries))
    return [s for s in summaries if s.reconciliation_id in live]


# The overdue event ----------------------------------------------------------------------------

def notify_overdue(ports: Ports, environment: str, reconciliation_id: int | None = None,
                   now: datetime | None = None, active: ActiveExceptions | None = None) -> int:
    """Send `reconciliation_exception.overdue` for each open or investigating exception past its due
    time whose event for this opening was not sent: the mark (`overdue_notified_for`, its opening)
    is a conditional write carrying the event's hold (services/events.save_and_emit), so the event
    goes once per opening even when two sweeps race, and at least once if this process dies.
    `active`: the environment's active exceptions read already (else read here, once)."""
    now = now or utc_now()
    sla = store(ports)
    active = active if active is not None else active_exceptions(ports, environment)
    candidates = [s for s in active
                  if s.summary.status in ACTIVE and s.summary.opened_at is not None
                  and (reconciliation_id is None or s.summary.reconciliation_id == reconciliation_id)
                  and s.overdue_notified_for != iso(s.summary.opened_at)]
    if not candidates:
        return 0
    policies = policies_of(ports, environment, (s.summary.reconciliation_id for s in candidates))
    sent = 0
    for candidate in candidates:
        summary = candidate.summary
        if not of_summary(policies[summary.reconciliation_id], summary, now).overdue:
            continue
        exception = ports.exceptions.get(environment, summary.id)
        found = of_exception(policies[summary.reconciliation_id], exception, now)
        if not found.overdue:
            continue
        event = event_data.exception_overdue(exception, found.severity.value, found.due_at)
        announcer = Announcer(system_actor("service_levels", exception.reconciliation_id), ("severity", "due_at"))
        try:
            save_and_emit(ports, environment, event, EventOrigin.exception(exception.id),
                          _marking(sla, exception), announcer=announcer, lease=ANNOUNCEMENT_LEASE)
        except Conflict:
            continue  # another sweep sent it, or the exception was reopened meanwhile
        sent += 1
    return sent


def _marking(sla: ServiceLevelStore, exception: ReconciliationException) -> Callable[[str | None], None]:
    return lambda owed: sla.mark_overdue_notified(exception.environment, exception.id, exception.opened_at, owed)


def sweep(ports: Ports, now: datetime | None = None) -> dict[str, int]:
    """The sweeper's step: overdue events of every environment, the new exceptions a refresh left
    unrouted, and the open exceptions of deactivated users handed on by the routing rules
    (services/routing.py). One environment's failure stops no other."""
    from chalicelib.services import routing

    now = now or utc_now()
    counts = {"overdue": 0, "routed": 0, "reassigned": 0, "errors": 0}
    if ports.service_levels is None:
        return counts
    reconciliations = store(ports).all_reconciliations()
    for environment in sorted({e for e, _ in reconciliations}):
        try:
            active = active_exceptions(ports, environment)  # the one read of the environment's exceptions
            counts["overdue"] += notify_overdue(ports, environment, now=now, active=active)
            # What a refresh opened and could not route (it died, or the index did not show it yet).
            counts["routed"] += sum(routing.route_new(ports, environment, reconciliation_id, now=now, active=active)
                                    for e, reconciliation_id in reconciliations if e == environment)
            counts["reassigned"] += routing.reassign_from_deactivated(ports, environment, now=now, active=active)
        except Exception:
            logger.exception("sweeping service levels failed", extra={"environment": environment})
            counts["errors"] += 1
    return counts


def after_refresh(ports: Ports, environment: str, reconciliation_id: int, now: datetime | None = None) -> None:
    """The exceptions refresh's last step: route the exceptions it opened, tell of those past due.
    A failure is logged, never the refresh's (the sweeper's next minute tries again)."""
    if ports.service_levels is None:
        return
    from chalicelib.services import routing

    try:
        active = active_exceptions(ports, environment)
        routing.route_new(ports, environment, reconciliation_id, now=now, active=active)
        notify_overdue(ports, environment, reconciliation_id, now=now, active=active)
    except Exception:
        logger.exception("routing or overdue events after a refresh failed",
                         extra={"environment": environment, "reconciliation_id": reconciliation_id})

