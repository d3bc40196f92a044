"""Bulk actions: one action on many exceptions (assign, status, comment) or proposed matches
(confirm, reject), by ids or by the list routes' filters, worked asynchronously with a result per
item (domain/bulk_actions.py).

Submitting checks the action's fields as the single-item route would (422), resolves a filter to
its ids once (refused past MAX_FILTERED), stores them and queues the action on the bulk queue (a
message of its own kind). The worker works the items a chunk at a time: one batch read of the
chunk's exceptions or matches tells what is missing or already so; every other item goes through
the single-item use case (services/reconciliation_exceptions.py, services/matches.py), so its
status table, conditional write, event and audit entry are that route's. The audit entry of each
item names the caller and the bulk action (audit.change_in_flight: an entry even if the worker dies
after the change). A redelivered message re-runs at most the chunk it died in: an item applied
then is found already so (`skipped`), a comment is written under the id reserved for it (once).
Two deliveries may run at once (an idempotent re-POST or the sweeper re-sends a pending action's
message; SQS duplicates): an item's mark names the delivery working it, and another delivery
finishes it only once its lease (ITEM_LEASE, longer than a worker lives) lapsed; before that it
waits for its result or leaves the chunk to the live delivery (its message sent again, delayed).
"""
from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from chalicelib.domain.approvals import ApprovalRequired
from chalicelib.domain.audit import system_actor
from chalicelib.domain.bulk_actions import (
    AUDIT_ACTION,
    CHUNK_ITEMS,
    BulkAction,
    BulkActionKind,
    BulkStatus,
    BulkTarget,
    ItemMark,
    ItemResult,
    ItemStatus,
    bulk_action_completed,
    check_ids,
    chunk_range,
    over_cap,
    refusal,
)
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, DomainError, TransitionRefused, ValidationFailed
from chalicelib.domain.events import Event
from chalicelib.domain.executions import ExecutionStopped
from chalicelib.domain.matches import Match, MatchStatus
from chalicelib.domain.reconciliation_exceptions import ExceptionStatus, ReconciliationException
from chalicelib.domain.users import Role, User, can_be_named
from chalicelib.observability import logger
from chalicelib.services import audit, idempotency, period_closes, sweeping, users
from chalicelib.services import matches as match_service
from chalicelib.services import reconciliation_exceptions as exception_service
from chalicelib.services.events import announce
from chalicelib.services.paging import every
from chalicelib.services.ports import Ports
from chalicelib.services.sweeping import SweptKind

MESSAGE_KIND = "bulk_action"  # on the bulk queue, beside the bulk requests' messages
MATCH_PAGE = 200
ITEM_THREADS = 4
WORK_BUDGET_SECONDS = 600.0  # of one delivery: the bulk worker's timeout is 900 s
# An item's mark with no result is another delivery's change under way (an idempotent re-POST or
# the sweeper re-sends a pending action's message, SQS delivers twice): it is finished by another
# delivery only past this lease, longer than any worker lives (the bulk worker's timeout, 900 s).
ITEM_LEASE = timedelta(seconds=960)
ITEM_WAIT_SECONDS = 20.0  # how long a delivery waits for a live one's item before leaving the chunk
ITEM_POLL_SECONDS = 0.25


class ItemBusy(Exception):
    """Another delivery, alive, is changing an item of this chunk: this one leaves the chunk to it
    and comes back (its message, delayed) when it is done or its lease lapsed."""

    def __init__(self, index: int, retry_in: timedelta) -> None:
        super().__init__(f"item {index} is being worked by another delivery")
        self.index = index
        self.retry_seconds = max(1, min(900, int(retry_in.total_seconds()) + 1))


@dataclass(frozen=True)
class Caller:
    """Who submits: each item is done as them (their role, their name in its audit entry and events)."""
    actor: str
    role: Role
    user: User | None = None


def body_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def payload_key(environment: str, action_id: int) -> str:
    return f"bulk/actions/{environment}/{action_id}.json"  # bulk/: the roles' grants and its 7-day expiry


def message(environment: str, action_id: int) -> dict[str, Any]:
    return {"kind": MESSAGE_KIND, "environment": environment, "bulk_action_id": action_id}


