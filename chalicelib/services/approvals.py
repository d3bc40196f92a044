"""Four-eyes approvals (domain/approvals.py): the gates the actions pass, and deciding what waits.

Each gated action's service calls one `check_*` here once its own checks have passed (so a request
the action would refuse is refused, never turned into an approval): when the reconciliation's
policy covers the action and its amount is above the threshold, the approval is stored (pending),
announced (`approval.requested`: its audit entry, naming the requester, then its event) and
ApprovalRequired is raised, before anything of the action is written. The API answers 202 with
the approval; a bulk action's item is skipped with the approval's id.

Approving moves the approval pending -> executing in one conditional write (so of two approvals of
the same request, one runs the action), then runs the action through its own service function
with its gates open (`decided`), under its own audit entry (the action's, naming the requester and
the approval), and ends `approved` with what the action made, or `failed` with the reason the
action gave (a record matched elsewhere meanwhile, an exception moved...). Rejecting and expiring
are one conditional write each. Each end is announced once (`approval.approved` / `.rejected` /
`.expired`, its audit entry first) however often a request or a sweep repeats it.

Who requested: the request's actor (`user:<id>`, or `api_key:<id>` for a machine). Who decides: a
signed-in person of the approver or admin role who is not the requester (an API key never decides).
"""
from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Literal

from chalicelib.domain.approvals import (
    Amount,
    Approval,
    ApprovalAction,
    ApprovalPolicy,
    ApprovalRequired,
    ApprovalStatus,
    amount_of_exception,
    amount_of_sides,
    approval_decided,
    approval_requested,
    check_decider,
    check_policy,
)
from chalicelib.domain.audit import system_actor
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import (
    BrokenInvariant,
    Conflict,
    DomainError,
    FieldError,
    Forbidden,
    TransitionRefused,
    ValidationFailed,
    shown,
)
from chalicelib.domain.events import Announcer, EventOrigin
from chalicelib.domain.investigations.investigation import Investigation
from chalicelib.domain.matches import Match, MatchStatus
from chalicelib.domain.reconciliation_exceptions import CLOSED, ExceptionStatus, ReconciliationException
from chalicelib.domain.records import Record
from chalicelib.domain.users import user_actor
from chalicelib.observability import logger
from chalicelib.services import api_keys, audit
from chalicelib.services.events import save_and_emit
from chalicelib.services.ports import Approvals, Ports

SUMMARY_FIELDS = ("status", "action", "reconciliation_id", "amount", "amount_decimal_places", "requested_by",
                  "decided_by", "rejection_reason", "failure_reason", "result")
# The audit action of each action run once approved: its own route's (api/audit_trail.py ROUTE_ACTIONS).
EXECUTED_AS: dict[ApprovalAction, tuple[str, str]] = {
    ApprovalAction.MANUAL_MATCH: ("reconciliation_match.created", "reconciliation_match"),
    ApprovalAction.UNMATCH: ("reconciliation_match.deleted", "reconciliation_match"),
    ApprovalAction.DISMISSAL: ("reconciliation_exception.updated", "reconciliation_exception"),
    ApprovalAction.ACCEPT_INVESTIGATION: ("investigation.accepted", "investigation"),
}

# An approval `executing` longer than this was left by a process that died while the action ran: no
# process runs one that long (Lambda's longest timeout), and a manual match it began is rolled back by
# then (services/matches.py PENDING_FOR). The sweeper then settles it by the action's effect (`settle`).
SETTLE_AFTER = timedelta(minutes=15)
# A target's guard naming an approval not stored (yet): its request is storing it, unless it claimed
# the guard longer ago than a request lives.
TARGET_IN_FLIGHT = timedelta(minutes=15)
TARGET_ATTEMPTS = 5
TARGET_STORE_WAIT = 3.0  # seconds a second request waits for the first's approval to be stored

_decided: ContextVar[bool] = ContextVar("approvals_decided", default=False)
# The params of the approved manual match being made (`_execute`): what the gate replayed checks.
_approved_match: ContextVar[dict[str, Any] | None] = ContextVar("approved_manual_match", default=None)


