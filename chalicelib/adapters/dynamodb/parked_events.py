"""What the table keeps of events: those the bus did not take, until the sweeper publishes them,
and a mark per automated decision's event once its audit entry is written.

Parked events are rare (EventBridge refused or could not be reached after the publisher's own
retries), so one partition across environments (each sort key starts with its environment) that
the one-minute sweeper reads whole; the same event parked twice is one item (its id is stable).
"""
from __future__ import annotations

import json
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import DynamoTable
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.events import Event


class ParkedEventRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def park(self, environment: str, events: list[Event]) -> None:
        self._table.batch_write(puts=[self._to_item(environment, e) for e in events])

    def parked(self, limit: int = 500) -> list[tuple[str, Event]]:
        page = self._table.query_page("pk", keys.PARKED_EVENTS_PK, limit=limit, newest_first=False)
        return [(item["environment"], Event.from_json(json.loads(item["event"]))) for item in page.items]

    def release(self, environment: str, events: list[Event]) -> None:
        self._table.batch_write(deletes=[keys.parked_event(environment, e.id) for e in events])

    def audited(self, environment: str, event_id: str) -> bool:
        return self._table.get(keys.audited_event(environment, event_id)) is not None

    def mark_audited(self, environment: str, event_id: str) -> None:
        self._table.put({**keys.audited_event(environment, event_id), "entity": "audited_event",
                         "at": iso(utc_now())})

    @staticmethod
    def _to_item(environment: str, event: Event) -> dict[str, Any]:
        return {**keys.parked_event(environment, event.id), "entity": "parked_event", "environment": environment,
                "event": json.dumps(event.to_json(), separators=(",", ":")), "parked_at": iso(utc_now())}
