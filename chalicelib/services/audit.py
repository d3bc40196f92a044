"""The audit trail's use cases: record an entry, list entries, verify the chain.

`record` is how every writer adds to the trail: the API's middleware for each state-changing
request, the async jobs for their automated decisions. It raises when the entry could not be
appended (ChainBusy after bounded retries, or a storage error): the caller decides (the
middleware logs, counts and still answers; a job fails and is retried). Services add detail to the
entry of the request they serve with `note(before=..., after=...)`, which does nothing outside one.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from chalicelib.domain.audit import (
    UNKNOWN_OUTCOME,
    AuditEntry,
    AuditQuery,
    ChainBreak,
    ChainWalk,
    RequestInFlight,
    entity_fields,
    field_changes,
)
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import DomainError, ValidationFailed
from chalicelib.domain.events import REQUEST_LEASE
from chalicelib.observability import logger
from chalicelib.services.ports import Ports

VERIFY_MAX_ENTRIES = 20_000  # per call: a walk this long stays well inside an API Lambda's 30 s
VERIFY_MAX_SECONDS = 20.0
UNFINISHED_SEARCH_PAGES = 10  # of 200 entries, looking for the entry of a creation that died after writing it
CLAIM_LEASE = timedelta(minutes=5)  # a sweeper writing an unfinished request's entry holds it this long


def record(ports: Ports, environment: str, *, actor: str, action: str, resource_type: str,
           resource_id: str | int | None, summary: Mapping[str, Any] | None = None) -> None:
    """Append one entry to the environment's chain."""
    ports.audit.append(environment, actor=actor, action=action, resource_type=resource_type,
                       resource_id=resource_id, summary=summary or {})


# Requests in flight: an API request's entry outlives its process -------------------------------

def begin_request(ports: Ports, request: RequestInFlight) -> None:
    """Before a state-changing request runs (the middleware's); `end_request` once its entry is
    written, or it changed nothing."""
    ports.audit.begin_request(request)


def end_request(ports: Ports, environment: str, request_id: str) -> None:
    ports.audit.end_request(environment, request_id)


@dataclass
class NotedChange:
    """What a change made inside `change_in_flight` adds to its entry: its resource's id when known
    only after it, more summary, or that it changed nothing after all (no entry)."""
    resource_id: str | int | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    changed: bool = True


@contextmanager
def change_in_flight(ports: Ports, environment: str, *, request_id: str, actor: str, action: str,
                     resource_type: str, resource_id: str | int | None = None,
                     summary: Mapping[str, Any] | None = None,
                     refusals: tuple[type[BaseException], ...] = (DomainError,)) -> Iterator[NotedChange]:
    """Around a change made outside an API request (an agent's tool, the webhooks' disable): noted
    in flight first, then its entry (`summary` and what the change noted, with `request_id`), then
    the note goes. A refusal (`refusals`) changed nothing: the note goes, no entry. Any other
    failure of the change, or a process that dies, leaves the note: the sweeper writes the entry,
    outcome unknown. The change made, a failure to write its entry or drop its note is logged, never
    raised (the caller would take the change for not made), and the note is left to the sweeper. A
    note that cannot be written is logged; the change still goes ahead."""
    known = dict(summary or {})
    try:
        begin_request(ports, RequestInFlight(
            environment=environment, request_id=request_id, actor=actor, action=action, resource_type=resource_type,
            resource_id=None if resource_id is None else str(resource_id), summary=known, began_at=utc_now()))
    except Exception:
        logger.exception("change not noted in flight", extra={"audit_action": action, "request_id": request_id})
    noted = NotedChange(resource_id=resource_id)
    try:
        yield noted
    except refusals:
        end_request(ports, environment, request_id)
        raise
    try:
        if noted.changed:
            record(ports, environment, actor=actor, action=action, resource_type=resource_type,
                   resource_id=noted.resource_id, summary={**known, **noted.summary, "request_id": request_id})
        end_request(ports, environment, request_id)
    except Exception:
        logger.exception("audit entry not recorded; the sweeper writes it", extra={
            "audit_action": action, "audit_resource_id": noted.resource_id, "request_id": request_id})


