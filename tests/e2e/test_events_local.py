"""Events on the local stack, end to end: a change stored, its event on the embedded AWS's bus, the
bus's rule into the fan-out queue, the fan-out and the delivery worker in the local runtime, and a
receiver on loopback that checks every delivery with the off-the-shelf `standardwebhooks` library."""
from __future__ import annotations

import json
import uuid

import pytest

from chalicelib.domain.events import REQUEST_LEASE
from tests.support.webhook_receiver import VerifyingReceiver

# A request's event is sent at once; if that send fails (the embedded bus busy under a loaded
# suite), the one-minute sweeper sends it once its hold's lease is over. That is the promise, so
# it is what a test may wait for.
EVENT_OWED_SECONDS = REQUEST_LEASE.total_seconds() + 60 + 30


@pytest.fixture
def receiver():
    running = VerifyingReceiver()
    yield running
    running.stop()


def test_a_bulk_request_is_delivered_to_a_loopback_endpoint_signed_as_standard_webhooks_say(stack, receiver):
    created = stack.request("POST", "/webhook_endpoints", {"url": receiver.url, "events": ["bulk_request.completed"],
                                                           "description": "laptop"})
    assert created.status_code == 201, created.json()
    receiver.secret = created.json()["secret"]
    stream = f"bank-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/data_streams", {"key": stream, "name": stream}).status_code == 201
    bulk = stack.request("POST", "/records/bulk", {"records": [
        {"data_stream_key": stream, "amount": 1250, "date": "2026-11-02", "direction": "credit"}]}).json()

    event = receiver.wait_for("bulk_request.completed")

    assert event["data"]["id"] == bulk["id"] and event["data"]["status"] == "completed"
    assert event["data"]["url"] == f"/v1/bulk_requests/{bulk['id']}"
    assert receiver.refused == [] and "environment" not in json.dumps(event)
    deliveries = stack.request("GET", f"/webhook_endpoints/{created.json()['id']}/deliveries").json()["data"]
    assert any(d["status"] == "succeeded" and d["last_status_code"] == 200 for d in deliveries), deliveries
    trail = stack.request("GET", "/audit_events", params={"actor": f"system:bulk_request:{bulk['id']}"}).json()
    assert [e["action"] for e in trail["data"]] == ["bulk_request.completed"]
    assert stack.request("GET", "/audit_events/verify").json()["intact"] is True


def test_a_match_by_hand_is_told_and_leaves_nothing_owed_in_dynalite(stack, receiver):
    """The outbox's writes (the event's id added to the match in its saving write, taken off once
    sent, the hold released) as dynalite runs them."""
    from chalicelib.adapters.dynamodb import keys
    from chalicelib.container import Container
    from chalicelib.local.stack import StackInfo
    from chalicelib.settings import Settings

    created = stack.request("POST", "/webhook_endpoints", {"url": receiver.url, "events": [
        "reconciliation_match.created", "reconciliation_match.deleted"]})
    assert created.status_code == 201, created.json()
    receiver.secret = created.json()["secret"]
    suffix = uuid.uuid4().hex[:8]
    for side in ("bank", "ledger"):
        assert stack.request("POST", "/data_streams", {"key": f"{side}-{suffix}", "name": side}).status_code == 201
    reconciliation = stack.request("POST", "/reconciliations", {
        "name": f"by hand {suffix}", "run_type": "batch", "side_a_stream_keys": [f"bank-{suffix}"],
        "side_b_stream_keys": [f"ledger-{suffix}"]}).json()
    bulk = stack.request("POST", "/records/bulk", {"records": [
        {"data_stream_key": f"{side}-{suffix}", "amount": 700, "date": "2026-11-02", "direction": "credit"}
        for side in ("bank", "ledger")]}).json()
    results = _results_of(stack, bulk)
    match = stack.request("POST", "/reconciliation_matches", {"reconciliation_id": reconciliation["id"],
                                                              "record_ids": [r["record_id"] for r in results]})
    assert match.status_code == 201, match.json()
    assert stack.request("DELETE", f"/reconciliation_matches/{match.json()['id']}").status_code == 204

    made = receiver.wait_for("reconciliation_match.created", timeout=EVENT_OWED_SECONDS)
    undone = receiver.wait_for("reconciliation_match.deleted", timeout=EVENT_OWED_SECONDS)

    assert made["data"]["id"] == undone["data"]["id"] == match.json()["id"] and receiver.refused == []
    services = Container(StackInfo(**stack.stack_info()).settings(Settings(local_mode=True)))
    environment = services.api_keys.list()[0].environment
    assert keys.PENDING_EVENTS not in services.table.get(keys.match(environment, match.json()["id"]))
    assert not [h for h in services.ports.event_ledger.held() if h.event.id in (made["id"], undone["id"])]


def _results_of(stack, bulk, timeout: float = 60) -> list[dict]:
    """The bulk request's results, once it has completed."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        body = stack.request("GET", bulk["url"].removeprefix("/v1")).json()
        if body["status"] == "completed":
            assert all(r["status"] == "successful" for r in body["results"]), body["results"]
            return body["results"]
        assert time.monotonic() < deadline, body
        time.sleep(0.2)
