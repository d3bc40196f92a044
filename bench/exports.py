"""An export of unmatched records as CSV on the local stack, timed: N open records written directly by
BatchWriteItem (as bench/reconciliation_run.py --direct does; not timed), then, side by side:

- the baseline: the raw read of the same rows through the same listing the export pages through
  (GET /records?status=unreconciled's read, 500 a page), nothing written;
- the export: POST /v1/exports {"kind": "unmatched_records"} polled until completed, then the file
  fetched through its download URL and its rows counted.

Prints rows/s of both, the export's progress while it ran, the process's peak RSS and the load average.

    .venv/bin/python bench/exports.py [--records 1000000]
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.local.__main__ import LocalService  # noqa: E402
from chalicelib.local.processes import free_port  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402


def write_directly(service: LocalService, records: int, stream_id: int) -> None:
    from chalicelib.domain.clock import utc_now
    from chalicelib.domain.records import Direction, Record, RecordStatus
    from chalicelib.local.__main__ import LOCAL_ENVIRONMENT

    now = utc_now()
    for start in range(0, records, 1000):
        service.container.records.put_many(
            Record(environment=LOCAL_ENVIRONMENT, id=1 + n, data_stream_key="bank", data_stream_id=stream_id,
                   date=f"2026-{1 + n % 12:02d}-{1 + n % 28:02d}", amount=100 + n * 7, direction=Direction.CREDIT,
                   currency="USD", decimal_places=2, status=RecordStatus.UNRECONCILED, created_at=now,
                   description=f"payment {n}" if n % 1000 else "=HYPERLINK(\"x\")", external_id=f"ext-{n}")
            for n in range(start, min(start + 1000, records)))


def raw_read(service: LocalService) -> int:
    """The baseline: every open record through the listing the export reads, 500 a page."""
    from chalicelib.domain.records import RecordQuery, RecordStatus
    from chalicelib.local.__main__ import LOCAL_ENVIRONMENT

    records, cursor, count = service.container.records, None, 0
    while True:
        page, cursor = records.list_page(LOCAL_ENVIRONMENT, RecordQuery(status=RecordStatus.UNRECONCILED), 500, cursor)
        count += len(page)
        if cursor is None:
            return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-export-"))
    service = LocalService(Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_bench"),
                           log=lambda m: print(f"[local] {m}")).start()
    service.serve_in_background()
    session = requests.Session()
    session.headers["X-API-KEY"] = service.key
    api = service.url
    try:
        stream = session.post(f"{api}/data_streams", json={"key": "bank", "name": "Bank"})
        assert stream.ok, stream.text
        started = time.perf_counter()
        write_directly(service, args.records, stream.json()["id"])
        print(f"{args.records:,} records written in {time.perf_counter() - started:.1f} s (not timed)")

        started = time.perf_counter()
        read = raw_read(service)
        read_seconds = time.perf_counter() - started
        assert read == args.records, read

        started = time.perf_counter()
        export = session.post(f"{api}/exports", json={"kind": "unmatched_records", "format": "csv"}).json()
        url, steps = f"{api}/exports/{export['id']}", []
        while export["status"] in ("pending", "processing"):
            time.sleep(0.5)
            export = session.get(url).json()
            steps.append((time.perf_counter() - started, export["rows_written"]))
        export_seconds = time.perf_counter() - started
        assert export["status"] == "completed", export
        body = requests.get(export["download_url"], timeout=600)
        assert body.ok
        lines = body.content.count(b"\r\n") - 1
        assert lines == args.records == export["rows_written"], (lines, export["rows_written"])
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"\nmachine: {platform.machine()}, {platform.system()} {platform.release()}, {os.cpu_count()} cpus, "
              f"python {platform.python_version()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"baseline, the raw read of the rows: {read:,} in {read_seconds:.1f} s = {read / read_seconds:,.0f} rows/s")
        print(f"export unmatched_records csv: {lines:,} rows, {len(body.content) / 1e6:.1f} MB in {export_seconds:.1f} s"
              f" = {lines / export_seconds:,.0f} rows/s = {read_seconds / export_seconds:.2f}x the baseline's rate")
        print("rows_written while running (s, rows): "
              + ", ".join(f"{t:.0f} {n:,}" for t, n in steps[:: max(1, len(steps) // 12)]))
        print(f"peak RSS of the process (stack, worker and bench): {peak_mb:,.0f} MB")
    finally:
        service.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