# Submitting -------------------------------------------------------------------------------------

def exception_params(ports: Ports, environment: str, caller: Caller, action: BulkActionKind, *,
                     user_id: int | None = None, idp_user_id: str | None = None, status: str | None = None,
                     body: str | None = None, author_idp_id: str | None = None,
                     mentions: list[int] | None = None) -> dict[str, Any]:
    """The fields an exception action needs, checked as its single-item route checks them (422)."""
    if action is BulkActionKind.ASSIGN:
        if user_id is None and idp_user_id is None:
            raise ValidationFailed.on("user_id", "give user_id or idp_user_id")
        user = users.active_user(ports, environment, "user_id" if user_id is not None else "idp_user_id",
                                 user_id=user_id, idp_user_id=idp_user_id)
        if idp_user_id is not None and user.idp_user_id != idp_user_id:
            raise ValidationFailed.on("idp_user_id", f"user {user.id} is not '{idp_user_id[:64]}': give one of the two")
        return {"user_id": user.id, "idp_user_id": user.idp_user_id}
    if action is BulkActionKind.STATUS:
        if status is None:
            raise ValidationFailed.on("status", "give the status to move the exceptions to")
        return {"status": ExceptionStatus(status).value}
    if action is BulkActionKind.COMMENT:
        if body is None or not body.strip() or len(body) > exception_service.MAX_BODY:
            raise ValidationFailed.on("body", f"must be 1 to {exception_service.MAX_BODY} characters")
        if caller.user is not None:
            if author_idp_id is not None and author_idp_id != caller.user.idp_user_id:
                raise ValidationFailed.on("author_idp_id", "the author is the signed-in user; omit it")
            author = caller.user
        elif author_idp_id is None:
            raise ValidationFailed.on("author_idp_id", "an API key names the comment's author: the idp_user_id of "
                                                       "an active user of this environment")
        else:
            author = users.active_user(ports, environment, "author_idp_id", idp_user_id=author_idp_id)
        users.active_users(ports, environment, mentions or [], "mentions")
        return {"body": body, "author_idp_id": author.idp_user_id, "mentions": list(mentions or [])}
    raise ValidationFailed.on("action", f"'{action.value}' is not an action on exceptions")


def filtered_exceptions(ports: Ports, environment: str, query: exception_service.ExceptionQuery) -> list[int]:
    """The ids the queue's filters keep, newest first (one read of the environment's exception
    index, as the queue's own), refused past MAX_FILTERED."""
    exception_service.check_query(query)
    ids = [s.id for s in ports.exceptions.summaries(environment) if query.admits(s)]
    problem = over_cap(len(ids), "exceptions")
    if problem:
        raise ValidationFailed.on("filter", problem)
    return ids


def filtered_matches(ports: Ports, environment: str, reconciliation_id: int) -> list[int]:
    """The proposed matches of a reconciliation, newest first (the match list's read, a page at a
    time), refused past MAX_FILTERED; 404 for a reconciliation of another environment."""
    reconciliation = ports.reconciliations.get(environment, reconciliation_id)
    ids: list[int] = []
    for match in every(lambda cursor: ports.matches.list_page(environment, reconciliation.id, MATCH_PAGE, cursor,
                                                              status=MatchStatus.PROPOSED)):
        ids.append(match.id)
        if problem := over_cap(len(ids), "proposed matches"):
            raise ValidationFailed.on("filter", problem)
    return ids


def checked_ids(ids: list[int]) -> list[int]:
    problems = check_ids(ids)
    if problems:
        raise ValidationFailed.on("ids", problems[0])
    return ids


