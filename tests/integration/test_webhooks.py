"""Webhooks end to end on moto: endpoints through the API, events sent to the webhook event queue in
EventBridge's envelope (as the bus's rule delivers them), the app's SQS handlers run in-process by
the worker, and a real HTTP receiver on loopback that checks every delivery with the
`standardwebhooks` library. Retries are driven by moving the clock and running the sweeper."""
from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.webhook_sender import HttpWebhookSender
from chalicelib.domain.clock import clock_in_use
from chalicelib.domain.events import make_event
from chalicelib.domain.webhooks import MAX_ATTEMPTS, UNFINISHED_ERROR, UrlPolicy, WebhookRequest
from chalicelib.handlers import sweeper
from chalicelib.services import webhooks as webhook_service
from chalicelib.services.api_keys import create_key
from tests.fakes.clock import FrozenClock

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
def clock(services):
    with clock_in_use(FrozenClock()) as frozen:
        yield frozen


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
    assert delivery["status"] == "pending" and delivery["last_error"] == "connection failed"
    # Nothing says which port was tried nor why it failed (errno text would map the open ports).
    assert str(gone.port) not in delivery["last_error"] and "refused" not in delivery["last_error"].lower()


def test_locally_an_endpoint_on_a_port_of_the_stack_itself_is_refused_when_saved(api, services, clock):
    own = services.settings.port  # the API's own; the settings also name dynalite's, moto's and s3rver's
    for url in (f"http://127.0.0.1:{own}/v1/data_streams", f"http://localhost:{own}/", f"http://[::1]:{own}/"):
        answer = api.post("/v1/webhook_endpoints", {"url": url, "events": ["*"]})
        assert answer.status_code == 422, url
        [error] = answer.json_body["errors"]
        assert error["field"] == "url" and "local stack's own services" in error["message"]


def test_locally_a_delivery_to_a_port_of_the_stack_itself_fails_without_being_sent(
        api, services, worker, receivers, clock):
    receiver = receivers()
    endpoint = create(api, receiver.url())  # saved before the stack took that port (a restart moved it)
    use_sender(services, HttpWebhookSender(UrlPolicy(local=True, own_ports=frozenset({receiver.port}))))

    publish(services, "acme")
    worker.drain()

    assert receiver.received == []
    [delivery] = deliveries(api, endpoint["id"])
    assert delivery["status"] == "pending" and delivery["last_error"].startswith("refused: the URL names a port "
                                                                                  "of the local stack's own")


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
    # The automated decision is in the audit trail, once.
    [entry] = api.get(f"/v1/audit_events?actor=system:webhooks&resource_type=webhook_endpoint"
                      f"&resource_id={endpoint['id']}").json_body["data"]
    assert (entry["action"], entry["actor"]) == ("webhook_endpoint.disabled", "system:webhooks")
    assert entry["summary"]["reason"] == shown["disabled_reason"]
    assert datetime.fromisoformat(entry["summary"]["failing_since"]) == datetime.fromisoformat(failing_since)
    # Switched on again, it is forgiven.
    again = api.patch(f"/v1/webhook_endpoints/{endpoint['id']}", {"active": True}).json_body
    assert (again["active"], again["disabled_reason"], again["failing_since"]) == (True, None, None)


