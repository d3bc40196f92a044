"""The aging counts (`GET /reconciliations/{id}/service_levels/aging`, the overview's `aging`) from the
sparse read of the active exceptions against the read they replaced, the queue's whole exception
index, on the real local stack (dynalite), side by side in the same run, with the results compared
(they must be identical).

An environment of --reconciliations reconciliations of two streams each: per stream one active
exception (open or investigating, with its active exception guard, as a refresh leaves it) and its
history, --closed exceptions in all, resolved or dismissed (a queue that has worked for a while).
The exceptions are written with the repository's own item layout.

    .venv/bin/python bench/aging_reads.py [--reconciliations 20] [--closed 50000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.adapters.dynamodb import keys  # noqa: E402
from chalicelib.adapters.dynamodb.reconciliation_exceptions import ExceptionRepository  # noqa: E402
from chalicelib.container import Container  # noqa: E402
from chalicelib.domain.clock import iso  # noqa: E402
from chalicelib.domain.reconciliation_exceptions import (  # noqa: E402
    ACTIVE,
    ExceptionRecord,
    ExceptionStatus,
    ReconciliationException,
    totals,
)
from chalicelib.domain.service_levels import Aging, aging  # noqa: E402
from chalicelib.local.launcher import StackProcess  # noqa: E402
from chalicelib.local.stack import StackInfo  # noqa: E402
from chalicelib.services import service_levels  # noqa: E402
from chalicelib.services.ports import Ports  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402

ENVIRONMENT = "local"
CLOSED = [ExceptionStatus.RESOLVED, ExceptionStatus.DISMISSED]


def exception(n: int, reconciliation_id: int, stream_key: str, status: ExceptionStatus,
              now: datetime) -> ReconciliationException:
    today = date.today()
    records = [ExceptionRecord(n * 10 + i, 1000 + i * 7 + n % 50_000, "credit" if i % 3 else "debit",
                               (today - timedelta(days=1 + (n + i * 9) % 60)).isoformat(), "USD")
               for i in range(1 + n % 5)]
    return ReconciliationException(
        environment=ENVIRONMENT, id=n, reconciliation_id=reconciliation_id, data_stream_key=stream_key,
        data_stream_id=1, title=f"{stream_key}: unmatched records", description=f"{len(records)} records",
        status=status, created_at=now, updated_at=now, opened_at=now - timedelta(hours=n % 400), totals=totals(records))


def fill(container: Container, reconciliations: list[tuple[int, list[str]]], closed: int) -> int:
    """Per stream one active exception and its guard; `closed` closed ones spread over the streams."""
    now = datetime.now(UTC)
    items: list[dict] = []
    streams = [(rid, key) for rid, keys_of in reconciliations for key in keys_of]
    n = 1_000_000
    for index, (rid, key) in enumerate(streams):
        n += 1
        status = ExceptionStatus.OPEN if index % 3 else ExceptionStatus.INVESTIGATING
        items.append(ExceptionRepository._to_item(exception(n, rid, key, status, now)))
        items.append({**keys.active_exception_guard(ENVIRONMENT, rid, key), "entity": "active_exception_guard",
                      "exception_id": n, "created_at": iso(now)})
    for c in range(closed):
        n += 1
        rid, key = streams[c % len(streams)]
        items.append(ExceptionRepository._to_item(exception(n, rid, key, CLOSED[c % 2], now)))
    for start in range(0, len(items), 5_000):
        container.table.batch_write(puts=items[start:start + 5_000])
    return len(streams)


# The reads the aging counts made before (the queue's whole index), as they were.

def index_aging_of(ports: Ports, reconciliation_id: int | None) -> Aging:
    now = datetime.now(UTC)
    summaries = [s.summary for s in service_levels.store(ports).summaries(ENVIRONMENT) if s.summary.status in ACTIVE
                 and (reconciliation_id is None or s.summary.reconciliation_id == reconciliation_id)]
    live = service_levels.live_reconciliations(ports, ENVIRONMENT, (s.reconciliation_id for s in summaries))
    summaries = [s for s in summaries if s.reconciliation_id in live]
    policies = service_levels.policies_of(ports, ENVIRONMENT, (s.reconciliation_id for s in summaries))
    return aging([service_levels.of_summary(policies[s.reconciliation_id], s, now) for s in summaries])


def index_agings(ports: Ports) -> dict[int, Aging]:
    now = datetime.now(UTC)
    summaries = [s.summary for s in service_levels.store(ports).summaries(ENVIRONMENT) if s.summary.status in ACTIVE]
    live = service_levels.live_reconciliations(ports, ENVIRONMENT, (s.reconciliation_id for s in summaries))
    summaries = [s for s in summaries if s.reconciliation_id in live]
    policies = service_levels.policies_of(ports, ENVIRONMENT, (s.reconciliation_id for s in summaries))
    return {rid: aging([service_levels.of_summary(policies[rid], s, now) for s in summaries
                        if s.reconciliation_id == rid]) for rid in policies}


def timed(work: Callable[[], object], repeat: int) -> tuple[list[float], object]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()
        times.append((time.perf_counter() - started) * 1000)
    return times, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reconciliations", type=int, default=20)
    parser.add_argument("--closed", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-aging-"))
    stack = StackProcess(workdir / "data", api_key="rk_bench").start()
    try:
        container = Container(StackInfo(**stack.stack_info()).settings(Settings(local_mode=True)))
        ports = container.ports
        made: list[tuple[int, list[str]]] = []
        for r in range(args.reconciliations):
            pair = [f"a{r}", f"b{r}"]
            for key in pair:
                assert stack.request("POST", "/data_streams", {"key": key, "name": key}).status_code == 201
            created = stack.request("POST", "/reconciliations", {
                "name": f"Aging {r}", "run_type": "batch", "side_a_stream_keys": pair[:1],
                "side_b_stream_keys": pair[1:]})
            assert created.status_code == 201, created.text
            made.append((created.json()["id"], pair))
        filled_at = time.perf_counter()
        active = fill(container, made, args.closed)
        print(f"filled {active + args.closed:,} exceptions ({active} active) in {time.perf_counter() - filled_at:.1f} s")
        one = made[0][0]
        load_before = os.getloadavg()
        cases = [
            ("aging of one reconciliation", lambda: index_aging_of(ports, one),
             lambda: service_levels.aging_of(ports, ENVIRONMENT, one)),
            ("aging of the environment", lambda: index_aging_of(ports, None),
             lambda: service_levels.aging_of(ports, ENVIRONMENT)),
            ("agings of every reconciliation (the overview's)", lambda: index_agings(ports),
             lambda: service_levels.agings(ports, ENVIRONMENT)),
        ]
        rows = []
        for name, before, after in cases:
            before_times, before_result = timed(before, args.repeat)
            after_times, after_result = timed(after, args.repeat)
            assert after_result == before_result, (name, before_result, after_result)  # identical counts
            rows.append((name, statistics.median(before_times), statistics.median(after_times)))
        http_times, _ = timed(lambda: stack.request("GET", f"/reconciliations/{one}/service_levels/aging"),
                              args.repeat)
        overview_times, _ = timed(lambda: stack.request("GET", "/overview"), args.repeat)
        load_after = os.getloadavg()
        print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, {os.cpu_count()} CPUs, "
              f"python {platform.python_version()}; {args.reconciliations} reconciliations, {active} active "
              f"exceptions, {args.closed:,} closed; median of {args.repeat}")
        print(f"load average before / after: {' '.join(f'{x:.2f}' for x in load_before)} / "
              f"{' '.join(f'{x:.2f}' for x in load_after)}\n")
        print("| read | baseline: the whole exception index | the active exceptions' sparse read | speed-up |")
        print("|---|---|---|---|")
        for name, before_ms, after_ms in rows:
            print(f"| {name} | {before_ms:.0f} ms | {after_ms:.0f} ms | {before_ms / after_ms:.1f}x |")
        print(f"\nOver HTTP, after: GET /reconciliations/{{id}}/service_levels/aging {statistics.median(http_times):.0f} ms; "
              f"GET /overview {statistics.median(overview_times):.0f} ms (it still reads the index for its own counts)")
    finally:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
