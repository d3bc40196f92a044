"""Bulk actions on the fakes: submitted as the routes submit them, worked as the worker works
them (`process`), a chunk at a time; each item through its single-item use case, audited and told
once, refused per item by the caller's role, and never applied twice however often it is worked."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain import bulk_actions as domain
from chalicelib.domain.bulk_actions import BulkActionKind, BulkStatus, BulkTarget, ItemStatus
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, ValidationFailed
from chalicelib.domain.matches import MatchStatus
from chalicelib.domain.period_closes import Period
from chalicelib.domain.reconciliation_exceptions import ExceptionStatus
from chalicelib.domain.users import Role, UserStatus
from chalicelib.services import bulk_actions as service
from chalicelib.services import period_closes
from chalicelib.services.reconciliation_exceptions import ExceptionQuery, list_exceptions, refresh
from chalicelib.services.reconciliation_rules import create_rule
from tests.services.conftest import ENV, days_ago, matched_by_a_run, record
from tests.support.people import add_user

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}


@pytest.fixture
def world(ports, ingest, reconciliation):
    """An open exception per stream (bank 25.00, ledger 40.00, weeks old), two proposed matches,
    and a person of each role."""
    rule = create_rule(ports, ENV, reconciliation.id, RULE)
    bank = ingest(record("bank", 1, 1000, days_ago(20)), record("bank", 2, 1100, days_ago(20)),
                  record("bank", 3, 2500, days_ago(40)))
    ledger = ingest(record("ledger", 1, 1000, days_ago(20)), record("ledger", 2, 1100, days_ago(20)),
                    record("ledger", 3, 4000, days_ago(30)))
    matches = [matched_by_a_run(ports, reconciliation, rule, [bank[n]], [ledger[n]], MatchStatus.PROPOSED).id
               for n in (0, 1)]
    refresh(ports, ENV, reconciliation.id)
    exceptions = sorted(e.id for e in list_exceptions(ports, ENV, ExceptionQuery(), 0, 50)[0])
    people = {role: add_user(ports.users, ENV, f"person-{role.value}", role) for role in Role}
    return {"reconciliation": reconciliation, "exceptions": exceptions, "matches": matches, "people": people}


def caller(world, role: Role) -> service.Caller:
    user = world["people"][role]
    return service.Caller(actor=f"user:{user.id}", role=role, user=user)


def submit(ports, who, target, action, ids, params=None, key=None, digest="d"):
    return service.submit(ports, ENV, who, target, action, params or {}, lambda: list(ids), {"ids": len(ids)},
                          digest, key)


def entries(ports, action: str) -> list:
    return [e for e in ports.audit.entries.values() if e.action == action]


def published(ports, event_type: str) -> list:
    return [event for _, event in ports.events.published if event.type == event_type]


def test_a_status_moves_each_exception_as_the_single_patch_does(ports, world):
    who = caller(world, Role.PREPARER)
    ids = world["exceptions"] + [999]
    action = submit(ports, who, BulkTarget.EXCEPTIONS, BulkActionKind.STATUS, ids, {"status": "dismissed"})
    assert action.status is BulkStatus.PENDING and ports.bulk_queue.messages[-1] == service.message(ENV, action.id)

    done = service.process(ports, ENV, action.id)

    assert done.status is BulkStatus.COMPLETED and done.started_at and done.completed_at
    assert (done.succeeded_items, done.failed_items, done.skipped_items) == (2, 1, 0)
    results, after = service.results_page(ports, done, -1, 10)
    assert after is None and [(r.id, r.status) for r in results] == [
        (ids[0], ItemStatus.SUCCEEDED), (ids[1], ItemStatus.SUCCEEDED), (999, ItemStatus.FAILED)]
    assert {ports.exceptions.get(ENV, i).status for i in world["exceptions"]} == {ExceptionStatus.DISMISSED}
    audited = entries(ports, "reconciliation_exception.updated")
    assert sorted(int(e.resource_id) for e in audited) == world["exceptions"]
    assert {(e.actor, e.summary["bulk_action_id"]) for e in audited} == {(who.actor, action.id)}
    assert all(e.summary["after"] == {"status": "dismissed"} for e in audited)
    told = published(ports, "reconciliation_exception.status_changed")
    assert len(told) == 2 and {e.data["actor"] for e in told} == {who.actor}  # the person, as their own request

    # Worked again (a redelivered message): nothing more is done, told or audited
    assert service.process(ports, ENV, action.id) == done
    assert len(entries(ports, "reconciliation_exception.updated")) == 2
    assert len(published(ports, "reconciliation_exception.status_changed")) == 2


def test_an_item_already_so_is_skipped_without_an_entry(ports, world):
    who = caller(world, Role.PREPARER)
    user = world["people"][Role.APPROVER]
    params = service.exception_params(ports, ENV, who, BulkActionKind.ASSIGN, user_id=user.id)
    first = submit(ports, who, BulkTarget.EXCEPTIONS, BulkActionKind.ASSIGN, world["exceptions"], params)
    assert service.process(ports, ENV, first.id).succeeded_items == 2
    again = submit(ports, who, BulkTarget.EXCEPTIONS, BulkActionKind.ASSIGN, world["exceptions"], params)
    done = service.process(ports, ENV, again.id)
    assert done.skipped_items == 2
    assert [r.error for r in service.results_page(ports, done, -1, 10)[0]] == [
        f"user {user.id} is assigned already"] * 2
    assert len(entries(ports, "reconciliation_exception.assigned")) == 2
    assert all([a.user_id for a in ports.exceptions.get(ENV, i).assignees] == [user.id] for i in world["exceptions"])


def test_a_worker_that_dies_after_applying_a_chunk_applies_nothing_twice(ports, world, monkeypatch):
    who = caller(world, Role.PREPARER)
    params = service.exception_params(ports, ENV, who, BulkActionKind.COMMENT, body="Asked the bank")
    action = submit(ports, who, BulkTarget.EXCEPTIONS, BulkActionKind.COMMENT, world["exceptions"], params)
    saved = ports.bulk_actions.save_chunk

    def dies(*args, **kwargs):
        raise RuntimeError("the worker died before storing the chunk's results")

    monkeypatch.setattr(ports.bulk_actions, "save_chunk", dies)
    with pytest.raises(RuntimeError):
        service.process(ports, ENV, action.id)
    monkeypatch.setattr(ports.bulk_actions, "save_chunk", saved)

    done = service.process(ports, ENV, action.id)  # the message, delivered again
    service.process(ports, ENV, action.id)  # and once more

    # Each item's result was kept with its mark when it was made: the same result, not "skipped"
    assert done.status is BulkStatus.COMPLETED and (done.succeeded_items, done.skipped_items) == (2, 0)
    for exception_id in world["exceptions"]:
        comments = ports.exceptions.comments(ports.exceptions.get(ENV, exception_id))
        assert [(c.body, c.author_idp_id) for c in comments] == [("Asked the bank", who.user.idp_user_id)]
    assert len(entries(ports, "reconciliation_exception.commented")) == 2
    assert len(published(ports, "reconciliation_exception.commented")) == 2


@pytest.fixture(autouse=True)
def short_item_wait(monkeypatch):
    """A delivery waits this long (not 20 s) for another's item under way before leaving its chunk."""
    monkeypatch.setattr(service, "ITEM_WAIT_SECONDS", 0.3)
    monkeypatch.setattr(service, "ITEM_POLL_SECONDS", 0.02)