def submit(ports: Ports, environment: str, caller: Caller, target: BulkTarget, action: BulkActionKind,
           params: dict[str, Any], select: Callable[[], list[int]], selection: dict[str, Any], digest: str,
           idempotency_key: str | None) -> BulkAction:
    """Create the bulk action of the ids `select` gives and queue it. With an idempotency key, a
    repeat of the same body returns the first action (queued again while it is pending: the first
    send may have been lost); the same key with another body is 409."""
    action_id, existing = idempotency.claim_id(
        environment, idempotency_key, digest, next_id=lambda: ports.counters.next_id(environment, "bulk_action"),
        claim=ports.bulk_actions.claim_idempotency_key, find=ports.bulk_actions.find,
        send_again=lambda found: ports.bulk_queue.send(message(environment, found)))
    if existing is not None:
        return existing
    ids = select()
    now = utc_now()
    created = BulkAction(
        environment=environment, id=action_id, target=target, action=action, params=params,
        status=BulkStatus.PENDING if ids else BulkStatus.COMPLETED, total_items=len(ids), created_at=now,
        actor=caller.actor, role=caller.role, user_id=caller.user.id if caller.user else None, selection=selection,
        idempotency_key=idempotency_key, body_hash=digest, completed_at=None if ids else now)
    if ids:
        ports.payloads.put_json(payload_key(environment, action_id), {"ids": ids})
    ports.bulk_actions.add(created)
    if ids:
        ports.bulk_queue.send(message(environment, action_id))
    stored = ports.bulk_actions.get(environment, action_id)
    announce_end(ports, stored)  # none selected: it ended at once
    return stored


# Working ----------------------------------------------------------------------------------------

def process(ports: Ports, environment: str, action_id: int,
            budget_seconds: float = WORK_BUDGET_SECONDS) -> BulkAction | None:
    """Work (or resume) one bulk action to the end. Safe to call any number of times. Past
    `budget_seconds` (well inside the worker's 15 minutes) it queues itself again and returns: the
    next delivery goes on from the first chunk not done."""
    deadline = time.monotonic() + budget_seconds
    owner = uuid.uuid4().hex  # this delivery: the owner of the items it marks
    action = ports.bulk_actions.find(environment, action_id)
    if action is None:
        logger.warning("bulk action not found; message dropped", extra={"bulk_action_id": action_id})
        return None
    if action.finished:
        announce_end(ports, action)  # a worker that died between the end and its announcement
        return action
    if action.status is BulkStatus.PENDING:
        try:
            action = ports.bulk_actions.move(action, BulkStatus.PROCESSING, started_at=utc_now(),
                                             last_progress_at=utc_now())
        except TransitionRefused:  # another delivery moved it meanwhile
            action = ports.bulk_actions.get(environment, action_id)
            if action.finished:
                announce_end(ports, action)
                return action
    ids: list[int] = ports.payloads.get_json(payload_key(environment, action_id))["ids"]
    if action.action is BulkActionKind.COMMENT and action.first_comment_id is None:
        block = ports.counters.next_ids(environment, "exception_comment", max(action.total_items, 1))
        action = ports.bulk_actions.reserve_comment_ids(action, block.start)
    role = current_role(ports, action)
    worked = False
    for chunk in range(action.chunk_count):
        if chunk in action.done_chunks:
            continue
        if ports.stopping():  # the message stays with the queue: the next start resumes here
            raise ExecutionStopped(f"bulk action {action_id} stopped after {len(action.done_chunks)} chunks")
        if worked and time.monotonic() > deadline:  # a chunk at least each delivery: it always gets on
            ports.bulk_queue.send(message(environment, action_id))
            return action
        worked = True
        again = ports.bulk_actions.begin_chunk(action, chunk)
        indexes = chunk_range(chunk, action.total_items)
        try:
            results = work_chunk(ports, action, role, [(i, ids[i]) for i in indexes], again, owner)
        except ItemBusy as busy:  # the live delivery finishes it; this message comes back to check
            logger.info("bulk action chunk busy with another delivery; message delayed", extra={
                "bulk_action_id": action_id, "chunk": chunk, "item": busy.index, "delay_s": busy.retry_seconds})
            ports.bulk_queue.send(message(environment, action_id), delay_seconds=busy.retry_seconds)
            return ports.bulk_actions.get(environment, action_id)
        action = ports.bulk_actions.save_chunk(action, chunk, results)
        if action.finished:
            announce_end(ports, action)
            return action
    return _finish(ports, action)


