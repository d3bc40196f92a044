"""A close never lands while a change of a match that can stop part-way is still under way (an
unmatch from its mark, a manual match from its begin): the change's retry or roll-back would then
open records dated inside the period the close counted as matched. A close refuses, naming the
match; once the change ends (retried, rolled back), the close lands."""
from __future__ import annotations

from dataclasses import replace
from datetime import date, timedelta

import pytest

from chalicelib.domain.errors import Conflict
from chalicelib.domain.matches import MatchStatus
from chalicelib.domain.period_closes import Period
from chalicelib.services import matches as match_service
from chalicelib.services import period_closes
from chalicelib.services.reconciliation_rules import create_rule
from chalicelib.services.reconciliation_runs import give_up, load, match, persist, start_run
from tests.services.conftest import ENV, matched_by_a_run, record
from tests.support.crashes import Dies, Killed, one_by_one

NOVEMBER = Period(date(2026, 11, 1), date(2026, 11, 30))
RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}


class Died(Exception):
    """The process of a request stops here."""


def close_november(ports, reconciliation):
    return period_closes.close(ports, ENV, reconciliation.id, NOVEMBER, "signed", {}, "user:1")


@pytest.fixture
def confirmed(ports, ingest, reconciliation):
    rule = create_rule(ports, ENV, reconciliation.id, RULE)
    bank, ledger = ingest(record("bank", 1, 1000)), ingest(record("ledger", 1, 1000))
    return matched_by_a_run(ports, reconciliation, rule, bank, ledger), bank[0], ledger[0]


def test_a_close_refuses_while_an_unmatch_that_stopped_part_way_is_unfinished(
        ports, reconciliation, confirmed, monkeypatch):
    match, bank_record, ledger_record = confirmed

    def dies(*args, **kwargs):
        raise Died()
    with monkeypatch.context() as patched:  # marked, then its process dies before any record opens
        patched.setattr(match_service, "release_members", dies)
        with pytest.raises(Died):
            match_service.unmatch(ports, ENV, match.id)
    assert ports.matches.find(ENV, match.id).unmatching

    with pytest.raises(Conflict, match=f"match {match.id} of reconciliation {reconciliation.id} is still being "
                                       "unmatched"):
        close_november(ports, reconciliation)
    assert period_closes.closed_of(ports, ENV, reconciliation.id) == []

    match_service.unmatch(ports, ENV, match.id)  # the retry finishes it; the close then counts its records open
    made = close_november(ports, reconciliation)

    assert [(m.currency, m.count, m.credits) for m in made.unmatched] == [("USD", 2, 2000)]
    assert {ports.records.get(ENV, r).status for r in (bank_record, ledger_record)} == {"unreconciled"}
    assert ports.period_closes.held_matches(ENV, reconciliation.id) == []


def test_an_unmatch_ended_lets_go_and_a_close_lets_go_of_one_that_never_marked(
        ports, reconciliation, confirmed, monkeypatch):
    match, _, _ = confirmed
    ports.period_closes.hold_match(ENV, reconciliation.id, 999, match.created_at)  # its request died before its mark
    match_service.unmatch(ports, ENV, match.id)
    assert ports.period_closes.held_matches(ENV, reconciliation.id) == [999]

    close_november(ports, reconciliation)

    assert ports.period_closes.held_matches(ENV, reconciliation.id) == []


def test_a_close_refuses_while_a_manual_match_whose_request_died_is_begun_then_lands_once_rolled_back(
        ports, ingest, reconciliation, clock, monkeypatch):
    bank, ledger = ingest(record("bank", 1, 500))[0], ingest(record("ledger", 1, 500))[0]

    def dies(*args, **kwargs):
        raise Died()
    with monkeypatch.context() as patched:  # begun, its records claimed, then the process dies before its commit
        real = match_service.write_matches

        def claims_then_dies(ports_, batch, *args, **kwargs):
            patched.setattr(ports_.matches, "commit_many", dies)
            return real(ports_, batch, *args, **kwargs)
        patched.setattr(match_service, "write_matches", claims_then_dies)
        patched.setattr(match_service, "roll_back", dies)
        with pytest.raises(Died):
            match_service.create_manual_match(ports, ENV, reconciliation.id, [bank, ledger], False, None)
    (pending,) = ports.matches.pending()
    assert ports.records.get(ENV, bank).status == "reconciled"  # claimed by the match that never was

    with pytest.raises(Conflict, match=f"match {pending.id} of reconciliation {reconciliation.id} is still being "
                                       "made"):
        close_november(ports, reconciliation)

    clock.advance(seconds=(match_service.PENDING_FOR + timedelta(seconds=1)).total_seconds())
    assert match_service.sweep_pending(ports) == 1
    made = close_november(ports, reconciliation)

    assert [(m.currency, m.count, m.credits) for m in made.unmatched] == [("USD", 2, 1000)]
    assert ports.period_closes.held_matches(ENV, reconciliation.id) == []