def test_a_confirm_cut_short_before_its_records_is_finished_by_the_retry(ports, world, monkeypatch, clock):
    who = caller(world, Role.APPROVER)
    action = submit(ports, who, BulkTarget.MATCHES, BulkActionKind.CONFIRM, world["matches"])
    confirm_record = ports.claims.confirm_record

    def dies(*args, **kwargs):
        raise RuntimeError("died between the match and its records")

    monkeypatch.setattr(ports.claims, "confirm_record", dies)
    with pytest.raises(RuntimeError):
        service.process(ports, ENV, action.id)
    monkeypatch.setattr(ports.claims, "confirm_record", confirm_record)
    first = world["matches"][0]
    assert ports.matches.get(ENV, first).status is MatchStatus.CONFIRMED  # its records still await confirmation

    early = service.process(ports, ENV, action.id)  # within the lease: the worker may live; left to it
    assert early.done_chunks == frozenset() and ports.bulk_queue.delays[-1] == 900
    clock.advance(seconds=service.ITEM_LEASE.total_seconds())  # SQS redelivers after its visibility timeout (90 minutes)
    done = service.process(ports, ENV, action.id)

    results = service.results_page(ports, done, -1, 10)[0]
    assert results[0].status is ItemStatus.SUCCEEDED  # this action's confirm, finished: not "already confirmed"
    assert done.status is BulkStatus.COMPLETED and done.failed_items == 0  # the second, confirmed then or now
    # Once each: the match's event (owed with its write), its audit entry (the item's request id)
    assert len(published(ports, "reconciliation_match.confirmed")) == 2
    audited = entries(ports, "reconciliation_match.confirmed")
    assert sorted(int(e.resource_id) for e in audited) == sorted(world["matches"])
    for match_id in world["matches"]:
        members = ports.matches.members(ENV, match_id)
        assert {h.record.status.value for h in ports.claims.held_records(ENV, [m.record_id for m in members])} == {
            "reconciled"}


