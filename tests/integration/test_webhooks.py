"""Webhooks end to end on moto: endpoints through the API, events sent to the webhook event queue in
EventBridge's envelope (as the bus's rule delivers them), the app's SQS handlers run in-process by
the worker, and a real HTTP receiver on loopback that checks every delivery with the
`standardwebhooks` library. Retries are driven by moving the clock and running the sweeper."""
from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from chalicelib.adapters.webhook_sender import HttpWebhookSender
from chalicelib.domain.events import make_event
from chalicelib.domain.webhooks import UrlPolicy
from chalicelib.jobs import sweeper
from chalicelib.services import webhooks as webhook_service
from chalicelib.services.api_keys import create_key
from tests.fakes.clock import freeze

EVENT_TIME = datetime(2024, 5, 1, 11, 59, tzinfo=UTC)


class Receiver:
    """An endpoint on 127.0.0.1: answers each request with the next scripted status (the last one
    again when the script runs out), after `delay` seconds, and keeps what it got."""

    def __init__(self, statuses=(200,), delay: float = 0.0) -> None:
        self.statuses = list(statuses)
        self.delay = delay
        self.received: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length", "0"))).decode()
                receiver.received.append({"body": body, "headers": {k.lower(): v for k, v in self.headers.items()},
                                          "path": self.path})
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                if receiver.delay:
                    time.sleep(receiver.delay)
                answer = json.dumps({"got": status}).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:  # the sender gave up waiting
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def url(self, host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}/hooks/recon"

    def verified(self, secret: str) -> list[dict]:
        """Every delivery received, checked with the standardwebhooks library (raises if one fails)."""
        return [Webhook(secret).verify(r["body"], r["headers"]) for r in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers():
    made: list[Receiver] = []

    def make(statuses=(200,), delay: float = 0.0) -> Receiver:
        made.append(Receiver(statuses, delay))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


@pytest.fixture
def clock(monkeypatch, services):
    import chalicelib.api.webhook_endpoints  # noqa: F401 (imported before the clock is frozen)
    return freeze(monkeypatch)


def use_sender(services, sender) -> None:
    services.ports = replace(services.ports, webhook_sender=sender)


def publish(services, environment: str, event_type: str = "file_import.completed", occurrence: str = "job 7"):
    """A domain event as the event bus's rule hands it to the webhook event queue."""
    event = make_event(environment, event_type, occurrence, EVENT_TIME,
                       {"id": 7, "object": "file_import", "url": "/v1/file_imports/7"})
    envelope = {"version": "0", "id": str(uuid.uuid4()), "detail-type": event.type, "source": "recon",
                "account": "123456789012", "time": "2024-05-01T11:59:00Z", "region": "us-east-1", "resources": [],
                "detail": {"environment": environment, "event": event.to_json()}}
    sqs = services.aws.sqs
    url = sqs.get_queue_url(QueueName=services.settings.webhook_event_queue_name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(envelope))
    return event


def create(api, url: str, events=("*",), **fields):
    response = api.post("/v1/webhook_endpoints", {"url": url, "events": list(events), **fields})
    assert response.status_code == 201, response.json_body
    return response.json_body


def deliveries(api, endpoint_id: int, **kw):
    response = api.get(f"/v1/webhook_endpoints/{endpoint_id}/deliveries", **kw)
    assert response.status_code == 200, response.json_body
    return response.json_body["data"]


def test_every_delivery_verifies_with_the_standardwebhooks_library(api, services, worker, receivers, clock):
    receiver = receivers()
    endpoint = create(api, receiver.url(), events=["file_import.completed"], description="ops")

    event = publish(services, "acme")
    worker.drain()

    [payload] = receiver.verified(endpoint["secret"])
    assert payload == event.to_json()
    [got] = receiver.received
    assert got["headers"]["webhook-id"] == event.id
    assert got["headers"]["content-type"] == "application/json"
    assert got["headers"]["user-agent"].startswith("recon-webhooks/")
    assert got["path"] == "/hooks/recon"
    [delivery] = deliveries(api, endpoint["id"])
    assert delivery["event_id"] == event.id and delivery["event_type"] == "file_import.completed"
    assert (delivery["status"], delivery["attempts"], delivery["last_status_code"]) == ("succeeded", 1, 200)
    assert delivery["response_excerpt"] == '{"got": 200}' and delivery["next_attempt_at"] is None


def test_an_endpoint_not_subscribed_to_the_type_gets_nothing_and_a_star_gets_everything(
        api, services, worker, receivers, clock):
    narrow, wide = receivers(), receivers()
    create(api, narrow.url(), events=["agent_run.failed"])
    create(api, wide.url(), events=["*"])

    publish(services, "acme", "reconciliation_run.completed", "run 3")
    worker.drain()

    assert narrow.received == [] and len(wide.received) == 1


def test_an_event_that_comes_twice_is_delivered_once(api, services, worker, receivers, clock):
    receiver = receivers()
    endpoint = create(api, receiver.url())

    publish(services, "acme")
    publish(services, "acme")
    worker.drain()

    assert len(receiver.received) == 1
    assert len(deliveries(api, endpoint["id"])) == 1


def test_a_receiver_that_answers_500_twice_gets_the_event_on_the_third_attempt(
        api, services, worker, receivers, clock):
    receiver = receivers([500, 500, 200])
    endpoint = create(api, receiver.url())
    event = publish(services, "acme")

    worker.drain()
    [first] = deliveries(api, endpoint["id"])
    assert (first["status"], first["attempts"], first["last_status_code"]) == ("pending", 1, 500)
    assert first["last_error"] == "answered HTTP 500"
    assert 4.5 <= (datetime.fromisoformat(first["next_attempt_at"]) - clock.now).total_seconds() <= 5.5

    clock.advance(minutes=10)  # past the 5 s wait (and the sweeper's grace)
    sweeper.sweep_task()
    worker.drain()
    [second] = deliveries(api, endpoint["id"])
    assert (second["status"], second["attempts"]) == ("pending", 2)
    assert 54 <= (datetime.fromisoformat(second["next_attempt_at"]) - clock.now).total_seconds() <= 66

    clock.advance(minutes=10)
    sweeper.sweep_task()
    worker.drain()

    [third] = deliveries(api, endpoint["id"])
    assert (third["status"], third["attempts"], third["last_status_code"]) == ("succeeded", 3, 200)
    assert [p["id"] for p in receiver.verified(endpoint["secret"])] == [event.id] * 3
    assert {r["headers"]["webhook-id"] for r in receiver.received} == {event.id}  # stable across retries
    assert api.get(f"/v1/webhook_endpoints/{endpoint['id']}").json_body["failing_since"] is None


def test_a_wait_longer_than_sqs_can_delay_is_picked_up_by_the_sweeper_when_due(
        api, services, worker, receivers, clock):
    receiver = receivers([500, 500, 500, 500, 200])
    endpoint = create(api, receiver.url())
    publish(services, "acme")
    worker.drain()
    for _ in range(3):  # attempts 2..4 after 5 s, 1 min, 5 min
        clock.advance(minutes=11)
        webhook_service.sweep(services.ports)
        worker.drain()
    [waiting] = deliveries(api, endpoint["id"])
    assert (waiting["status"], waiting["attempts"]) == ("pending", 4)  # next: about 30 min later

    clock.advance(minutes=20)
    assert webhook_service.sweep(services.ports) == 0  # not due yet
    clock.advance(minutes=15)
    assert webhook_service.sweep(services.ports) == 1
    worker.drain()

    [done] = deliveries(api, endpoint["id"])
    assert (done["status"], done["attempts"]) == ("succeeded", 5)


def test_every_attempt_failing_ends_in_a_failed_delivery(api, services, worker, receivers, clock):
    receiver = receivers([503])
    endpoint = create(api, receiver.url())
    publish(services, "acme")
    worker.drain()
    for _ in range(7):
        clock.advance(hours=11)
        webhook_service.sweep(services.ports)
        worker.drain()

    [delivery] = deliveries(api, endpoint["id"])
    assert (delivery["status"], delivery["attempts"], delivery["next_attempt_at"]) == ("failed", 8, None)
    assert len(receiver.received) == 8


def test_a_timeout_counts_as_a_failed_attempt(api, services, worker, receivers, clock):
    slow = receivers([200], delay=2.0)
    use_sender(services, HttpWebhookSender(UrlPolicy(local=True), timeout_seconds=0.3))
    endpoint = create(api, slow.url())

    publish(services, "acme")
    worker.drain()

    [delivery] = deliveries(api, endpoint["id"])
    assert (delivery["status"], delivery["attempts"], delivery["last_status_code"]) == ("pending", 1, None)
    assert delivery["last_error"].startswith("timed out")


def test_a_connection_refused_counts_as_a_failed_attempt(api, services, worker, receivers, clock):
    gone = receivers()
    url = gone.url()
    gone.close()
    endpoint = create(api, url)

    publish(services, "acme")
    worker.drain()

    [delivery] = deliveries(api, endpoint["id"])
    assert delivery["status"] == "pending" and delivery["last_error"].startswith("connection failed")


def test_after_rotate_secret_deliveries_verify_with_the_old_secret_and_the_new_one(
        api, services, worker, receivers, clock):
    receiver = receivers()
    endpoint = create(api, receiver.url())

    rotated = api.post(f"/v1/webhook_endpoints/{endpoint['id']}/rotate_secret")
    assert rotated.status_code == 200
    new_secret = rotated.json_body["secret"]
    assert new_secret.startswith("whsec_") and new_secret != endpoint["secret"]
    assert rotated.json_body["previous_secret_expires_at"] is not None
    publish(services, "acme", occurrence="job 8")
    worker.drain()

    assert receiver.verified(endpoint["secret"]) == receiver.verified(new_secret)
    assert len(receiver.received[0]["headers"]["webhook-signature"].split(" ")) == 2

    clock.advance(hours=25)  # the old secret no longer signs
    publish(services, "acme", occurrence="job 9")
    worker.drain()
    last = receiver.received[-1]
    Webhook(new_secret).verify(last["body"], last["headers"])
    with pytest.raises(WebhookVerificationError):
        Webhook(endpoint["secret"]).verify(last["body"], last["headers"])


def test_an_endpoint_of_another_environment_never_receives_this_environments_events(
        api, services, worker, receivers, clock):
    ours, theirs = receivers(), receivers()
    create(api, ours.url())
    other_key = create_key(services.api_keys, "globex")[1]
    other = api.post("/v1/webhook_endpoints", {"url": theirs.url(), "events": ["*"]}, key=other_key).json_body

    publish(services, "acme")
    worker.drain()

    assert len(ours.received) == 1 and theirs.received == []
    assert deliveries(api, other["id"], key=other_key) == []


def test_an_endpoint_failing_for_3_days_is_disabled_and_says_so(api, services, worker, receivers, clock):
    receiver = receivers([500])
    endpoint = create(api, receiver.url())
    publish(services, "acme", occurrence="job 1")
    worker.drain()
    failing_since = api.get(f"/v1/webhook_endpoints/{endpoint['id']}").json_body["failing_since"]
    assert failing_since is not None

    clock.advance(days=3, minutes=1)
    publish(services, "acme", occurrence="job 2")
    worker.drain()

    shown = api.get(f"/v1/webhook_endpoints/{endpoint['id']}").json_body
    assert shown["active"] is False and shown["disabled_at"] is not None
    assert "failed" in shown["disabled_reason"] and shown["failing_since"] == failing_since
    # The first event's delivery, still waiting, is not sent to a disabled endpoint.
    webhook_service.sweep(services.ports)
    worker.drain()
    second, first = deliveries(api, endpoint["id"])  # newest first
    assert (first["status"], first["last_error"]) == ("failed", "not sent: the endpoint is inactive")
    assert (second["status"], second["attempts"]) == ("pending", 1)
    received = len(receiver.received)
    publish(services, "acme", occurrence="job 3")
    worker.drain()
    assert len(receiver.received) == received
    # Switched on again, it is forgiven.
    again = api.patch(f"/v1/webhook_endpoints/{endpoint['id']}", {"active": True}).json_body
    assert (again["active"], again["disabled_reason"], again["failing_since"]) == (True, None, None)


def test_retry_sends_a_failed_or_waiting_delivery_now_and_refuses_one_that_succeeded(
        api, services, worker, receivers, clock):
    receiver = receivers([500, 200])
    endpoint = create(api, receiver.url())
    publish(services, "acme")
    worker.drain()
    [delivery] = deliveries(api, endpoint["id"])
    retry = f"/v1/webhook_endpoints/{endpoint['id']}/deliveries/{delivery['id']}/retry"

    answer = api.post(retry)
    assert answer.status_code == 202 and answer.json_body["status"] == "pending"
    worker.drain()

    [done] = deliveries(api, endpoint["id"])
    assert (done["status"], done["attempts"]) == ("succeeded", 2)
    again = api.post(retry)
    assert again.status_code == 409 and "succeeded" in again.json_body["message"]
    assert api.post(f"/v1/webhook_endpoints/{endpoint['id']}/deliveries/999/retry").status_code == 404


def test_get_list_and_patch_never_show_the_secret(api, receivers, clock):
    receiver = receivers()
    endpoint = create(api, receiver.url())
    secret = endpoint["secret"]
    assert secret.startswith("whsec_")

    answers = [api.get(f"/v1/webhook_endpoints/{endpoint['id']}"), api.get("/v1/webhook_endpoints"),
               api.patch(f"/v1/webhook_endpoints/{endpoint['id']}", {"description": "renamed"})]

    for answer in answers:
        assert answer.status_code == 200
        assert secret not in answer.body.decode() and '"secret"' not in answer.body.decode()
    assert answers[2].json_body["description"] == "renamed"


def test_endpoints_are_listed_newest_first_with_a_cursor_and_deleted(api, receivers, clock):
    receiver = receivers()
    ids = [create(api, receiver.url(), description=f"n{n}")["id"] for n in range(3)]

    first = api.get("/v1/webhook_endpoints?limit=2").json_body
    rest = api.get(f"/v1/webhook_endpoints?limit=2&cursor={first['next_cursor']}").json_body

    assert [e["id"] for e in first["data"] + rest["data"]] == ids[::-1] and rest["next_cursor"] is None
    assert api.delete(f"/v1/webhook_endpoints/{ids[0]}").status_code == 204
    assert api.get(f"/v1/webhook_endpoints/{ids[0]}").status_code == 404


def test_unknown_event_types_are_refused_naming_the_entry(api, receivers, clock):
    receiver = receivers()
    answer = api.post("/v1/webhook_endpoints", {"url": receiver.url(), "events": ["file_import.completed", "nope"]})
    assert answer.status_code == 422 and answer.json_body["errors"][0]["field"] == "events[1]"
    assert api.post("/v1/webhook_endpoints", {"url": receiver.url(), "events": []}).status_code == 422


@pytest.mark.parametrize("url, problem", [
    ("http://hooks.example.com/in", "must use https"),
    ("https://localhost/in", "loopback"),
    ("https://127.0.0.1/in", "loopback"),
    ("https://10.0.0.5/in", "private"),
    ("https://169.254.169.254/latest", "link-local"),
    ("https://[::1]/in", "loopback"),
    ("https://[fd00::1]/in", "private"),
    ("https://no-such-host.invalid/in", "does not resolve"),
])
def test_on_aws_a_bad_url_is_refused_when_saved(api, services, clock, url, problem):
    use_sender(services, HttpWebhookSender(UrlPolicy(local=False)))
    answer = api.post("/v1/webhook_endpoints", {"url": url, "events": ["*"]})
    assert answer.status_code == 422
    [error] = answer.json_body["errors"]
    assert error["field"] == "url" and problem in error["message"]


def test_on_aws_a_host_that_resolves_to_loopback_is_refused_at_delivery_time(
        api, services, worker, receivers, clock):
    receiver = receivers()
    endpoint = create(api, receiver.url(host="localhost", scheme="https"))  # saved while its DNS looked fine
    use_sender(services, HttpWebhookSender(UrlPolicy(local=False)))

    publish(services, "acme")
    worker.drain()

    assert receiver.received == []
    [delivery] = deliveries(api, endpoint["id"])
    assert delivery["status"] == "pending" and delivery["last_error"].startswith("refused: the URL resolves to a "
                                                                                  "loopback address")


def test_delivery_connects_to_the_address_it_checked_with_the_url_s_host_in_the_host_header(
        api, services, worker, receivers, clock):
    receiver = receivers()
    answers = {"hooks.example.test": "127.0.0.1"}

    def resolve(host, port, **_):
        import socket
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port))]

    use_sender(services, HttpWebhookSender(UrlPolicy(local=True), resolve=resolve))
    endpoint = create(api, receiver.url(host="hooks.example.test"))
    publish(services, "acme")
    worker.drain()
    assert receiver.received[0]["headers"]["host"] == f"hooks.example.test:{receiver.port}"

    # The name now answers a private address: refused at delivery, nothing is sent.
    answers["hooks.example.test"] = "10.0.0.7"
    publish(services, "acme", occurrence="job 8")
    worker.drain()
    assert len(receiver.received) == 1
    newest = deliveries(api, endpoint["id"])[0]
    assert "private address" in newest["last_error"]


def test_an_event_published_on_the_bus_reaches_the_endpoint_through_the_fan_out_rule(
        api, services, worker, receivers, clock):
    receiver = receivers()
    endpoint = create(api, receiver.url(), events=["agent_run.failed"])
    event = make_event("acme", "agent_run.failed", "agent run 4", EVENT_TIME, {"id": 4, "object": "agent_run"})

    services.ports.events.publish("acme", [event])  # EventBridge (moto) -> the rule -> the webhook event queue
    worker.drain()

    assert receiver.verified(endpoint["secret"]) == [event.to_json()]
