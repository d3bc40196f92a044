"""What events, webhook deliveries and the audit trail add to bulk ingestion (issue 18).

The whole local service runs in this process (as bench/ingestion.py: dynalite, moto server, the
API on a loopback port, the in-process SQS workers), with one webhook endpoint subscribed to every
event (`["*"]`) and a receiver on loopback that verifies each delivery with the `standardwebhooks`
library. The same bulk load (requests of 1,000 records, 4 clients, every record with an
`external_id`) is ingested in alternating rounds:

- `off`: the service with its event bus, audit trail and event ledger in memory (`Ports.events`,
  `Ports.audit`, `Ports.event_ledger` the fakes of tests/fakes): what ingestion cost before issue 18;
- `on`: everything on: events published, fanned out and delivered, audit entries appended.

Rounds alternate (off, on, off, on, ...) so that the machine's drift falls on both alike. It counts
every DynamoDB write request and every EventBridge PutEvents call of each mode, and checks that
the extra writes grow with requests, not records. Usage:

    .venv/bin/python bench/events_overhead.py [--records 100000] [--rounds 2] [--batch 1000] [--clients 4]
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingestion import WRITE_OPERATIONS, run_bulk  # noqa: E402
from chalicelib.local.__main__ import LocalService  # noqa: E402
from chalicelib.local.processes import free_port  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402
from tests.fakes.audit import FakeAuditRepository  # noqa: E402
from tests.fakes.events import FakeEventLedger, FakeEventPublisher  # noqa: E402
from tests.support.webhook_receiver import VerifyingReceiver  # noqa: E402


class Calls:
    """DynamoDB writes and EventBridge puts, counted per mode (a botocore hook on each client)."""

    def __init__(self) -> None:
        self.mode = "off"
        self.counts: dict[str, Counter[str]] = {"off": Counter(), "on": Counter()}
        self._lock = threading.Lock()

    def __call__(self, model, **kwargs) -> None:
        if model.name in WRITE_OPERATIONS or model.name == "PutEvents":
            with self._lock:
                self.counts[self.mode][model.name] += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000, help="per mode, split over the rounds")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-events-"))
    settings = Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_bench")
    service = LocalService(settings, log=lambda m: print(f"[local] {m}")).start()
    service.serve_in_background()
    container = service.container
    calls = Calls()
    container.aws.dynamodb.meta.events.register("before-call.dynamodb.*", calls)
    container.events._events.meta.events.register("before-call.events.*", calls)
    receiver = VerifyingReceiver()
    headers = {"X-API-KEY": service.key}
    endpoint = requests.post(f"{service.url}/webhook_endpoints", headers=headers,
                             json={"url": receiver.url, "events": ["*"], "description": "bench"})
    assert endpoint.status_code == 201, endpoint.text
    receiver.secret = endpoint.json()["secret"]
    wired = container.ports
    # No bus, no audit trail and no announcement marks in the table: in memory, where nothing reads them.
    unwired = replace(wired, events=FakeEventPublisher(), audit=FakeAuditRepository(), event_ledger=FakeEventLedger())

    seconds: Counter[str] = Counter()
    requests_sent: Counter[str] = Counter()
    per_round = args.records // args.rounds
    try:
        for number in range(args.rounds):
            for mode in ("off", "on"):
                container.ports = unwired if mode == "off" else wired  # what every handler reads next
                calls.mode = mode
                stream = f"bench-{mode}-{number}"
                took, finished = run_bulk(service, per_round, args.batch, args.clients, stream=stream)
                assert all(f["status"] == "completed" for f in finished), [f["status"] for f in finished]
                assert sum(f["successful_items"] for f in finished) == per_round
                seconds[mode] += took
                requests_sent[mode] += len(finished) + 1  # the bulk requests and the stream's creation
                print(f"round {number + 1} {mode}: {per_round:,} records in {took:.1f} s")
        container.ports = wired
        deadline = time.monotonic() + 120
        expected = requests_sent["on"] - args.rounds  # one bulk_request.completed per request
        while len(receiver.events) < expected and time.monotonic() < deadline:
            time.sleep(0.5)

        off, on = calls.counts["off"], calls.counts["on"]
        writes = {mode: sum(n for op, n in calls.counts[mode].items() if op != "PutEvents") for mode in ("off", "on")}
        total = per_round * args.rounds
        print(f"\nmachine: {platform.machine()}, {platform.system()} {platform.release()}, "
              f"python {platform.python_version()}")
        print(f"off (no events, no audit): {total:,} records in {seconds['off']:.1f} s")
        print(f"on (events + webhooks + audit): {total:,} records in {seconds['on']:.1f} s")
        print(f"overhead: {100 * (seconds['on'] / seconds['off'] - 1):+.1f}% (target: at most +5%)")
        print(f"DynamoDB write requests: off {writes['off']:,} ({writes['off'] / total:.4f}/record), "
              f"on {writes['on']:,} ({writes['on'] / total:.4f}/record); extra {writes['on'] - writes['off']:,} "
              f"for {requests_sent['on']} requests = {(writes['on'] - writes['off']) / requests_sent['on']:.1f} per "
              "request")
        print("  off: " + ", ".join(f"{op} {n:,}" for op, n in sorted(off.items())))
        print("  on:  " + ", ".join(f"{op} {n:,}" for op, n in sorted(on.items())))
        print(f"webhook deliveries verified by standardwebhooks: {dict(Counter(e['type'] for e in receiver.events))} "
              f"(refused: {len(receiver.refused)}; expected {expected} bulk_request.completed)")
        print(json.dumps({"off_s": round(seconds["off"], 1), "on_s": round(seconds["on"], 1),
                          "writes_off": writes["off"], "writes_on": writes["on"],
                          "put_events": on.get("PutEvents", 0), "delivered": len(receiver.events)}))
    finally:
        receiver.stop()
        service.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
