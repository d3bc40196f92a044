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
BYTES_PER_CALL = 240 * 1024  # PutEvents takes 256 KB a call (entries' source, detail-type and detail)
ATTEMPTS = 4  # entries EventBridge refused (throttled, internal) are sent again this many times in all


class EventPublishFailed(Exception):
    """Some events were not accepted by the bus after every attempt: `failed` (the caller parks them)."""

    def __init__(self, failed: list[Event], reason: str) -> None:
        super().__init__(f"{len(failed)} event(s) not accepted by the event bus: {reason}")
        self.failed = failed


class EventBridgePublisher:
    def __init__(self, events_client: Any, bus_name: str) -> None:
        self._events = events_client
        self._bus = bus_name

    def publish(self, environment: str, events: list[Event]) -> None:
        """Every event, in calls of at most 10 entries and 240 KB; raises EventPublishFailed naming
        those the bus did not take (the others went)."""
        failed: list[Event] = []
        reasons: list[str] = []
        for batch in self._batches(environment, events):
            try:
                self._put(batch)
            except EventPublishFailed as refused:
                failed += refused.failed
                reasons.append(str(refused))
            except Exception as error:  # the bus unreachable: this batch did not go
                failed += [event for event, _ in batch]
                reasons.append(f"{type(error).__name__}: {error}")
        if failed:
            raise EventPublishFailed(failed, "; ".join(reasons))

    def _batches(self, environment: str, events: list[Event]) -> list[list[tuple[Event, dict[str, Any]]]]:
        batches: list[list[tuple[Event, dict[str, Any]]]] = []
        size = 0
        for event in events:
            entry = self._entry(environment, event)
            entry_size = sum(len(entry[k].encode()) for k in ("Source", "DetailType", "Detail"))
            if not batches or len(batches[-1]) == ENTRIES_PER_CALL or size + entry_size > BYTES_PER_CALL:
                batches.append([])
                size = 0
            batches[-1].append((event, entry))
            size += entry_size
        return batches

    def _put(self, batch: list[tuple[Event, dict[str, Any]]]) -> None:
        pending, reason = batch, ""
        for attempt in range(ATTEMPTS):
            if attempt:
                time.sleep(0.05 * 2 ** attempt)
            answer = self._events.put_events(Entries=[entry for _, entry in pending])
            if not answer.get("FailedEntryCount"):
                return
            refused = [(sent, result) for sent, result in zip(pending, answer["Entries"], strict=True)
                       if result.get("ErrorCode")]
            pending = [sent for sent, _ in refused]
            reason = "; ".join(sorted({f"{r['ErrorCode']}: {r.get('ErrorMessage', '')}" for _, r in refused}))
        raise EventPublishFailed([event for event, _ in pending], reason)

    def _entry(self, environment: str, event: Event) -> dict[str, Any]:
        return {"Source": EVENT_SOURCE, "DetailType": event.type, "EventBusName": self._bus,
                "Detail": json.dumps({"environment": environment, "event": event.to_json()}, separators=(",", ":"))}
