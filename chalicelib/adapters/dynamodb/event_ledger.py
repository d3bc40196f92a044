"""What the table keeps of events: those the bus did not take, until the sweeper publishes them,
and the mark of each automated decision's announcement (its audit entry and its event).

Parked events are rare (EventBridge refused or could not be reached after the publisher's own
retries), so one partition across environments (each sort key starts with its environment) that
the one-minute sweeper reads whole; the same event parked twice is one item (its id is stable).
An announcement's mark is reserved before the audit entry is written and completed after the
event is out, so a retried job announces nothing twice (services/events.py `announce`).
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable
from chalicelib.domain.clock import iso, parse_iso, utc_now
from chalicelib.domain.events import Announcement, Event

PENDING, DONE = "pending", "done"


class EventLedger:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    # Parked events ------------------------------------------------------------------------------

    def park(self, environment: str, events: list[Event]) -> None:
        self._table.batch_write(puts=[self._parked_item(environment, e) for e in events])

    def parked(self, limit: int = 500) -> list[tuple[str, Event]]:
        page = self._table.query_page("pk", keys.PARKED_EVENTS_PK, limit=limit, newest_first=False)
        return [(item["environment"], Event.from_json(json.loads(item["event"]))) for item in page.items]

    def release(self, environment: str, events: list[Event]) -> None:
        self._table.batch_write(deletes=[keys.parked_event(environment, e.id) for e in events])

    @staticmethod
    def _parked_item(environment: str, event: Event) -> dict[str, Any]:
        return {**keys.parked_event(environment, event.id), "entity": "parked_event", "environment": environment,
                "event": json.dumps(event.to_json(), separators=(",", ":")), "parked_at": iso(utc_now())}

    # Announcements ------------------------------------------------------------------------------

    def announcement(self, environment: str, event_id: str) -> Announcement | None:
        item = self._table.get(keys.announced_event(environment, event_id))
        if item is None:
            return None
        return Announcement(done=item["state"] == DONE, since=parse_iso(item["at"]))

    def reserve(self, environment: str, event_id: str) -> bool:
        """Take the announcement; False when another worker has it (or it is done)."""
        try:
            self._table.put_new({**keys.announced_event(environment, event_id), "entity": "announced_event",
                                 "state": PENDING, "at": iso(utc_now())})
        except ConditionFailed:
            return False
        return True

    def retake(self, environment: str, event_id: str, since: datetime) -> bool:
        """Take over a pending announcement its worker left (reserved at `since`); False when
        another worker took it or finished it first."""
        try:
            self._table.update(keys.announced_event(environment, event_id), "SET #at = :now",
                               values={":now": iso(utc_now()), ":since": iso(since), ":pending": PENDING},
                               names={"#at": "at", "#state": "state"},
                               condition="#state = :pending AND #at = :since")
        except ConditionFailed:
            return False
        return True

    def complete(self, environment: str, event_id: str) -> None:
        self._table.update(keys.announced_event(environment, event_id), "SET #state = :done, #at = :now",
                           values={":done": DONE, ":now": iso(utc_now())}, names={"#state": "state", "#at": "at"})