def test_a_confirm_cut_short_is_not_finished_by_the_retry_once_a_close_took_its_records_period(
        ports, world, monkeypatch, clock):
    # The retry comes after the item's lease (16 minutes), the close may land in between: its records
    # stay awaiting confirmation, as the single route's confirm leaves them, until the period reopens.
    action = submit(ports, caller(world, Role.APPROVER), BulkTarget.MATCHES, BulkActionKind.CONFIRM,
                    world["matches"])
    def dies(*args, **kwargs):
        raise RuntimeError("died between the match and its records")

    with monkeypatch.context() as patched:
        patched.setattr(ports.claims, "confirm_record", dies)
        with pytest.raises(RuntimeError):
            service.process(ports, ENV, action.id)
    first = world["matches"][0]
    today = utc_now().date()
    period_closes.close(ports, ENV, world["reconciliation"].id, Period(today - timedelta(days=25),
                                                                         today - timedelta(days=15)),
                        "signed", {}, "user:1")
    clock.advance(seconds=service.ITEM_LEASE.total_seconds())

    done = service.process(ports, ENV, action.id)

    results = service.results_page(ports, done, -1, 10)[0]
    assert results[0].status is ItemStatus.FAILED and "inside the closed period" in results[0].error
    members = ports.matches.members(ENV, first)
    assert {h.record.status.value for h in ports.claims.held_records(ENV, [m.record_id for m in members])} == {
        "pending_confirmation"}


def test_a_later_confirm_finishes_a_confirmed_match_whose_records_were_left_awaiting_confirmation(
        ports, world, monkeypatch):
    # The first action's confirm stopped between the match and its records (a close refused the rest,
    # or its worker died and nobody retried yet): another bulk confirm finishes them, not "already confirmed".
    who = caller(world, Role.APPROVER)
    first_action = submit(ports, who, BulkTarget.MATCHES, BulkActionKind.CONFIRM, world["matches"][:1])
    def dies(*args, **kwargs):
        raise RuntimeError("died between the match and its records")

    with monkeypatch.context() as patched:
        patched.setattr(ports.claims, "confirm_record", dies)
        with pytest.raises(RuntimeError):
            service.process(ports, ENV, first_action.id)
    first = world["matches"][0]
    records = [m.record_id for m in ports.matches.members(ENV, first)]
    assert {h.record.status.value for h in ports.claims.held_records(ENV, records)} == {"pending_confirmation"}

    again = submit(ports, who, BulkTarget.MATCHES, BulkActionKind.CONFIRM, world["matches"])
    done = service.process(ports, ENV, again.id)

    results = service.results_page(ports, done, -1, 10)[0]
    assert [r.status for r in results] == [ItemStatus.SUCCEEDED] * len(world["matches"])
    assert {h.record.status.value for h in ports.claims.held_records(ENV, records)} == {"reconciled"}
    assert len(published(ports, "reconciliation_match.confirmed")) == len(world["matches"])  # the first's, once
    nothing_left = service.process(ports, ENV, submit(ports, who, BulkTarget.MATCHES, BulkActionKind.CONFIRM,
                                                       world["matches"]).id)
    assert {(r.status, r.error) for r in service.results_page(ports, nothing_left, -1, 10)[0]} == {
        (ItemStatus.SKIPPED, "already confirmed")}