@contextmanager
def decided() -> Iterator[None]:
    """Inside, the gates let actions through: an approved action running, or the inner step of an
    action whose own gate has passed (an accepted investigation's manual match)."""
    token = _decided.set(True)
    try:
        yield
    finally:
        _decided.reset(token)


def _repository(ports: Ports) -> Approvals:
    if ports.approvals is None:
        raise BrokenInvariant("approvals are not wired into these ports")
    return ports.approvals


# Gates ------------------------------------------------------------------------------------------

def check_manual_match(ports: Ports, environment: str, reconciliation_id: int, record_ids: list[int],
                       allow_difference: bool, reason: str | None, side_a: list[Record], side_b: list[Record],
                       allocations: Mapping[int, int] | None, *, shares: Mapping[int, int], difference: int) -> None:
    """A person's match of these records (services/matches.py `create_manual_match`), which takes
    `shares` of the records it takes in part (any other whole) and leaves `difference`. A partial
    payment's asked allocations are kept for its replay, and what it measures is what the match
    takes. The approved match is made only as it was asked about: replayed, the same shares and
    difference, or 409 (a record paid in part meanwhile would change both, unapproved)."""
    if _decided.get():
        approved = _approved_match.get()
        if approved is not None and "difference" in approved and (
                approved["difference"] != difference
                or {int(r): int(s) for r, s in approved["shares"]} != dict(shares)):
            raise Conflict(f"the records changed since the request: the match would now leave a difference of "
                           f"{difference} (minor units) where {approved['difference']} was approved, or take other "
                           "shares of them; nothing was matched: ask again")
        return

    def measure() -> list[Amount]:
        return amount_of_sides(_weighed(side_a, shares), _weighed(side_b, shares))

    _gate(ports, environment, reconciliation_id, ApprovalAction.MANUAL_MATCH, measure,
          {"reconciliation_id": reconciliation_id, "record_ids": list(record_ids),
           "allow_difference": allow_difference, "reason": reason,
           **({"allocations": [[rid, share] for rid, share in allocations.items()]} if allocations else {}),
           "shares": [[rid, share] for rid, share in sorted(shares.items())], "difference": difference},
          f"Match {len(record_ids)} records by hand in reconciliation {reconciliation_id}")


def check_unmatch(ports: Ports, match: Match) -> None:
    """An unmatch of a confirmed match (services/matches.py `unmatch`). Rejecting a proposed match
    (one nobody confirmed) reconciles nothing back: it is not gated; nor is a retry of an unmatch
    already under way."""
    if match.unmatching or match.status is not MatchStatus.CONFIRMED:
        return

    def measure() -> list[Amount]:
        members = ports.matches.members(match.environment, match.id)
        held = {h.record.id: h.record for h in ports.claims.held_records(match.environment,
                                                                          [m.record_id for m in members])}
        shares = {m.record_id: m.share for m in members if m.share is not None} | dict(match.allocations)
        return amount_of_sides(
            _weighed([held[m.record_id] for m in members if m.side == "a" and m.record_id in held], shares),
            _weighed([held[m.record_id] for m in members if m.side == "b" and m.record_id in held], shares))

    _gate(ports, match.environment, match.reconciliation_id, ApprovalAction.UNMATCH, measure,
          {"match_id": match.id}, f"Unmatch match {match.id} ({match.record_count} records)",
          target=("reconciliation_match", match.id))


def _weighed(records: list[Record], shares: Mapping[int, int]) -> list[Record]:
    """The records as the approval policy weighs them: a record the match takes a share of counts
    that share (in its own minor units), any other its whole amount (docs/approvals.md)."""
    return [replace(r, amount=shares[r.id]) if r.id in shares else r for r in records]


