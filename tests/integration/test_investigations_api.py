"""Investigations of exceptions: started through the API, run on the investigation queue, accepted
as a confirmed match (on moto)."""
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from tests.integration.conftest import record
from tests.support.worlds import dated, world_of_api

RULE = {"name": "Amount within 3 days", "priority": 1, "conditions": [
    {"field": "amount", "operator": "equals"}, {"field": "date", "operator": "within", "days": 3}]}


def days_ago(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


@pytest.fixture
def exception(api, ingest, reconciliation):
    """The bank's 1,250.00 was booked by the ledger 6 days later with a typo in the reference:
    outside the rule's window, so both sit in exceptions; a decoy of another amount too.
    Built once a process, restored after."""
    return world_of_api(dated("test_investigations_api.exception"), api,
                        lambda: _exception(api, ingest, reconciliation))


def _exception(api, ingest, reconciliation):
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).status_code == 201
    bank = ingest(record("bank", 1, 125000, days_ago(20), description="ACME PAYOUT",
                         metadata={"reference": "INV-4411"}))
    ledger = ingest(record("ledger", 1, 125000, days_ago(14), description="Acme payout",
                           metadata={"reference": "INV-4441"}),
                    record("ledger", 2, 99000, days_ago(20), description="Other customer"))
    run = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body
    assert (run["status"], run["matched_records"]) == ("completed", 0)  # 6 days apart: outside the rule
    [row] = api.get("/v1/reconciliation_exceptions?data_stream_key=bank").json_body["data"]
    return {"id": row["id"], "bank": bank, "ledger": ledger, "reconciliation": reconciliation}


def start(api, exception_id, query=""):
    response = api.post(f"/v1/reconciliation_exceptions/{exception_id}/investigations{query}")
    assert response.status_code == 202, response.json_body
    return response.json_body


def test_an_investigation_runs_on_its_queue_and_suggests_the_likely_counterpart(api, worker, exception):
    started = start(api, exception["id"])
    assert started["status"] == "pending" and started["suggested_record_ids"] == []
    assert api.get(f"/v1/reconciliation_exceptions/{exception['id']}").json_body["status"] == "investigating"

    worker.drain()

    detail = api.get(f"/v1/reconciliation_exceptions/{exception['id']}").json_body
    investigation = detail["investigation"]
    assert investigation["id"] == started["id"] and investigation["status"] == "completed"
    assert investigation["suggested_record_ids"][0] == exception["ledger"][0]
    assert investigation["candidate_records_searched"] == 2
    assert 0 < investigation["confidence_score"] <= 1 and investigation["completed_at"]
    assert str(exception["ledger"][0]) in investigation["recommendation_text"]
    assert "1,250.00" in investigation["recommendation_text"]
    assert [s["id"] for s in detail["investigation_sessions"]] == [started["id"]]


def test_accepting_makes_a_confirmed_match_and_the_exception_lets_the_record_go(api, worker, exception):
    started = start(api, exception["id"])
    worker.drain()

    accepted = api.post(f"/v1/reconciliation_exceptions/{exception['id']}/investigations/{started['id']}/accept")

    assert accepted.status_code == 201, accepted.json_body
    match = accepted.json_body
    assert match["status"] == "confirmed" and match["reconciliation_rule_id"] is None
    assert sorted(r["id"] for r in match["records"]) == sorted([exception["bank"][0], exception["ledger"][0]])
    detail = api.get(f"/v1/reconciliation_exceptions/{exception['id']}").json_body
    assert detail["status"] == "resolved" and detail["aggregates"]["record_count"] == 0
    assert detail["investigation"]["accepted_match_id"] == match["id"]
    again = api.post(f"/v1/reconciliation_exceptions/{exception['id']}/investigations/{started['id']}/accept")
    assert again.status_code == 409 and "accepted already" in again.json_body["message"]


