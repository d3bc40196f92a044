"""Bulk ingestion on the local stack: 100,000 records through POST /records/bulk.

Runs the whole local service in this process (dynalite + moto server + the API on a
loopback port + the in-process SQS worker, exactly what `make run` starts), so that it can
count every DynamoDB write request the service sends. In the same run, a baseline writes the
same number of record items straight to the table with BatchWriteItem (no guards, no jobs,
no HTTP): the floor the bulk path is compared with. A second baseline writes, the same way, every
item the path must store: each record and its external_id guard (the uniqueness item every record
with an external_id needs). Both are written before the path and again after it, and the path is
set against the mean of each pair. Usage:

    .venv/bin/python bench/ingestion.py [--records 100000] [--batch 1000] [--clients 4]
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.domain.clock import utc_now  # noqa: E402
from chalicelib.domain.records import Direction, Record, RecordStatus  # noqa: E402
from chalicelib.local.__main__ import LocalService  # noqa: E402
from chalicelib.local.processes import free_port  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402

WRITE_OPERATIONS = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}


class WriteCounter:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, model, **kwargs) -> None:
        if model.name in WRITE_OPERATIONS:
            with self._lock:
                self.counts[model.name] += 1

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()


class RequestCounter:
    """Every request the service's DynamoDB and S3 clients send, by operation and by purpose: the
    adapter method that sent it and the service (or API) function that called that adapter, read
    from the stack (a few microseconds a request)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def __call__(self, model, **kwargs) -> None:
        purpose = _purpose(sys._getframe(1))
        with self._lock:
            self.counts[(model.name, purpose)] += 1

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()

    def by_operation(self) -> Counter[str]:
        found: Counter[str] = Counter()
        for (operation, _), n in self.counts.items():
            found[operation] += n
        return found

    def report(self, per: int, unit: int = 1000, purposes: bool = True) -> list[str]:
        """Requests per `unit` records (of `per` records in all), by operation, then by purpose."""
        scale = unit / per
        lines = [f"  {op}: {n * scale:,.1f}" for op, n in self.by_operation().most_common()]
        if not purposes:
            return lines
        lines.append(f"  by purpose (operation, adapter <- caller), per {unit:,} records:")
        lines += [f"    {n * scale:8,.1f}  {op:16} {purpose}" for (op, purpose), n in self.counts.most_common()]
        return lines


_ROOT = str(Path(__file__).resolve().parents[1] / "chalicelib")
_PLUMBING = ("/adapters/dynamodb/table.py", "/adapters/dynamodb/wire.py", "/adapters/dynamodb/attribute_values.py",
             "/adapters/aws.py",
             "/adapters/blobs.py")


def _purpose(frame) -> str:
    adapter = caller = None
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_ROOT) and not name.endswith(_PLUMBING):
            where = f"{Path(name).stem}.{frame.f_code.co_name}"
            if adapter is None:
                adapter = where
            elif "/adapters/" not in name:
                caller = where
                break
        frame = frame.f_back
    return f"{adapter or '?'} <- {caller or '?'}"


INDEXES = ("gsi1", "gsi2", "gsi3", "gsi4", "gsi5")


class PartitionCounter:
    """Item writes per partition key, of the table and of each index, counted from the write
    requests the service's client sends: a put (alone or in a batch) writes the partitions of
    every key it carries; an update those of the keys it sets; a delete its table partition."""

    def __init__(self) -> None:
        self.writes: dict[str, Counter[str]] = {"table": Counter(), **{i: Counter() for i in INDEXES}}
        self._lock = threading.Lock()

    def __call__(self, model, params, **kwargs) -> None:
        items: list[dict] = []
        if model.name == "PutItem":
            items.append(params["Item"])
        elif model.name == "DeleteItem":
            items.append({"pk": params["Key"]["pk"]})
        elif model.name == "UpdateItem":
            items.append({"pk": params["Key"]["pk"], **_set_keys(params)})
        elif model.name == "BatchWriteItem":
            for requests in params["RequestItems"].values():
                for request in requests:
                    items.append(request["PutRequest"]["Item"] if "PutRequest" in request
                                 else {"pk": request["DeleteRequest"]["Key"]["pk"]})
        with self._lock:
            for item in items:
                self.writes["table"][item["pk"]["S"]] += 1
                for index in INDEXES:
                    if f"{index}pk" in item:
                        self.writes[index][item[f"{index}pk"]["S"]] += 1

    def reset(self) -> None:
        with self._lock:
            for counter in self.writes.values():
                counter.clear()

    def report(self, records: int, seconds: float) -> list[str]:
        """The heaviest partition key of the table and of each index written: its share of the
        records, and its writes per second over the run."""
        lines = []
        for where, counter in self.writes.items():
            if counter:
                key, writes = counter.most_common(1)[0]
                lines.append(f"  {where}: {len(counter):,} partition keys written; heaviest {key!r} took {writes:,} "
                             f"item writes = {writes / records:.4f} of the records ({writes / seconds:,.1f}/s)")
        return lines


