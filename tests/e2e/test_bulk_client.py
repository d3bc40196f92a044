"""A real API client, unchanged, against the local stack: deterministic Idempotency-Key,
retries on 408/429/5xx with the same key, 400/422 permanent, polls until done, reads failures.

Between the client and the stack sits a flaky proxy: the first attempt of each batch reaches
the service but its answer is lost (503), and some batches are first refused with 429, so
the retries are real."""
from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from chalicelib.local.processes import free_port

RETRYABLE = {408, 429}


class PermanentError(Exception):
    pass


class BulkClient:
    """Written the way integrations of this kind of API are written; nothing here knows our internals."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url = base_url
        self.session = requests.Session()
        self.session.headers["X-API-KEY"] = api_key
        self.attempts: list[int] = []

    def post_batch(self, records: list[dict]) -> dict:
        idempotency_key = hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()
        body = {"on_conflict": "skip", "records": records}
        for attempt in range(6):
            response = self.session.post(f"{self.base_url}/records/bulk", json=body, timeout=30,
                                         headers={"Idempotency-Key": idempotency_key})
            self.attempts.append(response.status_code)
            if response.status_code in RETRYABLE or response.status_code >= 500:
                time.sleep(0.05 * 2 ** attempt)
                continue
            if response.status_code in (400, 422):
                raise PermanentError(response.text)
            response.raise_for_status()
            return response.json()
        raise RuntimeError("gave up after retries")

    def wait(self, summary: dict, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        url = summary["url"].removeprefix("/v1")
        while time.monotonic() < deadline:
            body = self.session.get(f"{self.base_url}{url}", timeout=30).json()
            if body["status"] not in ("pending", "processing"):
                return body
            time.sleep(0.1)
        raise TimeoutError(summary)

    @staticmethod
    def failures(body: dict) -> list[dict]:
        return [r for r in body["results"] if r["status"] == "failed"]


class FlakyProxy:
    """Forwards to the stack; loses the answer of each batch's first POST, and answers 429 to
    the very first attempt of every third batch without forwarding it."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()
        self.port = free_port()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                key = self.headers.get("Idempotency-Key")
                status_override = None
                if self.command == "POST" and key:
                    with proxy.lock:
                        attempt = proxy.seen[key] = proxy.seen.get(key, 0) + 1
                        batch_number = list(proxy.seen).index(key)
                    if attempt == 1 and batch_number % 3 == 2:
                        return self._answer(429, b'{"message": "slow down"}')
                    if attempt <= 2:
                        status_override = 503
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                upstream = requests.request(self.command, proxy.target + self.path, data=body, headers=headers,
                                            timeout=30)
                if status_override:
                    return self._answer(status_override, b'{"message": "upstream answer lost"}')
                self._answer(upstream.status_code, upstream.content)

            def _answer(self, status: int, body: bytes):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


@pytest.fixture
def proxy(stack):
    running = FlakyProxy(f"http://127.0.0.1:{stack.port}")
    yield running
    running.stop()


def test_a_real_client_with_retries_ingests_every_batch_exactly_once(stack, proxy):
    stream = f"client-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/data_streams", {"key": stream, "name": "Client"}).status_code == 201
    client = BulkClient(f"http://127.0.0.1:{proxy.port}/v1", stack.api_key)

    def batch(b):
        records = [{"date": "2026-11-03", "data_stream_key": stream, "amount": 100 * b + n, "direction": "credit",
                    "external_id": f"b{b}-{n}", "description": f"payment {n}"} for n in range(100)]
        records[10]["amount"] = "12.50"          # a bad item: fails alone
        records[20]["date"] = "2026-02-31"       # another one
        if b > 0:
            records[30]["external_id"] = "b0-30"  # already sent in batch 0: skipped
        return records

    summaries = [client.post_batch(batch(b)) for b in range(4)]
    finished = [client.wait(s) for s in summaries]

    # The client stops polling once a request is neither pending nor processing: its results are
    # final from `replicating` on (the records are written; only the analytics mirror is left).
    assert all(f["status"] in ("replicating", "completed") for f in finished)
    assert 503 in client.attempts and 429 in client.attempts  # retries really happened
    assert len({s["id"] for s in summaries}) == 4
    for b, body in enumerate(finished):
        assert [(f["index"], f["error"].split(":")[0]) for f in client.failures(body)] == [(10, "amount"),
                                                                                             (20, "date")]
        assert body["skipped_items"] == (1 if b > 0 else 0)
        assert body["successful_items"] + body["failed_items"] + body["skipped_items"] == body["total_items"] == 100
    expected_records = 98 + 3 * 97
    listed, cursor = [], None
    while True:
        params = {"data_stream_key": stream, "limit": 200, **({"cursor": cursor} if cursor else {})}
        page = stack.request("GET", "/records", params=params).json()
        listed += page["data"]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(listed) == len({r["external_id"] for r in listed}) == expected_records
    assert stack.request("GET", f"/data_streams/{stream}").json()["records_count"] == expected_records


def test_a_permanent_error_is_not_retried(stack):
    client = BulkClient(stack.url, stack.api_key)
    with pytest.raises(PermanentError):
        client.post_batch([])
    assert client.attempts == [422]
