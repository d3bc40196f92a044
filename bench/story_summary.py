"""A story's summary with 1,000,000 records in its chain, on the local stack.

Builds orders -> charges -> payouts -> bank (three links) through the API with a few hundred
records, runs each link, and times GET /reconciliation_stories/{id}/summary (the baseline).
Then fills each of the four streams with a quarter of `--records` more records, already matched
(record items in the repository's own layout, and their Parquet parts in the analytics mirror
under one published import per stream), runs each link again (its last step refreshes the
stream tallies: the first refresh reads the new mirror parts, the next one their cached money),
and times the same summary in the same run.

    .venv/bin/python bench/story_summary.py [--records 1000000] [--requests 50]
"""
from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.adapters.dynamodb.records import RecordRepository  # noqa: E402
from chalicelib.domain.records import Direction, Record, RecordStatus  # noqa: E402
from chalicelib.local.__main__ import LOCAL_ENVIRONMENT, LocalService  # noqa: E402
from chalicelib.local.processes import free_port  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402

STREAMS = ("orders", "charges", "payouts", "bank")
LINKS = (("orders", "charges"), ("charges", "payouts"), ("payouts", "bank"))
PART_ROWS = 1000
SMALL = 100  # records per stream of the baseline, one in ten left unmatched in every link


def wait(session: requests.Session, url: str, busy: tuple[str, ...]) -> dict:
    while True:
        body = session.get(url).json()
        if body["status"] not in busy:
            return body
        time.sleep(0.2)


def timed_gets(session: requests.Session, url: str, count: int) -> list[float]:
    session.get(url)  # warm-up
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        response = session.get(url)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.text
    return timings


def run_all(session: requests.Session, api: str, reconciliation_ids: list[int]) -> float:
    started = time.perf_counter()
    for rid in reconciliation_ids:
        run = session.post(f"{api}/reconciliations/{rid}/runs").json()
        run = wait(session, f"{api}/reconciliations/{rid}/runs/{run['id']}", ("pending", "running"))
        assert run["status"] == "completed", run
    return time.perf_counter() - started


def fill(service: LocalService, stream: dict, users: set[int], count: int, first_id: int, job_id: int) -> None:
    """`count` records of the stream, matched in every reconciliation that uses it: record items
    (no open-records index entry) and one published import in the mirror."""
    ports, table = service.container.ports, service.container.table
    now = datetime.now(UTC)
    records = [Record(environment=LOCAL_ENVIRONMENT, id=first_id + n, data_stream_key=stream["key"],
                      data_stream_id=stream["id"], date=f"2026-10-{1 + n % 28:02d}", amount=100 + n % 50_000,
                      direction=Direction.CREDIT, currency="USD", decimal_places=2, status=RecordStatus.RECONCILED,
                      created_at=now, external_id=f"{stream['key']}-fill-{n}", file_import_id=job_id)
               for n in range(count)]
    parts = [records[i:i + PART_ROWS] for i in range(0, count, PART_ROWS)]

    def write(index_and_part: tuple[int, list[Record]]) -> None:
        index, part = index_and_part
        table.batch_write(puts=[{**RecordRepository.to_item(r), "matched_in": users} for r in part])
        ports.mirror.write_part(LOCAL_ENVIRONMENT, job_id, index, part)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, enumerate(parts)))
    ports.mirror.publish(LOCAL_ENVIRONMENT, job_id, [stream["key"]])
    ports.mirror.summarize(LOCAL_ENVIRONMENT, job_id, [stream["key"]])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-summary-"))
    service = LocalService(Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_bench"),
                           log=lambda m: print(f"[local] {m}")).start()
    service.serve_in_background()
    session = requests.Session()
    session.headers["X-API-KEY"] = service.key
    api = service.url
    try:
        streams = {key: session.post(f"{api}/data_streams", json={"key": key, "name": key.title()}).json()
                   for key in STREAMS}
        recon_ids = []
        for a, b in LINKS:
            created = session.post(f"{api}/reconciliations", json={
                "name": f"{a} to {b}", "run_type": "batch", "side_a_stream_keys": [a],
                "side_b_stream_keys": [b]}).json()
            assert session.post(f"{api}/reconciliations/{created['id']}/rules", json={
                "name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}).ok
            recon_ids.append(created["id"])
        for key in STREAMS:  # the same amounts everywhere, but one in ten records missing downstream
            items = [{"data_stream_key": key, "amount": 1000 + n, "date": "2026-11-02", "direction": "credit",
                      "external_id": f"{key}-{n}"} for n in range(SMALL) if STREAMS.index(key) == 0 or n % 10]
            bulk = session.post(f"{api}/records/bulk", json={"records": items}).json()
            done = wait(session, f"{api}/bulk_requests/{bulk['id']}", ("pending", "processing", "replicating"))
            assert done["status"] == "completed", done
        story = session.post(f"{api}/reconciliation_stories", json={"name": "Order to cash", "links": [
            {"reconciliation_id": rid, "position": i + 1,
             **({"shared_data_stream_id": streams[LINKS[i][0]]["id"]} if i else {})}
            for i, rid in enumerate(recon_ids)]}).json()
        run_all(session, api, recon_ids)
        url = f"{api}/reconciliation_stories/{story['id']}/summary"
        small = timed_gets(session, url, args.requests)

        filled = time.perf_counter()
        per_stream = args.records // len(STREAMS)
        users = {key: {recon_ids[i] for i, link in enumerate(LINKS) if key in link} for key in STREAMS}
        for n, key in enumerate(STREAMS):
            fill(service, streams[key], users[key], per_stream, 10**9 + n * per_stream, 10**6 + n)
        filled = time.perf_counter() - filled
        first_refresh = run_all(session, api, recon_ids)
        cached_refresh = run_all(session, api, recon_ids)
        large = timed_gets(session, url, args.requests)
        summary = session.get(url).json()
        in_chain = sum(m["count"] for link in summary["links"][:1] for side in ("side_a", "side_b")
                       for part in ("matched", "unmatched") for m in link[side][part])
        in_chain += sum(m["count"] for link in summary["links"][1:] for part in ("matched", "unmatched")
                        for m in link["side_b"][part])

        def row(name: str, timings: list[float]) -> str:
            p95 = statistics.quantiles(timings, n=20, method="inclusive")[-1]
            return f"| {name} | {statistics.median(timings):.1f} ms | {p95:.1f} ms | {max(timings):.1f} ms |"
        print(f"\nmachine: {platform.machine()}, {platform.system()} {platform.release()}, "
              f"python {platform.python_version()}")
        print(f"records in the chain per the summary: {in_chain:,} (filled {args.records:,} in {filled:.0f} s)")
        print(f"three runs after the fill (first tally refresh reads the mirror): {first_refresh:.1f} s; "
              f"again (money cached per import): {cached_refresh:.1f} s")
        print("| GET summary, 3 links | median | p95 | max |\n|---|---|---|---|")
        print(row(f"{SMALL * 4 - 30} records (baseline)", small))
        print(row(f"{in_chain:,} records", large))
        print(f"ratio of medians: {statistics.median(large) / statistics.median(small):.2f}")
    finally:
        service.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
