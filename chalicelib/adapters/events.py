"""Domain events onto the app's EventBridge bus (infra/template.yaml `EventBus`).

Each event is one bus entry: `source` "recon", `detail-type` the event's type, and the detail
`{"environment": ..., "event": {id, type, created_at, data}}`. The environment travels beside the
event, never inside it: the rules route on it (webhook fan-out), a client's payload never shows it.
"""
from __future__ import annotations

import json
import time
from typing import Any

from chalicelib.domain.events import EVENT_SOURCE, Event

ENTRIES_PER_CALL = 10  # PutEvents' limit
ATTEMPTS = 4  # entries EventBridge refused (throttled, internal) are sent again this many times in all


class EventPublishFailed(Exception):
    """Some events were not accepted by the bus after every attempt (the caller parks them)."""

    def __init__(self, failed: list[Event], reason: str) -> None:
        super().__init__(f"{len(failed)} event(s) not accepted by the event bus: {reason}")
        self.failed = failed


class EventBridgePublisher:
    def __init__(self, events_client: Any, bus_name: str) -> None:
        self._events = events_client
        self._bus = bus_name

    def publish(self, environment: str, events: list[Event]) -> None:
        for start in range(0, len(events), ENTRIES_PER_CALL):
            self._put(environment, events[start:start + ENTRIES_PER_CALL])

    def _put(self, environment: str, batch: list[Event]) -> None:
        pending, reason = batch, ""
        for attempt in range(ATTEMPTS):
            if attempt:
                time.sleep(0.05 * 2 ** attempt)
            answer = self._events.put_events(Entries=[self._entry(environment, event) for event in pending])
            if not answer.get("FailedEntryCount"):
                return
            refused = [(event, result) for event, result in zip(pending, answer["Entries"], strict=True)
                       if result.get("ErrorCode")]
            pending = [event for event, _ in refused]
            reason = "; ".join(sorted({f"{r['ErrorCode']}: {r.get('ErrorMessage', '')}" for _, r in refused}))
        raise EventPublishFailed(pending, reason)

    def _entry(self, environment: str, event: Event) -> dict[str, Any]:
        return {"Source": EVENT_SOURCE, "DetailType": event.type, "EventBusName": self._bus,
                "Detail": json.dumps({"environment": environment, "event": event.to_json()}, separators=(",", ":"))}
