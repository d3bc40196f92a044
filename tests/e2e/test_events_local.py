"""Events on the local stack, end to end: a change stored, its event on the embedded AWS's bus, the
bus's rule into the fan-out queue, the fan-out and the delivery worker in the local runtime, and a
receiver on loopback that checks every delivery with the off-the-shelf `standardwebhooks` library."""
from __future__ import annotations

import json
import uuid

import pytest

from tests.support.webhook_receiver import VerifyingReceiver


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