def overlapping(ports, monkeypatch, target, name, calls: int):
    """`target.name` counted; its first `calls` calls (the first delivery's items) held part-way
    until released: the second delivery runs while the first's changes are under way."""
    real = getattr(target, name)
    seen: list[tuple] = []
    held, release = threading.Semaphore(0), threading.Event()

    def slow(*args, **kwargs):
        seen.append(args)
        if len(seen) <= calls:
            held.release()
            assert release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, slow)
    return seen, held, release


def run_overlapping(ports, action_id: int, held, release, calls: int):
    """The first delivery in a thread, held inside its changes; a second delivery meanwhile (the
    idempotent re-POST's, the sweeper's or SQS's duplicate); then the first goes on."""
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(service.process, ports, ENV, action_id)
        for _ in range(calls):
            assert held.acquire(timeout=10)
        second = service.process(ports, ENV, action_id)
        release.set()
        return first.result(timeout=30), second


def test_a_confirm_delivered_twice_at_once_is_confirmed_once_and_succeeds(ports, world, monkeypatch):
    who = caller(world, Role.APPROVER)
    action = submit(ports, who, BulkTarget.MATCHES, BulkActionKind.CONFIRM, world["matches"])
    confirms, held, release = overlapping(ports, monkeypatch, service.match_service, "confirm", 2)

    done, second = run_overlapping(ports, action.id, held, release, 2)

    # The second delivery found the first's items under way: it left the chunk, its message delayed
    assert len(confirms) == 2 and second.done_chunks == frozenset()
    assert ports.bulk_queue.delays[-1] > 0 and ports.bulk_queue.messages[-1] == service.message(ENV, action.id)
    assert done.status is BulkStatus.COMPLETED and (done.succeeded_items, done.failed_items) == (2, 0)
    assert {r.status for r in service.results_page(ports, done, -1, 10)[0]} == {ItemStatus.SUCCEEDED}
    assert len(entries(ports, "reconciliation_match.confirmed")) == 2
    assert len(published(ports, "reconciliation_match.confirmed")) == 2
    assert service.process(ports, ENV, action.id).status is BulkStatus.COMPLETED  # the delayed message
    assert len(confirms) == 2


def test_a_status_delivered_twice_at_once_is_moved_and_audited_once(ports, world, monkeypatch):
    who = caller(world, Role.PREPARER)
    action = submit(ports, who, BulkTarget.EXCEPTIONS, BulkActionKind.STATUS, world["exceptions"],
                    {"status": "dismissed"})
    updates, held, release = overlapping(ports, monkeypatch, service.exception_service, "update", 2)

    done, _ = run_overlapping(ports, action.id, held, release, 2)

    assert len(updates) == 2
    assert done.status is BulkStatus.COMPLETED and (done.succeeded_items, done.failed_items) == (2, 0)
    audited = entries(ports, "reconciliation_exception.updated")
    assert sorted(int(e.resource_id) for e in audited) == world["exceptions"]  # one entry each
    assert len(published(ports, "reconciliation_exception.status_changed")) == 2