def check_status_move(ports: Ports, current: ReconciliationException, status: ExceptionStatus | None,
                      title: str | None, description: str | None) -> None:
    """A person's move of an exception to a closed status, `dismissed` or `resolved` alike: both
    take it off the open work (services/reconciliation_exceptions.py `update`: the PATCH route and a
    bulk status action alike), so choosing `resolved` cannot skip the approval a dismissal needs.
    The approval keeps the exception's version and totals: it is run only on the exception as it
    was asked about (`_execute`)."""
    if status not in CLOSED or current.status is status:
        return
    current.moved(status, utc_now())  # a move the status table refuses is refused (409), never held
    verb = "Dismiss" if status is ExceptionStatus.DISMISSED else "Resolve"
    _gate(ports, current.environment, current.reconciliation_id, ApprovalAction.DISMISSAL,
          lambda: amount_of_exception(current.totals, current.decimal_places, current.currency),
          {"exception_id": current.id, "status": status.value, "title": title, "description": description,
           "version": current.version, "totals": _kept_totals(current.totals)},
          f"{verb} exception {current.id} ({current.totals.get('record_count', 0)} records)",
          target=("reconciliation_exception", current.id))


TOTALS_COMPARED = ("record_count", "credit_sum", "debit_sum")


def _kept_totals(totals: dict[str, Any] | None) -> dict[str, int]:
    kept = totals or {}
    return {key: int(kept.get(key) or 0) for key in TOTALS_COMPARED}


def _exception_changed(params: dict[str, Any], exception: ReconciliationException) -> str | None:
    """Why the exception is no longer the one the approval was asked about (None: it is)."""
    if "version" in params and int(params["version"]) != exception.version:
        return (f"exception {exception.id} changed since the request (version {int(params['version'])} "
                f"then, {exception.version} now): ask again")
    if "totals" in params and _kept_totals(params["totals"]) != _kept_totals(exception.totals):
        then, now = _kept_totals(params["totals"]), _kept_totals(exception.totals)
        return (f"exception {exception.id} changed since the request (its records: {then['record_count']} then, "
                f"{now['record_count']} now; gross {then['credit_sum'] + then['debit_sum']} then, "
                f"{now['credit_sum'] + now['debit_sum']} now): ask again")
    return None


def check_accept(ports: Ports, investigation: Investigation) -> None:
    """An investigation's suggestion accepted as a match (services/investigations.py `accept`)."""
    def measure() -> list[Amount]:
        ids = list(investigation.target_record_ids) + list(investigation.suggested_record_ids)
        held = {h.record.id: h.record for h in ports.claims.held_records(investigation.environment, ids)}
        return amount_of_sides([held[i] for i in investigation.target_record_ids if i in held],
                               [held[i] for i in investigation.suggested_record_ids if i in held])

    _gate(ports, investigation.environment, investigation.reconciliation_id, ApprovalAction.ACCEPT_INVESTIGATION,
          measure, {"exception_id": investigation.exception_id, "investigation_id": investigation.id},
          f"Accept investigation {investigation.id} of exception {investigation.exception_id}",
          target=("investigation", investigation.id))


def _gate(ports: Ports, environment: str, reconciliation_id: int, action: ApprovalAction,
          measure: Callable[[], list[Amount]], params: dict[str, Any], description: str,
          target: tuple[str, int] | None = None) -> None:
    """Let the action through, or store it as a pending approval and raise ApprovalRequired. The
    policy is read only for a gated action; the amount only when the policy covers the action."""
    if _decided.get() or ports.approvals is None:
        return
    policy = ports.approvals.policy(environment, reconciliation_id)
    if not policy.covers(action):
        return
    held = policy.holding(action, measure())
    if held is None:
        return
    amount, threshold = held
    now = utc_now()
    requester, sent_by = _requester(ports, environment, audit.acting())
    approval = Approval(
        environment=environment, id=ports.counters.next_id(environment, "approval"),
        reconciliation_id=reconciliation_id, action=action, params=params, description=description,
        amount=amount.minor, amount_decimal_places=amount.decimal_places, currency=amount.currency,
        threshold=threshold, threshold_decimal_places=policy.threshold_decimal_places,
        status=ApprovalStatus.PENDING, requested_by=requester, requested_at=now, expires_at=now + policy.expiry,
        target_type=target[0] if target else None, target_id=target[1] if target else None,
        requested_with=sent_by)
    approvals = ports.approvals
    dedupe = dedupe_key(action, reconciliation_id, params, target)
    existing = _claim_target(ports, approval, dedupe, now)
    if existing is not None:  # the same action on the same target waits already: that approval answers
        audit.note(approval_requested=existing.id)
        raise ApprovalRequired(existing)
    try:
        save_and_emit(ports, environment, approval_requested(approval), EventOrigin.approval(approval.id),
                      lambda owed: approvals.add(approval, pending_event=owed),
                      announcer=Announcer(sent_by, SUMMARY_FIELDS))
    except Exception:
        approvals.release_target(environment, dedupe, approval.id)
        raise
    audit.note(approval_requested=approval.id)  # the request's own entry is this announcement (api/audit_trail.py)
    raise ApprovalRequired(approval)