def test_the_five_newest_investigations_are_kept_as_sessions(api, worker, exception):
    ids = [start(api, exception["id"], "?direction=credit")["id"] for _ in range(6)]
    worker.drain()
    detail = api.get(f"/v1/reconciliation_exceptions/{exception['id']}").json_body
    assert [s["id"] for s in detail["investigation_sessions"]] == sorted(ids, reverse=True)[:5]
    assert detail["investigation"]["filter_params"] == {"direction": "credit"}


def test_an_accept_retried_after_dying_before_its_mark_returns_the_match_it_made(api, services, worker, exception):
    from chalicelib.services.investigations import accept

    started = start(api, exception["id"])
    worker.drain()

    class MarkDies:
        def __init__(self, investigations):
            self._investigations = investigations

        def __getattr__(self, name):
            return getattr(self._investigations, name)

        def mark_accepted(self, investigation, match_id):
            raise RuntimeError("Lambda died before the mark")

    from dataclasses import replace

    with pytest.raises(RuntimeError):
        accept(replace(services.ports, investigations=MarkDies(services.investigations)),
               "acme", exception["id"], started["id"])

    retried = api.post(f"/v1/reconciliation_exceptions/{exception['id']}/investigations/{started['id']}/accept")

    assert retried.status_code == 201, retried.json_body
    assert api.get(f"/v1/reconciliation_exceptions/{exception['id']}").json_body["investigation"][
        "accepted_match_id"] == retried.json_body["id"]


# What accepting matches: exactly the suggestion, and only while it still holds --------------------

@pytest.fixture
def with_prenote(api, ingest):
    """Side B holds the ledger and an ACH stream; the ACH stream has a zero-amount prenote that
    carries the bank payment's reference (the issue's case). Built once a process, restored after."""
    return world_of_api(dated("test_investigations_api.with_prenote"), api, lambda: _with_prenote(api, ingest))


def _with_prenote(api, ingest):
    for key in ("bank", "ledger", "ach"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
    reconciliation = api.post("/v1/reconciliations", {"name": "Bank to books", "run_type": "batch",
                                                      "side_a_stream_keys": ["bank"],
                                                      "side_b_stream_keys": ["ledger", "ach"]}).json_body
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).status_code == 201
    bank = ingest(record("bank", 1, 125000, days_ago(20), description="ACME PAYOUT",
                         metadata={"reference": "INV-4411"}))
    ledger = ingest(record("ledger", 1, 125000, days_ago(14), description="Acme payout",
                           metadata={"reference": "INV-4441"}))
    prenote = ingest(record("ach", 1, 0, days_ago(21), description="ACME PRENOTE", metadata={"reference": "INV-4411"}))
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body["matched_records"] == 0
    [row] = api.get("/v1/reconciliation_exceptions?data_stream_key=bank").json_body["data"]
    return {"id": row["id"], "bank": bank, "ledger": ledger, "prenote": prenote}


def investigated(api, worker, exception):
    start(api, exception["id"])
    worker.drain()
    investigation = api.get(f"/v1/reconciliation_exceptions/{exception['id']}").json_body["investigation"]
    assert investigation["status"] == "completed", investigation
    return investigation


def accept_url(exception, investigation):
    return f"/v1/reconciliation_exceptions/{exception['id']}/investigations/{investigation['id']}/accept"


def test_accepting_matches_exactly_the_records_the_recommendation_proposes(api, worker, with_prenote):
    investigation = investigated(api, worker, with_prenote)

    assert investigation["suggested_record_ids"] == with_prenote["ledger"]
    assert str(with_prenote["prenote"][0]) not in investigation["recommendation_text"]
    assert f"with record {with_prenote['ledger'][0]}." in investigation["recommendation_text"]

    accepted = api.post(accept_url(with_prenote, investigation))

    assert accepted.status_code == 201, accepted.json_body
    assert sorted(r["id"] for r in accepted.json_body["records"]) == sorted(with_prenote["bank"] + with_prenote["ledger"])
    assert api.get(f"/v1/records/{with_prenote['prenote'][0]}").json_body["status"] == "unreconciled"
