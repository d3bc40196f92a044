"""Issue 30, point 3: a run's load (`open_frames`: both sides' open records into frames) from the
analytics mirror, against the same load from the table, on the local stack (dynalite and s3rver).

Each side is one completed CSV import of N records into its own new stream, written as ingestion
leaves them: the record items (BatchWriteItem, `records.put_many`), the import's Parquet parts
published with their compact copy and row marker (adapters/mirror.py), the job item. Then the load
runs twice on the same data, side by side: while the streams' records are as imported (the
mirror), and once a change is noted on both streams (the table, as every stream read before).
`--table-records` writes only that many record items a side (the table's read scales with them,
at about 18 us an index entry on dynalite) so that 1M a side from the mirror can be measured
without a quarter of an hour of writes; the mirror always holds N.

The steady state follows (`--steady`, on by default): a reconciliation's second run, on two more
streams. Each holds an import an earlier run matched (`--table-records` records, all in the table,
one in a hundred left open, its blocks noted as a run's claims note them) and a new import of N
right after it (in the mirror; in the table only its records in the block it shares with the
first, which is what the load reads of it there). The load takes the new import from the mirror
and the matched import's open records from the table (`services/imported_records.py`).

    .venv/bin/python bench/open_records_mirror.py [--records 1000000] [--table-records 200000]
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.adapters.dynamodb import keys  # noqa: E402
from chalicelib.domain.clock import utc_now  # noqa: E402
from chalicelib.domain.data_streams import DataStream, StreamType  # noqa: E402
from chalicelib.domain.ingestion import IngestionJob, JobSource, JobStatus, OnConflict  # noqa: E402
from chalicelib.domain.reconciliations import Reconciliation, RunType  # noqa: E402
from chalicelib.domain.record_changes import CHANGE_BLOCK_IDS  # noqa: E402
from chalicelib.domain.records import Direction, Record, RecordStatus  # noqa: E402
from chalicelib.local.__main__ import LocalService  # noqa: E402
from chalicelib.local.processes import free_port  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402

ENVIRONMENT = "local"
PART_ROWS = 1_000  # a CSV import's chunk: one Parquet part each, as ingestion stages them
WRITE_THREADS = 4
RULE = {"name": "Amount and date", "priority": 1, "cardinality": "one_to_one",  # the end-to-end bench's
        "conditions": [{"field": "amount", "operator": "equals"}, {"field": "date", "operator": "within", "days": 3}]}


def records_of(side: str, stream_id: int, job_id: int, first_id: int, count: int) -> list[Record]:
    now, start = utc_now(), date(2026, 10, 1)
    return [Record(environment=ENVIRONMENT, id=first_id + n, data_stream_key=f"side-{side}", data_stream_id=stream_id,
                   date=(start + timedelta(days=n % 28)).isoformat(), amount=1_000 + n, currency="USD",
                   decimal_places=2, direction=Direction.CREDIT, status=RecordStatus.UNRECONCILED, created_at=now,
                   description=f"payment {n}", external_id=f"{side}-{n}", metadata={"reference": f"R{n}"},
                   file_import_id=job_id)
            for n in range(count)]


def fill(ports, table, side: str, stream_id: int, job_id: int, records: int, table_records: int | range,
         first_id: int | None = None, matched: bool = False) -> range:
    """An import of `records` into the side's stream (made with the first import), `table_records`
    of them (the first ones, or those of a range of positions) in the table, all open or, `matched`,
    all but one in a hundred reconciled. The ids it gave."""
    key = f"side-{side}"
    if ports.data_streams.find_including_deleting(ENVIRONMENT, key) is None:
        ports.data_streams.add(DataStream(ENVIRONMENT, stream_id, key, key, StreamType.CSV, utc_now()))
    first_id = job_id * 10 ** 8 if first_id is None else first_id
    rows = records_of(side, stream_id, job_id, first_id, records)
    if matched:
        rows = [r if n % 100 == 0 else replace(r, status=RecordStatus.RECONCILED) for n, r in enumerate(rows)]
    in_table = range(table_records) if isinstance(table_records, int) else table_records
    with ThreadPoolExecutor(WRITE_THREADS) as pool:
        list(pool.map(lambda s: ports.mirror.write_part(ENVIRONMENT, job_id, s // PART_ROWS, rows[s:s + PART_ROWS]),
                      range(0, records, PART_ROWS)))
        list(pool.map(lambda s: ports.records.put_many(rows[s:min(s + 5_000, in_table.stop)]),
                      range(in_table.start, in_table.stop, 5_000)))
    ports.mirror.publish(ENVIRONMENT, job_id, [key])
    ports.mirror.summarize(ENVIRONMENT, job_id, [key])
    ports.ingestion_jobs.add(IngestionJob(ENVIRONMENT, job_id, JobSource.CSV, JobStatus.COMPLETED, records,
                                          OnConflict.SKIP, utc_now(), filename=f"{side}.csv", data_stream_key=key))
    # What the import's chunks and its end leave on the item (`add` writes a new job's counters as zero)
    table.update(keys.ingestion_job(ENVIRONMENT, job_id),
                 "SET created_per_stream = :created, counts_rolled_up = :t, processed_items = :n, "
                 "successful_items = :n, first_record_id = :first REMOVE gsi2pk, gsi2sk",
                 values={":created": {key: records}, ":t": True, ":n": records, ":first": first_id})
    return range(first_id, first_id + records)


def load(ports, reconciliation: Reconciliation, rule) -> tuple[float, str, int]:
    """Seconds, the CPU seconds of this process and of the servers, and the records loaded."""
    from chalicelib.services.reconciliation_runs import open_frames

    started, cpu, servers = time.perf_counter(), _cpu(), servers_cpu()
    side_a, side_b = open_frames(ports, ENVIRONMENT, reconciliation, [rule], None, adopt=False)
    wall, after = time.perf_counter() - started, servers_cpu()
    spent = f"CPU: this process {_cpu() - cpu:.2f} s, " + ", ".join(
        f"{name} {after[name] - servers[name]:.2f} s" for name in servers)
    return wall, spent, side_a.height + side_b.height


def steady_state(ports, table, records: int, matched_records: int, rule, repeat: int) -> None:
    """A second run's load: each side a matched import, then a new one right after it (see above)."""
    started, expected = time.perf_counter(), 0
    for n, side in enumerate("cd", start=3):
        first = 900 + n
        matched = fill(ports, table, side, first, first, matched_records, matched_records, matched=True)
        ports.data_streams.note_records_changed(ENVIRONMENT, {f"side-{side}": matched})  # as the run's claims did
        shared = range(0, min(CHANGE_BLOCK_IDS - matched.stop % CHANGE_BLOCK_IDS, records))  # its first block's
        fill(ports, table, side, first, first + 10, records, shared, first_id=matched.stop)
        ports.claims.adopt(ENVIRONMENT, 78, f"side-{side}")  # by the first run
        expected += records + len(range(0, matched_records, 100))
    print(f"steady state filled in {time.perf_counter() - started:.0f} s", flush=True)
    now = utc_now()
    second = Reconciliation(ENVIRONMENT, 78, "steady state", RunType.BATCH, ("side-c",), ("side-d",), 3,
                            now, now, current_run_id=2)
    for attempt in range(repeat):
        wall, cpu, loaded = load(ports, second, replace(rule, reconciliation_id=second.id))
        assert loaded == expected, f"{loaded:,} loaded, not {expected:,}"
        print(f"steady state, attempt {attempt}: {loaded:,} records ({records:,} a side new, "
              f"{matched_records:,} a side matched before) in {wall:.2f} s ({cpu}), "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def servers_cpu() -> dict[str, float]:
    """CPU seconds so far of the local stack's DynamoDB and S3 processes (found by their scripts)."""
    found = {"dynalite": 0.0, "s3rver": 0.0}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        for name, script in (("dynalite", b"dynamodb_server.js"), ("s3rver", b"s3_server.js")):
            if script in cmdline:
                found[name] += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000, help="records a side in the mirror")
    parser.add_argument("--table-records", type=int, help="record items a side in the table (default: --records)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-steady", dest="steady", action="store_false", help="skip the steady state")
    args = parser.parse_args()
    table_records = args.records if args.table_records is None else min(args.table_records, args.records)
    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-mirror-load-"))
    service = LocalService(Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_bench"),
                           log=lambda m: None).start()
    try:
        import polars  # noqa: F401  (imported before the clock starts, as in a warm worker)

        from chalicelib.domain.rules import Rule, validate_rule

        ports = service.container.ports
        started = time.perf_counter()
        first_ids = {side: fill(ports, service.container.table, side, 900 + n, 900 + n, args.records, table_records)
                     for n, side in enumerate("ab", start=1)}
        print(f"filled: {args.records:,} records a side in the mirror, {table_records:,} in the table, "
              f"in {time.perf_counter() - started:.0f} s", flush=True)
        now = utc_now()
        reconciliation = Reconciliation(ENVIRONMENT, 77, "mirror load", RunType.BATCH, ("side-a",), ("side-b",), 3,
                                        now, now, current_run_id=1)
        rule = Rule(ENVIRONMENT, 7, reconciliation.id, validate_rule(RULE), None)
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}", flush=True)
        for attempt in range(args.repeat):
            wall, cpu, loaded = load(ports, reconciliation, rule)
            assert loaded == 2 * args.records, f"{loaded:,} loaded: the mirror did not answer"
            print(f"mirror, attempt {attempt}: {loaded:,} records in {wall:.2f} s ({cpu}), "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
        ports.data_streams.note_records_changed(ENVIRONMENT, {f"side-{side}": ids for side, ids in first_ids.items()})
        for attempt in range(args.repeat):
            wall, cpu, loaded = load(ports, reconciliation, rule)
            assert loaded == 2 * table_records, f"{loaded:,} loaded from the table"
            print(f"table, attempt {attempt}: {loaded:,} records in {wall:.2f} s ({cpu}), "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
        if args.steady:
            steady_state(ports, service.container.table, args.records, table_records, rule, args.repeat)
    finally:
        service.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