def record_unfinished(ports: Ports, now: datetime | None = None) -> int:
    """The sweeper's: a request still in flight past REQUEST_LEASE belongs to a process that died
    (or whose entry could not be written). Its entry is written, outcome unknown, unless its
    resource's entries hold one with its request id (the process died just after writing it).
    Returns how many entries were written."""
    now = now or utc_now()
    written = 0
    for request in ports.audit.requests_in_flight():
        if now - request.began_at <= REQUEST_LEASE:
            continue
        try:
            if not ports.audit.claim_request(request, now, stale_before=now - CLAIM_LEASE):
                continue  # another sweep is writing it
            if not _has_entry(ports, request):
                record(ports, request.environment, actor=request.actor, action=request.action,
                       resource_type=request.resource_type, resource_id=request.resource_id,
                       summary={**request.summary, "request_id": request.request_id, **UNKNOWN_OUTCOME})
                written += 1
            ports.audit.end_request(request.environment, request.request_id)
        except Exception:  # one request's trouble stops no other; the next sweep tries again
            logger.exception("writing an unfinished request's audit entry failed",
                             extra={"environment": request.environment, "request_id": request.request_id})
    return written


def resource_has_entry(ports: Ports, environment: str, resource_type: str, resource_id: str, name: str,
                       value: str) -> bool:
    """Whether one of the resource's latest entries (50, newest first) has `value` at `name` in its
    summary (`request_id` or `event_id`, the ids bounded_summary always keeps): was it written?"""
    query = AuditQuery(resource_type=resource_type, resource_id=resource_id)
    entries, _ = ports.audit.list_page(environment, query, limit=50, cursor=None)
    return any(entry.summary.get(name) == value for entry in entries)


def _has_entry(ports: Ports, request: RequestInFlight) -> bool:
    """Whether the request's entry was written: among its resource's newest entries, or for a
    creation (its id was not known before it ran) among the chain's entries since it began, newest
    first, at most UNFINISHED_SEARCH_PAGES pages of 200."""
    if request.resource_id is not None:
        return resource_has_entry(ports, request.environment, request.resource_type, request.resource_id,
                                  "request_id", request.request_id)
    cursor = None
    for _ in range(UNFINISHED_SEARCH_PAGES):
        entries, cursor = ports.audit.list_page(request.environment, AuditQuery(), limit=200, cursor=cursor)
        if any(entry.summary.get("request_id") == request.request_id for entry in entries):
            return True
        if cursor is None or (entries and entries[-1].at < request.began_at):
            return False
    return False


# Notes: what a service adds to the entry of the request it serves --------------------------------

_notes: ContextVar[dict[str, Any] | None] = ContextVar("audit_notes", default=None)
_acting: ContextVar[str | None] = ContextVar("audit_acting", default=None)


@contextmanager
def acting_as(actor: str | None) -> Iterator[None]:
    """While inside, `acting()` names who sent the request (the middleware wraps each request in one),
    so that the events a person's change sends name them."""
    token = _acting.set(actor)
    try:
        yield
    finally:
        _acting.reset(token)


def acting() -> str | None:
    return _acting.get()


@contextmanager
def collecting_notes() -> Iterator[dict[str, Any]]:
    """While inside, `note` adds to the dict yielded (the middleware wraps each request in one)."""
    notes: dict[str, Any] = {}
    token = _notes.set(notes)
    try:
        yield notes
    finally:
        _notes.reset(token)


