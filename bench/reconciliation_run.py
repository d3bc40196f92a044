"""A 100,000 x 100,000 batch run end to end on the local stack: records go in as two CSV imports
(not timed), a one-to-one rule on amount plus a 3-day window, then POST /reconciliations/{id}/runs
polled until it ends. Reports the run's time, its phases and the DynamoDB write requests per
matched record. Same run: the BatchWriteItem-only baseline of bench/ingestion.py.

    .venv/bin/python bench/reconciliation_run.py [--records 100000]
"""
from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingestion import WriteCounter, baseline  # noqa: E402

from chalicelib.local.__main__ import LocalService  # noqa: E402
from chalicelib.local.processes import free_port  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402


def side_csv(records: int, side: str) -> bytes:
    """Side B books the same amounts 0 to 3 days later; one record in 20 has no partner."""
    lines = ["date,amount,description,external_id"]
    for n in range(records):
        day = 1 + n % 25 + (n % 4 if side == "b" else 0)
        amount = 100 + n * 7 if (side == "a" or n % 20) else 5 + n * 7 + 3
        lines.append(f"2026-10-{day:02d},{amount // 100}.{amount % 100:02d},{side} payment {n},{side}-{n:08d}")
    return ("\n".join(lines) + "\n").encode()


def wait(session: requests.Session, url: str, busy: tuple[str, ...]) -> dict:
    while True:
        body = session.get(url).json()
        if body["status"] not in busy:
            return body
        time.sleep(0.25)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-run-"))
    service = LocalService(Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_bench"),
                           log=lambda m: print(f"[local] {m}")).start()
    service.serve_in_background()
    counter = WriteCounter()
    service.container.aws.dynamodb.meta.events.register("before-call.dynamodb.*", counter)
    session = requests.Session()
    session.headers["X-API-KEY"] = service.key
    api = service.url
    try:
        base_seconds = baseline(service, args.records, 4)
        for side in ("a", "b"):
            assert session.post(f"{api}/data_streams", json={"key": f"side-{side}", "name": side}).ok
            created = session.post(f"{api}/data_streams/side-{side}/file_imports",
                                   json={"filename": f"{side}.csv", "format": "csv"}).json()
            assert requests.put(created["upload_url"], data=side_csv(args.records, side), timeout=300).ok
            done = wait(session, f"{api}/file_imports/{created['id']}", ("pending", "processing", "replicating"))
            assert done["status"] == "completed", done
        reconciliation = session.post(f"{api}/reconciliations", json={
            "name": "Bench", "run_type": "batch", "side_a_stream_keys": ["side-a"],
            "side_b_stream_keys": ["side-b"]}).json()
        assert session.post(f"{api}/reconciliations/{reconciliation['id']}/rules", json={
            "name": "Amount, 3 days", "priority": 1, "cardinality": "one_to_one",
            "conditions": [{"field": "amount", "operator": "equals"},
                           {"field": "date", "operator": "within", "days": 3}]}).ok
        counter.reset()
        started = time.perf_counter()
        run = session.post(f"{api}/reconciliations/{reconciliation['id']}/runs").json()
        run = wait(session, f"{api}/reconciliations/{reconciliation['id']}/runs/{run['id']}", ("pending", "running"))
        seconds = time.perf_counter() - started
        assert run["status"] == "completed", run
        writes = sum(counter.counts.values())
        matched = run["matched_records"]
        print(f"\nmachine: {platform.machine()}, {platform.system()} {platform.release()}, "
              f"python {platform.python_version()}")
        print(f"baseline, BatchWriteItem only: {args.records:,} items in {base_seconds:.1f} s = "
              f"{args.records / base_seconds:,.0f} items/s")
        print(f"batch run {args.records:,} x {args.records:,}: {seconds:.1f} s, {matched:,} records matched "
              f"({run['rule_summary']['unmatched']} unmatched), {matched / seconds:,.0f} matched records/s")
        print(f"DynamoDB write requests: {writes:,} = {writes / max(matched, 1):.3f} per matched record; "
              + ", ".join(f"{op} {n:,}" for op, n in sorted(counter.counts.items())))
    finally:
        service.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
