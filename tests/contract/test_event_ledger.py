"""The event ledger: events the bus refused, parked until published; events held while the change
they tell of is saved, owed only once the origin's item carries their mark (and cleared when
out); the sweeper's held decisions; and announcements, reserved once, retaken only as read, done."""
from __future__ import annotations

from datetime import timedelta

from chalicelib.domain.events import Announcer, Event, EventOrigin, HeldDecision, HeldEvent
from chalicelib.domain.matches import Match, MatchStatus
from tests.contract.builders import ENV, OTHER_ENV, T0, T0_MS


def event(n: int) -> Event:
    return Event(id=f"evt_{n}", type="reconciliation_match.confirmed", created_at=T0_MS, data={"id": n})


def held(n: int, token: str = "t1") -> HeldEvent:
    return HeldEvent(ENV, event(n), due_at=T0_MS + timedelta(minutes=2), origin=EventOrigin.match(n),
                     announcer=Announcer("key:1", ("status",)), token=token)


class TestEventLedger:
    def test_parked_events_wait_until_released(self, event_ledger, clock):
        event_ledger.park(ENV, [event(1), event(2)])
        event_ledger.park(ENV, [event(1)])  # the same event again: one
        event_ledger.park(OTHER_ENV, [event(3)])
        parked = event_ledger.parked()
        assert sorted(((p.environment, p.event.id), p.event) for p in parked) == [
            ((ENV, "evt_1"), event(1)), ((ENV, "evt_2"), event(2)), ((OTHER_ENV, "evt_3"), event(3))]
        assert all(p.due(clock.now) and p.origin is None for p in parked)

        event_ledger.release(ENV, [event(1), event(2)])
        assert [p.event.id for p in event_ledger.parked()] == ["evt_3"]

    def test_a_held_event_is_owed_once_its_origin_carries_its_mark_until_cleared(self, event_ledger, matches):
        first, rival = held(1), held(1, token="t2")
        event_ledger.hold(first)
        event_ledger.hold(rival)  # another change telling the same event: a hold of its own
        assert sorted(h.token for h in event_ledger.held()) == ["t1", "t2"]
        assert event_ledger.held()[0] in (first, rival)
        assert not event_ledger.owed(first)  # its change is not saved (yet, or ever)

        matches.commit_many([Match(ENV, 1, 1, MatchStatus.CONFIRMED, "group-1", 2, T0)], {1: first.mark})
        assert event_ledger.owed(first) and not event_ledger.owed(rival)

        event_ledger.clear_owed(first)
        event_ledger.clear_owed(held(9))  # an origin gone meanwhile stays gone
        assert not event_ledger.owed(first)
        event_ledger.release_hold(first)
        event_ledger.release_hold(rival)
        assert event_ledger.held() == []

    def test_held_decisions_are_listed_by_kind_until_released(self, event_ledger):
        run, job = HeldDecision("reconciliation_run", ENV, 7, T0_MS), HeldDecision("file_import", ENV, 7, T0_MS)
        event_ledger.hold_decision(run)
        event_ledger.hold_decision(job)
        event_ledger.hold_decision(HeldDecision("reconciliation_run", OTHER_ENV, 2, T0_MS))
        assert [(d.environment, d.entity_id) for d in event_ledger.decisions("reconciliation_run")] == [
            (ENV, 7), (OTHER_ENV, 2)]
        assert event_ledger.decisions("file_import") == [job]
        event_ledger.release_decision(run)
        assert [d.environment for d in event_ledger.decisions("reconciliation_run")] == [OTHER_ENV]

    def test_an_announcement_is_reserved_once_retaken_only_as_read_and_done(self, event_ledger, clock):
        assert event_ledger.announcement(ENV, "evt_1") is None
        assert event_ledger.reserve(ENV, "evt_1")
        assert not event_ledger.reserve(ENV, "evt_1")
        mark = event_ledger.announcement(ENV, "evt_1")
        reserved_at = clock.now.replace(microsecond=clock.now.microsecond // 1000 * 1000)  # kept to the ms
        assert mark is not None and not mark.done and mark.since == reserved_at

        clock.advance(minutes=30)
        assert not event_ledger.retake(ENV, "evt_1", mark.since - timedelta(seconds=1))
        assert event_ledger.retake(ENV, "evt_1", mark.since)
        assert not event_ledger.retake(ENV, "evt_1", mark.since)  # another worker took it meanwhile
        event_ledger.complete(ENV, "evt_1")
        done = event_ledger.announcement(ENV, "evt_1")
        assert done is not None and done.done
        assert not event_ledger.retake(ENV, "evt_1", done.since) and not event_ledger.reserve(ENV, "evt_1")