def test_a_disable_whose_audit_entry_could_not_be_written_is_recorded_by_the_sweeper(
        api, services, worker, receivers, clock):
    from chalicelib.services import audit
    from tests.support.crashes import failing_appends

    receiver = receivers([500])
    endpoint = create(api, receiver.url())
    publish(services, "acme", occurrence="job 1")
    worker.drain()
    clock.advance(days=3, minutes=1)
    publish(services, "acme", occurrence="job 2")
    with failing_appends(services, "webhook_endpoint.disabled"):
        worker.drain()  # the delivery's attempt is recorded all the same: only the entry waits
    assert api.get(f"/v1/webhook_endpoints/{endpoint['id']}").json_body["active"] is False
    by_resource = f"/v1/audit_events?resource_type=webhook_endpoint&resource_id={endpoint['id']}&actor=system:webhooks"
    assert api.get(by_resource).json_body["data"] == []

    clock.advance(minutes=3)
    assert audit.record_unfinished(services.ports) == 1
    assert audit.record_unfinished(services.ports) == 0

    [entry] = api.get(by_resource).json_body["data"]
    assert entry["action"] == "webhook_endpoint.disabled" and entry["summary"]["outcome"] == "unknown"
    assert "failed" in entry["summary"]["reason"]


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
    # The rule, not the address the service's DNS gave (that would map its network for a client)
    assert delivery["status"] == "pending" and delivery["last_error"] == "refused: the URL resolves to a loopback address"
    answer = api.post("/v1/webhook_endpoints", {"url": receiver.url(host="localhost", scheme="https"), "events": ["*"]})
    assert answer.status_code == 422
    assert answer.json_body["errors"][0]["message"].endswith("resolves to a loopback address")


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


# An attempt that never finishes ---------------------------------------------------------------

class WorkerKilled(BaseException):
    """The Lambda timing out mid-send: the worker never returns from the HTTP call."""


class NeverReturningSender:
    def __init__(self) -> None:
        self.sent = 0

    def now(self) -> int:
        return int(EVENT_TIME.timestamp())

    def refusal(self, url: str) -> None:
        return None

    def send(self, request):
        self.sent += 1
        raise WorkerKilled()


def test_an_attempt_whose_worker_dies_counts_as_failed_backs_off_and_ends_failed_after_the_last_attempt(
        api, services, clock):
    endpoint = create(api, "http://127.0.0.1:9/hooks")
    sender = NeverReturningSender()
    use_sender(services, sender)
    event = make_event("acme", "file_import.completed", "job 1", EVENT_TIME, {"id": 1})
    [delivery] = webhook_service.fan_out(services.ports, "acme", event)
    store = services.ports.webhooks

    def attempt() -> None:
        try:
            webhook_service.deliver(services.ports, "acme", endpoint["id"], delivery.id)
        except WorkerKilled:
            pass

    attempt()
    for _ in range(4 * MAX_ATTEMPTS):
        current = store.get_delivery("acme", endpoint["id"], delivery.id)
        if current.status.value == "failed":
            break
        if current.status.value == "delivering":
            clock.advance(minutes=3)  # past the claim's lease
        else:
            assert current.next_attempt_at is not None and current.last_error == UNFINISHED_ERROR
            assert current.next_attempt_at - clock.now >= timedelta(seconds=4)  # it waits its turn
            clock.set(current.next_attempt_at + timedelta(minutes=6))
        assert webhook_service.sweep(services.ports) == 1
        attempt()

    done = store.get_delivery("acme", endpoint["id"], delivery.id)
    assert (done.status.value, done.attempts, done.last_error) == ("failed", MAX_ATTEMPTS, UNFINISHED_ERROR)
    assert sender.sent == MAX_ATTEMPTS
    assert store.get("acme", endpoint["id"]).failing_since is not None
    clock.advance(hours=1)
    assert webhook_service.sweep(services.ports) == 0


class DrippingServer:
    """Answers each connection slowly: `head` (the status line and headers) and then `body`, one
    byte every `every` seconds, starting with the byte `drip_from`."""

    def __init__(self, head: bytes, body: bytes, drip_from: int, every: float) -> None:
        self.raw = head + body
        self.drip_from, self.every = drip_from, every
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        connection, _ = self.sock.accept()
        try:
            connection.recv(65536)
            connection.sendall(self.raw[:self.drip_from])
            for i in range(self.drip_from, len(self.raw)):
                time.sleep(self.every)
                connection.sendall(self.raw[i:i + 1])
        except OSError:  # the sender hung up
            pass
        finally:
            connection.close()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hooks"