def _finish(ports: Ports, action: BulkAction) -> BulkAction:
    try:
        action = ports.bulk_actions.move(action, BulkStatus.COMPLETED, completed_at=utc_now())
    except TransitionRefused:
        action = ports.bulk_actions.get(action.environment, action.id)
    announce_end(ports, action)
    return action


def fail(ports: Ports, environment: str, action_id: int, error: Exception | str) -> None:
    """The action fails with the reason (an error: its message's last delivery failed; a reason:
    the sweeper's); its results keep what was done; announced."""
    action = ports.bulk_actions.find(environment, action_id)
    if action is None:
        return
    if not action.finished:
        reason = error if isinstance(error, str) else type(error).__name__
        try:
            action = ports.bulk_actions.move(action, BulkStatus.FAILED, completed_at=utc_now(),
                                             error=f"the bulk action could not be finished: {reason}")
        except TransitionRefused:
            action = ports.bulk_actions.get(environment, action_id)
    announce_end(ports, action)


def announce_end(ports: Ports, action: BulkAction) -> None:
    """`bulk_action.completed` and its audit entry, once (events.announce), when the action has ended."""
    if action.finished:
        announce(ports, bulk_action_completed(action), action.environment,
                 actor=system_actor("bulk_action", action.id),
                 summary_fields=("status", "action", "total_items", "succeeded_items", "failed_items",
                                 "skipped_items", "error"))


# Sweeping ---------------------------------------------------------------------------------------

BULK_ACTION_DECISIONS = "bulk_action"  # the sweeper's held decisions on bulk actions (events.deciding)


def sweep(ports: Ports, now: datetime | None = None) -> dict[str, int]:
    """No bulk action stays pending or processing for ever: a lost first message (pending past 5
    minutes) or a worker that died (no chunk counted for 16 minutes, on its last delivery too) has
    its message sent again (a conditional claim: one sweeper, and only if it did not move
    meanwhile), at most MAX_QUEUED_RESTARTS times; then it fails saying why (its results keep what
    was done)."""
    return sweeping.sweep(ports, SWEPT_BULK_ACTIONS, now)


def _restart(ports: Ports, action: BulkAction) -> str | None:
    return sweeping.resend_queued(
        ports.bulk_actions.count_restart, action, noun="bulk_action", pending=action.status is BulkStatus.PENDING,
        send=lambda: ports.bulk_queue.send(message(action.environment, action.id)),
        progress={"status": action.status.value, "processed_items": action.processed_items,
                  "last_progress_at": str(action.last_progress_at)})


def _finish_if_ended(ports: Ports, environment: str, action_id: int) -> Event | None:
    action = sweeping.ended(ports.bulk_actions.get, environment, action_id)
    if action is None:
        return None
    announce_end(ports, action)
    return bulk_action_completed(action)


SWEPT_BULK_ACTIONS = SweptKind[BulkAction](
    decisions=BULK_ACTION_DECISIONS, noun="bulk_action", outcomes=("restarted", "started", "failed"),
    active=lambda ports: ports.bulk_actions.active(),
    judge=lambda ports, action, now: sweeping.queued_verdict(
        pending=action.status is BulkStatus.PENDING, created_at=action.created_at,
        last_progress_at=action.last_progress_at, restarts=action.restarts, now=now),
    give_up=lambda ports, action, verdict: fail(ports, action.environment, action.id, verdict.reason),
    finish_if_ended=_finish_if_ended, restart=_restart)


def current_role(ports: Ports, action: BulkAction) -> Role | None:
    """The role items are done with: a user's as it is now, if lower than when they asked (None: the
    user was deactivated meanwhile, and may do nothing); an API key's as it was."""
    if action.user_id is None:
        return action.role
    user = ports.users.get_many(action.environment, [action.user_id]).get(action.user_id)
    if user is None or not can_be_named(user):
        return None
    return user.role if user.role.rank < action.role.rank else action.role


