"""The exception queue at size: GET /reconciliation_exceptions, a page of 100 out of 10,000, on
the real local stack over HTTP. Beside it in the same run, GET /data_streams?limit=100 (a plain
one-query page) as the baseline. The exceptions are written with the repository's own item
layout (with their stored totals, as a refresh leaves them).

    .venv/bin/python bench/exceptions.py [--exceptions 10000] [--requests 50]
"""
from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.adapters.dynamodb.reconciliation_exceptions import ExceptionRepository  # noqa: E402
from chalicelib.container import Container  # noqa: E402
from chalicelib.domain.reconciliation_exceptions import (  # noqa: E402
    ExceptionRecord,
    ExceptionStatus,
    ReconciliationException,
    totals,
)
from chalicelib.local.launcher import StackProcess  # noqa: E402
from chalicelib.local.stack import StackInfo  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402

STATUSES = [ExceptionStatus.OPEN, ExceptionStatus.INVESTIGATING, ExceptionStatus.DISMISSED, ExceptionStatus.RESOLVED]


def fill(container: Container, count: int, stream_keys: list[str], reconciliation_id: int) -> None:
    now = datetime.now(UTC)
    today = date.today()
    items = []
    for n in range(count):
        records = [ExceptionRecord(n * 10 + i, 1000 + i * 7, "credit" if i % 3 else "debit",
                                   (today - timedelta(days=5 + i * 9)).isoformat(), "USD") for i in range(1 + n % 7)]
        exception = ReconciliationException(
            environment="local", id=100_000 + n, reconciliation_id=reconciliation_id,
            data_stream_key=stream_keys[n % len(stream_keys)], data_stream_id=1 + n % len(stream_keys),
            title=f"Stream {n % len(stream_keys)}: unmatched records", description=f"{len(records)} records",
            status=STATUSES[n % 4], created_at=now, updated_at=now, opened_at=now, totals=totals(records))
        items.append(ExceptionRepository._to_item(exception))
    container.table.batch_write(puts=items)


def timed(stack: StackProcess, path: str, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        response = stack.request("GET", path)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.text
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--exceptions", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-exc-"))
    stack = StackProcess(workdir / "data", api_key="rk_bench").start()
    try:
        container = Container(StackInfo(**stack.stack_info()).settings(Settings(local_mode=True)))
        keys = [f"bench-{i}" for i in range(2)] + [f"other-{i}" for i in range(98)]
        for key in keys:
            assert stack.request("POST", "/data_streams", {"key": key, "name": key}).status_code == 201
        reconciliation = stack.request("POST", "/reconciliations", {
            "name": "Bench", "run_type": "batch", "side_a_stream_keys": keys[:1], "side_b_stream_keys": keys[1:2]}).json()
        fill(container, args.exceptions, keys[:2], reconciliation["id"])
        cases = {
            "baseline: GET /data_streams?limit=100": "/data_streams?limit=100",
            "GET /reconciliation_exceptions?limit=100 (first page)": "/reconciliation_exceptions?limit=100",
            "... &offset=9900 (last page)": "/reconciliation_exceptions?limit=100&offset=9900",
            "... &status=open&limit=100": "/reconciliation_exceptions?status=open&limit=100",
        }
        print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, "
              f"python {platform.python_version()}; {args.exceptions:,} exceptions\n")
        print("| request | median | p95 |")
        print("|---|---|---|")
        for name, path in cases.items():
            times = sorted(timed(stack, path, args.requests))
            print(f"| {name} | {statistics.median(times):.0f} ms | {times[int(len(times) * 0.95) - 1]:.0f} ms |")
    finally:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
