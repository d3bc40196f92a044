"""Investigations of exceptions: started through the API, run on the investigation queue, accepted
as a confirmed match (on moto)."""
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from tests.integration.conftest import record

RULE = {"name": "Amount within 3 days", "priority": 1, "conditions": [
    {"field": "amount", "operator": "equals"}, {"field": "date", "operator": "within", "days": 3}]}


def days_ago(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


@pytest.fixture
def exception(api, ingest, reconciliation):
    """The bank's 1,250.00 was booked by the ledger 6 days later with a typo in the reference:
    outside the rule's window, so both sit in exceptions; a decoy of another amount too."""
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


def test_only_a_completed_investigation_of_that_exception_can_be_accepted(api, exception):
    started = start(api, exception["id"])  # still pending: the queue was not drained
    base = f"/v1/reconciliation_exceptions/{exception['id']}/investigations"
    assert api.post(f"{base}/{started['id']}/accept").status_code == 409
    assert api.post(f"{base}/999999/accept").status_code == 404
    assert api.post("/v1/reconciliation_exceptions/999999/investigations").status_code == 404


def test_an_investigation_that_fails_on_its_last_delivery_is_failed_with_its_reason(api, services, exception):
    from chalicelib.services.investigations import fail

    started = start(api, exception["id"])
    fail(services.investigation_ports, "acme", started["id"], RuntimeError("out of memory"))

    latest = api.get(f"/v1/reconciliation_exceptions/{exception['id']}").json_body["investigation"]
    assert latest["status"] == "failed" and "out of memory" in latest["error_message"]


def test_the_five_newest_investigations_are_kept_as_sessions(api, worker, exception):
    ids = [start(api, exception["id"], "?direction=credit")["id"] for _ in range(6)]
    worker.drain()
    detail = api.get(f"/v1/reconciliation_exceptions/{exception['id']}").json_body
    assert [s["id"] for s in detail["investigation_sessions"]] == sorted(ids, reverse=True)[:5]
    assert detail["investigation"]["filter_params"] == {"direction": "credit"}


def test_an_investigation_no_worker_finished_is_failed_by_the_sweeper(api, services, exception):
    from chalicelib.services.investigations import sweep

    started = start(api, exception["id"])  # its message is never delivered
    assert sweep(services.investigation_ports) == 0
    assert sweep(services.investigation_ports, now=utc_now() + timedelta(hours=2)) == 1
    latest = api.get(f"/v1/reconciliation_exceptions/{exception['id']}").json_body["investigation"]
    assert latest["id"] == started["id"] and latest["status"] == "failed"
    assert services.investigations.active() == []


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
        accept(replace(services.investigation_ports, investigations=MarkDies(services.investigations)),
               "acme", exception["id"], started["id"])

    retried = api.post(f"/v1/reconciliation_exceptions/{exception['id']}/investigations/{started['id']}/accept")

    assert retried.status_code == 201, retried.json_body
    assert api.get(f"/v1/reconciliation_exceptions/{exception['id']}").json_body["investigation"][
        "accepted_match_id"] == retried.json_body["id"]
