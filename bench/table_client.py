"""What one table request costs, by client: boto3's DynamoDB client against the table's own wire
(chalicelib/adapters/dynamodb/wire.py), and a claim as an expression against the same write in plain
parameters (DynamoTable.update_plainly), on a dynalite of its own (in memory, the template's table).

For each case: wall time, the interpreter's CPU per request (this process), dynalite's CPU per request
(its process, from /proc). Requests are sent from `--threads` threads, as a persist's claims are.

    .venv/bin/python bench/table_client.py [--requests 4000] [--threads 16]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.adapters.aws import AwsClients  # noqa: E402
from chalicelib.adapters.dynamodb import keys  # noqa: E402
from chalicelib.adapters.dynamodb.matches import _status_update, _status_values, claim_write  # noqa: E402
from chalicelib.adapters.dynamodb.table import DynamoTable  # noqa: E402
from chalicelib.domain.records import RecordStatus  # noqa: E402
from chalicelib.local import processes  # noqa: E402
from chalicelib.local.provision import Resolver, ensure_table, load_template, table_definitions  # noqa: E402
from chalicelib.local.stack import DYNALITE_CLI  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402

TABLE = "recon-bench-client"
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def records(table: DynamoTable, first: int, count: int) -> None:
    table.batch_write([{**keys.record("bench", n), "entity": "record", "id": n, "data_stream_key": "bank",
                        "date": "2026-11-01", "amount": 1000 + n, "direction": "credit", "currency": "USD",
                        "decimal_places": 2, "description": f"payout {n}", "external_id": f"pay-{n:08d}",
                        "status": "unreconciled", **keys.record_indexes("bench", n, "bank", "unreconciled")}
                       for n in range(first, first + count)], threads=4)


def claim_by_expression(table: DynamoTable, record_id: int) -> None:
    status = RecordStatus.RECONCILED
    table.update(keys.record("bench", record_id), _status_update(status, "SET #m = :match", "ADD matched_in :r"),
                 condition="attribute_exists(pk) AND attribute_not_exists(deleting) AND attribute_not_exists(#m) "
                           "AND attribute_not_exists(#at) AND attribute_not_exists(matched_in) "
                           "AND attribute_not_exists(proposed_in)",
                 names={"#m": keys.match_attribute(1), "#status": "status", "#at": "allocated_000000000001"},
                 values={":match": 7, ":r": {1}, **_status_values("bench", record_id, "bank", status)})


def claim_plainly(table: DynamoTable, record_id: int) -> None:
    claim_write(table, "bench", record_id, "bank", 1, 7, RecordStatus.RECONCILED, set(), set(), False)


def measure(name: str, send, ids: range, threads: int, dynalite_pid: int) -> None:
    mine, theirs, started = time.process_time(), cpu_of(dynalite_pid), time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(send, ids))
    wall = time.perf_counter() - started
    mine, theirs = time.process_time() - mine, cpu_of(dynalite_pid) - theirs
    n = len(ids)
    print(f"  {name:44} {wall:6.2f} s  {n / wall:7,.0f} requests/s  this process {mine / n * 1000:.3f} ms/request"
          f"  dynalite {theirs / n * 1000:.3f} ms/request")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-table-client-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    port = processes.free_port()
    dynalite = processes.start(["node", str(DYNALITE_CLI), "--host", "127.0.0.1", "--port", str(port),
                                "--createTableMs", "0"], folder / "dynalite.log")
    try:
        processes.wait_for_port(port, dynalite, "dynalite", folder / "dynalite.log")
        print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, "
              f"python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}")
        tables = {}
        for client in ("botocore", "wire"):
            aws = AwsClients(Settings(dynamodb_endpoint=f"http://127.0.0.1:{port}", local_mode=True,
                                      table_name=TABLE, dynamodb_client=client))
            tables[client] = DynamoTable(aws.table_client, TABLE)
        template = load_template()
        [definition] = table_definitions(template, Resolver(template, {"DataBucketName": "b"}, "us-east-1"))
        ensure_table(aws.dynamodb, {**definition, "TableName": TABLE}, log=lambda _: None)
        n = args.requests
        records(tables["wire"], 1, 4 * n)
        print(f"{n:,} requests a case, {args.threads} threads:")
        for client, table in tables.items():
            measure(f"GetItem, {client}", lambda i, t=table: t.get(keys.record("bench", 1 + i % n)),
                    range(n), args.threads, dynalite.pid)
        batches = [[1 + (i * 25 + k) % n for k in range(25)] for i in range(n // 25)]
        for client, table in tables.items():
            measure(f"BatchGetItem of 25 (per request), {client}",
                    lambda i, t=table: t.get_many([keys.record("bench", r) for r in batches[i]]),
                    range(len(batches)), args.threads, dynalite.pid)
        cases = [("claim as an expression, botocore", tables["botocore"], claim_by_expression),
                 ("claim as an expression, wire", tables["wire"], claim_by_expression),
                 ("claim in plain parameters, botocore", tables["botocore"], claim_plainly),
                 ("claim in plain parameters, wire", tables["wire"], claim_plainly)]
        for number, (name, table, claim) in enumerate(cases):
            first = 1 + number * n
            measure(name, lambda i, t=table, c=claim, f=first: c(t, f + i), range(n), args.threads, dynalite.pid)
    finally:
        processes.stop([dynalite])


if __name__ == "__main__":
    main()
