"""Emitting domain events: after the change they tell of is durable, at least once.

The publisher retries what the bus refuses; what it still cannot send is parked in the table and
the one-minute sweeper publishes it again, so a bus outage delays events rather than losing them.
An emitter that runs again (a redelivered message, a retried task) emits the same ids, which is
why consumers (the webhook fan-out, a client) drop duplicates by id.

Automated decisions (an import or a run ended, a refresh opened an exception, an agent run ended)
are announced: an audit entry, then the event, once per decision however often a retried job
announces it (`announce`).

A change that nothing retries (a person's request, an exception resolving itself) is saved with its
event through `save_and_emit`: an outbox without transactions, so a process that dies between the
save and the event does not lose the event.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TypeVar

from chalicelib.domain import event_data
from chalicelib.domain.agents.runs import AgentRun
from chalicelib.domain.audit import agent_actor
from chalicelib.domain.clock import utc_now
from chalicelib.domain.events import (
    ANNOUNCEMENT_LEASE,
    REQUEST_LEASE,
    Announcer,
    Event,
    EventOrigin,
    HeldDecision,
    HeldEvent,
)
from chalicelib.domain.users import USER_ACTOR_PREFIX
from chalicelib.observability import logger
from chalicelib.services import audit
from chalicelib.services.ports import EventLedger, Ports

T = TypeVar("T")


def emit(ports: Ports, environment: str, *maybe_events: Event | None) -> None:
    """Publish the events given (a None is a change that tells of nothing: skipped); those of a
    person's request name them."""
    _publish(ports, environment, [naming_the_person(e) for e in maybe_events if e is not None])


def _publish(ports: Ports, environment: str, events: list[Event]) -> None:
    if not events:
        return
    try:
        ports.events.publish(environment, events)
    except Exception as error:  # the change is done: never undo it for the bus; park the events instead
        refused = getattr(error, "failed", events)  # the publisher names those that did not go
        logger.warning("events parked: the bus did not take them",
                       extra={"event_ids": [e.id for e in refused], "error": type(error).__name__})
        ports.event_ledger.park(environment, refused)


def naming_the_person(event: Event) -> Event:
    """The event of a person's request names them (`actor`: `user:<id>`), as its audit entry does.
    Not an automated decision made during their request (one with an announcer, say an exception
    resolved because its last record was matched): its announcer is who decided."""
    actor = audit.acting()
    if actor is None or not actor.startswith(USER_ACTOR_PREFIX) or "actor" in event.data:
        return event
    return replace(event, data={**event.data, "actor": actor})


def save_and_emit(ports: Ports, environment: str, event: Event, origin: EventOrigin, save: Callable[[str | None], T],
                  *, announcer: Announcer | None = None, lease: timedelta = REQUEST_LEASE) -> T:
    """Save a change and send the event that tells of it, at least once even if this process dies
    between the two. The event is held in the ledger first (for `lease`, longer than the caller
    lives) under a mark of its own (the event's id and a token); `save(mark)` makes the change and
    adds the mark to the `origin` item's `pending_events` in the same conditional write; then the
    event goes (announced, its audit entry first, when `announcer` is given), the mark comes off the
    item and the hold is released.

    A process that dies after the save leaves the hold and the mark: once the lease is over, the
    sweeper sends the event. One that dies before the save, or a save refused, leaves a hold whose
    item lacks the mark: the sweeper drops it (a save that failed is not taken for unsaved at once:
    a write can be applied though its answer was lost). Two changes racing to tell the same event
    id (the same version of an exception) hold under different tokens: only the one saved is sent."""
    ledger = ports.event_ledger
    if announcer is None:
        event = naming_the_person(event)
    held = HeldEvent(environment, event, due_at=utc_now() + lease, origin=origin, announcer=announcer,
                     token=uuid.uuid4().hex)
    ledger.hold(held)
    saved = save(held.mark)
    try:
        _deliver(ports, held)
    except Exception:  # the change is made and its event owed: the sweeper sends it, never a failed answer
        logger.exception("sending an event failed; the sweeper sends it", extra={"event_id": event.id})
    return saved


def _send(ports: Ports, environment: str, event: Event, announcer: Announcer | None) -> None:
    if announcer is None:
        emit(ports, environment, event)
    else:
        announce(ports, event, environment, actor=announcer.actor, summary_fields=announcer.summary_fields)


def _deliver(ports: Ports, held: HeldEvent) -> bool:
    """Send a held event whose change is saved, then take its mark off its origin. False when it is not out yet: its
    announcement is another worker's for now (the hold stays, and a later sweep looks again)."""
    ledger = ports.event_ledger
    _send(ports, held.environment, held.event, held.announcer)
    if held.announcer is not None:
        announcement = ledger.announcement(held.environment, held.event.id)
        if announcement is None or not announcement.done:
            return False
    ledger.clear_owed(held)
    ledger.release_hold(held)
    return True


def announce(ports: Ports, event: Event | None, environment: str, *, actor: str,
             summary_fields: Iterable[str] = ("status",)) -> None:
    """An automated decision: its audit entry (action the event's type, resource the event's, summary
    the `summary_fields` of its data), then its event, once. The announcement is reserved first
    and marked done after the event is out: a retry of a done one does nothing, a duplicate
    running beside it leaves it to its worker, and one whose worker died part-way (found pending
    past its lease) is taken over, writing the audit entry only if it is not there yet."""
    if event is None:
        return
    ledger = ports.event_ledger
    announcement = ledger.announcement(environment, event.id)
    if announcement is None:
        if not ledger.reserve(environment, event.id):
            return  # a duplicate of this job took it a moment ago
    elif announcement.done or not announcement.abandoned(utc_now()) or \
            not ledger.retake(environment, event.id, announcement.since):
        return
    elif _recorded(ports, event, environment):  # its worker died after the entry
        _publish(ports, environment, [event])
        ledger.complete(environment, event.id)
        return
    _record(ports, event, environment, actor, summary_fields)
    _publish(ports, environment, [event])  # the announcer's, not the person's whose request it ran in
    ledger.complete(environment, event.id)