def dedupe_key(action: ApprovalAction, reconciliation_id: int, params: dict[str, Any],
               target: tuple[str, int] | None) -> str:
    """One action on one target: the resource acted on (a match to unmatch, an exception to dismiss
    or resolve, an investigation to accept), or a manual match's set of records in its reconciliation
    with the shares it takes of them, if any."""
    if target is not None:
        return f"{action.value}#{target[0]}#{target[1]}"
    ids = ",".join(str(i) for i in sorted({int(i) for i in params.get("record_ids") or ()}))
    # The shares asked for are part of what is approved: other shares of the same records are another request
    shares = ",".join(f"{int(r)}:{int(a)}" for r, a in sorted(params.get("allocations") or ()))
    what = f"{ids}|{shares}" if shares else ids  # no shares: the key of a whole match, as before
    return f"{action.value}#{reconciliation_id}#{hashlib.sha256(what.encode()).hexdigest()[:40]}"


def _claim_target(ports: Ports, approval: Approval, dedupe: str, now: datetime) -> Approval | None:
    """Hold the target for `approval` (None), or the approval pending on it already. The guard is one
    conditional write: held by a pending approval, it answers that one; by one no longer pending
    (decided, expired), it is taken over conditionally on that holder; by one not stored (its request
    is storing it now, or died before), it is taken over once that request cannot be alive."""
    repository = _repository(ports)
    for _ in range(TARGET_ATTEMPTS):
        holder = repository.claim_target(approval.environment, dedupe, approval.id, now)
        if holder is None:
            return None
        held_id, claimed_at = holder
        held = repository.find(approval.environment, held_id)
        waited = time.monotonic() + TARGET_STORE_WAIT
        while held is None and now - claimed_at < TARGET_IN_FLIGHT and time.monotonic() < waited:
            time.sleep(0.05)  # its request is storing it: a moment, then answer with it
            held = repository.find(approval.environment, held_id)
        if held is not None:
            held = _expired_if_due(ports, held, now)
            if held.status is ApprovalStatus.PENDING:
                return held
        elif now - claimed_at < TARGET_IN_FLIGHT:
            raise Conflict(f"approval {held_id} of the same {approval.action.value} is being requested right now; "
                           "read the pending approvals in a moment")
        if repository.take_over_target(approval.environment, dedupe, held_id, approval.id, now):
            return None
    raise Conflict(f"the {approval.action.value} is being requested by others at this moment; ask again")


def _requester(ports: Ports, environment: str, sent_by: str | None) -> tuple[str, str]:
    """Who asks, for four eyes: the person behind the request (signed in, or the owner of the key
    it was sent with: api_keys.owner_of), else the unowned key itself (a machine's: any person may
    decide its requests). A request naming nobody (no request's actor: code calling an action
    outside any request or bulk action) is refused: an approval must name who asked."""
    if sent_by is None:
        raise Forbidden("this action needs an approval, and an approval must name who asked: send it as a signed-in "
                        "person or with an API key")
    owner = api_keys.owner_of(ports.api_keys, environment, sent_by)
    return (user_actor(owner) if owner is not None else sent_by), sent_by


