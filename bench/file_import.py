"""A 100,000-row CSV import end to end on the local stack: presigned upload, the S3 event, the
file-import state machine (prepare, chunk tasks, finish), polled until `completed`. Same run:
the BatchWriteItem-only baselines of bench/ingestion.py for the same number of records (the
records alone, and the records with their external_id guards; each before the import and after it).

    .venv/bin/python bench/file_import.py [--rows 100000]
"""
from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingestion import Baselines, PartitionCounter, WriteCounter, cpu_report, cpu_seconds  # noqa: E402

from chalicelib.local.__main__ import LocalService  # noqa: E402
from chalicelib.local.processes import free_port  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402


def csv_rows(rows: int) -> bytes:
    lines = ["date,amount,description,external_id,payout_id"]
    lines += [f"2026-10-{1 + n % 28:02d},{'-' if n % 5 == 0 else ''}{n // 100}.{n % 100:02d},Payment {n},"
              f"f-{n:08d},po_{n // 50}" for n in range(rows)]
    return ("\n".join(lines) + "\n").encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-file-"))
    service = LocalService(Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_bench"),
                           log=lambda m: print(f"[local] {m}")).start()
    service.serve_in_background()
    counter, partitions = WriteCounter(), PartitionCounter()
    service.container.aws.dynamodb.meta.events.register("before-call.dynamodb.*", counter)
    service.container.aws.dynamodb.meta.events.register("before-parameter-build.dynamodb.*", partitions)
    session = requests.Session()
    session.headers["X-API-KEY"] = service.key
    try:
        baselines = Baselines(service, args.rows, 4)
        baselines.write("before")
        counter.reset()
        partitions.reset()
        assert session.post(f"{service.url}/data_streams", json={"key": "bench", "name": "Bench"}).ok
        created = session.post(f"{service.url}/data_streams/bench/file_imports",
                               json={"filename": "bench.csv", "format": "csv"}).json()
        data = csv_rows(args.rows)
        cpu_upload = cpu_seconds()
        started = time.perf_counter()
        assert requests.put(created["upload_url"], data=data, timeout=120).status_code == 200
        while True:
            body = session.get(f"{service.url}/file_imports/{created['id']}").json()
            if body["status"] not in ("pending", "processing", "replicating"):
                break
            time.sleep(0.2)
        seconds = time.perf_counter() - started
        cpu_import = cpu_seconds()
        assert body["status"] == "completed" and body["successful_items"] == args.rows, body
        writes = dict(counter.counts)  # before the baseline after the import adds its own
        partition_lines = partitions.report(args.rows, seconds)
        baselines.write("after")
        print(f"\nmachine: {platform.machine()}, {platform.system()} {platform.release()}, "
              f"python {platform.python_version()}")
        print("\n".join(baselines.report()))
        print(f"CSV import of {args.rows:,} rows ({len(data) / 1e6:.1f} MB), upload to completed: {seconds:.1f} s = "
              f"{args.rows / seconds:,.0f} records/s")
        print(f"CPU, CSV import: {cpu_report(cpu_upload, cpu_import, args.rows)}")
        print("\n".join(baselines.ratios("CSV import", seconds)))
        print(f"DynamoDB write requests: {sum(writes.values()):,} = {sum(writes.values()) / args.rows:.3f} per "
              "record; " + ", ".join(f"{op} {n:,}" for op, n in sorted(writes.items())))
        print("heaviest partition keys (item writes, from the requests sent):")
        print("\n".join(partition_lines))
    finally:
        service.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
