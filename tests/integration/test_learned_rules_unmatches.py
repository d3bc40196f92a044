"""Pairs people unmatched count against learned rules, over HTTP (on moto): a person matches pairs
by hand and takes some apart again; a suggestion whose dry run would pair those records again
counts each as a conflict naming the unmatch, a run's own undo or a reconciliation's delete keeps
nothing, and another environment (its reconciliation of the same id) sees none of it."""
from __future__ import annotations

import pytest

from chalicelib.services.api_keys import create_key
from tests.integration.test_approvals import people, set_policy, signed  # noqa: F401 (people: a fixture)
from tests.integration.test_rule_suggestions import DECIDED
from tests.support.learned_rules import labelled_pairs

UNDONE = 2


class As:
    """Requests of one environment: its key (None: the client's own, of 'acme')."""

    def __init__(self, api, worker, key=None) -> None:
        self.api, self.worker, self.key = api, worker, key

    def call(self, method, path, body=None, **kw):
        if self.key is not None and "headers" not in kw:
            kw["key"] = self.key
        return self.api.request(method, path, body, **kw)

    def ingest(self, *records):
        response = self.call("POST", "/v1/records/bulk", {"records": list(records)})
        assert response.status_code == 202, response.json_body
        self.worker.drain()
        results = self.call("GET", response.json_body["url"]).json_body["results"]
        assert all(r["status"] == "successful" for r in results), results
        return [r["record_id"] for r in results]

    def world(self, count=45):
        """The labelled invoices and payments of tests/integration/test_rule_suggestions.py, the first
        DECIDED pairs matched by hand: (the reconciliation, the pairs left open)."""
        for key in ("invoices", "bank"):
            assert self.call("POST", "/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
        reconciliation = self.call("POST", "/v1/reconciliations", {
            "name": "Invoices to bank", "run_type": "batch", "side_a_stream_keys": ["invoices"],
            "side_b_stream_keys": ["bank"]}).json_body
        pairs = labelled_pairs(count)
        it = iter(self.ingest(*(row for pair in pairs for row in pair if row is not None)))
        real = [(a, b) for a, b in ((next(it) if invoice is not None else None, next(it)) for invoice, _ in pairs)
                if a is not None]
        for a, b in real[:DECIDED]:
            assert self.match(reconciliation, [a, b]).status_code == 201
        return reconciliation, real[DECIDED:]

    def match(self, reconciliation, record_ids, **kw):
        return self.call("POST", "/v1/reconciliation_matches", {
            "reconciliation_id": reconciliation["id"], "record_ids": record_ids, "allow_difference": True,
            "reason": "bank fee"}, **kw)

    def suggest(self, reconciliation):
        response = self.call("POST", f"/v1/reconciliations/{reconciliation['id']}/rule_suggestions", {})
        assert response.status_code == 200, response.json_body
        return response.json_body

    def top(self, reconciliation):
        """The evidence of the suggestion that recovers the hidden rule (its text condition)."""
        rules = self.suggest(reconciliation)["data"]
        [found] = [r for r in rules if any(c.get("side_b_field") == "description" for c in r["conditions"])
                   and len(r["conditions"]) == 3]
        return found["evidence"]


@pytest.fixture
def acme(api, worker):
    return As(api, worker)


def test_a_suggestion_pairing_again_what_a_person_unmatched_counts_the_conflict(acme, services):
    reconciliation, still_open = acme.world()
    before = acme.top(reconciliation)
    assert (before["dry_run"]["matches"], before["dry_run"]["conflicting_matches"]) == (len(still_open), 0)
    undone = []
    for a, b in still_open[:UNDONE]:  # matched by hand, then taken apart: "not these two"
        made = acme.match(reconciliation, [a, b]).json_body
        assert acme.call("DELETE", f"/v1/reconciliation_matches/{made['id']}").status_code == 204
        undone.append((made["id"], a, b))

    after = acme.top(reconciliation)

    dry = after["dry_run"]
    assert after["unmatch_decisions_read"] == UNDONE
    assert (dry["matches"], dry["conflicting_matches"], dry["unmatched_conflicts"]) == (
        len(still_open) - UNDONE, UNDONE, UNDONE)
    assert sorted((c["unmatched"]["reconciliation_match_id"], c["side_a_record_ids"], c["side_b_record_ids"])
                  for c in dry["conflicts_sample"]) == sorted((m, [a], [b]) for m, a, b in undone)
    key_actor = services.ports.unmatch_decisions.newest_of("acme", reconciliation["id"], 10)[0].decided_by
    assert all(c["unmatched"]["unmatched_by"] == key_actor for c in dry["conflicts_sample"])
    assert after["rank"] <= before["rank"] + 1  # still the hidden rule, its cost said


def test_an_approved_unmatch_is_the_requesters_decision(acme, services, people):  # noqa: F811
    reconciliation, still_open = acme.world(count=33)
    a, b = still_open[0]
    made = acme.match(reconciliation, [a, b]).json_body
    set_policy(acme.api, reconciliation, actions=["unmatch"], threshold=0)

    held = acme.call("DELETE", f"/v1/reconciliation_matches/{made['id']}", **signed(people["alice"]))
    assert held.status_code == 202, held.json_body
    assert services.ports.unmatch_decisions.newest_of("acme", reconciliation["id"], 10) == []  # nothing yet
    done = acme.call("POST", f"/v1/approvals/{held.json_body['id']}/approve", **signed(people["bob"])).json_body
    assert done["status"] == "approved", done

    [decision] = services.ports.unmatch_decisions.newest_of("acme", reconciliation["id"], 10)
    assert (decision.decided_by, decision.approved_by) == (people["alice"]["actor"], people["bob"]["actor"])
    assert acme.top(reconciliation)["dry_run"]["unmatched_conflicts"] == 1


def test_a_reconciliations_delete_keeps_no_decision(acme, services):
    reconciliation, still_open = acme.world(count=33)
    made = acme.match(reconciliation, list(still_open[0])).json_body

    assert acme.call("DELETE", f"/v1/reconciliations/{reconciliation['id']}").status_code == 204

    assert acme.call("GET", f"/v1/reconciliation_matches/{made['id']}").status_code == 404
    assert services.ports.unmatch_decisions.newest_of("acme", reconciliation["id"], 10) == []


def test_another_environment_never_counts_the_first_ones_unmatches(api, worker, acme, services):
    globex = As(api, worker, create_key(services.api_keys, "globex")[1])
    ours, our_open = acme.world(count=33)
    theirs, their_open = globex.world(count=33)
    assert ours["id"] == theirs["id"]  # ids are per environment: the same reconciliation id in each
    made = acme.match(ours, list(our_open[0])).json_body
    assert acme.call("DELETE", f"/v1/reconciliation_matches/{made['id']}").status_code == 204
    # the other environment cannot unmatch ours, nor see it
    assert globex.call("DELETE", f"/v1/reconciliation_matches/{made['id']}").status_code == 404

    theirs_evidence = globex.top(theirs)

    assert (theirs_evidence["unmatch_decisions_read"], theirs_evidence["dry_run"]["unmatched_conflicts"]) == (0, 0)
    assert theirs_evidence["dry_run"]["matches"] == len(their_open)
    assert acme.top(ours)["dry_run"]["unmatched_conflicts"] == 1
