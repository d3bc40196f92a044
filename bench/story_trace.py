"""Tracing a record through a 4-link story on the local stack, where one payout holds 10,000 charges.

Builds orders -> charges -> payouts -> bank -> ledger through the API (the whole local service in
this process, as `make run` starts it): `--charges` orders and their charges by the bulk API, all
the charges paid out by one payout, one bank deposit and one ledger entry for it; four batch
reconciliations with rules (orders to charges one to one by metadata.order; charges to payouts
many to one, grouped by metadata.payout, the group's amount equal to the payout's; payouts to
bank and bank to ledger one to one by amount), each run until `completed`, so every match is
real. Then times GET /reconciliation_stories/{id}/trace from the bank deposit (back to the
payout's 10,000 charges and their orders), from a charge and from an order (forward to the
ledger): the first request apart (the first trace through the payout reads its 10,001 records
and keeps their money beside its members, see services/story_trace.py), then the median of
`--requests`, and the DynamoDB read requests one trace sends (a botocore hook on the service's
client).

    .venv/bin/python bench/story_trace.py [--charges 10000] [--requests 9] [--keep DIR]

`--keep DIR` keeps the stack's data in DIR: a second run with the same DIR times the story built
by the first without building it again.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.local.__main__ import LocalService  # noqa: E402
from chalicelib.local.processes import free_port  # noqa: E402
from chalicelib.observability import logger  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402

STREAMS = ("orders", "charges", "payouts", "bank", "ledger")
READ_OPERATIONS = {"GetItem", "BatchGetItem", "Query", "Scan"}
PAYOUT = "po_big"


class ReadCounter:
    """DynamoDB read requests by operation (a botocore before-call hook)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, model, **kwargs) -> None:
        if model.name in READ_OPERATIONS:
            with self._lock:
                self.counts[model.name] += 1

    def take(self) -> dict[str, int]:
        with self._lock:
            counts, self.counts = dict(self.counts), Counter()
        return counts


class Api:
    def __init__(self, service: LocalService) -> None:
        self.url = service.url
        self.session = requests.Session()
        self.session.headers["X-API-KEY"] = service.key

    def post(self, path: str, body: dict | None = None) -> dict:
        response = self.session.post(self.url + path, json=body)
        assert response.ok, (path, response.status_code, response.text)
        return response.json()

    def get(self, path: str) -> dict:
        response = self.session.get(self.url + path)
        assert response.ok, (path, response.status_code, response.text)
        return response.json()

    def wait(self, path: str, busy: tuple[str, ...]) -> dict:
        while True:
            body = self.get(path)
            if body["status"] not in busy:
                return body
            time.sleep(0.25)


def ingest(api: Api, records: list[dict]) -> list[int]:
    """Post the records 1,000 a request (4 at a time), wait for every job; their ids, in order."""
    def post(part: list[dict]) -> list[int]:
        job = api.post("/records/bulk", {"records": part})
        done = api.wait(job["url"].removeprefix("/v1"), ("pending", "processing"))
        assert done["status"] == "completed" and done["failed_items"] == 0, done
        return [r["record_id"] for r in done["results"]]
    with ThreadPoolExecutor(4) as pool:
        return [i for ids in pool.map(post, [records[s:s + 1000] for s in range(0, len(records), 1000)]) for i in ids]


