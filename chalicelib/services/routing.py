"""Routing rules: their CRUD (under /reconciliations/{id}/routing_rules), the assignment of the
exceptions a refresh opens, and the handing on of a deactivated user's open exceptions. Whom a rule
picks is domain/routing.py's `choose`; the state it reads is kept safe here:

- Every pick of an environment is a conditional write of its routing state (`version`): two
  refreshes (or a refresh and a deactivation) picking at once never both pick from the same
  state; the loser reads again (the winner's pick included) and picks again.
- A pick stays in the state's `pending` until its assignment is written (`settle`), and counts in
  the loads until then: loads are the open exceptions assigned to each user (read once per sweep,
  refresh or deactivation: services/service_levels.active_exceptions, with the assignments written
  since noted in it), plus the pending picks not yet visible there. A pick whose writer died
  expires after PICK_LEASE. Settling moves the state's version, so an older read never writes a
  settled pick back.
- An exception is routed once: the assignment is written with the exception's version (a person's
  change meanwhile wins: the next refresh looks again), then marked `routed_by`; a person who
  unassigns a routed exception is not overruled.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from chalicelib.domain import event_data
from chalicelib.domain.audit import system_actor
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, FieldError, NotFound, ValidationFailed
from chalicelib.domain.events import ANNOUNCEMENT_LEASE, Announcer, EventOrigin
from chalicelib.domain.reconciliation_exceptions import ACTIVE, Assignee, ReconciliationException
from chalicelib.domain.routing import (
    MAX_RULES,
    RoutingRule,
    Strategy,
    check_rule,
    choose,
    first_rule,
    ordered,
    team_of,
)
from chalicelib.domain.service_levels import Severity, SlaSummary
from chalicelib.domain.users import Role, User, UserStatus
from chalicelib.observability import logger
from chalicelib.services import audit
from chalicelib.services import service_levels as sla
from chalicelib.services.events import save_and_emit
from chalicelib.services.ports import Ports
from chalicelib.services.users import every_user

PICK_LEASE = timedelta(minutes=15)  # a pending pick whose assignment was never written stops counting
MAX_PICK_ATTEMPTS = 25


# The rules ------------------------------------------------------------------------------------

def list_rules(ports: Ports, environment: str, reconciliation_id: int) -> list[RoutingRule]:
    ports.reconciliations.get(environment, reconciliation_id)
    return ordered(sla.store(ports).rules_of(environment, reconciliation_id))


def get_rule(ports: Ports, environment: str, reconciliation_id: int, rule_id: int) -> RoutingRule:
    ports.reconciliations.get(environment, reconciliation_id)
    return sla.store(ports).rule(environment, reconciliation_id, rule_id)


def add_rule(ports: Ports, environment: str, reconciliation_id: int, *, name: str, strategy: Strategy,
             position: int, team_role: Role | None, team_user_ids: list[int], data_stream_key: str | None,
             severity: Severity | None, enabled: bool) -> RoutingRule:
    reconciliation = ports.reconciliations.get(environment, reconciliation_id)
    store = sla.store(ports)
    if len(store.rules_of(environment, reconciliation_id)) >= MAX_RULES:
        raise ValidationFailed.on("name", f"a reconciliation has at most {MAX_RULES} routing rules")
    now = utc_now()
    rule = check_rule(RoutingRule(
        environment=environment, id=store.next_rule_id(environment), reconciliation_id=reconciliation_id, name=name,
        strategy=strategy, position=position, team_role=team_role, team_user_ids=tuple(team_user_ids),
        data_stream_key=data_stream_key, severity=severity, enabled=enabled, created_at=now, updated_at=now))
    _check_references(ports, rule, reconciliation.stream_keys)
    store.add_rule(rule)
    audit.note(after=_audited(rule))
    return rule


def update_rule(ports: Ports, environment: str, reconciliation_id: int, rule_id: int,
                changes: dict[str, Any]) -> RoutingRule:
    """`changes`: the fields given (a team given replaces the team: role or user ids)."""
    reconciliation = ports.reconciliations.get(environment, reconciliation_id)
    store = sla.store(ports)
    current = store.rule(environment, reconciliation_id, rule_id)
    fields = dict(changes)
    if "team_role" in fields or "team_user_ids" in fields:
        fields.setdefault("team_role", None)
        fields["team_user_ids"] = tuple(fields.get("team_user_ids") or ())
    updated = check_rule(replace(current, **fields, updated_at=utc_now(), version=current.version + 1))
    _check_references(ports, updated, reconciliation.stream_keys)
    store.save_rule(updated)
    audit.note(**audit.changes(_audited(current), _audited(updated)))
    return updated


def delete_rule(ports: Ports, environment: str, reconciliation_id: int, rule_id: int) -> None:
    ports.reconciliations.get(environment, reconciliation_id)
    store = sla.store(ports)
    rule = store.rule(environment, reconciliation_id, rule_id)
    store.remove_rule(rule)
    audit.note(before=_audited(rule))


def _check_references(ports: Ports, rule: RoutingRule, stream_keys: Iterable[str]) -> None:
    errors: list[FieldError] = []
    if rule.data_stream_key is not None and rule.data_stream_key not in set(stream_keys):
        errors.append(FieldError("data_stream_key", f"'{rule.data_stream_key[:64]}' is not a data stream of this "
                                                    "reconciliation"))
    if rule.team_user_ids:
        found = ports.users.get_many(rule.environment, rule.team_user_ids)
        errors += [FieldError(f"team.user_ids[{n}]", f"user {user_id} is not a user of this environment")
                   for n, user_id in enumerate(rule.team_user_ids) if user_id not in found]
    if errors:
        raise ValidationFailed(errors)


def _audited(rule: RoutingRule) -> dict[str, Any]:
    return {"id": rule.id, "name": rule.name, "strategy": rule.strategy.value, "position": rule.position,
            "team_role": rule.team_role.value if rule.team_role else None, "team_user_ids": list(rule.team_user_ids),
            "data_stream_key": rule.data_stream_key, "severity": rule.severity.value if rule.severity else None,
            "enabled": rule.enabled}


# Routing --------------------------------------------------------------------------------------

def route_new(ports: Ports, environment: str, reconciliation_id: int, now: datetime | None = None,
              active: sla.ActiveExceptions | None = None) -> int:
    """Assign the reconciliation's new exceptions (the refresh's last step): each open one nobody is
    assigned to, never routed, created after the rule that takes it. How many were assigned.
    `active`: the environment's active exceptions read already (the sweep's, once for all its
    reconciliations); else read here, once."""
    now = now or utc_now()
    store = sla.store(ports)
    rules = [r for r in store.rules_of(environment, reconciliation_id) if r.enabled]
    if not rules:
        return 0
    active = active if active is not None else sla.active_exceptions(ports, environment)
    waiting = [s for s in active
               if s.summary.reconciliation_id == reconciliation_id and s.summary.status in ACTIVE
               and not s.summary.assignees and s.routed_by is None]
    if not waiting:
        return 0
    policy = sla.policy_of(ports, environment, reconciliation_id)
    people = _users(ports, environment)
    assigned = 0
    for candidate in sorted(waiting, key=lambda s: s.summary.id):
        summary = candidate.summary
        rule = first_rule(rules, summary.data_stream_key, sla.of_summary(policy, summary, now).severity)
        if rule is None or not _new_for(rule, candidate):
            continue
        team = team_of(rule, people.values())
        if not team:
            logger.warning("a routing rule's team has nobody to assign", extra={"routing_rule_id": rule.id})
            continue
        assigned += _route(ports, environment, summary.id, rule, team, people, now, active)
    return assigned


def _new_for(rule: RoutingRule, candidate: SlaSummary) -> bool:
    """Created after the rule (the exceptions before it keep their people, or their lack of one)."""
    return rule.created_at is None or candidate.created_at is None or candidate.created_at >= rule.created_at


def reassign_from(ports: Ports, environment: str, user: User, now: datetime | None = None,
                  active: sla.ActiveExceptions | None = None) -> int:
    """The deactivated user's open exceptions, each handed by the first rule that takes it to its
    team (the user left out): the new assignee added, then the user removed. One no rule takes
    keeps the user (shown in the queue as assigned to a deactivated user). How many were handed on."""
    now = now or utc_now()
    store = sla.store(ports)
    active = active if active is not None else sla.active_exceptions(ports, environment)
    theirs = [s.summary for s in active
              if s.summary.status in ACTIVE and any(a.user_id == user.id for a in s.summary.assignees)]
    if not theirs:
        return 0
    people = _users(ports, environment)
    rules: dict[int, list[RoutingRule]] = {}
    policies = sla.policies_of(ports, environment, (s.reconciliation_id for s in theirs))
    handed = 0
    for summary in sorted(theirs, key=lambda s: s.id):
        if summary.reconciliation_id not in rules:
            rules[summary.reconciliation_id] = [r for r in store.rules_of(environment, summary.reconciliation_id)
                                                if r.enabled]
        severity = sla.of_summary(policies[summary.reconciliation_id], summary, now).severity
        rule = first_rule(rules[summary.reconciliation_id], summary.data_stream_key, severity)
        team = team_of(rule, people.values(), excluding=[user.id]) if rule else []
        if rule is None or not team:
            continue
        try:
            handed += _route(ports, environment, summary.id, rule, team, people, now, active, replacing=user.id)
        except Exception:
            logger.exception("handing on a deactivated user's exception failed",
                             extra={"exception_id": summary.id, "user_id": user.id})
    return handed


def reassign_from_deactivated(ports: Ports, environment: str, now: datetime | None = None,
                              active: sla.ActiveExceptions | None = None) -> int:
    """The sweeper's: what a deactivation's own handing on left (its request died part-way)."""
    active = active if active is not None else sla.active_exceptions(ports, environment)
    assigned = {a.user_id for s in active if s.summary.status in ACTIVE
                for a in s.summary.assignees if a.user_id is not None}
    if not assigned:
        return 0
    gone = [u for u in ports.users.get_many(environment, assigned).values() if u.status is UserStatus.DEACTIVATED]
    return sum(reassign_from(ports, environment, u, now, active) for u in gone)


def _users(ports: Ports, environment: str) -> dict[int, User]:
    return {u.id: u for u in every_user(ports, environment)}


def loads(summaries: Iterable[SlaSummary], pending: dict[int, tuple[int, datetime]], now: datetime,
          ) -> tuple[Counter[int], list[int]]:
    """Each user's open exceptions assigned (as read once), plus the pending picks not yet seen
    there; and the pending picks past their lease (to drop)."""
    assigned: dict[int, set[int]] = {}
    counted: Counter[int] = Counter()
    for s in summaries:
        if s.summary.status in ACTIVE:
            users = {a.user_id for a in s.summary.assignees if a.user_id is not None}
            assigned[s.summary.id] = users
            counted.update(users)
    expired = []
    for exception_id, (user_id, at) in pending.items():
        if now - at > PICK_LEASE:
            expired.append(exception_id)
        elif user_id not in assigned.get(exception_id, set()):
            counted[user_id] += 1
    return counted, expired


def pick(ports: Ports, environment: str, rule: RoutingRule, team: list[int], exception_id: int,
         now: datetime, active: Iterable[SlaSummary] | None = None) -> int:
    """Whom of the team the exception goes to, the pick written to the routing state (conditional
    on its version: when another pick came first, read again the state item only, and pick again:
    the other's pick is in its pending picks, which the loads count). `active`: the exceptions read
    once by the caller (least loaded only; read here, once, when not given)."""
    store = sla.store(ports)
    seen: Iterable[SlaSummary] = ()
    if rule.strategy is Strategy.LEAST_LOADED:
        seen = list(active if active is not None else sla.active_exceptions(ports, environment))
    for _ in range(MAX_PICK_ATTEMPTS):
        state = store.state(environment)
        counted, expired = loads(seen, state.pending, now)
        user_id, cursor = choose(rule.strategy, team, counted, state.cursors.get(rule.id, 0))
        if store.advance(environment, state, rule.id, cursor, exception_id, user_id, now, expired):
            return user_id
    raise Conflict("the routing state kept changing; the next refresh routes this exception")


def _route(ports: Ports, environment: str, exception_id: int, rule: RoutingRule, team: list[int],
           people: dict[int, User], now: datetime, active: sla.ActiveExceptions, replacing: int | None = None) -> int:
    """Pick, assign (then unassign `replacing`), mark routed; 1 when assigned. The pick leaves the
    pending picks however this ends; the assignment written is noted in `active` (the loads of
    the next picks count it, though the pick left the pending ones)."""
    user_id = pick(ports, environment, rule, team, exception_id, now, active)
    try:
        current = ports.exceptions.get(environment, exception_id)
        if not current.active or (replacing is None and current.assignees):
            return 0  # moved or assigned meanwhile: a person's change wins
        user = people[user_id]
        announcer = Announcer(system_actor("routing_rule", rule.id), ("change", "idp_user_ids"))
        if not any(a.user_id == user.id for a in current.assignees):
            assignee = Assignee(ports.exceptions.next_id(environment, "exception_assignee"), user.idp_user_id, user.id)
            current = _save(ports, current, current.assignees + (assignee,), now, announcer)
        if replacing is not None:
            current = _save(ports, current, tuple(a for a in current.assignees if a.user_id != replacing), now,
                            announcer)
        active.assigned(exception_id, current.assignees)
        sla.store(ports).mark_routed(environment, exception_id, rule.id)
        active.assigned(exception_id, current.assignees, routed_by=rule.id)
        return 1
    except (Conflict, NotFound):
        return 0  # changed meanwhile: the next pass looks again
    finally:
        sla.store(ports).settle(environment, exception_id)


def _save(ports: Ports, current: ReconciliationException, assignees: tuple[Assignee, ...], now: datetime,
          announcer: Announcer) -> ReconciliationException:
    updated = replace(current, assignees=assignees, updated_at=now, version=current.version + 1)
    save_and_emit(ports, current.environment, event_data.exception_assigned(current, updated),
                  EventOrigin.exception(current.id),
                  lambda owed: ports.exceptions.save(updated, previous=current, pending_event=owed),
                  announcer=announcer, lease=ANNOUNCEMENT_LEASE)
    return updated
