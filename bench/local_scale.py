"""Local mode at scale: list and get latency over HTTP with 500,000 items in the local table.

Runs the real local stack (`python -m chalicelib.local`) in its own process, measures
GET /data_streams (one page) and GET /data_streams/{key} on an almost empty table (the
baseline), fills the table to the target with data streams of many environments (written
with the repository's own item layout), and measures the same requests again in the same
run. Usage:

    .venv/bin/python bench/local_scale.py [--items 500000] [--requests 300]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.adapters.aws import AwsClients  # noqa: E402
from chalicelib.adapters.dynamodb.data_streams import DataStreamRepository  # noqa: E402
from chalicelib.adapters.dynamodb.table import DynamoTable  # noqa: E402
from chalicelib.domain.data_streams import DataStream, StreamType  # noqa: E402
from chalicelib.local.launcher import StackProcess  # noqa: E402
from chalicelib.local.stack import StackInfo  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402

STREAMS_PER_ENVIRONMENT = 100
LOCAL_STREAMS = 120


def measure(stack: StackProcess, count: int) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {"list page (limit 50)": [], "get one": []}
    for i in range(count):
        for name, path in (("list page (limit 50)", "/data_streams?limit=50"),
                           ("get one", f"/data_streams/local-{i % LOCAL_STREAMS:04d}")):
            started = time.perf_counter()
            response = stack.request("GET", path)
            timings[name].append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.text
    return timings


def fill(table: DynamoTable, items: int, threads: int = 4) -> float:
    created = datetime.now(UTC)

    def write_environment(index: int) -> int:
        environment = f"bench-{index:05d}"
        batch = [DataStreamRepository.to_item(DataStream(
            environment=environment, id=n + 1, key=f"s-{n:03d}", name=f"Stream {n}", type=StreamType.API,
            created_at=created)) for n in range(STREAMS_PER_ENVIRONMENT)]
        return table.batch_write(puts=batch)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(write_environment, range(items // STREAMS_PER_ENVIRONMENT)))
    return time.perf_counter() - started


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[int(len(ordered) * 0.95) - 1]
    return f"median {statistics.median(ordered):6.1f} ms | p95 {p95:6.1f} ms | max {ordered[-1]:6.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=500_000)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-"))
    stack = StackProcess(workdir / "data", api_key="rk_bench").start()
    try:
        for i in range(LOCAL_STREAMS):
            assert stack.request("POST", "/data_streams", {"key": f"local-{i:04d}", "name": f"L{i}"}).ok
        baseline = measure(stack, args.requests)

        info = StackInfo(**stack.stack_info())
        settings = info.settings(Settings(local_mode=True))
        table = DynamoTable(AwsClients(settings).dynamodb, settings.table_name)
        seconds = fill(table, args.items)
        print(f"filled {args.items:,} items in {seconds:.0f} s ({args.items / seconds:,.0f} items/s)")

        loaded = measure(stack, args.requests)
        print(f"\nmachine: {platform.processor() or platform.machine()}, {platform.system()} "
              f"{platform.release()}, python {platform.python_version()}")
        print(f"{args.requests} sequential requests each, over HTTP to the local stack\n")
        for name in baseline:
            print(f"{name:22} baseline ({LOCAL_STREAMS} items): {summary(baseline[name])}")
            print(f"{'':22} with {args.items + LOCAL_STREAMS:,} items: {summary(loaded[name])}")
            ratio = statistics.median(loaded[name]) / statistics.median(baseline[name])
            print(f"{'':22} median ratio loaded/baseline: {ratio:.2f}")
    finally:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
