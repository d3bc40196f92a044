"""Domain events: what the service tells its clients happened, after the change is durable.

An event is `{id, type, created_at, data}` with no environment in it (the environment travels
beside it, in the bus message, and decides whose webhook endpoints receive it). Its id is stable:
derived from what happened (type, resource and the occurrence's own key), so an emitter that
runs again after a crash or a redelivery emits the same id and a consumer drops the duplicate.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from chalicelib.domain.clock import iso, parse_iso

EVENT_TYPES: tuple[str, ...] = (
    "file_import.completed",
    "file_import.failed",
    "file_import.cancelled",
    "bulk_request.completed",
    "reconciliation_run.completed",
    "reconciliation_run.failed",
    "reconciliation_run.cancelled",
    "reconciliation_match.created",
    "reconciliation_match.confirmed",
    "reconciliation_match.deleted",
    "reconciliation_exception.opened",
    "reconciliation_exception.status_changed",
    "reconciliation_exception.assigned",
    "reconciliation_exception.commented",
    "investigation.completed",
    "agent_run.completed",
    "agent_run.failed",
    "agent_run.needs_verification",
    "export.completed",
    "bulk_action.completed",
    "approval.requested",
    "approval.approved",
    "approval.rejected",
    "approval.expired",
    "period.closed",
    "period.reopened",
    "reconciliation_exception.overdue",
)
ALL_EVENTS = "*"
EVENT_SOURCE = "recon"  # the bus message's `source`


@dataclass(frozen=True)
class Announcement:
    """An automated decision's announcement (its audit entry, then its event): reserved by the
    worker announcing it, done once the event is out."""
    done: bool
    since: datetime

    def abandoned(self, now: datetime) -> bool:
        """Pending for longer than any announcing worker lives: its worker died part-way."""
        return not self.done and now - self.since > ANNOUNCEMENT_LEASE


ANNOUNCEMENT_LEASE = timedelta(minutes=20)  # longer than the longest Lambda (15 minutes)
REQUEST_LEASE = timedelta(minutes=2)  # longer than an API call lives (a 30 s Lambda)


@dataclass(frozen=True)
class Event:
    id: str
    type: str
    created_at: datetime
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type, "created_at": iso(self.created_at), "data": self.data}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Event:
        return cls(id=body["id"], type=body["type"], created_at=parse_iso(body["created_at"]),
                   data=dict(body.get("data") or {}))


def event_id(environment: str, event_type: str, occurrence: str) -> str:
    """The same occurrence (say `run 12`, or `exception 4 status resolved at <time>`) always gets
    the same id; the environment is part of the hash so ids never collide across environments."""
    digest = hashlib.sha256(f"{environment}\x1f{event_type}\x1f{occurrence}".encode()).hexdigest()
    return f"evt_{digest[:32]}"


def make_event(environment: str, event_type: str, occurrence: str, created_at: datetime,
               data: dict[str, Any]) -> Event:
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    return Event(id=event_id(environment, event_type, occurrence), type=event_type, created_at=created_at,
                 data=data)


@dataclass(frozen=True)
class EventOrigin:
    """The item whose saving write marks an event as owed (the outbox: services/events.py
    `save_and_emit`): a match, an exception or an exception's comment, by its ids."""
    kind: str
    ids: tuple[int, ...]

    @classmethod
    def match(cls, match_id: int) -> EventOrigin:
        return cls("match", (match_id,))

    @classmethod
    def exception(cls, exception_id: int) -> EventOrigin:
        return cls("exception", (exception_id,))

    @classmethod
    def exception_comment(cls, exception_id: int, comment_id: int) -> EventOrigin:
        return cls("exception_comment", (exception_id, comment_id))

    @classmethod
    def closed_periods(cls, reconciliation_id: int) -> EventOrigin:
        return cls("closed_periods", (reconciliation_id,))

    @classmethod
    def approval(cls, approval_id: int) -> EventOrigin:
        return cls("approval", (approval_id,))


@dataclass(frozen=True)
class Announcer:
    """Who announces an automated decision (`actor`), and which of the event's data fields its
    audit entry's summary keeps."""
    actor: str
    summary_fields: tuple[str, ...] = ("status",)


@dataclass(frozen=True)
class HeldEvent:
    """An event the ledger keeps until it is out: one the bus refused (no origin, due at once), or
    one held before the change it tells of is saved (due after its lease, sent only if its
    origin's item carries its mark by then)."""
    environment: str
    event: Event
    due_at: datetime
    origin: EventOrigin | None = None
    announcer: Announcer | None = None
    token: str = ""  # a held one's own: two changes that would tell the same event id never share a hold

    def due(self, now: datetime) -> bool:
        return self.due_at <= now

    @property
    def mark(self) -> str:
        """What the saving write adds to its item's `pending_events`, and the hold's key: the event's
        id and this hold's token."""
        return f"{self.event.id}#{self.token}" if self.token else self.event.id


@dataclass(frozen=True)
class HeldDecision:
    """An end the sweeper decides on its own (a stuck run failed, say), held before it is made and
    released once announced (services/events.py `deciding`)."""
    kind: str
    environment: str
    entity_id: int
    due_at: datetime
