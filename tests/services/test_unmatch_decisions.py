"""People's unmatch decisions kept at unmatch (services/matches.py `unmatch`, services/
unmatch_decisions.py), on the fakes: a person's unmatch or rejection is kept once, with its
records by side, who and when; an unmatch nobody decided (a job, the sweeper, a reconciliation's
delete, a run's or a dead request's undo) keeps nothing."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import NotFound
from chalicelib.domain.matches import Match, MatchMember, MatchStatus
from chalicelib.services import audit
from chalicelib.services.matches import create_manual_match, sweep_pending, unmatch, used_by, write_matches
from chalicelib.services.reconciliation_rules import create_rule
from chalicelib.services.reconciliations import delete_reconciliation
from tests.fakes import fake_ports
from tests.fakes.unmatch_decisions import FakeUnmatchDecisions
from tests.services.conftest import ENV, matched_by_a_run, record
from tests.services.test_matches import ClaimsThenDies

RULE = {"name": "Amounts", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}


@pytest.fixture
def ports():
    return fake_ports(unmatch_decisions=FakeUnmatchDecisions())


def kept(ports, reconciliation):
    return ports.unmatch_decisions.newest_of(ENV, reconciliation.id, 100)


def pair(ports, ingest, reconciliation, n=1):
    bank = ingest(record("bank", n, 1000 + n))
    ledger = ingest(record("ledger", n, 1000 + n))
    return bank, ledger, create_manual_match(ports, ENV, reconciliation.id, bank + ledger, False, None)


class ReleaseDies:
    """The claims, whose first release fails (the unmatching request dies part-way)."""

    def __init__(self, claims) -> None:
        self._claims, self.failed = claims, False

    def __getattr__(self, name):
        return getattr(self._claims, name)

    def release_record(self, *args, **kwargs):
        if not self.failed:
            self.failed = True
            raise RuntimeError("throttled")
        return self._claims.release_record(*args, **kwargs)


def test_a_persons_unmatch_is_kept_with_its_records_who_and_when(ports, ingest, reconciliation, clock):
    bank, ledger, match = pair(ports, ingest, reconciliation)

    with audit.acting_as("user:3"):
        unmatch(ports, ENV, match.id)

    [decision] = kept(ports, reconciliation)
    assert (decision.match_id, decision.side_a_record_ids, decision.side_b_record_ids) == (
        match.id, tuple(bank), tuple(ledger))
    assert (decision.decided_by, decision.match_status, decision.reconciliation_rule_id) == ("user:3", "confirmed",
                                                                                            None)
    assert abs(decision.decided_at - utc_now()) < timedelta(milliseconds=1)


def test_a_rejected_proposal_of_a_run_is_kept_naming_its_rule(ports, ingest, reconciliation):
    rule = create_rule(ports, ENV, reconciliation.id, RULE)
    bank, ledger = ingest(record("bank", 1, 500)), ingest(record("ledger", 1, 500))
    proposal = matched_by_a_run(ports, reconciliation, rule, bank, ledger, MatchStatus.PROPOSED)

    with audit.acting_as("api_key:7"):
        unmatch(ports, ENV, proposal.id)

    [decision] = kept(ports, reconciliation)
    assert (decision.decided_by, decision.match_status, decision.reconciliation_rule_id) == (
        "api_key:7", "proposed", rule.id)


def test_a_retried_unmatch_keeps_the_decision_once_as_first_made(ports, ingest, reconciliation):
    bank, _, match = pair(ports, ingest, reconciliation)
    dying = replace(ports, claims=ReleaseDies(ports.claims))
    with audit.acting_as("user:3"), pytest.raises(RuntimeError):
        unmatch(dying, ENV, match.id)  # dies after keeping the decision, before the members go

    with audit.acting_as("user:4"):  # the retry (another delivery of a bulk action, say)
        unmatch(ports, ENV, match.id)

    [decision] = kept(ports, reconciliation)
    assert decision.decided_by == "user:3" and decision.side_a_record_ids == tuple(bank)
    with audit.acting_as("user:3"), pytest.raises(NotFound):
        unmatch(ports, ENV, match.id)
    assert len(kept(ports, reconciliation)) == 1


@pytest.mark.parametrize("actor", [None, "system:reconciliation_run:4", "system:approval_settle:2"])
def test_an_unmatch_nobody_decided_keeps_nothing(ports, ingest, reconciliation, actor):
    _, _, match = pair(ports, ingest, reconciliation)

    with audit.acting_as(actor):
        unmatch(ports, ENV, match.id)

    assert ports.matches.find(ENV, match.id).unmatched_at is not None
    assert kept(ports, reconciliation) == []


def test_an_approved_unmatch_is_its_requesters_decision(ports, ingest, reconciliation):
    _, _, match = pair(ports, ingest, reconciliation)

    with audit.acting_as("user:9"):  # the approver's request runs it
        unmatch(ports, ENV, match.id, decided_by="user:3", approved_by="user:9")

    [decision] = kept(ports, reconciliation)
    assert (decision.decided_by, decision.approved_by) == ("user:3", "user:9")


def test_a_reconciliations_delete_unmatches_without_deciding(ports, ingest, reconciliation):
    _, _, match = pair(ports, ingest, reconciliation)

    with audit.acting_as("user:3"):
        delete_reconciliation(ports, ENV, reconciliation.id)

    assert ports.matches.find(ENV, match.id).unmatched_at is not None
    assert kept(ports, reconciliation) == []


def test_undoing_a_match_never_made_keeps_nothing(ports, ingest, reconciliation):
    bank, ledger = ingest(record("bank", 1, 1000)), ingest(record("ledger", 1, 1000))
    with audit.acting_as("user:3"), pytest.raises(RuntimeError):  # rolled back at once
        create_manual_match(replace(ports, matches=ClaimsThenDies(ports.matches)), ENV, reconciliation.id,
                            bank + ledger, False, None)
    match = Match(environment=ENV, id=ports.counters.next_id(ENV, "match"), reconciliation_id=reconciliation.id,
                  status=MatchStatus.CONFIRMED, group_key="manual", record_count=2, created_at=utc_now())
    ports.matches.begin(match)
    with pytest.raises(RuntimeError):  # left begun by a dead request: the sweeper undoes it
        write_matches(replace(ports, matches=ClaimsThenDies(ports.matches)),
                      [(match, [MatchMember("a", bank[0], "bank"), MatchMember("b", ledger[0], "ledger")])],
                      used_by(ports.reconciliations, ENV, ["bank", "ledger"]))

    assert sweep_pending(ports, now=utc_now() + timedelta(minutes=6)) == 1
    assert kept(ports, reconciliation) == []


def test_decisions_stay_in_their_environment(ports, ingest, reconciliation):
    _, _, match = pair(ports, ingest, reconciliation)
    with audit.acting_as("user:3"):
        unmatch(ports, ENV, match.id)

    assert ports.unmatch_decisions.newest_of("globex", reconciliation.id, 100) == []
    assert len(kept(ports, reconciliation)) == 1