def test_a_manual_match_whose_commit_landed_though_its_answer_was_lost_is_made(
        ports, ingest, reconciliation, monkeypatch):
    bank, ledger = ingest(record("bank", 1, 500))[0], ingest(record("ledger", 1, 500))[0]
    real = match_service.write_matches

    def answer_lost(*args, **kwargs):
        real(*args, **kwargs)
        raise TimeoutError("read timeout")
    monkeypatch.setattr(match_service, "write_matches", answer_lost)

    made = match_service.create_manual_match(ports, ENV, reconciliation.id, [bank, ledger], False, None)

    stored = ports.matches.find(ENV, made.id)
    assert (stored.status, stored.pending_since, stored.unmatching) == (MatchStatus.CONFIRMED, None, False)
    assert {ports.records.get(ENV, r).status for r in (bank, ledger)} == {"reconciled"}
    assert ports.period_closes.held_matches(ENV, reconciliation.id) == []


def test_a_manual_match_whose_claims_failed_is_rolled_back(ports, ingest, reconciliation, monkeypatch):
    bank, ledger = ingest(record("bank", 1, 500))[0], ingest(record("ledger", 1, 500))[0]

    def refused(*args, **kwargs):
        raise TimeoutError("read timeout")
    monkeypatch.setattr(ports.claims, "claim_together", refused)

    with pytest.raises(TimeoutError):
        match_service.create_manual_match(ports, ENV, reconciliation.id, [bank, ledger], False, None)

    assert ports.matches.pending() == []
    assert {ports.records.get(ENV, r).status for r in (bank, ledger)} == {"unreconciled"}
    assert ports.period_closes.held_matches(ENV, reconciliation.id) == []


def test_a_close_gives_a_match_change_that_ended_just_before_its_check_the_index_settle_time(
        ports, reconciliation, confirmed, monkeypatch):
    # a roll-back or an unmatch retry that ends as the close looks at the held matches wrote records
    # the close then reads from its indexes: the settle wait comes after that look, not before it
    match, _, _ = confirmed
    steps = []
    held_matches = ports.period_closes.held_matches
    monkeypatch.setattr(ports.period_closes, "held_matches",
                        lambda *args: steps.append("held matches read") or held_matches(*args))
    monkeypatch.setattr(period_closes.time, "sleep", lambda seconds: steps.append("index settle"))
    settling = replace(ports, limits=replace(ports.limits, index_settle=timedelta(seconds=2)))

    close_november(settling, reconciliation)

    assert steps == ["held matches read", "index settle"]


@pytest.fixture
def persist_died(ports, ingest, reconciliation):
    """A run whose persist claimed three of its two matches' four records, then died before a commit."""
    create_rule(ports, ENV, reconciliation.id, RULE)
    record_ids = ingest(record("bank", 1, 1001), record("bank", 2, 1002))
    record_ids += ingest(record("ledger", 1, 1001), record("ledger", 2, 1002))
    run = start_run(ports, ENV, reconciliation.id)
    assert load(ports, ENV, run.id) == "match" and match(ports, ENV, run.id) == "persist"
    with pytest.raises(Killed):
        persist(replace(ports, claims=Dies(one_by_one(ports.claims), "claim_record", 4)), ENV, run.id)
    assert any(reconciliation.id in h.matched_in for h in ports.claims.held_records(ENV, record_ids))
    return run, record_ids


def unmatched_in(ports, reconciliation, record_ids) -> int:
    return sum(reconciliation.id not in h.matched_in for h in ports.claims.held_records(ENV, record_ids))


def test_a_close_refuses_while_a_run_chunk_that_died_before_its_commit_holds_claims_then_counts_its_retry(
        ports, reconciliation, persist_died):
    # Landing in between, the close counted the claimed records as matched; the retry, finding them inside
    # the closed period, released them: open records inside a signed-off period the close never listed.
    run, record_ids = persist_died
    with pytest.raises(Conflict, match=f"run {run.id} of reconciliation {reconciliation.id} is still writing"):
        close_november(ports, reconciliation)
    assert period_closes.closed_of(ports, ENV, reconciliation.id) == []

    persist(ports, ENV, run.id)  # the retry commits both matches
    made = close_november(ports, reconciliation)

    assert not made.unmatched and unmatched_in(ports, reconciliation, record_ids) == 0
    assert ports.period_closes.held_run_chunks(ENV, reconciliation.id) == []


def test_a_close_lands_once_a_run_whose_persist_died_gives_up_and_counts_what_it_released(
        ports, reconciliation, persist_died):
    run, record_ids = persist_died
    give_up(ports, ENV, run.id, "the persist failed on every retry")

    made = close_november(ports, reconciliation)

    assert sum(m.count for m in made.unmatched) == 4 == unmatched_in(ports, reconciliation, record_ids)
    assert ports.period_closes.held_run_chunks(ENV, reconciliation.id) == []