def work_chunk(ports: Ports, action: BulkAction, role: Role | None, items: list[tuple[int, int]],
               again: bool, owner: str) -> list[ItemResult]:
    """Each item's result. `again`: another delivery began this chunk, so its items' marks are
    read first (one query): an item it finished keeps its result, one it left part-way is waited
    for while its lease holds (ItemBusy past ITEM_WAIT_SECONDS) and finished once it lapsed."""
    refused = ("forbidden: the user who asked was deactivated" if role is None
               else refusal(role, action.action))
    if refused is not None:
        return [ItemResult(index, item_id, ItemStatus.FAILED, refused) for index, item_id in items]
    marks = ports.bulk_actions.item_marks(action, range(items[0][0], items[-1][0] + 1)) if again and items else {}
    if action.target is BulkTarget.EXCEPTIONS:
        exceptions = ports.exceptions.find_many(action.environment, [i for _, i in items])
        return _each(items, lambda index, item_id: _once(
            ports, action, owner, index, item_id, marks.get(index),
            lambda: _exception_checks(action, index, item_id, exceptions.get(item_id)),
            lambda resumed: _exception_change(ports, action, index, item_id, resumed)))
    matches = ports.matches.find_many(action.environment, [i for _, i in items])
    return _each(items, lambda index, item_id: _once(
        ports, action, owner, index, item_id, marks.get(index),
        lambda: _match_checks(ports, action, index, item_id, matches.get(item_id)),
        lambda resumed: _match_change(ports, action, item_id, resumed, matches.get(item_id))))


def _each(items: list[tuple[int, int]], work: Callable[[int, int], ItemResult]) -> list[ItemResult]:
    """Each item's result, in item order, ITEM_THREADS items at a time: the items are distinct
    exceptions or matches, each its own conditional writes (the audit chain's appends take turns
    at its head, retrying with backoff)."""
    with ThreadPoolExecutor(ITEM_THREADS) as pool:
        return list(pool.map(lambda item: work(*item), items))


# A change of one item: True when made now; False when it was found made by an earlier delivery of
# this action (it was marked, so it was not so before: this action made it).
Change = Callable[[], bool]


def _once(ports: Ports, action: BulkAction, owner: str, index: int, item_id: int, mark: ItemMark | None,
          checks: Callable[[], ItemResult | None], change_of: Callable[[bool], Change]) -> ItemResult:
    """An item's change, at most once however often (and however many deliveries at once) its
    chunk is worked. Its mark, naming this delivery, is written (conditionally) before the change
    and given the result after it: a mark with a result is that result again; a mark without one
    is another delivery's change under way, waited for (`_settled`) and, once its lease lapsed
    (its worker died), finished from what is stored by the one delivery that took it over
    (`resumed`: a change found made is this action's, audited once, told once). An item the
    checks end (missing, already so) changes nothing and is not marked."""
    if mark is None:
        ended = checks()
        if ended is not None:
            return ended
        mark = ports.bulk_actions.claim_item(action, index, item_id, owner)
        if mark is None:  # ours: the change is made now
            return ports.bulk_actions.item_done(action, _audited(ports, action, index, item_id, change_of(False)))
    settled = _settled(ports, action, owner, mark)
    if settled.result is not None:
        return settled.result
    result = _audited(ports, action, index, item_id, change_of(True))
    return ports.bulk_actions.item_done(action, result)


def _settled(ports: Ports, action: BulkAction, owner: str, mark: ItemMark) -> ItemMark:
    """The mark once it has a result, or once this delivery took it over (its lease lapsed: no
    worker lives that long); ItemBusy when its live worker holds it past ITEM_WAIT_SECONDS."""
    waited_until = time.monotonic() + ITEM_WAIT_SECONDS
    while mark.result is None:
        now = utc_now()
        if mark.owner == owner:
            return mark
        if mark.lapsed(now, ITEM_LEASE):
            taken = ports.bulk_actions.take_over_item(action, mark, owner)
            if taken is None:
                logger.warning("bulk action item taken over from a worker that died", extra={
                    "bulk_action_id": action.id, "item": mark.index, "from_owner": mark.owner})
                return replace(mark, owner=owner)
            if taken.result is None and taken.claimed_at == mark.claimed_at:  # gone meanwhile: try later
                raise ItemBusy(mark.index, ITEM_LEASE)
            mark = taken  # another delivery took it over, or it got its result: look again
            continue
        if time.monotonic() > waited_until:
            raise ItemBusy(mark.index, (mark.claimed_at or now) + ITEM_LEASE - now)
        time.sleep(ITEM_POLL_SECONDS)
        mark = ports.bulk_actions.item_marks(action, range(mark.index, mark.index + 1)).get(mark.index) or mark
    return mark


