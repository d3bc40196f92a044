"""Two bulk requests racing with the same external_ids create each record once. This runs on the
local stack's dynalite, whose conditional writes are atomic like DynamoDB's (moto's are not
under threads), with the stack's own workers and two more deliveries from here all at once."""
import threading
import time
import uuid

from chalicelib.container import Container
from chalicelib.local.stack import StackInfo
from chalicelib.services.bulk_ingestion import process_job
from chalicelib.settings import Settings


def test_racing_requests_with_the_same_external_ids_create_each_record_once(stack):
    stream = f"race-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/data_streams", {"key": stream, "name": "Race"}).status_code == 201
    batch = [{"date": "2026-11-02", "data_stream_key": stream, "amount": n, "direction": "credit",
              "external_id": f"same-{n}"} for n in range(300)]
    summaries = [stack.request("POST", "/records/bulk", {"records": batch}).json() for _ in range(2)]
    container = Container(StackInfo(**stack.stack_info()).settings(Settings(local_mode=True)))
    barrier = threading.Barrier(2)

    def deliver(job_id):
        barrier.wait()
        process_job(container.ingestion, "local", job_id)

    threads = [threading.Thread(target=deliver, args=(s["id"],)) for s in summaries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done = []
    for summary in summaries:
        deadline = time.monotonic() + 60
        while True:
            body = stack.request("GET", summary["url"].removeprefix("/v1")).json()
            if body["status"] == "completed" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        done.append(body)

    assert [d["status"] for d in done] == ["completed", "completed"]
    assert sum(d["successful_items"] for d in done) == 300
    assert sum(d["skipped_items"] for d in done) == 300
    records, cursor = [], None
    while True:
        params = {"data_stream_key": stream, "limit": 200, **({"cursor": cursor} if cursor else {})}
        page = stack.request("GET", "/records", params=params).json()
        records += page["data"]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(r["external_id"] for r in records) == sorted(f"same-{n}" for n in range(300))
    assert stack.request("GET", f"/data_streams/{stream}").json()["records_count"] == 300
