"""The whole data path on the local stack, timed phase by phase: a CSV import of N rows into each of
two streams at once (uploaded to the presigned URLs, as a client would), then a batch run of N x N with a
one-to-one rule (amount equals, date within 3 days), polled until it ends. Prints each phase's
time and rate, the DynamoDB write requests and the items they wrote, and dynalite's peak memory.
The baseline, in the same run: a BatchWriteItem-only write of `--baseline` record items
(bench/ingestion.py's), once before the imports and once after the run (the store has grown by
then); the items the whole path wrote, at the mean of the two rates, give the time a
BatchWriteItem-only write of them takes, and the path is set against it.

    .venv/bin/python bench/end_to_end.py [--records 1000000] [--baseline 100000]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingestion import WRITE_OPERATIONS, WriteCounter, baseline  # noqa: E402
from reconciliation_run import batch_reconciliation, side_csv  # noqa: E402

from chalicelib.local.__main__ import LocalService  # noqa: E402
from chalicelib.local.processes import free_port  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402

IMPORT_BUSY = ("pending", "processing", "replicating")
RUN_BUSY = ("pending", "running")


def dynalite_peak_mb() -> float | None:
    """The peak resident memory of this process's dynalite child (VmHWM), if it is found."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"dynamodb_server" not in cmdline and b"dynalite" not in cmdline:  # our launcher of it, or it
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            continue
    return None


class ItemCounter:
    """The items the service's DynamoDB writes name: one a PutItem, UpdateItem or DeleteItem, each put
    or delete of a BatchWriteItem (a batch's unprocessed items sent again count again), each write of a
    TransactWriteItems (a cancelled one's count too)."""

    def __init__(self) -> None:
        self.items = 0
        self._lock = threading.Lock()

    def __call__(self, model, params, **kwargs) -> None:
        if model.name == "BatchWriteItem":
            written = sum(len(requests) for requests in params.get("RequestItems", {}).values())
        elif model.name == "TransactWriteItems":  # a ConditionCheck writes nothing
            written = sum(1 for action in params.get("TransactItems", []) if "ConditionCheck" not in action)
        elif model.name in WRITE_OPERATIONS:
            written = 1
        else:
            return
        with self._lock:
            self.items += written


def follow(session: requests.Session, url: str, busy: tuple[str, ...], label: str) -> tuple[dict, float]:
    """Polls until the resource leaves `busy`, printing its progress every 15 s."""
    started = shown = time.perf_counter()
    while True:
        body = session.get(url).json()
        if body["status"] not in busy:
            return body, time.perf_counter() - started
        if time.perf_counter() - shown >= 15:
            shown = time.perf_counter()
            done = body.get("processed_items", body.get("matched_records"))
            print(f"  {label}: {body['status']}, progress {body.get('progress')}, {done} after "
                  f"{shown - started:.0f} s", flush=True)
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000, help="rows of each CSV, records a side")
    parser.add_argument("--baseline", type=int, default=100_000, help="items of the BatchWriteItem baseline")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-e2e-"))
    service = LocalService(Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_bench"),
                           log=lambda m: print(f"[local] {m}")).start()
    service.serve_in_background()
    counter, items = WriteCounter(), ItemCounter()
    service.container.aws.dynamodb.meta.events.register("before-call.dynamodb.*", counter)
    service.container.aws.dynamodb.meta.events.register("before-parameter-build.dynamodb.*", items)
    session = requests.Session()
    session.headers["X-API-KEY"] = service.key
    api = service.url
    phases: list[tuple[str, float, int, str]] = []
    try:
        base_before = baseline(service, args.baseline, 4, environment="baseline-before")
        # Printed now too: a run stopped part-way still says how fast this sitting's machine wrote.
        print(f"baseline before: {args.baseline:,} items in {base_before:.1f} s = {args.baseline / base_before:,.0f} "
              f"items/s; load average {os.getloadavg()[0]:.1f}", flush=True)
        counter.reset()
        items.items = 0
        # Both files at once, as a team dropping its bank file and its ledger export would: each
        # stream has its own writer, so the two imports run side by side.
        bodies = {side: side_csv(args.records, side) for side in ("a", "b")}
        started = time.perf_counter()
        imports = {}
        for side, body in bodies.items():
            assert session.post(f"{api}/data_streams", json={"key": f"side-{side}", "name": side}).ok
            created = session.post(f"{api}/data_streams/side-{side}/file_imports",
                                   json={"filename": f"{side}.csv", "format": "csv"}).json()
            assert requests.put(created["upload_url"], data=body, timeout=600).ok
            imports[side] = created["id"]
        for side, import_id in imports.items():
            done, _ = follow(session, f"{api}/file_imports/{import_id}", IMPORT_BUSY, f"import {side}")
            assert done["status"] == "completed" and done["successful_items"] == args.records, done
            print(f"import {side}: {time.perf_counter() - started:.1f} s after both uploads began", flush=True)
        seconds = time.perf_counter() - started
        size = sum(len(body) for body in bodies.values()) / 1e6
        phases.append((f"two CSV imports side by side, side-a and side-b ({size:.0f} MB)", seconds,
                       2 * args.records, "records"))
        reconciliation = batch_reconciliation(session, api)
        run = session.post(f"{api}/reconciliations/{reconciliation['id']}/runs").json()
        run, seconds = follow(session, f"{api}/reconciliations/{reconciliation['id']}/runs/{run['id']}",
                              RUN_BUSY, "run")
        assert run["status"] == "completed", run
        phases.append((f"batch run {args.records:,} x {args.records:,}", seconds, run["matched_records"],
                       "matched records"))
        writes, written = sum(counter.counts.values()), items.items
        base_after = baseline(service, args.baseline, 4, environment="baseline-after")
        base_rate = (args.baseline / base_before + args.baseline / base_after) / 2
        took_all = sum(p[1] for p in phases)
        print(f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
              f"python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}")
        print(f"baseline, BatchWriteItem only: {args.baseline:,} items in {base_before:.1f} s before, "
              f"{base_after:.1f} s after = {base_rate:,.0f} items/s (mean)")
        for name, took, count, unit in phases:
            print(f"{name}: {took:.1f} s, {count / took:,.0f} {unit}/s")
        print(f"all of it: {took_all / 60:.1f} min")
        print(f"DynamoDB write requests: {writes:,}; "
              + ", ".join(f"{op} {n:,}" for op, n in sorted(counter.counts.items())))
        floor = written / base_rate
        print(f"items written: {written:,}; by BatchWriteItem alone at the baseline's rate: {floor / 60:.1f} min; "
              f"ratio {floor / took_all:.2f}")
        peak = dynalite_peak_mb()
        print(f"dynalite peak resident memory: {peak:,.0f} MB" if peak else "dynalite not found in /proc")
    finally:
        service.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