# Deciding ---------------------------------------------------------------------------------------

def approve(ports: Ports, environment: str, approval_id: int, actor: str) -> Approval:
    """Run the approved action once (see the module's doc). The same approver's repeat (a double
    click, a retried request) answers the approval as it stands; anyone else's is 409."""
    approvals = _repository(ports)
    approval = current(ports, environment, approval_id)
    check_decider(approval, actor, "approving")
    if approval.status is not ApprovalStatus.PENDING:
        return _repeated(approval, actor, (ApprovalStatus.EXECUTING, ApprovalStatus.APPROVED, ApprovalStatus.FAILED),
                         "approved")
    try:
        executing = approvals.move(approval, ApprovalStatus.EXECUTING, decided_by=actor, decided_at=utc_now())
    except TransitionRefused:  # decided meanwhile (the other click, or another approver)
        return _repeated(current(ports, environment, approval_id), actor,
                         (ApprovalStatus.EXECUTING, ApprovalStatus.APPROVED, ApprovalStatus.FAILED), "approved")
    try:
        result = _execute(ports, executing, actor)
    except DomainError as refused:  # the world changed since the request: nothing was done
        return _end(ports, executing, ApprovalStatus.FAILED, actor, failure_reason=shown(refused.message, 500))
    # Any other error (a throttled write, a timeout) may have stopped the action part-way: the approval
    # stays executing, and the sweeper settles it by what the action left (`settle`: an unmatch
    # stopped half-way is finished), as for an approving process that died.
    return _end(ports, executing, ApprovalStatus.APPROVED, actor, result=result)


def reject(ports: Ports, environment: str, approval_id: int, actor: str, reason: str) -> Approval:
    """Refuse the action, with a reason: nothing of it is done. The same approver's repeat answers
    the approval as it stands; anyone else's, once decided, is 409."""
    if not reason.strip():
        raise ValidationFailed.on("reason", "give the reason of the rejection")
    approval = current(ports, environment, approval_id)
    check_decider(approval, actor, "rejecting")
    if approval.status is not ApprovalStatus.PENDING:
        return _repeated(approval, actor, (ApprovalStatus.REJECTED,), "rejected")
    try:
        return _end(ports, approval, ApprovalStatus.REJECTED, actor, decided_by=actor, decided_at=utc_now(),
                    rejection_reason=reason.strip())
    except TransitionRefused:
        return _repeated(current(ports, environment, approval_id), actor, (ApprovalStatus.REJECTED,), "rejected")


def _repeated(approval: Approval, actor: str, same: tuple[ApprovalStatus, ...], verb: str) -> Approval:
    if approval.status in same and approval.decided_by == actor:
        if approval.finished:
            return approval
        raise Conflict(f"approval {approval.id} is being {verb} by your earlier request; read it again in a moment")
    if approval.status is ApprovalStatus.EXPIRED:
        raise Conflict(f"approval {approval.id} expired on {approval.expires_at.isoformat()}: nothing was done; "
                       "ask again")
    raise Conflict(f"approval {approval.id} is {approval.status.value}"
                   + (f" (by {approval.decided_by})" if approval.decided_by else "")
                   + f"; only a pending approval can be {verb}")


