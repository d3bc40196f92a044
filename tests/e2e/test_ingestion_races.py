"""Races, on the local stack's dynalite, whose conditional writes are atomic like DynamoDB's
(moto's are not under threads): deliveries of one request at the same time, and two requests
with the same external_ids, each with the stack's own workers delivering too."""
import threading
import time
import uuid

from chalicelib.container import Container
from chalicelib.local.stack import StackInfo
from chalicelib.services.ingestion.bulk import process_job
from chalicelib.settings import Settings


def _container(stack):
    return Container(StackInfo(**stack.stack_info()).settings(Settings(local_mode=True)))


def _wait_completed(stack, summary, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        body = stack.request("GET", summary["url"].removeprefix("/v1")).json()
        if body["status"] == "completed" or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def _records(stack, stream):
    records, cursor = [], None
    while True:
        params = {"data_stream_key": stream, "limit": 200, **({"cursor": cursor} if cursor else {})}
        page = stack.request("GET", "/records", params=params).json()
        records += page["data"]
        cursor = page["next_cursor"]
        if not cursor:
            return records


def test_deliveries_of_one_request_at_the_same_time_make_one_record_per_item(stack):
    stream = f"twice-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/data_streams", {"key": stream, "name": "Twice"}).status_code == 201
    items = [{"date": "2026-11-02", "data_stream_key": stream, "amount": n, "direction": "credit",
              **({"external_id": f"t-{n}"} if n % 3 else {})} for n in range(900)]
    summary = stack.request("POST", "/records/bulk", {"records": items}).json()
    container = _container(stack)
    barrier = threading.Barrier(3)

    def deliver():
        barrier.wait()
        process_job(container.ports, "local", summary["id"])

    threads = [threading.Thread(target=deliver) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done = _wait_completed(stack, summary)

    assert (done["status"], done["successful_items"], done["processed_items"]) == ("completed", 900, 900)
    records = _records(stack, stream)
    assert len(records) == len({r["id"] for r in records}) == 900
    assert sorted(r["amount"] for r in records) == list(range(900))
    assert stack.request("GET", f"/data_streams/{stream}").json()["records_count"] == 900


def test_racing_requests_with_the_same_external_ids_create_each_record_once(stack):
    stream = f"race-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/data_streams", {"key": stream, "name": "Race"}).status_code == 201
    batch = [{"date": "2026-11-02", "data_stream_key": stream, "amount": n, "direction": "credit",
              "external_id": f"same-{n}"} for n in range(300)]
    summaries = [stack.request("POST", "/records/bulk", {"records": batch}).json() for _ in range(2)]
    container = _container(stack)
    barrier = threading.Barrier(2)

    def deliver(job_id):
        barrier.wait()
        process_job(container.ports, "local", job_id)

    threads = [threading.Thread(target=deliver, args=(s["id"],)) for s in summaries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done = [_wait_completed(stack, summary) for summary in summaries]

    assert [d["status"] for d in done] == ["completed", "completed"]
    assert sum(d["successful_items"] for d in done) == 300
    assert sum(d["skipped_items"] for d in done) == 300
    records = _records(stack, stream)
    assert sorted(r["external_id"] for r in records) == sorted(f"same-{n}" for n in range(300))
    assert stack.request("GET", f"/data_streams/{stream}").json()["records_count"] == 300