def test_an_item_whose_worker_died_is_taken_over_by_one_delivery_past_its_lease(ports, world, monkeypatch, clock):
    who = caller(world, Role.APPROVER)
    stuck = submit(ports, who, BulkTarget.MATCHES, BulkActionKind.CONFIRM, world["matches"][1:])
    stored = ports.bulk_actions.get(ENV, stuck.id)
    assert ports.bulk_actions.claim_item(stored, 0, world["matches"][1], "dead-worker") is None
    ports.bulk_actions.begin_chunk(stored, 0)
    clock.advance(seconds=service.ITEM_LEASE.total_seconds())
    mark = ports.bulk_actions.item_marks(stored, range(0, 1))[0]
    # Two late deliveries read the same lapsed mark: one takes it over, the other finds it taken
    assert ports.bulk_actions.take_over_item(stored, mark, "late-1") is None
    assert ports.bulk_actions.take_over_item(stored, mark, "late-2").owner == "late-1"

    left = service.process(ports, ENV, stuck.id)  # late-1 is live (its lease holds): left to it
    assert left.done_chunks == frozenset() and ports.matches.get(ENV, world["matches"][1]).status is MatchStatus.PROPOSED
    clock.advance(seconds=service.ITEM_LEASE.total_seconds())  # late-1 died too
    done = service.process(ports, ENV, stuck.id)
    assert done.status is BulkStatus.COMPLETED and done.succeeded_items == 1
    assert ports.matches.get(ENV, world["matches"][1]).status is MatchStatus.CONFIRMED


def test_what_the_role_may_not_do_fails_each_item_and_changes_nothing(ports, world):
    action = submit(ports, caller(world, Role.PREPARER), BulkTarget.MATCHES, BulkActionKind.CONFIRM,
                    world["matches"])
    done = service.process(ports, ENV, action.id)
    assert done.failed_items == 2
    assert {r.error for r in service.results_page(ports, done, -1, 10)[0]} == {
        "forbidden: confirming a match needs the approver role or above; yours is preparer"}
    assert {ports.matches.get(ENV, m).status for m in world["matches"]} == {MatchStatus.PROPOSED}


@pytest.mark.parametrize("change, error", [
    (lambda user: replace(user, role=Role.VIEWER), "needs the preparer role or above; yours is viewer"),
    (lambda user: replace(user, status=UserStatus.DEACTIVATED), "forbidden: the user who asked was deactivated"),
])
def test_a_user_lowered_or_deactivated_before_the_work_starts_is_refused_then(ports, world, change, error):
    who = caller(world, Role.PREPARER)
    action = submit(ports, who, BulkTarget.EXCEPTIONS, BulkActionKind.STATUS, world["exceptions"],
                    {"status": "investigating"})
    ports.users.save(change(who.user), who.user)
    done = service.process(ports, ENV, action.id)
    assert done.failed_items == 2 and all(error in r.error for r in service.results_page(ports, done, -1, 10)[0])


def test_reject_unmatches_a_proposed_match_once(ports, world):
    who = caller(world, Role.APPROVER)
    first = service.process(ports, ENV, submit(ports, who, BulkTarget.MATCHES, BulkActionKind.REJECT,
                                               world["matches"]).id)
    assert first.succeeded_items == 2 and all(ports.matches.find(ENV, m).unmatched_at for m in world["matches"])
    again = service.process(ports, ENV, submit(ports, who, BulkTarget.MATCHES, BulkActionKind.REJECT,
                                               world["matches"]).id)
    assert [r.error for r in service.results_page(ports, again, -1, 10)[0]] == ["already rejected (unmatched)"] * 2
    assert len(entries(ports, "reconciliation_match.deleted")) == 2


def test_a_long_action_goes_on_in_the_next_delivery_past_its_budget(ports, world):
    ids = list(range(10_000, 10_000 + domain.CHUNK_ITEMS + 5))  # two chunks of ids no exception has
    action = submit(ports, caller(world, Role.PREPARER), BulkTarget.EXCEPTIONS, BulkActionKind.STATUS, ids,
                    {"status": "resolved"})
    sent = len(ports.bulk_queue.messages)
    part = service.process(ports, ENV, action.id, budget_seconds=0)
    assert part.status is BulkStatus.PROCESSING and part.done_chunks == {0} and part.failed_items == domain.CHUNK_ITEMS
    assert ports.bulk_queue.messages[sent:] == [service.message(ENV, action.id)]  # queued again
    done = service.process(ports, ENV, action.id, budget_seconds=0)
    assert done.status is BulkStatus.COMPLETED and done.failed_items == len(ids)
    page, after = service.results_page(ports, done, -1, domain.CHUNK_ITEMS)
    assert len(page) == domain.CHUNK_ITEMS and after == domain.CHUNK_ITEMS - 1
    rest, end = service.results_page(ports, done, after, domain.CHUNK_ITEMS)
    assert [r.index for r in rest] == list(range(domain.CHUNK_ITEMS, len(ids))) and end is None