def _set_keys(params: dict) -> dict:
    """The index keys an UpdateItem sets, as {"gsiNpk": {"S": value}}."""
    names = params.get("ExpressionAttributeNames", {})
    values = params.get("ExpressionAttributeValues", {})
    found = {}
    for name, placeholder in re.findall(r"([#\w]+)\s*=\s*(:\w+)", params.get("UpdateExpression", "")):
        attribute = names.get(name, name)
        if attribute.endswith("pk") and attribute.startswith("gsi") and placeholder in values:
            found[attribute] = values[placeholder]
    for attribute, update in params.get("AttributeUpdates", {}).items():  # a claim's plain parameters
        if attribute.startswith("gsi") and attribute.endswith("pk") and update["Action"] == "PUT":
            found[attribute] = update["Value"]
    return found


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) of this process (the service, its workers and the bench's clients)
    and of each process it started and they start (dynalite, the AWS server of moto, s3rver), read
    from /proc."""
    found = {"service": time.process_time()}
    parents, commands, ticks = {}, {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            commands[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parents[pid], ticks[pid] = fields[1], int(fields[11]) + int(fields[12])
    mine = {str(os.getpid())}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                grew = True
    for pid in mine - {str(os.getpid())}:
        command = commands[pid]
        # Named by the script each runs (the AWS server's arguments name s3rver's log too).
        name = ("dynalite" if "dynamodb_server" in command or "dynalite" in command
                else "s3rver" if "s3_server" in command else "moto" if "aws_server" in command
                else f"child {pid}")
        found[name] = found.get(name, 0.0) + ticks[pid] / _TICKS
    return found


def cpu_report(before: dict[str, float], after: dict[str, float], records: int) -> str:
    return ", ".join(f"{name} {after[name] - before.get(name, 0.0):.1f} s "
                     f"({1000 * (after[name] - before.get(name, 0.0)) / records:.2f} ms/record)"
                     for name in after if after[name] - before.get(name, 0.0) >= 0.05)


def batches(total: int, size: int, stream: str) -> list[list[dict]]:
    return [[{"date": f"2026-10-{1 + n % 28:02d}", "data_stream_key": stream, "amount": 100 + n,
              "direction": "credit" if n % 3 else "debit", "external_id": f"pay-{n:08d}",
              "description": f"payout {n}", "metadata": {"payout_id": f"po_{n // 50}"}}
             for n in range(start, min(start + size, total))] for start in range(0, total, size)]


def baseline(service: LocalService, total: int, threads: int, environment: str = "baseline",
             guards: bool = False) -> float:
    """The same number of record items written with BatchWriteItem only; with `guards`, each
    record's external_id guard too (written first, as a chunk does)."""
    table, records = service.container.table, service.container.records
    to_item = records.to_item
    now = utc_now()

    def write(start: int) -> None:  # one BatchWriteItem request after another, as put_many did before issue 30
        if guards:
            records.put_external_id_guards(environment, [("bench", f"pay-{n:08d}", f"job:1:{n}", n + 1)
                                                         for n in range(start, min(start + 1000, total))])
        # The items the bulk path stores for `batches`: same fields, description and metadata included.
        table.batch_write(to_item(Record(
            environment=environment, id=n + 1, data_stream_key="bench", data_stream_id=1, date=f"2026-10-{1 + n % 28:02d}",
            amount=100 + n, direction=Direction.CREDIT if n % 3 else Direction.DEBIT, currency="USD", decimal_places=2,
            status=RecordStatus.UNRECONCILED, created_at=now, description=f"payout {n}", external_id=f"pay-{n:08d}",
            metadata={"payout_id": f"po_{n // 50}"})) for n in range(start, min(start + 1000, total)))

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(write, range(0, total, 1000)))
    return time.perf_counter() - started


class Baselines:
    """Both baselines (the records alone; the records with their guards), each written once before
    the path and once after it into an environment of its own: the store grows in between and a
    shared machine's speed moves, so the path is set against the mean of each pair."""

    KINDS = {"records alone": False, "records and their guards": True}

    def __init__(self, service: LocalService, records: int, threads: int) -> None:
        self._service, self._records, self._threads = service, records, threads
        self._seconds: dict[tuple[str, str], float] = {}
        self._cpu: dict[tuple[str, str], str] = {}

    def write(self, when: str) -> None:
        for number, (kind, guards) in enumerate(self.KINDS.items()):
            before = cpu_seconds()
            self._seconds[kind, when] = baseline(self._service, self._records, self._threads,
                                                 environment=f"baseline{number}-{when}", guards=guards)
            self._cpu[kind, when] = cpu_report(before, cpu_seconds(), self._records)

    def mean_seconds(self, kind: str) -> float:
        return (self._seconds[kind, "before"] + self._seconds[kind, "after"]) / 2

    def report(self) -> list[str]:
        lines = []
        for kind in self.KINDS:
            before, after = self._seconds[kind, "before"], self._seconds[kind, "after"]
            lines.append(f"baseline, BatchWriteItem only, {kind}: {self._records:,} records in {before:.1f} s "
                         f"before the path, {after:.1f} s after it: {self._records / self.mean_seconds(kind):,.0f} "
                         f"records/s (their mean)")
            lines += [f"  CPU {when}: {self._cpu[kind, when]}" for when in ("before", "after")]
        return lines

    def ratios(self, path: str, seconds: float) -> list[str]:
        return [f"ratio {path}/baseline of the {kind}: {self.mean_seconds(kind) / seconds:.2f}" for kind in self.KINDS]


