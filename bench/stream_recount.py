"""A stream's recount at each import's end, as the stream's imports grow (issue 30).

Each import's end counts its streams from the analytics mirror (`AnalyticsMirror.count_records`): a
stream fed by 1,000-record bulk requests has 10,000 imports at 10M records. This puts a stream's
index of row markers with `--existing` imports' markers straight into the local stack's S3 (s3rver,
as the imports' ends would have left them), counts it once, then times `--imports` more imports'
ends as the service does them (the import's own marker, its index entry, the count) and reports the
count's time and the S3 calls it sends, at each size. Run it on two checkouts to compare.

    .venv/bin/python bench/stream_recount.py [--existing 1000 10000 30000] [--imports 100]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import requests
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.adapters.mirror import AnalyticsMirror, import_prefix, index_marker_key, rows_index  # noqa: E402
from chalicelib.local import processes  # noqa: E402
from chalicelib.local.aws_server import s3rver_command  # noqa: E402
from chalicelib.local.stack import ROOT  # noqa: E402

BUCKET = "bench-recount"
ENV = "bench"
ROWS = 1_000  # each import's records


def s3rver(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = processes.free_port()
    server = subprocess.Popen(s3rver_command(port, directory), cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{processes.LOOPBACK}:{port}"
    while True:
        assert server.poll() is None, "s3rver exited"
        try:
            requests.get(url, timeout=1)
            return server, url
        except requests.ConnectionError:
            time.sleep(0.05)


def put_empty(s3, key: str) -> None:
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"")


def import_ended(s3, stream: str, job_id: int) -> None:
    """What `summarize` leaves of an import: its marker, in the import and in the stream's index."""
    put_empty(s3, f"{import_prefix(ENV, stream, job_id)}_rows={ROWS}")
    put_empty(s3, index_marker_key(ENV, stream, job_id, ROWS))


def measure(s3, existing: int, imports: int) -> dict[str, float]:
    stream = f"s{existing}"
    mirror = AnalyticsMirror(s3, BUCKET)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda job_id: import_ended(s3, stream, job_id), range(1, existing + 1)))
    put_empty(s3, f"{rows_index(ENV, stream)}_whole")
    began = time.perf_counter()
    assert mirror.count_records(ENV, stream) == existing * ROWS
    first = time.perf_counter() - began

    calls: Counter[str] = Counter()
    counting = [False]

    def called(event_name: str, **_) -> None:
        if counting[0]:
            calls.update([event_name.rsplit(".", 1)[-1]])

    s3.meta.events.register("before-call.s3.*", called)
    timings = []
    for job_id in range(existing + 1, existing + imports + 1):
        import_ended(s3, stream, job_id)
        counting[0], began = True, time.perf_counter()
        assert mirror.count_records(ENV, stream) == job_id * ROWS
        timings.append(time.perf_counter() - began)
        counting[0] = False
    s3.meta.events.unregister("before-call.s3.*", called)
    per = {name: count / imports for name, count in calls.items() if count}
    return {"first": first, "median": statistics.median(timings),
            "p90": statistics.quantiles(timings, n=10)[-1], **per}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--existing", type=int, nargs="+", default=[1_000, 10_000, 30_000])
    parser.add_argument("--imports", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        server, url = s3rver(Path(directory))
        try:
            s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                              aws_access_key_id="local", aws_secret_access_key="local",
                              config=Config(max_pool_connections=16))
            s3.create_bucket(Bucket=BUCKET)
            print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
                  f"s3rver (the local stack's S3); {args.imports} imports' ends at each size")
            print("| imports before | first count | a count at an import's end: median | p90 | S3 calls a count |")
            print("|---:|---:|---:|---:|---|")
            for existing in args.existing:
                found = measure(s3, existing, args.imports)
                calls = ", ".join(f"{name} {found[name]:.2f}" for name in sorted(found)
                                  if name not in ("first", "median", "p90"))
                print(f"| {existing:,} | {found['first'] * 1000:,.0f} ms | {found['median'] * 1000:,.1f} ms | "
                      f"{found['p90'] * 1000:,.1f} ms | {calls} |", flush=True)
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
