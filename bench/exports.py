"""An export of unmatched records as CSV on the local stack, timed: N open records written directly as
ingestion leaves them (jobs with their blocks of ids, the records by BatchWriteItem, each job's
Parquet parts in the analytics mirror, published and summarized; not timed), then, side by side:

- the baseline: the raw read of the first `--baseline-rows` of the same rows through the listing
  GET /records?status=unreconciled reads (500 a page: the open-records index, then BatchGetItem),
  nothing written: the export's own read before it took the records' columns from the mirror;
- the export: POST /v1/exports {"kind": "unmatched_records"} polled until completed, then the file
  fetched through its download URL and its rows counted.

Prints rows/s of both, the export's progress while it ran, the process's peak RSS and the load average.

    .venv/bin/python bench/exports.py [--records 1000000] [--keep DIR]
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


def write_directly(service: LocalService, records: int, stream_id: int, job_rows: int) -> None:
    """What ingestion leaves, written directly: jobs of `job_rows` records each (their blocks of ids
    reserved), the records in the table, each job's Parquet parts of 1,000 in the analytics mirror,
    published and summarized (its compact copy and row marker)."""
    from concurrent.futures import ThreadPoolExecutor

    from chalicelib.domain.clock import utc_now
    from chalicelib.domain.ingestion import IngestionJob, JobSource, JobStatus, OnConflict
    from chalicelib.domain.records import Direction, Record, RecordStatus
    from chalicelib.local.__main__ import LOCAL_ENVIRONMENT

    container, now = service.container, utc_now()

    def record(n: int, job_id: int) -> Record:
        return Record(environment=LOCAL_ENVIRONMENT, id=1 + n, data_stream_key="bank", data_stream_id=stream_id,
                      date=f"2026-{1 + n % 12:02d}-{1 + n % 28:02d}", amount=100 + n * 7, direction=Direction.CREDIT,
                      currency="USD", decimal_places=2, status=RecordStatus.UNRECONCILED, created_at=now,
                      description=f"payment {n}" if n % 1000 else "=HYPERLINK(\"x\")", external_id=f"ext-{n}",
                      file_import_id=job_id, metadata={"batch": n // 1000} if n % 2 else {})

    for first in range(0, records, job_rows):
        job_id = container.counters.next_id(LOCAL_ENVIRONMENT, "ingestion_job")
        rows = min(job_rows, records - first)
        job = IngestionJob(environment=LOCAL_ENVIRONMENT, id=job_id, source=JobSource.BULK_API,
                           status=JobStatus.COMPLETED, total_items=rows, on_conflict=OnConflict.SKIP, created_at=now,
                           data_stream_ids=(stream_id,))
        container.ingestion_jobs.add(job)
        container.ingestion_jobs.reserve_record_ids(job, first + 1)

        def chunk(start: int, job_id: int = job_id, first: int = first, end: int = first + rows) -> None:
            batch = [record(n, job_id) for n in range(start, min(start + 1000, end))]
            container.records.put_many(batch)
            container.mirror.write_part(LOCAL_ENVIRONMENT, job_id, (start - first) // 1000, batch)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(chunk, range(first, first + rows, 1000)))
        container.mirror.publish(LOCAL_ENVIRONMENT, job_id, ["bank"])
        container.mirror.summarize(LOCAL_ENVIRONMENT, job_id, ["bank"])


def raw_read(service: LocalService, rows: int) -> int:
    """The baseline: open records through the listing the list route reads, 500 a page, up to `rows`."""
    from chalicelib.domain.records import RecordQuery, RecordStatus
    from chalicelib.local.__main__ import LOCAL_ENVIRONMENT

    records, cursor, count = service.container.records, None, 0
    while count < rows:
        page, cursor = records.list_page(LOCAL_ENVIRONMENT, RecordQuery(status=RecordStatus.UNRECONCILED), 500, cursor)
        count += len(page)
        if cursor is None:
            break
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--job-rows", type=int, default=250_000, help="records per import")
    parser.add_argument("--baseline-rows", type=int, default=50_000, help="rows the baseline reads (its rate)")
    parser.add_argument("--keep", type=Path, help="the stack's data here, kept: a later run with the same directory "
                                                  "and --records reads it again instead of writing (fill once, "
                                                  "time when the machine is quiet)")
    args = parser.parse_args()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="recon-bench-export-"))
    filled = workdir / f"filled-{args.records}"
    service = LocalService(Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_bench"),
                           log=lambda m: print(f"[local] {m}")).start()
    service.serve_in_background()
    session = requests.Session()
    session.headers["X-API-KEY"] = service.key
    api = service.url
    try:
        if not filled.exists():
            stream = session.post(f"{api}/data_streams", json={"key": "bank", "name": "Bank"})
            assert stream.ok, stream.text
            started = time.perf_counter()
            write_directly(service, args.records, stream.json()["id"], args.job_rows)
            filled.touch()
            print(f"{args.records:,} records written in {time.perf_counter() - started:.1f} s (not timed)")

        started = time.perf_counter()
        read = raw_read(service, min(args.baseline_rows, args.records))
        read_seconds = time.perf_counter() - started

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
        rate = lines / export_seconds
        print(f"export unmatched_records csv: {lines:,} rows, {len(body.content) / 1e6:.1f} MB in {export_seconds:.1f} s"
              f" = {rate:,.0f} rows/s = {rate / (read / read_seconds):.1f}x the baseline's rate")
        print("rows_written while running (s, rows): "
              + ", ".join(f"{t:.0f} {n:,}" for t, n in steps[:: max(1, len(steps) // 12)]))
        print(f"peak RSS of the process (stack, worker and bench): {peak_mb:,.0f} MB")
    finally:
        service.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