def test_an_idempotency_key_returns_the_first_action_and_requeues_it_while_pending(ports, world):
    who = caller(world, Role.PREPARER)
    first = submit(ports, who, BulkTarget.EXCEPTIONS, BulkActionKind.STATUS, world["exceptions"],
                   {"status": "resolved"}, key="k", digest="one")
    again = submit(ports, who, BulkTarget.EXCEPTIONS, BulkActionKind.STATUS, world["exceptions"],
                   {"status": "resolved"}, key="k", digest="one")
    assert again.id == first.id and ports.bulk_queue.messages.count(service.message(ENV, first.id)) == 2
    with pytest.raises(Conflict, match="already used with a different body"):
        submit(ports, who, BulkTarget.EXCEPTIONS, BulkActionKind.STATUS, [1], {"status": "open"}, key="k",
               digest="two")


def test_a_filter_is_the_queues_and_is_capped(ports, world, monkeypatch):
    assert service.filtered_exceptions(ports, ENV, ExceptionQuery(status=ExceptionStatus.OPEN)) == \
        sorted(world["exceptions"], reverse=True)
    assert service.filtered_matches(ports, ENV, world["reconciliation"].id) == sorted(world["matches"], reverse=True)
    monkeypatch.setattr(domain, "MAX_FILTERED", 1)
    with pytest.raises(ValidationFailed, match="selects more than 1 exceptions"):
        service.filtered_exceptions(ports, ENV, ExceptionQuery())
    with pytest.raises(ValidationFailed, match="must not be above amount_max"):
        service.filtered_exceptions(ports, ENV, ExceptionQuery(amount_min=5, amount_max=1))


def test_the_actions_fields_are_checked_as_the_single_routes_check_them(ports, world):
    by_key = service.Caller(actor="api_key:1", role=Role.ADMIN)
    with pytest.raises(ValidationFailed, match="is not an active user"):
        service.exception_params(ports, ENV, by_key, BulkActionKind.ASSIGN, user_id=12345)
    with pytest.raises(ValidationFailed, match="an API key names the comment's author"):
        service.exception_params(ports, ENV, by_key, BulkActionKind.COMMENT, body="x")
    with pytest.raises(ValidationFailed, match="the author is the signed-in user"):
        service.exception_params(ports, ENV, caller(world, Role.PREPARER), BulkActionKind.COMMENT, body="x",
                                 author_idp_id="someone-else")
    with pytest.raises(ValidationFailed):
        service.exception_params(ports, ENV, by_key, BulkActionKind.COMMENT, body="x",
                                 author_idp_id=world["people"][Role.VIEWER].idp_user_id, mentions=[99999])
    assert service.exception_params(ports, ENV, by_key, BulkActionKind.STATUS, status="resolved") == {
        "status": "resolved"}


def test_an_empty_selection_is_completed_at_once(ports, world):
    action = submit(ports, caller(world, Role.PREPARER), BulkTarget.EXCEPTIONS, BulkActionKind.STATUS, [],
                    {"status": "resolved"})
    assert action.status is BulkStatus.COMPLETED and action.total_items == 0 and action.progress == 100


def test_a_confirm_redelivered_after_its_chunk_was_counted_confirms_tells_and_audits_once(ports, world, monkeypatch):
    """The message comes again after the worker applied every item and died before counting the
    chunk: each item keeps the result it was given with its mark; nothing is confirmed, told or
    audited again."""
    who = caller(world, Role.APPROVER)
    action = submit(ports, who, BulkTarget.MATCHES, BulkActionKind.CONFIRM, world["matches"])
    saved = ports.bulk_actions.save_chunk
    monkeypatch.setattr(ports.bulk_actions, "save_chunk", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("died")))
    with pytest.raises(RuntimeError):
        service.process(ports, ENV, action.id)
    monkeypatch.setattr(ports.bulk_actions, "save_chunk", saved)
    confirms = []
    real_confirm = service.match_service.confirm
    monkeypatch.setattr(service.match_service, "confirm", lambda *a, **k: confirms.append(a) or real_confirm(*a, **k))

    done = service.process(ports, ENV, action.id)
    service.process(ports, ENV, action.id)

    assert confirms == [] and (done.succeeded_items, done.skipped_items) == (2, 0)
    assert len(published(ports, "reconciliation_match.confirmed")) == 2
    assert len(entries(ports, "reconciliation_match.confirmed")) == 2