def _exception_checks(action: BulkAction, index: int, exception_id: int,
                      exception: ReconciliationException | None) -> ItemResult | None:
    params = action.params
    if exception is None:
        return ItemResult(index, exception_id, ItemStatus.FAILED, f"reconciliation exception {exception_id} not found")
    if action.action is BulkActionKind.STATUS and exception.status is ExceptionStatus(params["status"]):
        return ItemResult(index, exception_id, ItemStatus.SKIPPED, f"already {params['status']}")
    if action.action is BulkActionKind.ASSIGN and _assigned(exception, params):
        return ItemResult(index, exception_id, ItemStatus.SKIPPED, f"user {params['user_id']} is assigned already")
    return None


def _assigned(exception: ReconciliationException, params: dict[str, Any]) -> bool:
    return any(a.user_id == params["user_id"] or a.idp_user_id == params["idp_user_id"] for a in exception.assignees)


def _exception_change(ports: Ports, action: BulkAction, index: int, exception_id: int, resumed: bool) -> Change:
    environment, params = action.environment, action.params

    def change() -> bool:
        if action.action is BulkActionKind.COMMENT:
            try:
                exception_service.add_comment(
                    ports, environment, exception_id, body=params["body"], author_idp_id=params["author_idp_id"],
                    mentions=list(params.get("mentions") or []), comment_id=action.comment_id(index))
                return True
            except Conflict:  # its id, reserved for this item of this action, was written: by a delivery that died
                return False
        current = ports.exceptions.find_many(environment, [exception_id]).get(exception_id) if resumed else None
        if action.action is BulkActionKind.STATUS:
            target = ExceptionStatus(params["status"])
            if current is not None and current.status is target:
                return False
            exception_service.update(ports, environment, exception_id, title=None, description=None, status=target)
            return True
        if current is not None and _assigned(current, params):
            return False
        exception_service.add_assignee(ports, environment, exception_id, user_id=params["user_id"])
        return True
    return change


def _match_checks(ports: Ports, action: BulkAction, index: int, match_id: int,
                  match: Match | None) -> ItemResult | None:
    if match is None or match.pending_since is not None:
        return ItemResult(index, match_id, ItemStatus.FAILED, f"reconciliation match {match_id} not found")
    if action.action is BulkActionKind.CONFIRM:
        if match.unmatched_at is not None or match.unmatching:
            return ItemResult(index, match_id, ItemStatus.FAILED, f"reconciliation match {match_id} not found")
        if match.status is MatchStatus.CONFIRMED and not _records_left_to_confirm(ports, match):
            return ItemResult(index, match_id, ItemStatus.SKIPPED, "already confirmed")
        return None
    if match.unmatched_at is not None:
        return ItemResult(index, match_id, ItemStatus.SKIPPED, "already rejected (unmatched)")
    if match.status is not MatchStatus.PROPOSED and not match.unmatching:
        return ItemResult(index, match_id, ItemStatus.FAILED, f"reconciliation match {match_id} is confirmed: only "
                          f"proposed matches are rejected here (unmatch it with DELETE "
                          f"/v1/reconciliation_matches/{match_id})")
    return None


def _records_left_to_confirm(ports: Ports, match: Match) -> bool:
    """Whether a confirmed match still holds a record as proposed: a confirm that stopped between
    the match and its records (a worker that died, a close that refused the rest)."""
    members = ports.matches.members(match.environment, match.id)
    return any(held.match_in(match.reconciliation_id) == match.id and match.reconciliation_id in held.proposed_in
               for held in ports.claims.held_records(match.environment, [m.record_id for m in members]))