def _execute(ports: Ports, approval: Approval, approver: str) -> dict[str, Any]:
    """Run the approved action through its own service function, its gates open, under its own
    audit entry (the requester's action; the summary names the approval and its approver)."""
    from chalicelib.services import investigations, matches
    from chalicelib.services import reconciliation_exceptions as exception_service

    environment, params = approval.environment, approval.params
    action, resource_type = EXECUTED_AS[approval.action]
    with audit.change_in_flight(ports, environment, request_id=f"approval-{approval.id}-{uuid.uuid4().hex[:12]}",
                                actor=approval.requested_with or approval.requested_by, action=action,
                                resource_type=resource_type, resource_id=approval.target_id,
                                summary={"approval_id": approval.id, "approved_by": approver}) as noted, \
            audit.collecting_notes() as notes, decided():
        result: dict[str, Any] = {}
        if approval.action is ApprovalAction.MANUAL_MATCH:
            approved = _approved_match.set(params)
            try:
                match = matches.create_manual_match(
                    ports, environment, params["reconciliation_id"], params["record_ids"],
                    bool(params["allow_difference"]), params.get("reason"),
                    {int(r): int(s) for r, s in params.get("allocations") or ()})
            finally:
                _approved_match.reset(approved)
            result = {"reconciliation_match_id": match.id}
            noted.resource_id = match.id
        elif approval.action is ApprovalAction.UNMATCH:
            matches.unmatch(ports, environment, int(params["match_id"]), decided_by=approval.requested_by,
                            approved_by=approver)  # the requester's decision (learned rules count it)
        elif approval.action is ApprovalAction.DISMISSAL:
            target = ExceptionStatus(params.get("status") or ExceptionStatus.DISMISSED.value)
            exception = ports.exceptions.get(environment, int(params["exception_id"]))
            if exception.status in CLOSED:
                raise Conflict(f"exception {exception.id} was {exception.status.value} meanwhile")
            changed = _exception_changed(params, exception)
            if changed:
                raise Conflict(changed)
            exception_service.update(ports, environment, exception.id, title=params.get("title"),
                                     description=params.get("description"), status=target)
            result = {"status": target.value}
        else:
            match = investigations.accept(ports, environment, int(params["exception_id"]),
                                          int(params["investigation_id"]))
            result = {"reconciliation_match_id": match.id}
        noted.summary.update(notes)
        return result


def _end(ports: Ports, approval: Approval, status: ApprovalStatus, actor: str, **fields: Any) -> Approval:
    """Move the approval to its end and owe its announcement in the same conditional write (the
    outbox, services/events.py `save_and_emit`): a process that dies after the move leaves the
    event's mark on the approval, and the sweeper announces it (its audit entry, then its event).
    Raises TransitionRefused when the stored status does not allow the move (nothing is owed)."""
    fields.setdefault("completed_at", utc_now())
    ended = replace(approval, status=status, **fields)
    return save_and_emit(ports, approval.environment, approval_decided(ended), EventOrigin.approval(approval.id),
                         lambda owed: _repository(ports).move_owing(approval, status, owed, **fields),
                         announcer=Announcer(actor, SUMMARY_FIELDS))


# Reading and expiring -----------------------------------------------------------------------------

def current(ports: Ports, environment: str, approval_id: int, now: datetime | None = None) -> Approval:
    """The approval as it stands: one pending past its expiry expires now (a conditional write)."""
    return _expired_if_due(ports, _repository(ports).get(environment, approval_id), now or utc_now())


def list_page(ports: Ports, environment: str, limit: int, cursor: str | None, *, status: ApprovalStatus | None,
              reconciliation_id: int | None, requested_by: str | None) -> tuple[list[Approval], str | None]:
    """A page of the environment's approvals, newest first; those due to expire on it expire now."""
    if status is ApprovalStatus.PENDING or status is ApprovalStatus.EXPIRED:
        sweep_environment(ports, environment)  # so that the filter sees what has expired by now
    found, cursor = _repository(ports).list_page(environment, limit, cursor, status=status,
                                                 reconciliation_id=reconciliation_id, requested_by=requested_by)
    now = utc_now()
    return [_expired_if_due(ports, approval, now) for approval in found], cursor


def _expired_if_due(ports: Ports, approval: Approval, now: datetime) -> Approval:
    if not approval.overdue(now):
        return approval
    actor = system_actor("approval_expiry", approval.id)
    try:
        return _end(ports, approval, ApprovalStatus.EXPIRED, actor, completed_at=now)
    except TransitionRefused:  # decided or expired meanwhile: the write that moved it owes its announcement
        return _repository(ports).get(approval.environment, approval.id)


def sweep_environment(ports: Ports, environment: str, now: datetime | None = None) -> int:
    """Expire the environment's approvals past their expiry (before a list filtered by status)."""
    now = now or utc_now()
    due = [a for a in _repository(ports).active(environment) if a.overdue(now)]
    for approval in due:
        _expired_if_due(ports, approval, now)
    return len(due)