def run_bulk(service: LocalService, total: int, size: int, clients: int,
             stream: str = "bench") -> tuple[float, list[dict]]:
    session = requests.Session()
    session.headers["X-API-KEY"] = service.key
    assert session.post(f"{service.url}/data_streams", json={"key": stream, "name": stream.title()}).ok
    work = batches(total, size, stream)
    started = time.perf_counter()

    def post(records: list[dict]) -> dict:
        response = session.post(f"{service.url}/records/bulk", json={"on_conflict": "skip", "records": records})
        assert response.status_code == 202, response.text
        return response.json()

    with ThreadPoolExecutor(clients) as pool:
        summaries = list(pool.map(post, work))
    # As a client waiting for all its requests would: the oldest pending one, twice a second, and
    # on to the next as soon as it ends (polling all of them five times a second, as this did
    # before, took a third of the service's CPU at 100 requests).
    pending = [s["url"] for s in summaries]
    finished = []
    while pending:
        body = session.get(f"{service.url}{pending[0].removeprefix('/v1')}").json()
        if body["status"] not in ("pending", "processing"):
            finished.append(body)
            pending.pop(0)
            continue
        time.sleep(0.5)
    return time.perf_counter() - started, finished


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", action="store_true", help="list every request's purpose")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-ingest-"))
    settings = Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_bench")
    service = LocalService(settings, log=lambda m: print(f"[local] {m}")).start()
    service.serve_in_background()
    counter, partitions, requests_sent = WriteCounter(), PartitionCounter(), RequestCounter()
    service.container.aws.dynamodb.meta.events.register("before-call.dynamodb.*", counter)
    service.container.aws.dynamodb.meta.events.register("before-call.dynamodb.*", requests_sent)
    service.container.aws.s3.meta.events.register("before-call.s3.*", requests_sent)
    # The local runtime's receives count too: on AWS, Lambda's pollers make them, not the service.
    service.container.aws.sqs.meta.events.register("before-call.sqs.*", requests_sent)
    service.container.events._events.meta.events.register("before-call.events.*", requests_sent)
    service.container.aws.dynamodb.meta.events.register("before-parameter-build.dynamodb.*", partitions)
    try:
        baselines = Baselines(service, args.records, args.clients)
        baselines.write("before")
        counter.reset()
        partitions.reset()
        requests_sent.reset()

        cpu_path = cpu_seconds()
        seconds, finished = run_bulk(service, args.records, args.batch, args.clients)
        cpu_bulk = cpu_seconds()
        stored = sum(f["successful_items"] for f in finished)
        assert all(f["status"] == "completed" for f in finished), [f["status"] for f in finished]
        assert stored == args.records, stored
        writes = dict(counter.counts)
        total_writes = sum(writes.values())
        requests_per_1000 = sum(requests_sent.counts.values()) * 1000 / stored
        request_lines = requests_sent.report(stored, purposes=args.requests)
        partition_lines = partitions.report(stored, seconds)
        stream = requests.get(f"{service.url}/data_streams/bench", headers={"X-API-KEY": service.key}).json()
        assert stream["records_count"] == args.records, stream
        baselines.write("after")

        print(f"\nmachine: {platform.machine()}, {platform.system()} {platform.release()}, "
              f"python {platform.python_version()}")
        print("\n".join(baselines.report()))
        print(f"bulk path: {len(finished)} requests of {args.batch}, {args.clients} clients: {stored:,} records "
              f"stored, first POST to last completed {seconds:.1f} s = {stored / seconds:,.0f} records/s")
        print(f"CPU, bulk path: {cpu_report(cpu_path, cpu_bulk, stored)}")
        print("\n".join(baselines.ratios("bulk", seconds)))
        print(f"DynamoDB write requests: {total_writes:,} = {total_writes / stored:.3f} per stored record; "
              + ", ".join(f"{op} {n:,}" for op, n in sorted(writes.items())))
        print(f"DynamoDB, S3, SQS and EventBridge requests per 1,000 stored records: {requests_per_1000:,.1f}")
        print("\n".join(request_lines))
        print("heaviest partition keys (item writes, from the requests sent):")
        print("\n".join(partition_lines))
    finally:
        service.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