def _match_change(ports: Ports, action: BulkAction, match_id: int, resumed: bool, seen: Match | None) -> Change:
    environment = action.environment

    def change() -> bool:
        current = ports.matches.find(environment, match_id) if resumed else seen
        if action.action is BulkActionKind.CONFIRM:
            if current is not None and current.status is MatchStatus.CONFIRMED:
                # Its records, left by the delivery that died or by an earlier confirm that stopped
                # part-way (the checks let it through only then): no event again.
                _finish_confirm(ports, current)
                return not resumed
            match_service.confirm(ports, environment, match_id)
            return True
        if current is not None and current.unmatched_at is not None:
            return False
        match_service.unmatch(ports, environment, match_id, only=MatchStatus.PROPOSED)  # a retry finds its mark
        return True
    return change


def _finish_confirm(ports: Ports, match: Match) -> None:
    """What a confirm does after the match itself (services/matches.confirm), for a confirm whose
    worker died in between or that a close refused part-way: its records confirmed (each a
    conditional write, a no-op when done), the reconciliation's exceptions refreshed; the match's
    event was owed with its write (sent once). Refused, as the confirm itself is, when a close took
    the records' period meanwhile."""
    environment = match.environment
    period_closes.refuse_match(ports, environment, match, "confirming")
    members = ports.matches.members(environment, match.id)
    users = match_service.used_by(ports.reconciliations, environment, (m.data_stream_key for m in members))
    for member in members:
        ports.claims.confirm_record(environment, member.record_id, match.reconciliation_id, match.id,
                                    users[member.data_stream_key])
    audit.note(before={"status": MatchStatus.PROPOSED.value}, after={"status": MatchStatus.CONFIRMED.value})
    match_service.matching_changed(ports, environment, match.reconciliation_id)


@period_closes.worker_unit  # a confirm or reject reads the closed periods behind the closing fence
def _audited(ports: Ports, action: BulkAction, index: int, item_id: int, change: Change) -> ItemResult:
    """Do one item's change as the caller, with its audit entry (the single route's action, the
    service's notes, the bulk action's id), under the item's own request id: the same on every
    delivery, so a change found made by a delivery that died gets the entry it may lack, once. A
    refusal (a domain error: 404, 409, 422) fails the item alone, with no entry; a write that lost
    a race (409 Conflict) is tried once more from a fresh read."""
    request_id = f"bulk_action-{action.id}-{index}"
    for attempt in (1, 2):
        try:
            with audit.change_in_flight(
                    ports, action.environment, request_id=request_id, actor=action.actor,
                    action=AUDIT_ACTION[action.action], resource_type=action.target.value, resource_id=item_id,
                    summary={"bulk_action_id": action.id}) as noted, \
                    audit.collecting_notes() as notes, audit.acting_as(action.actor):
                if not change():
                    noted.changed = not audit.resource_has_entry(ports, action.environment, action.target.value,
                                                                 str(item_id), "request_id", request_id)
                    noted.summary["resumed"] = True
                noted.summary.update(notes)
            return ItemResult(index, item_id, ItemStatus.SUCCEEDED)
        except TransitionRefused as refused:  # the status table says no: no fresh read changes that
            return ItemResult(index, item_id, ItemStatus.FAILED, str(refused))
        except ApprovalRequired as waiting:  # nothing changed: the approval's approver decides (services/approvals.py)
            return ItemResult(index, item_id, ItemStatus.SKIPPED, str(waiting))
        except Conflict as conflict:
            if attempt == 2:
                return ItemResult(index, item_id, ItemStatus.FAILED, str(conflict))
        except DomainError as refused:
            return ItemResult(index, item_id, ItemStatus.FAILED, str(refused))
    raise AssertionError("unreachable")  # pragma: no cover


# Reading ----------------------------------------------------------------------------------------

def results_page(ports: Ports, action: BulkAction, after: int, limit: int) -> tuple[list[ItemResult], int | None]:
    """The results of the items after index `after`, in item order, at most `limit`, and the index
    the next page starts after (None at the end). Only chunks worked so far have results."""
    found: list[ItemResult] = []
    for _, results in ports.bulk_actions.result_chunks(action, (after + 1) // CHUNK_ITEMS):
        found += [r for r in results if r.index > after]
        if len(found) > limit:
            return found[:limit], found[limit - 1].index
    return found, None