def sweep(ports: Ports, now: datetime | None = None) -> int:
    """The sweeper's: expire every pending approval past its expiry, and settle every approval left
    `executing` by a process that died (`settle`), each announced once (one's trouble stops no
    other). Answers how many it moved."""
    if ports.approvals is None:
        return 0
    now = now or utc_now()
    moved = 0
    for approval in ports.approvals.active():
        try:
            if approval.overdue(now):
                moved += _expired_if_due(ports, approval, now).status is ApprovalStatus.EXPIRED
            elif stuck(approval, now):
                moved += settle(ports, approval, now) is not None
        except Exception:
            logger.exception("sweeping an approval failed", extra={"approval_id": approval.id,
                                                                   "status": approval.status.value,
                                                                   "environment": approval.environment})
    return moved


# Settling an approval whose approving process died -------------------------------------------------

def stuck(approval: Approval, now: datetime) -> bool:
    """Executing for longer than any process runs an action: its approver's process died."""
    return (approval.status is ApprovalStatus.EXECUTING and approval.decided_at is not None
            and now - approval.decided_at > SETTLE_AFTER)


def settle(ports: Ports, approval: Approval, now: datetime | None = None) -> Approval | None:
    """End an approval its approving process left `executing`, by the action's effect: `approved`
    (with what the action made) when the effect is there, `failed` (nothing was done) when it is
    not, an unmatch stopped half-way finished first. The end owes its announcement in the same
    conditional write (`_end`), by `system:approval_settle:<id>` (the approver stays `decided_by`).
    None: not settled now (a match still being written or rolled back: a later sweep looks again;
    or another process settled it meanwhile, whose write owes the announcement)."""
    now = now or utc_now()
    if not stuck(approval, now):
        return None
    actor = system_actor("approval_settle", approval.id)
    try:
        found = _effect(ports, approval, actor)
    except DomainError as refused:  # a resumed unmatch the world overtook
        found = (ApprovalStatus.FAILED, {"failure_reason": shown(refused.message, 500)})
    if found is None:
        return None
    status, fields = found
    try:
        return _end(ports, approval, status, actor, completed_at=now, **fields)
    except TransitionRefused:
        return None


STOPPED = "the approving process stopped before {what} (nothing was done); ask again"
Effect = tuple[ApprovalStatus, dict[str, Any]] | None


def _effect(ports: Ports, approval: Approval, actor: str) -> Effect:
    """What the action left: (approved, its result), (failed, why), or None (not known yet)."""
    environment, params = approval.environment, approval.params
    if approval.action is ApprovalAction.MANUAL_MATCH:
        found = _match_made(ports, approval, [int(i) for i in params["record_ids"]])
        return None if found == WAIT else _made(found, "the match was made")
    if approval.action is ApprovalAction.ACCEPT_INVESTIGATION:
        investigation = ports.investigations.get(environment, int(params["investigation_id"]))
        if investigation.accepted_match_id is not None:
            return ApprovalStatus.APPROVED, {"result": {"reconciliation_match_id": investigation.accepted_match_id}}
        record_ids = list(investigation.target_record_ids) + list(investigation.suggested_record_ids)
        found = _match_made(ports, approval, record_ids)
        if found == WAIT:
            return None
        if isinstance(found, Match):
            if not (found.reason or "").startswith(f"Accepted investigation {investigation.id}:"):
                found = None  # somebody else's match of the same records
            else:
                try:
                    ports.investigations.mark_accepted(investigation, found.id)  # the accept's last step
                except TransitionRefused:
                    pass
        return _made(found, "the suggestion was matched")
    if approval.action is ApprovalAction.DISMISSAL:
        target = str(params.get("status") or ExceptionStatus.DISMISSED.value)
        exception = ports.exceptions.find_many(environment, [int(params["exception_id"])]).get(
            int(params["exception_id"]))
        if (exception is not None and exception.status.value == target
                and exception.version > int(params.get("version") or 0)):
            return ApprovalStatus.APPROVED, {"result": {"status": target}}
        return ApprovalStatus.FAILED, {"failure_reason": STOPPED.format(
            what=f"exception {params['exception_id']} became {target}")}
    match = ports.matches.find(environment, int(params["match_id"]))  # an unmatch
    if match is None or match.unmatched_at is not None:
        return ApprovalStatus.APPROVED, {"result": {}}
    if match.unmatching:  # stopped half-way, its records partly released: finish what was approved
        _execute(ports, approval, approval.decided_by or actor)
        return ApprovalStatus.APPROVED, {"result": {}}
    return ApprovalStatus.FAILED, {"failure_reason": STOPPED.format(what=f"match {match.id} was unmatched")}


