"""Emitting domain events: after the change they tell of is durable, at least once.

The publisher retries what the bus refuses; what it still cannot send is parked in the table and
the one-minute sweeper publishes it again, so a bus outage delays events rather than losing them.
An emitter that runs again (a redelivered message, a retried task) emits the same ids, which is
why consumers (the webhook fan-out, a client) drop duplicates by id.
"""
from __future__ import annotations

from collections.abc import Iterable

from chalicelib.domain import event_data
from chalicelib.domain.agents.runs import AgentRun
from chalicelib.domain.audit import agent_actor
from chalicelib.domain.events import Event
from chalicelib.observability import logger
from chalicelib.services import audit
from chalicelib.services.ports import Ports


def emit(ports: Ports, environment: str, *maybe_events: Event | None) -> None:
    """Publish the events given (a None is a change that tells of nothing: skipped)."""
    events = [e for e in maybe_events if e is not None]
    if ports.events is None or not events:
        return
    try:
        ports.events.publish(environment, events)
    except Exception as error:  # the change is done: never undo it for the bus; park the events instead
        if ports.parked_events is None:
            raise
        logger.warning("events parked: the bus did not take them",
                       extra={"event_ids": [e.id for e in events], "error": type(error).__name__})
        ports.parked_events.park(environment, events)


def announce(ports: Ports, event: Event | None, environment: str, *, actor: str,
             summary_fields: Iterable[str] = ("status",)) -> None:
    """An automated decision (an import or a run ended, an exception opened by a refresh, an agent
    run ended or paused): its audit entry, once, then its event. The entry's action is the event's
    type and its resource the event's; its summary the `summary_fields` of the event's data.
    A retried job announcing the same decision again (same event id) writes no second entry, but
    publishes the event again (consumers drop the duplicate)."""
    if event is None:
        return
    marks = ports.parked_events
    if ports.audit is not None and (marks is None or not marks.audited(environment, event.id)):
        data = event.data
        audit.record(ports, environment, actor=actor, action=event.type, resource_type=event.type.split(".")[0],
                     resource_id=data.get("id"),
                     summary={"event_id": event.id, **{k: data[k] for k in summary_fields if k in data}})
        if marks is not None:
            marks.mark_audited(environment, event.id)
    emit(ports, environment, event)


def announce_agent_run(ports: Ports, run: AgentRun) -> None:
    """An agent run ended, or paused for a verification code: the agent is the actor."""
    announce(ports, event_data.agent_run_event(run), run.environment, actor=agent_actor(run.agent_id),
             summary_fields=("status", "trigger", "file_import_id", "error_message"))


def publish_parked(ports: Ports) -> int:
    """The sweeper's: publish what was parked; what the bus still refuses stays for the next sweep."""
    if ports.events is None or ports.parked_events is None:
        return 0
    published = 0
    by_environment: dict[str, list[Event]] = {}
    for environment, event in ports.parked_events.parked():
        by_environment.setdefault(environment, []).append(event)
    for environment, events in by_environment.items():
        try:
            ports.events.publish(environment, events)
        except Exception as error:
            logger.warning("parked events still refused by the bus",
                           extra={"environment": environment, "count": len(events), "error": type(error).__name__})
            continue
        ports.parked_events.release(environment, events)
        published += len(events)
    return published