def note(**fields: Any) -> None:
    """Add fields to the summary of the current request's audit entry, e.g.
    `note(before={"status": "open"}, after={"status": "resolved"})`; a mapping merges with one
    noted before under the same name. Nothing happens outside a request."""
    notes = _notes.get()
    if notes is None:
        return
    for name, value in fields.items():
        if isinstance(value, Mapping) and isinstance(notes.get(name), dict):
            notes[name].update(value)
        else:
            notes[name] = dict(value) if isinstance(value, Mapping) else value


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The before/after of the fields that differ: `{"before": {...}, "after": {...}}`, or {}
    (secrets redacted, long values cut: domain/audit.field_changes)."""
    return field_changes(before, after)


def note_change(before: Any, after: Any) -> None:
    """Note an update's before and after, field by field, from the entity as read and as saved:
    the one call every update makes, whatever its resource."""
    note(**field_changes(entity_fields(before), entity_fields(after)))


# Listing ----------------------------------------------------------------------------------------

def list_page(ports: Ports, environment: str, query: AuditQuery, limit: int,
              cursor: str | None) -> tuple[list[AuditEntry], str | None]:
    if query.resource_id is not None and query.resource_type is None:
        raise ValidationFailed.on("resource_id", "needs resource_type (ids repeat across resource types)")
    if query.at_from is not None and query.at_to is not None and query.at_from > query.at_to:
        raise ValidationFailed.on("from", "must not be after 'to'")
    return ports.audit.list_page(environment, query, limit, cursor)


# Verifying --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChainReport:
    """One verification call. `intact` speaks of the entries checked (from `from_seq` to
    `last_checked_seq`); when `complete` is false the walk stopped at its bound before the chain's
    end, and the next call continues with `from_seq=next_from_seq`."""
    intact: bool
    checked: int
    first_break: ChainBreak | None
    from_seq: int
    last_checked_seq: int
    head_seq: int
    head_hash: str | None
    complete: bool
    next_from_seq: int | None


def verify(ports: Ports, environment: str, from_seq: int = 1, max_entries: int = VERIFY_MAX_ENTRIES,
           max_seconds: float = VERIFY_MAX_SECONDS) -> ChainReport:
    """Walk the chain from `from_seq` in pages, up to `max_entries` entries or `max_seconds`.
    Starting past 1, the entry before `from_seq` must itself hash right; its hash starts the walk
    (a client continuing a verification already checked the chain up to it).

    The head is read first and the walk goes up to its seq, no further: an entry appended meanwhile
    is left to the next verification (entries are put before the head moves to them, and read
    consistently, so every entry the head counts is found). The entry at the head's seq must have
    the head's hash. No head while entries exist is a break (`head_missing`): the tail may have been
    removed along with it. A `from_seq` past the chain's end is refused (422)."""
    if from_seq < 1:
        raise ValidationFailed.on("from_seq", "must be 1 or more")
    audit = ports.audit
    head = audit.head(environment)
    newest = None
    if head is None:
        found = audit.list_page(environment, AuditQuery(), 1, None)[0]
        newest = found[0] if found else None
        if newest is not None:
            head = audit.head(environment)  # the first entry's writer may have moved the head meanwhile
    head_seq, head_hash = (head.seq, head.hash) if head is not None else (0, None)
    end = head_seq if head is not None or newest is None else newest.seq
    if from_seq > end + 1:
        raise ValidationFailed.on("from_seq", f"past the chain's end: the chain holds {end} entries")

    def report(walk: ChainWalk, complete: bool) -> ChainReport:
        if head is None and newest is not None:
            walk.missing_head(newest.seq)
        complete = complete or walk.first_break is not None
        return ChainReport(intact=walk.intact, checked=walk.checked, first_break=walk.first_break,
                           from_seq=from_seq, last_checked_seq=walk.next_seq - 1, head_seq=head_seq,
                           head_hash=head_hash, complete=complete, next_from_seq=None if complete else walk.next_seq)

    walk = ChainWalk(from_seq, head=head)
    if from_seq > 1:
        previous = audit.get(environment, from_seq - 1)
        start = ChainWalk(from_seq - 1, previous.prev_hash if previous is not None else "", head=head)
        start.feed([previous] if previous is not None else [])
        start.expect_through(from_seq - 1)
        if not start.intact:
            return report(start, complete=True)
        walk = ChainWalk(from_seq, start.prev_hash, head=head)
    deadline = time.monotonic() + max_seconds
    last = min(end, from_seq + max_entries - 1)
    stopped = False
    if from_seq <= last:
        for entry in audit.entries_between(environment, from_seq, last):
            if not walk.feed([entry]):
                break
            if time.monotonic() > deadline and walk.next_seq <= last:
                stopped = True
                break
    if not stopped:
        walk.expect_through(last)
    return report(walk, complete=not stopped and last == end)