@contextmanager
def deciding(ports: Ports, kind: str, environment: str, entity_id: int) -> Iterator[None]:
    """Around an end the sweeper decides on its own (a stuck run, import or investigation failed).
    Nothing retries such a decision once made: its entity leaves the sweeper's lists. So it is held
    first (for ANNOUNCEMENT_LEASE) and released once made and announced; one a dying sweeper left
    is finished by `finish_decisions`. A decision that raised stays held too."""
    decision = HeldDecision(kind, environment, entity_id, utc_now() + ANNOUNCEMENT_LEASE)
    ports.event_ledger.hold_decision(decision)
    yield
    ports.event_ledger.release_decision(decision)


def finish_decisions(ports: Ports, kind: str, finish_if_ended: Callable[[str, int], Event | None],
                     now: datetime | None = None) -> int:
    """The kind's sweep's: for each decision held past its lease, `finish_if_ended(environment, id)`
    finishes what a dead sweeper left of an end that was made (its announcement, which is
    idempotent, and what follows it) and gives the end's event, or None when the end was not made.
    The decision is released then, or once the event's announcement is done: one still pending
    (another worker's, or one whose worker died a moment ago) is kept for a later sweep, by when
    `announce` takes it over. Returns how many ends were announced."""
    ledger = ports.event_ledger
    now = now or utc_now()
    ended = 0
    for decision in ledger.decisions(kind):
        if decision.due_at > now:
            continue
        try:
            event = finish_if_ended(decision.environment, decision.entity_id)
            if event is not None:
                announcement = ledger.announcement(decision.environment, event.id)
                if announcement is None or not announcement.done:
                    continue
                ended += 1
                logger.warning("a decision whose sweeper died was announced",
                               extra={"kind": kind, "environment": decision.environment, "id": decision.entity_id})
            ledger.release_decision(decision)
        except Exception:  # one decision's trouble stops no other; the next sweep tries again
            logger.exception("finishing a held decision failed", extra={"kind": kind, "id": decision.entity_id})
    return ended


def announced(ledger: EventLedger, environment: str, event_id: str) -> bool:
    """Whether an automated decision's announcement was made (done) or is being made."""
    return ledger.announcement(environment, event_id) is not None


def _record(ports: Ports, event: Event, environment: str, actor: str, summary_fields: Iterable[str]) -> None:
    data = event.data
    audit.record(ports, environment, actor=actor, action=event.type, resource_type=_resource_type(event),
                 resource_id=data.get("id"),
                 summary={"event_id": event.id, **{k: data[k] for k in summary_fields if k in data}})


def _recorded(ports: Ports, event: Event, environment: str) -> bool:
    """Whether the resource's audit entries (newest first) hold this event's, among its latest."""
    if event.data.get("id") is None:
        return False
    return audit.resource_has_entry(ports, environment, _resource_type(event), str(event.data["id"]),
                                    "event_id", event.id)


def _resource_type(event: Event) -> str:
    return event.type.split(".")[0]


def announce_agent_run(ports: Ports, run: AgentRun) -> None:
    """An agent run ended, or paused for a verification code: the agent is the actor."""
    announce(ports, event_data.agent_run_event(run), run.environment, actor=agent_actor(run.agent_id),
             summary_fields=("status", "trigger", "file_import_id", "error_message"))


def publish_parked(ports: Ports, now: datetime | None = None) -> int:
    """The sweeper's: publish what was parked (what the bus still refuses stays for the next sweep),
    and the held events past their lease whose change was saved (`save_and_emit`)."""
    now = now or utc_now()
    published = _publish_refused(ports, ports.event_ledger.parked())
    for held in ports.event_ledger.held():
        if held.due(now):
            published += _send_owed(ports, held)
    return published


def _publish_refused(ports: Ports, parked: list[HeldEvent]) -> int:
    published = 0
    by_environment: dict[str, list[Event]] = {}
    for held in parked:
        by_environment.setdefault(held.environment, []).append(held.event)
    for environment, events in by_environment.items():
        try:
            ports.events.publish(environment, events)
            sent = events
        except Exception as error:
            refused = {e.id for e in getattr(error, "failed", events)}
            sent = [e for e in events if e.id not in refused]
            logger.warning("parked events still refused by the bus",
                           extra={"environment": environment, "count": len(refused), "error": type(error).__name__})
        ports.event_ledger.release(environment, sent)
        published += len(sent)
    return published


def _send_owed(ports: Ports, held: HeldEvent) -> int:
    """A held event past its lease: its worker died after the save (the item carries the event's
    id: send it) or before it, or the save was refused (drop the hold)."""
    ledger = ports.event_ledger
    try:
        if not ledger.owed(held):
            ledger.release_hold(held)
            return 0
        return int(_deliver(ports, held))
    except Exception:  # one event's trouble stops no other; the next sweep tries again
        logger.exception("sending a held event failed", extra={"event_id": held.event.id,
                                                               "environment": held.environment})
        return 0
