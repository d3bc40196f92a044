"""Events on the local stack, end to end: a change stored, its event on the embedded AWS's bus, the
bus's rule into the fan-out queue, the fan-out and the delivery worker in the local runtime, and a
receiver on loopback that checks every delivery with the off-the-shelf `standardwebhooks` library."""
from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks import Webhook


class Receiver:
    def __init__(self) -> None:
        self.secret: str | None = None
        self.events: list[dict] = []
        self.refused: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["content-length"]))
                try:
                    receiver.events.append(Webhook(receiver.secret).verify(body, dict(self.headers)))
                except Exception as error:
                    receiver.refused.append(str(error))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def wait_for(self, event_type: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [e for e in self.events if e["type"] == event_type]
            if found:
                return found[0]
            time.sleep(0.2)
        raise AssertionError(f"no {event_type} delivered; got {[e['type'] for e in self.events]}, "
                             f"refused {self.refused}")


@pytest.fixture
def receiver():
    running = Receiver()
    yield running
    running.server.shutdown()


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