def test_an_answer_that_drips_in_is_read_only_until_the_attempt_s_deadline():
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n"
    server = DrippingServer(head, b"x" * 30, drip_from=len(head), every=0.1)  # each byte well inside the timeout
    sender = HttpWebhookSender(UrlPolicy(local=True), timeout_seconds=0.5)

    outcome = sender.send(WebhookRequest(url=server.url(), body="{}"))

    assert outcome.status_code == 200 and outcome.succeeded
    assert 0 < len(outcome.response_excerpt) < 30  # cut at the deadline, not read to the end


def test_headers_that_drip_in_make_the_attempt_time_out():
    head = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 30 + b"\r\nContent-Length: 0\r\n\r\n"
    server = DrippingServer(head, b"", drip_from=20, every=0.1)
    sender = HttpWebhookSender(UrlPolicy(local=True), timeout_seconds=0.5)

    outcome = sender.send(WebhookRequest(url=server.url(), body="{}"))

    assert (outcome.status_code, outcome.error) == (None, "timed out after 0.5 s")


# The failing clock against concurrent writers ---------------------------------------------------

def test_a_patch_made_from_a_read_before_a_failure_keeps_the_failing_clock(api, services, clock):
    endpoint = create(api, "http://127.0.0.1:9/hooks")
    store = services.ports.webhooks
    read_by_the_patch = store.get("acme", endpoint["id"])
    failing = store.mark_failing(read_by_the_patch, clock.now)  # a delivery fails meanwhile

    store.save(replace(read_by_the_patch, description="renamed"), read_by_the_patch)

    saved = store.get("acme", endpoint["id"])
    assert saved.description == "renamed" and saved.failing_since == failing.failing_since is not None


def test_a_success_stops_the_failing_clock_started_after_the_endpoint_was_read(api, services, clock):
    endpoint = create(api, "http://127.0.0.1:9/hooks")
    store = services.ports.webhooks
    read_before_sending = store.get("acme", endpoint["id"])
    store.mark_failing(read_before_sending, clock.now)  # another delivery fails meanwhile

    store.mark_succeeded(read_before_sending)

    assert store.get("acme", endpoint["id"]).failing_since is None


# Deleting an endpoint ---------------------------------------------------------------------------

def partition(services, endpoint_id: int) -> list[str]:
    items = services.table.query_all(keys.BASE_TABLE, keys.webhook_endpoint("acme", endpoint_id)["pk"])
    return sorted(i["sk"] for i in items)


def test_deleting_an_endpoint_answers_at_once_and_the_sweeper_clears_its_log_a_page_at_a_time(
        api, services, worker, receivers, clock):
    receiver = receivers([500])
    endpoint = create(api, receiver.url())
    for n in range(3):
        publish(services, "acme", occurrence=f"job {n}")
    worker.drain()
    assert len(partition(services, endpoint["id"])) == 1 + 3 + 3  # the endpoint, deliveries, event guards

    assert api.delete(f"/v1/webhook_endpoints/{endpoint['id']}").status_code == 204

    assert api.get(f"/v1/webhook_endpoints/{endpoint['id']}").status_code == 404
    assert api.get(f"/v1/webhook_endpoints/{endpoint['id']}/deliveries").status_code == 404
    assert api.get("/v1/webhook_endpoints").json_body["data"] == []
    assert len(partition(services, endpoint["id"])) == 7  # nothing cleared in the request
    assert services.ports.webhooks.purge_deleted(page_size=4) == 4
    assert services.ports.webhooks.purge_deleted(page_size=4) == 2
    assert partition(services, endpoint["id"]) == ["WHE"]  # the tombstone goes last
    webhook_service.sweep(services.ports)
    assert partition(services, endpoint["id"]) == []
    assert api.delete(f"/v1/webhook_endpoints/{endpoint['id']}").status_code == 404