def test_a_bulk_action_ending_is_told_once_with_its_counts(ports, world):
    who = caller(world, Role.PREPARER)
    action = submit(ports, who, BulkTarget.EXCEPTIONS, BulkActionKind.STATUS, world["exceptions"] + [999],
                    {"status": "dismissed"})
    assert published(ports, "bulk_action.completed") == []
    done = service.process(ports, ENV, action.id)
    service.process(ports, ENV, action.id)  # a redelivery: announced once
    [event] = published(ports, "bulk_action.completed")
    assert event.data == {
        "id": action.id, "url": f"/v1/bulk_actions/{action.id}", "target": "reconciliation_exception",
        "action": "status", "status": "completed", "total_items": 3, "succeeded_items": 2, "failed_items": 1,
        "skipped_items": 0, "error": None, "actor": who.actor, "completed_at": event.data["completed_at"]}
    assert done.completed_at is not None
    [entry] = entries(ports, "bulk_action.completed")
    assert (entry.resource_type, entry.resource_id, entry.actor) == (
        "bulk_action", str(action.id), f"system:bulk_action:{action.id}")
    empty = submit(ports, who, BulkTarget.EXCEPTIONS, BulkActionKind.STATUS, [], {"status": "resolved"})
    assert [e.data["id"] for e in published(ports, "bulk_action.completed")] == [action.id, empty.id]


def later(minutes: float):
    from datetime import timedelta

    from chalicelib.domain.clock import utc_now
    return utc_now() + timedelta(minutes=minutes)


def test_a_bulk_action_whose_first_message_was_lost_is_sent_again(ports, world):
    action = submit(ports, caller(world, Role.PREPARER), BulkTarget.EXCEPTIONS, BulkActionKind.STATUS,
                    world["exceptions"], {"status": "investigating"})
    ports.bulk_queue.messages.clear()
    assert service.sweep(ports, later(4))["started"] == 0
    assert service.sweep(ports, later(6))["started"] == 1
    assert ports.bulk_queue.messages == [service.message(ENV, action.id)]
    assert not ports.bulk_actions.count_restart(action)  # claimed once, from that read
    assert service.process(ports, ENV, action.id).status is BulkStatus.COMPLETED
    assert service.sweep(ports, later(60)) == {"restarted": 0, "started": 0, "failed": 0, "errors": 0}


def test_a_bulk_action_whose_worker_died_on_its_last_delivery_restarts_then_fails_saying_why(ports, world):
    action = submit(ports, caller(world, Role.PREPARER), BulkTarget.EXCEPTIONS, BulkActionKind.STATUS,
                    world["exceptions"], {"status": "investigating"})
    ports.bulk_queue.messages.clear()
    ports.bulk_actions.move(action, BulkStatus.PROCESSING, last_progress_at=later(0))  # then Lambda killed it
    assert service.sweep(ports, later(10))["restarted"] == 0
    minutes = 17
    for restart in range(1, 4):
        assert service.sweep(ports, later(minutes))["restarted"] == 1
        assert ports.bulk_actions.get(ENV, action.id).restarts == restart
        minutes += 17
    assert len(ports.bulk_queue.messages) == 3
    assert service.sweep(ports, later(minutes))["failed"] == 1
    failed = ports.bulk_actions.get(ENV, action.id)
    assert failed.status is BulkStatus.FAILED and "3 restarts did not help" in failed.error
    assert [e.data["status"] for e in published(ports, "bulk_action.completed")] == ["failed"]
