"""An unmatch hides a match only as it was read, judged and gated: a reject (proposed matches only)
never unmatches a match a person confirmed meanwhile, whether the confirm lands between its checks
and its write or while a bulk reject's worker that died is taken over."""
from __future__ import annotations

import pytest

from chalicelib.domain.bulk_actions import BulkActionKind, BulkStatus, BulkTarget, ItemStatus
from chalicelib.domain.errors import Conflict
from chalicelib.domain.matches import MatchStatus
from chalicelib.domain.users import Role
from chalicelib.services import bulk_actions as bulk
from chalicelib.services import matches as match_service
from chalicelib.services.reconciliation_rules import create_rule
from tests.services.conftest import ENV, matched_by_a_run, record
from tests.support.people import add_user

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}


@pytest.fixture
def proposed(ports, ingest, reconciliation):
    rule = create_rule(ports, ENV, reconciliation.id, RULE)
    bank, ledger = ingest(record("bank", 1, 1000)), ingest(record("ledger", 1, 1000))
    return matched_by_a_run(ports, reconciliation, rule, bank, ledger, MatchStatus.PROPOSED), bank[0]


def test_a_confirm_between_an_unmatchs_gate_and_its_mark_refuses_the_unmatch(ports, proposed, monkeypatch):
    match, bank_record = proposed
    gate = match_service.approvals.check_unmatch

    def then_confirmed(ports_, judged):  # the gate passes a proposed match; a person's confirm lands
        gate(ports_, judged)
        match_service.confirm(ports, ENV, match.id)
    monkeypatch.setattr(match_service.approvals, "check_unmatch", then_confirmed)

    with pytest.raises(Conflict, match="confirmed now"):
        match_service.unmatch(ports, ENV, match.id)

    kept = ports.matches.find(ENV, match.id)
    assert (kept.status, kept.unmatching, kept.unmatched_at) == (MatchStatus.CONFIRMED, False, None)
    assert ports.records.get(ENV, bank_record).status == "reconciled"


def test_a_bulk_reject_taken_over_from_a_dead_worker_leaves_a_match_confirmed_meanwhile(
        ports, proposed, clock):
    match, bank_record = proposed
    approver = add_user(ports.users, ENV, "approver", Role.APPROVER)
    who = bulk.Caller(actor=f"user:{approver.id}", role=Role.APPROVER, user=approver)
    action = bulk.submit(ports, ENV, who, BulkTarget.MATCHES, BulkActionKind.REJECT, {}, lambda: [match.id],
                         {"ids": 1}, "d", None)
    stored = ports.bulk_actions.get(ENV, action.id)
    # The first delivery marks the item (its checks passed: proposed), then its worker dies;
    assert ports.bulk_actions.claim_item(stored, 0, match.id, "dead-worker") is None
    ports.bulk_actions.begin_chunk(stored, 0)
    # meanwhile a person confirms the match.
    match_service.confirm(ports, ENV, match.id)

    clock.advance(seconds=bulk.ITEM_LEASE.total_seconds())
    done = bulk.process(ports, ENV, action.id)

    assert done.status is BulkStatus.COMPLETED
    [result] = bulk.results_page(ports, done, -1, 10)[0]
    assert result.status is ItemStatus.FAILED and "only proposed matches are rejected" in result.error
    assert ports.matches.find(ENV, match.id).unmatched_at is None
    assert ports.records.get(ENV, bank_record).status == "reconciled"