def test_a_waiting_delivery_whose_endpoint_is_gone_is_removed_rather_than_queued_for_ever(
        api, services, worker, receivers, clock):
    receiver = receivers([500])
    endpoint = create(api, receiver.url())
    publish(services, "acme")
    worker.drain()
    [delivery] = deliveries(api, endpoint["id"])
    services.table.delete(keys.webhook_endpoint("acme", endpoint["id"]))  # as a racing fan-out leaves one

    clock.advance(minutes=10)
    assert webhook_service.sweep(services.ports) == 1
    worker.drain()

    assert partition(services, endpoint["id"]) == []
    clock.advance(minutes=10)
    assert webhook_service.sweep(services.ports) == 0
    assert len(receiver.received) == 1


# The due list -----------------------------------------------------------------------------------

def test_waiting_deliveries_are_spread_over_the_due_list_s_shards_and_the_sweeper_reads_them_all(
        api, services, worker, receivers, clock):
    receiver = receivers([500])
    ids = [create(api, receiver.url())["id"] for _ in range(8)]
    publish(services, "acme")
    worker.drain()
    shards = {services.table.get(keys.webhook_delivery("acme", i, deliveries(api, i)[0]["id"]))["gsi2pk"]
              for i in ids}
    assert len(shards) > 1 and shards <= set(keys.webhook_due_shards())

    clock.advance(minutes=10)

    assert webhook_service.sweep(services.ports) == 8


def test_a_manual_retry_of_a_delivery_that_used_its_attempts_makes_exactly_one_more(
        api, services, worker, receivers, clock):
    receiver = receivers([503])
    endpoint = create(api, receiver.url())
    publish(services, "acme")
    worker.drain()
    for _ in range(MAX_ATTEMPTS - 1):  # each as soon as it is due (the endpoint fails for less than 3 days)
        [waiting] = deliveries(api, endpoint["id"])
        clock.set(datetime.fromisoformat(waiting["next_attempt_at"]) + timedelta(minutes=6))
        webhook_service.sweep(services.ports)
        worker.drain()
    [failed] = deliveries(api, endpoint["id"])
    assert (failed["status"], failed["attempts"]) == ("failed", MAX_ATTEMPTS)

    assert api.post(f"/v1/webhook_endpoints/{endpoint['id']}/deliveries/{failed['id']}/retry").status_code == 202
    worker.drain()
    clock.advance(hours=11)
    assert webhook_service.sweep(services.ports) == 0

    [again] = deliveries(api, endpoint["id"])
    assert (again["status"], again["attempts"]) == ("failed", MAX_ATTEMPTS + 1)
    assert len(receiver.received) == MAX_ATTEMPTS + 1


def test_a_manual_retry_of_a_delivery_failed_for_an_inactive_endpoint_makes_exactly_one_more(
        api, services, worker, receivers, clock):
    receiver = receivers([500])
    endpoint = create(api, receiver.url())
    publish(services, "acme")
    worker.drain()
    [waiting] = deliveries(api, endpoint["id"])
    assert (waiting["status"], waiting["attempts"]) == ("pending", 1)
    # The endpoint is set inactive before the next attempt is due: the delivery ends failed, unsent
    assert api.patch(f"/v1/webhook_endpoints/{endpoint['id']}", {"active": False}).status_code == 200
    clock.set(datetime.fromisoformat(waiting["next_attempt_at"]) + timedelta(minutes=6))
    webhook_service.sweep(services.ports)
    worker.drain()
    [failed] = deliveries(api, endpoint["id"])
    assert (failed["status"], failed["attempts"]) == ("failed", 1) and "inactive" in failed["last_error"]

    # Active again, a person retries it; the receiver still fails
    assert api.patch(f"/v1/webhook_endpoints/{endpoint['id']}", {"active": True}).status_code == 200
    assert api.post(f"/v1/webhook_endpoints/{endpoint['id']}/deliveries/{failed['id']}/retry").status_code == 202
    worker.drain()
    clock.advance(hours=11)
    assert webhook_service.sweep(services.ports) == 0

    [again] = deliveries(api, endpoint["id"])
    assert (again["status"], again["attempts"]) == ("failed", 2)
    assert len(receiver.received) == 2