def _made(match: Match | Literal["wait"] | None, what: str) -> Effect:
    if not isinstance(match, Match):
        return ApprovalStatus.FAILED, {"failure_reason": STOPPED.format(what=what)}
    return ApprovalStatus.APPROVED, {"result": {"reconciliation_match_id": match.id}}


WAIT: Literal["wait"] = "wait"


def _match_made(ports: Ports, approval: Approval, record_ids: list[int]) -> Match | Literal["wait"] | None:
    """The match holding exactly `record_ids` in the approval's reconciliation, made since the
    approval began executing; None when there is none; WAIT while a match holding some of them is
    begun and not committed (the request died writing it: services/matches.py `sweep_pending`
    rolls it back, a later sweep sees which)."""
    environment, reconciliation_id = approval.environment, approval.reconciliation_id
    held = ports.claims.held_records(environment, record_ids)

    def holders(h: Any) -> set[int]:  # the match holding it whole, or those holding a share of it
        whole = h.match_in(reconciliation_id)
        return ({whole} if whole is not None else set()) | set(h.record.allocations.get(reconciliation_id, {}))

    held_by = [holders(h) for h in held]
    found = ports.matches.find_many(environment, sorted(set().union(*held_by))) if held_by else {}
    if any(m.pending_since is not None for m in found.values()):
        return WAIT
    if len(held) != len(record_ids) or approval.decided_at is None:
        return None
    made = [m for m in found.values() if all(m.id in ids for ids in held_by) and m.record_count == len(record_ids)
            and not m.unmatching and m.unmatched_at is None and m.created_at >= approval.decided_at]
    return made[0] if len(made) == 1 else None


# The policy ---------------------------------------------------------------------------------------

def policy(ports: Ports, environment: str, reconciliation_id: int) -> ApprovalPolicy:
    ports.reconciliations.get(environment, reconciliation_id)  # 404 for another environment's
    return _repository(ports).policy(environment, reconciliation_id)


def set_policy(ports: Ports, environment: str, reconciliation_id: int, *, actions: list[ApprovalAction],
               thresholds: dict[str, int], threshold_decimal_places: int, expires_after_minutes: int,
               actor: str | None) -> ApprovalPolicy:
    """An admin's: the whole policy at once (422 naming a bad number). Approvals already pending
    keep the threshold and expiry they were asked under."""
    before = policy(ports, environment, reconciliation_id)
    problems = check_policy(thresholds, threshold_decimal_places, expires_after_minutes)
    if problems:
        raise ValidationFailed([FieldError(name, message) for name, message in problems])
    updated = replace(before, actions=frozenset(actions), thresholds=dict(sorted(thresholds.items())),
                      threshold_decimal_places=threshold_decimal_places, expires_after_minutes=expires_after_minutes,
                      updated_at=utc_now(), updated_by=actor)
    _repository(ports).save_policy(updated)
    audit.note(**audit.changes(_audited(before), _audited(updated)))
    return updated


def _audited(policy: ApprovalPolicy) -> dict[str, Any]:
    return {"actions": sorted(a.value for a in policy.actions), "thresholds": dict(policy.thresholds),
            "threshold_decimal_places": policy.threshold_decimal_places,
            "expires_after_minutes": policy.expires_after_minutes}
