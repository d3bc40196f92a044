"""A stream's recount at each import's end, and its money at each exception refresh, as the
stream's imports grow (issue 30).

Each import's end counts its streams from the analytics mirror (`AnalyticsMirror.count_records`), and
each exception refresh reads the money of the reconciliation's streams from it (`stream_money`): a
stream fed by 1,000-record bulk requests has 10,000 imports at 10M records. This puts `--existing`
imports straight into the local stack's S3 (s3rver) as their ends would have left them (a part of two
rows, the import's row marker and its entry in the stream's index), counts the stream once, then
times `--imports` more imports' ends as the service does them (the same three objects, then the
count); then, up to `--money-up-to` imports, reads the stream's money once (every import's sum
computed and kept) and times `--refreshes` more reads. Reported: each call's time and the S3 calls
it sends, at each size. Run it on two checkouts to compare.

    .venv/bin/python bench/stream_recount.py [--existing 1000 10000 30000] [--imports 100]
                                             [--money-up-to 10000] [--refreshes 10]
"""
from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import boto3
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.adapters.mirror import AnalyticsMirror, import_prefix, index_marker_key, rows_index  # noqa: E402
from chalicelib.domain.records import Direction, Record, RecordStatus  # noqa: E402
from chalicelib.local import processes  # noqa: E402
from chalicelib.local.aws_server import s3rver_command  # noqa: E402
from chalicelib.local.stack import ROOT  # noqa: E402

BUCKET = "bench-recount"
ENV = "bench"
ROWS = 2  # each import's records (money and counts read markers and sums, not rows)


def s3rver(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The local stack's S3 on a free port, as the stack starts it."""
    port, log = processes.free_port(), directory / "s3rver.log"
    server = processes.start(s3rver_command(port, directory / "data"), log, cwd=ROOT)
    processes.wait_for_port(port, server, "s3rver", log)
    return server, f"http://{processes.LOOPBACK}:{port}"


def put_empty(s3, key: str) -> None:
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"")


def a_part() -> bytes:
    """One import's Parquet part: two records of 1.00 EUR each (what `write_part` writes)."""
    records = [Record(environment=ENV, id=i, data_stream_key="s", data_stream_id=1, date="2026-01-02", amount=100,
                      direction=Direction.CREDIT, currency="EUR", decimal_places=2, status=RecordStatus.UNRECONCILED,
                      created_at=datetime(2026, 1, 2, tzinfo=UTC)) for i in range(ROWS)]
    captured: dict[str, bytes] = {}

    class Capture:
        def put_object(self, Key: str, Body: bytes, **_) -> None:  # noqa: N803 - boto3's names
            captured[Key] = Body

    AnalyticsMirror(Capture(), BUCKET).write_part(ENV, 1, 0, records)
    [body] = captured.values()
    return body


PART = a_part()


def import_ended(s3, stream: str, job_id: int) -> None:
    """What an import's end leaves in the mirror: its part, its row marker and the marker's entry in the index."""
    s3.upload_fileobj(io.BytesIO(PART), BUCKET, f"{import_prefix(ENV, stream, job_id)}part-000000.parquet")
    put_empty(s3, f"{import_prefix(ENV, stream, job_id)}_rows={ROWS}")
    put_empty(s3, index_marker_key(ENV, stream, job_id, ROWS))


class Calls:
    """The S3 calls the client sends while counting is on, by operation."""

    def __init__(self, s3) -> None:
        self.counted: Counter[str] = Counter()
        self.on = False
        s3.meta.events.register("before-call.s3.*", self._called)

    def _called(self, event_name: str, **_) -> None:
        if self.on:
            self.counted.update([event_name.rsplit(".", 1)[-1]])

    def timed(self, call) -> float:
        self.on, began = True, time.perf_counter()
        call()
        elapsed = time.perf_counter() - began
        self.on = False
        return elapsed

    def per_call(self, calls: int) -> str:
        found = ", ".join(f"{name} {count / calls:.2f}" for name, count in sorted(self.counted.items()) if count)
        self.counted.clear()
        return found


def figures(first: float, timings: list[float], calls: str) -> str:
    return (f"{first * 1000:,.0f} ms | {statistics.median(timings) * 1000:,.1f} ms | "
            f"{max(timings) * 1000:,.1f} ms | {calls}")


def measure(s3, calls: Calls, existing: int, imports: int, refreshes: int) -> tuple[str, str | None]:
    stream = f"s{existing}"
    mirror = AnalyticsMirror(s3, BUCKET)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda job_id: import_ended(s3, stream, job_id), range(1, existing + 1)))
    put_empty(s3, f"{rows_index(ENV, stream)}_whole")
    first = calls.timed(lambda: mirror.count_records(ENV, stream))
    calls.per_call(1)
    timings = []
    for job_id in range(existing + 1, existing + imports + 1):
        import_ended(s3, stream, job_id)
        timings.append(calls.timed(lambda: mirror.count_records(ENV, stream)))
    assert mirror.count_records(ENV, stream) == (existing + imports) * ROWS
    counted = figures(first, timings, calls.per_call(imports))
    if not refreshes:
        return counted, None

    def money() -> None:
        assert mirror.stream_money(ENV, stream).money["EUR"].credits == 100 * ROWS * (existing + imports)

    first = calls.timed(money)
    calls.per_call(1)
    timings = [calls.timed(money) for _ in range(refreshes)]
    return counted, figures(first, timings, calls.per_call(refreshes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--existing", type=int, nargs="+", default=[1_000, 10_000, 30_000])
    parser.add_argument("--imports", type=int, default=100)
    parser.add_argument("--money-up-to", type=int, default=10_000)
    parser.add_argument("--refreshes", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        server, url = s3rver(Path(directory))
        try:
            s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                              aws_access_key_id="local", aws_secret_access_key="local",
                              config=Config(max_pool_connections=16))
            s3.create_bucket(Bucket=BUCKET)
            calls = Calls(s3)
            print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
                  f"s3rver (the local stack's S3); {args.imports} imports' ends and {args.refreshes} refreshes "
                  "at each size")
            print("| imports | read | first | then: median | slowest | S3 calls each |")
            print("|---:|---|---:|---:|---:|---|")
            for existing in args.existing:
                counted, money = measure(s3, calls, existing, args.imports,
                                         args.refreshes if existing <= args.money_up_to else 0)
                print(f"| {existing:,} | count | {counted} |", flush=True)
                if money:
                    print(f"| {existing + args.imports:,} | money | {money} |", flush=True)
        finally:
            processes.stop([server])


if __name__ == "__main__":
    main()