def build(api: Api, charges: int) -> dict:
    """The streams, records, reconciliations with their rules, runs and the story; the ids to trace."""
    for key in STREAMS:
        api.post("/data_streams", {"key": key, "name": key.title()})
    amounts = [100 + (n * 37) % 9_900 for n in range(charges)]
    total = sum(amounts)
    order_ids = ingest(api, [{"data_stream_key": "orders", "date": "2026-11-02", "amount": a, "direction": "credit",
                              "metadata": {"order": f"o{n}"}} for n, a in enumerate(amounts)])
    charge_ids = ingest(api, [{"data_stream_key": "charges", "date": "2026-11-02", "amount": a,
                               "direction": "credit", "metadata": {"order": f"o{n}", "payout": PAYOUT}}
                              for n, a in enumerate(amounts)])
    [payout, deposit, entry] = ingest(api, [
        {"data_stream_key": "payouts", "date": "2026-11-03", "amount": total, "direction": "credit",
         "metadata": {"payout": PAYOUT}},
        {"data_stream_key": "bank", "date": "2026-11-04", "amount": total, "direction": "credit"},
        {"data_stream_key": "ledger", "date": "2026-11-04", "amount": total, "direction": "credit"}])
    rules = [
        {"conditions": [{"field": "metadata.order", "operator": "equals"}]},
        {"cardinality": "many_to_one", "group_by": {"side_a": ["metadata.payout"]},
         "conditions": [{"field": "metadata.payout", "operator": "equals"}, {"field": "amount", "operator": "equals"}]},
        {"conditions": [{"field": "amount", "operator": "equals"}]},
        {"conditions": [{"field": "amount", "operator": "equals"}]},
    ]
    streams = {s["key"]: s["id"] for s in api.get("/data_streams?limit=200")["data"]}
    links = []
    for position, (a, b) in enumerate(zip(STREAMS, STREAMS[1:], strict=False), start=1):
        reconciliation = api.post("/reconciliations", {"name": f"{a} to {b}", "run_type": "batch",
                                                       "side_a_stream_keys": [a], "side_b_stream_keys": [b]})
        api.post(f"/reconciliations/{reconciliation['id']}/rules", {"name": "R", "priority": 1,
                                                                   **rules[position - 1]})
        started = time.perf_counter()
        run = api.post(f"/reconciliations/{reconciliation['id']}/runs")
        run = api.wait(f"/reconciliations/{reconciliation['id']}/runs/{run['id']}", ("pending", "running"))
        assert run["status"] == "completed", run
        print(f"[bench] run of {a} to {b}: {run['matched_records']:,} records matched in "
              f"{time.perf_counter() - started:.1f} s")
        links.append({"reconciliation_id": reconciliation["id"], "position": position,
                      **({"shared_data_stream_id": streams[a]} if position > 1 else {})})
    story = api.post("/reconciliation_stories", {"name": "Order to ledger", "links": links})
    return {"story": story["id"], "deposit": deposit, "charge": charge_ids[charges // 2],
            "order": order_ids[charges // 3], "payout": payout, "entry": entry}


def hops_in(hops: list[dict]) -> int:
    return sum(1 + hops_in(h["next"]) for h in hops)


def biggest_hop(hops: list[dict]) -> int:
    return max([h["records"]["count"] for h in hops] + [biggest_hop(h["next"]) for h in hops], default=0)


def omitted_in(hops: list[dict]) -> int:
    return sum((h["next_omitted"] or {}).get("hops", 0) + omitted_in(h["next"]) for h in hops)


def timed(api: Api, path: str, count: int, reads: ReadCounter) -> tuple[float, list[float], dict, dict[str, int]]:
    """The first request (a warm-up: it may keep a big match's money), then `count` more; the DynamoDB
    reads of the second."""
    started = time.perf_counter()
    api.get(path)
    first = (time.perf_counter() - started) * 1000
    reads.take()
    timings = []
    body: dict = {}
    one: dict[str, int] = {}
    for n in range(count):
        started = time.perf_counter()
        body = api.get(path)
        timings.append((time.perf_counter() - started) * 1000)
        if n == 0:
            one = reads.take()
    return first, timings, body, one


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--charges", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=9)
    parser.add_argument("--keep", type=Path, default=None, help="keep the stack's data here, and reuse it")
    args = parser.parse_args()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="recon-bench-trace-"))
    service = LocalService(Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_bench"),
                           log=lambda m: None).start()
    service.serve_in_background()
    logger.setLevel(logging.WARNING)  # one log line per request would be timed too
    reads = ReadCounter()
    service.container.aws.dynamodb.meta.events.register("before-call.dynamodb.*", reads)
    try:
        api = Api(service)
        built = workdir / "ids.json"
        if built.exists():
            ids = json.loads(built.read_text())
        else:
            started = time.perf_counter()
            ids = build(api, args.charges)
            print(f"[bench] built in {time.perf_counter() - started:.0f} s")
            built.write_text(json.dumps(ids))
        print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
              f"python {platform.python_version()}; {args.charges:,} charges in one payout, 4 links\n")
        print("| trace from | first | median | min | max | hops shown | hops omitted | largest hop | DynamoDB reads |")
        print("|---|---|---|---|---|---|---|---|---|")
        # The charge first: its first trace is the first through the payout, which keeps its money.
        for name, record_id in (("a charge", ids["charge"]), ("an order", ids["order"]),
                                ("the bank deposit", ids["deposit"])):
            path = f"/reconciliation_stories/{ids['story']}/trace?record_id={record_id}"
            first, timings, body, one = timed(api, path, args.requests, reads)
            print(f"| {name} | {first:.0f} ms | {statistics.median(timings):.0f} ms | {min(timings):.0f} ms "
                  f"| {max(timings):.0f} ms "
                  f"| {hops_in(body['hops'])} | {omitted_in(body['hops']):,} | {biggest_hop(body['hops']):,} records "
                  f"| {sum(one.values())} ({', '.join(f'{op} {n}' for op, n in sorted(one.items()))}) |")
    finally:
        service.stop()
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
