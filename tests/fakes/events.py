"""Events: the bus they are published to (`adapters/events.py`), which takes them or refuses them
as scripted, and the ledger of those not out yet (`adapters/dynamodb/event_ledger.py`), whose
holds are owed only when the origin's item carries their mark (the FakeRecordStore's
`pending_events`, which the matches and exceptions fakes write as the adapters do)."""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

from chalicelib.adapters.events import EventPublishFailed
from chalicelib.domain.clock import iso, parse_iso, utc_now
from chalicelib.domain.events import Announcement, Event, HeldDecision, HeldEvent
from tests.fakes._support import padded, stored_time
from tests.fakes.records import FakeRecordStore


class FakeEventPublisher:
    """`published`: (environment, event) in the order the bus took them. `refusing`: while true,
    every event is refused as the adapter refuses what the bus did not take (EventPublishFailed)."""

    def __init__(self) -> None:
        self.published: list[tuple[str, Event]] = []
        self.refusing = False

    def publish(self, environment: str, events: list[Event]) -> None:
        if self.refusing and events:
            raise EventPublishFailed(list(events), "refused (scripted)")
        self.published += [(environment, Event.from_json(json.loads(json.dumps(e.to_json())))) for e in events]


class FakeEventLedger:
    def __init__(self, store: FakeRecordStore | None = None) -> None:
        self.store = store or FakeRecordStore()  # the items that carry owed events' marks
        self.parked_events: dict[tuple[str, str], HeldEvent] = {}  # (environment, event id)
        self.holds: dict[tuple[str, str], HeldEvent] = {}  # (environment, mark)
        self.held_decisions: dict[tuple[str, str, int], HeldDecision] = {}  # (kind, environment, entity id)
        self.announcements: dict[tuple[str, str], tuple[bool, str]] = {}  # (environment, event id): done, at

    def park(self, environment: str, events: list[Event]) -> None:
        now = stored_time(utc_now())
        for event in events:
            self.parked_events[(environment, event.id)] = HeldEvent(environment, event, due_at=now)

    def hold(self, held: HeldEvent) -> None:
        self.holds[(held.environment, held.mark)] = replace(held, due_at=stored_time(held.due_at))

    def parked(self, limit: int = 500) -> list[HeldEvent]:
        """In key order (environment, then event id), a page of `limit`."""
        return [self.parked_events[key] for key in sorted(self.parked_events)][:limit]

    def held(self, limit_per_shard: int = 500) -> list[HeldEvent]:
        return [self.holds[key] for key in sorted(self.holds)]

    def release(self, environment: str, events: list[Event]) -> None:
        for event in events:
            self.parked_events.pop((environment, event.id), None)

    def release_hold(self, held: HeldEvent) -> None:
        self.holds.pop((held.environment, held.mark), None)

    def owed(self, held: HeldEvent) -> bool:
        assert held.origin is not None
        return held.mark in self.store.pending_events.get(self._origin(held), set())

    def clear_owed(self, held: HeldEvent) -> None:
        assert held.origin is not None
        self.store.pending_events.get(self._origin(held), set()).discard(held.mark)

    @staticmethod
    def _origin(held: HeldEvent) -> tuple[str, str, tuple[int, ...]]:
        assert held.origin is not None
        if held.origin.kind not in ("match", "exception", "exception_comment", "closed_periods"):
            raise ValueError(f"unknown event origin {held.origin.kind!r}")
        return held.environment, held.origin.kind, held.origin.ids

    def hold_decision(self, decision: HeldDecision) -> None:
        self.held_decisions[(decision.kind, decision.environment, decision.entity_id)] = replace(
            decision, due_at=stored_time(decision.due_at))

    def decisions(self, kind: str, limit: int = 500) -> list[HeldDecision]:
        """The kind's, in key order (environment, then id as the adapter pads it)."""
        found = [(f"{env}#{padded(entity_id)}", d) for (k, env, entity_id), d in self.held_decisions.items()
                 if k == kind]
        return [d for _, d in sorted(found, key=lambda pair: pair[0])][:limit]

    def release_decision(self, decision: HeldDecision) -> None:
        self.held_decisions.pop((decision.kind, decision.environment, decision.entity_id), None)

    def announcement(self, environment: str, event_id: str) -> Announcement | None:
        mark = self.announcements.get((environment, event_id))
        return None if mark is None else Announcement(done=mark[0], since=parse_iso(mark[1]))

    def reserve(self, environment: str, event_id: str) -> bool:
        if (environment, event_id) in self.announcements:
            return False
        self.announcements[(environment, event_id)] = (False, iso(utc_now()))
        return True

    def retake(self, environment: str, event_id: str, since: datetime) -> bool:
        mark = self.announcements.get((environment, event_id))
        if mark is None or mark[0] or mark[1] != iso(since):
            return False
        self.announcements[(environment, event_id)] = (False, iso(utc_now()))
        return True

    def complete(self, environment: str, event_id: str) -> None:
        self.announcements[(environment, event_id)] = (True, iso(utc_now()))
