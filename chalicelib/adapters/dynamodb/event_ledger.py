"""What the table keeps of events: those not out yet, until the sweeper publishes them, and each
automated decision's announcement (its audit entry and its event).

Events are parked when EventBridge refused them or could not be reached after the publisher's
own retries: rare, so one partition across environments (each sort key starts with its
environment) that the one-minute sweeper reads a page of; the same event parked twice is one item
(its id is stable). Events are held while the change they tell of is saved (the outbox: the
saving write adds the hold's mark, the event's id and the hold's own token, to the item's
`pending_events`; once the event is out the mark is taken off and the hold released): two writes
per person's change, so across 8 shards.
An announcement is reserved before the audit entry is written and completed after the
event is out, so a retried job announces nothing twice (services/events.py `announce`).
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable
from chalicelib.domain.clock import iso, parse_iso, utc_now
from chalicelib.domain.events import Announcement, Announcer, Event, EventOrigin, HeldDecision, HeldEvent

PENDING, DONE = "pending", "done"


class EventLedger:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    # Parked events ------------------------------------------------------------------------------

    def park(self, environment: str, events: list[Event]) -> None:
        """Events the bus refused: due at once."""
        now = utc_now()
        self._table.batch_write(puts=[self._parked_item(keys.parked_event(environment, e.id),
                                                        HeldEvent(environment, e, due_at=now)) for e in events])

    def hold(self, held: HeldEvent) -> None:
        """Before the change the event tells of is saved (see the module docstring); its token is
        its own, so no other hold is overwritten."""
        self._table.put_new(self._parked_item(keys.held_event(held.environment, held.mark), held))

    def parked(self, limit: int = 500) -> list[HeldEvent]:
        """Events the bus refused, of every environment, in key order: a page of `limit`."""
        page = self._table.query_page(keys.BASE_TABLE, keys.PARKED_EVENTS_PK, limit=limit, newest_first=False)
        return [self._held(item) for item in page.items]

    def held(self, limit_per_shard: int = 500) -> list[HeldEvent]:
        """Events held while their change is saved, of every environment: a page of each shard."""
        found = []
        for shard in keys.held_events_shards():
            found += [self._held(item) for item in
                      self._table.query_page(keys.BASE_TABLE, shard, limit=limit_per_shard, newest_first=False).items]
        return found

    def release(self, environment: str, events: list[Event]) -> None:
        self._table.batch_write(deletes=[keys.parked_event(environment, e.id) for e in events])

    def release_hold(self, held: HeldEvent) -> None:
        self._table.delete(keys.held_event(held.environment, held.mark))

    def owed(self, held: HeldEvent) -> bool:
        """Whether the held event's origin item carries its mark: its change was saved, and the
        event is not out yet."""
        assert held.origin is not None
        item = self._table.get(_origin_key(held.environment, held.origin))
        return item is not None and held.mark in (item.get(keys.PENDING_EVENTS) or ())

    def clear_owed(self, held: HeldEvent) -> None:
        """The event is out: its mark comes off the origin's item (an item gone meanwhile stays gone)."""
        assert held.origin is not None
        try:
            self._table.update(_origin_key(held.environment, held.origin), f"DELETE {keys.PENDING_EVENTS} :mark",
                               values={":mark": {held.mark}}, condition="attribute_exists(pk)")
        except ConditionFailed:
            pass

    @staticmethod
    def _parked_item(key: dict[str, str], held: HeldEvent) -> dict[str, Any]:
        item: dict[str, Any] = {**key, "entity": "held_event" if held.origin else "parked_event",
                                "environment": held.environment,
                                "event": json.dumps(held.event.to_json(), separators=(",", ":")),
                                "parked_at": iso(utc_now()), "due_at": iso(held.due_at)}
        if held.origin is not None:
            item["origin"] = {"kind": held.origin.kind, "ids": list(held.origin.ids)}
        if held.announcer is not None:
            item["announcer"] = {"actor": held.announcer.actor, "summary_fields": list(held.announcer.summary_fields)}
        if held.token:
            item["token"] = held.token
        return item

    @staticmethod
    def _held(item: dict[str, Any]) -> HeldEvent:
        origin, announcer = item.get("origin"), item.get("announcer")
        return HeldEvent(
            environment=item["environment"], event=Event.from_json(json.loads(item["event"])),
            due_at=parse_iso(item.get("due_at") or item["parked_at"]),
            origin=EventOrigin(origin["kind"], tuple(int(i) for i in origin["ids"])) if origin else None,
            announcer=Announcer(announcer["actor"], tuple(announcer["summary_fields"])) if announcer else None,
            token=item.get("token", ""))

    # Held decisions -----------------------------------------------------------------------------

    def hold_decision(self, decision: HeldDecision) -> None:
        self._table.put({**keys.held_decision(decision.kind, decision.environment, decision.entity_id),
                         "entity": "held_decision", "kind": decision.kind, "environment": decision.environment,
                         "entity_id": decision.entity_id, "due_at": iso(decision.due_at)})

    def decisions(self, kind: str, limit: int = 500) -> list[HeldDecision]:
        page = self._table.query_page(keys.BASE_TABLE, keys.HELD_DECISIONS_PK, limit=limit, newest_first=False,
                                      sort_prefix=f"{kind}#")
        return [HeldDecision(item["kind"], item["environment"], int(item["entity_id"]), parse_iso(item["due_at"]))
                for item in page.items]

    def release_decision(self, decision: HeldDecision) -> None:
        self._table.delete(keys.held_decision(decision.kind, decision.environment, decision.entity_id))

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


def owing(mark: str | None) -> dict[str, Any]:
    """The attribute a put adds to the item it saves when the change owes an event (its hold's
    mark; else none)."""
    return {keys.PENDING_EVENTS: {mark}} if mark is not None else {}


def owes(mark: str | None) -> tuple[str, dict[str, Any]]:
    """The clause and values an update adds when its change owes an event (its hold's mark; else
    "" and none)."""
    if mark is None:
        return "", {}
    return f" ADD {keys.PENDING_EVENTS} :owed_event", {":owed_event": {mark}}


def _origin_key(environment: str, origin: EventOrigin) -> dict[str, str]:
    if origin.kind == "match":
        return keys.match(environment, *origin.ids)
    if origin.kind == "exception":
        return keys.reconciliation_exception(environment, *origin.ids)
    if origin.kind == "exception_comment":
        return keys.exception_comment(environment, *origin.ids)
    if origin.kind == "closed_periods":
        return keys.closed_periods(environment, *origin.ids)
    if origin.kind == "approval":
        return keys.approval(environment, *origin.ids)
    raise ValueError(f"unknown event origin {origin.kind!r}")
