"""Peak memory and time of a reconciliation run's load and match phases, and of a dry run, with
N open records a side, the old dict-per-record loader beside the columnar one.

Pages come as DynamoDB's Query API returns them from the open-records index (typed JSON, at most
1 MB of index entries a page, the record item layout of adapters/dynamodb/records.py cut to what
gsi5 projects) from a small fake DynamoDB HTTP endpoint in its own process, generated as they are
asked for (the FilterExpression is not applied: every record is open); the service's own DynamoDB
client (adapters/dynamodb/wire.py, as on Lambda and the local stack; boto3's for the "botocore" path and
for measurements taken before 2026-11-30), DynamoTable, ClaimRepository and services/reconciliation_runs.py
read them. Every case runs in a fresh
subprocess; its peak RSS is that process's ru_maxrss and its CPU time its own user + system.

    .venv/bin/python bench/run_memory.py [--records 100000 1000000] [--dry-run 50000 100000 200000] [--pages DIR]
    .venv/bin/python bench/run_memory.py --check      # old and new loaders give the same frames
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import UTC, date, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ENVIRONMENT = "acme"
PAGE_BYTES = 1024 * 1024       # DynamoDB stops a Query page at 1 MB of items
FIRST_DAY = date(2026, 1, 1)
RULE_BODY = {"name": "Amount and date", "priority": 1, "cardinality": "one_to_one",
             "conditions": [{"field": "amount", "operator": "equals"},
                            {"field": "date", "operator": "within", "days": 3}]}


# The data: side A record i, and side B's partner of it -------------------------------------------

def stream_key(side: str, records: int, sharded: bool = False) -> str:
    """The server reads the side and the size back from the key; `s` first: the stream's open
    records sit in the open index's shards, else in its unsharded partition (as written before)."""
    return f"{'s' if sharded else ''}{side}{records}"


def parse_stream_key(key: str) -> tuple[str, int, bool]:
    sharded = key.startswith("s")
    key = key.removeprefix("s")
    return key[0], int(key[1:]), sharded


def record_values(side: str, records: int, n: int) -> tuple[int, int, str]:
    """(id, amount in cents, ISO date). Side B books side A's amounts in another order, 3 days
    earlier to 3 days later; one in 20 a cent off, so it finds no partner."""
    if side == "a":
        return 1 + n, 100 + (n * 7_919_993) % 4_999_900, (FIRST_DAY + timedelta(days=(n * 37) % 365)).isoformat()
    partner = (n * 1_000_003) % records
    _, amount, day = record_values("a", records, partner)
    shifted = date.fromisoformat(day) + timedelta(days=partner % 7 - 3)
    return records + 1 + n, amount + (0 if partner % 20 else 1), shifted.isoformat()


def record_item(side: str, records: int, n: int, sharded: bool = True) -> dict[str, Any]:
    """The typed item (as DynamoDB returns it) of records.RecordRepository.to_item, fast (not
    `sharded`: its open-index entry in the unsharded partition, as written before the shards)."""
    from chalicelib.adapters.dynamodb import keys

    record_id, amount, day = record_values(side, records, n)
    key, rid = stream_key(side, records, sharded), str(record_id).zfill(12)
    open_partition = (keys.open_record_shard(ENVIRONMENT, key, record_id) if sharded
                      else keys.open_records_of_stream_pk(ENVIRONMENT, key))
    job, external_id = 1 + n // 100_000, f"{side}-{n:08d}"
    text = lambda v: {"S": v}  # noqa: E731
    return {
        "pk": text(f"E#{ENVIRONMENT}#REC#{rid}"), "sk": text("REC"),
        "gsi1pk": text(f"E#{ENVIRONMENT}#DS#{key}#REC"), "gsi1sk": text(rid),
        "gsi5pk": text(open_partition), "gsi5sk": text(rid),
        "entity": text("record"), "environment": text(ENVIRONMENT), "id": {"N": str(record_id)},
        "data_stream_key": text(key), "data_stream_id": {"N": "1" if side == "a" else "2"},
        "date": text(day), "amount": {"N": str(amount)}, "direction": text("credit" if side == "a" else "debit"),
        "currency": text("USD"), "decimal_places": {"N": "2"}, "description": text(f"{side} payment {n}"),
        "external_id": text(external_id), "metadata": text(json.dumps({"batch": f"b{n % 50}"}, separators=(",", ":"))),
        "status": text("unreconciled"), "file_import_id": {"N": str(job)}, "created_at": text("2026-11-01T09:30:00.000Z"),
    }


def index_entry(item: dict[str, Any]) -> dict[str, Any]:
    """What the open-records index (gsi5, INCLUDE) holds of a record item: keys and its attributes."""
    from chalicelib.adapters.dynamodb.records import OPEN_RECORD_ATTRIBUTES

    kept = ("pk", "sk", "gsi5pk", "gsi5sk") + OPEN_RECORD_ATTRIBUTES
    return {name: item[name] for name in kept if name in item}


def item_size(item: dict[str, Any]) -> int:
    """DynamoDB's item size: names plus values (a number counts about one byte per two digits)."""
    size = 0
    for name, value in item.items():
        size += len(name)
        size += len(value["S"].encode()) if "S" in value else len(value["N"]) // 2 + 2
    return size


# A fake DynamoDB endpoint serving those pages --------------------------------------------------

class FakeDynamo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        operation = self.headers["X-Amz-Target"].split(".")[-1]
        if operation == "GetItem":  # every stream is adopted: the run reads the open index
            data = json.dumps({"Item": request["Key"]}).encode()
        elif operation == "Query":
            data = self.query(request)
        else:
            self.send_response(400)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    cache: Path | None = None  # pages kept as files once made, so that every case reads the same bytes fast

    def query(self, request: dict[str, Any]) -> bytes:
        start_key = request.get("ExclusiveStartKey")
        name = f"{'-'.join(request['ExpressionAttributeValues'][':p']['S'].split('#')[3:])}-"
        name += f"{start_key['gsi5sk']['S'] if start_key else 'first'}-{request.get('Select', 'items')}"
        name += f"{'-projected' if 'ProjectionExpression' in request else ''}.json"
        path = self.cache / name if self.cache else None
        if path is not None and path.exists():
            return path.read_bytes()
        data = json.dumps(self.page(request), separators=(",", ":")).encode()  # as DynamoDB sends it
        if path is not None:
            path.write_bytes(data)
        return data

    @staticmethod
    def page(request: dict[str, Any]) -> dict[str, Any]:
        from chalicelib.adapters.dynamodb import keys

        partition = request["ExpressionAttributeValues"][":p"]["S"]  # E#acme#DS#<key>#OPEN[#<shard>]
        side, records, sharded = parse_stream_key(partition.split("#")[3])
        start_key = request.get("ExclusiveStartKey")
        first = int(start_key["gsi5sk"]["S"]) - (0 if side == "a" else records) if start_key else 0
        if sharded != (partition.count("#") == 5):  # the stream's records are all in the other partitions
            first = records
        items, size, full = [], 0, False
        for n in range(first, records):
            if sharded and keys.open_record_shard(ENVIRONMENT, stream_key(side, records, True),
                                                  record_values(side, records, n)[0]) != partition:
                continue
            item = index_entry(record_item(side, records, n, sharded))  # a page holds 1 MB of index entries
            size += item_size(item)
            if size > PAGE_BYTES:
                full = True
                break
            items.append(item)
        body: dict[str, Any] = {"Count": len(items), "ScannedCount": len(items)}
        if full:
            last = items[-1]
            body["LastEvaluatedKey"] = {k: last[k] for k in ("pk", "sk", "gsi5pk", "gsi5sk")}
        if "ProjectionExpression" in request:  # the page's size was counted on whole items, as DynamoDB does
            names = request["ExpressionAttributeNames"]
            kept = [names.get(n.strip(), n.strip()) for n in request["ProjectionExpression"].split(",")]
            items = [{k: item[k] for k in kept if k in item} for item in items]
        if request.get("Select") != "COUNT":
            body["Items"] = items
        return body


def serve(port: int, cache: str) -> None:
    FakeDynamo.cache = Path(cache)
    ThreadingHTTPServer(("127.0.0.1", port), FakeDynamo).serve_forever()


# The ports the measured code reads through -----------------------------------------------------

@dataclass
class Reconciliation:
    id: int
    side_a_stream_keys: tuple[str, ...]
    side_b_stream_keys: tuple[str, ...]
    current_run_id: int | None = None


class Rules:
    def __init__(self, rule) -> None:
        self.rule = rule

    def get(self, environment, rule_id):
        return self.rule

    def list_of(self, environment, reconciliation_id):
        return [self.rule]


class Reconciliations:
    def __init__(self, reconciliation: Reconciliation) -> None:
        self.reconciliation = reconciliation

    def get(self, environment, reconciliation_id):
        return self.reconciliation


class NoJobs:
    """No ingestion is writing."""

    def active(self):
        return []


class StreamsOfTheTable:
    """The bench's streams were never marked as imported: their records are read from the table."""

    def changed_since_import(self, environment, key):
        return None

    def note_records_changed(self, environment, record_ids):
        pass  # nothing was marked


class NoCloses:
    """No period of the reconciliation is closed."""

    def closed_periods(self, environment, reconciliation_ids):
        return {}


class DiskS3:
    """put_object/get_object of the run's files, kept on disk between the phases' processes."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def put_object(self, Bucket, Key, Body):
        path = self.root / Key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(Body)

    def get_object(self, Bucket, Key):
        return {"Body": io.BytesIO((self.root / Key).read_bytes())}


def ports_for(port: int, records: int, workdir: Path, json_pages: bool = True):
    import boto3
    from botocore.config import Config

    from chalicelib.adapters.dynamodb.matches import ClaimRepository, MatchRepository
    from chalicelib.adapters.dynamodb.table import DynamoTable
    from chalicelib.adapters.run_files import RunFiles
    from chalicelib.domain.rules import Rule, validate_rule
    from chalicelib.services.ports import Limits, Ports

    session = boto3.Session(aws_access_key_id="bench", aws_secret_access_key="bench", region_name="us-east-1")
    client = session.client("dynamodb", endpoint_url=f"http://127.0.0.1:{port}",
                            config=Config(retries={"max_attempts": 1}, parameter_validation=False))
    if json_pages:  # as the service sends its table's requests (adapters/dynamodb/wire.py)
        from chalicelib.adapters.dynamodb.wire import DynamoWire

        client = DynamoWire(client, session.get_credentials())
    reconciliation = Reconciliation(10 ** 6, (stream_key("a", records),), (stream_key("b", records),), current_run_id=1)
    rule = Rule(ENVIRONMENT, 7, reconciliation.id, validate_rule(RULE_BODY), None)
    table = DynamoTable(client, "recon")
    if not json_pages:  # the same reader through botocore, parsing the pages (as before the JSON pages)
        client.meta.events.unregister("before-parse.dynamodb.Query", unique_id="recon-query-pages-as-json")
    # Only what loading and matching read; the rest is never reached.
    matches = MatchRepository(table)
    unused = {f.name: None for f in dataclasses.fields(Ports)  # never reached; those with a default keep it
              if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    ports = Ports(**{**unused, "reconciliations": Reconciliations(reconciliation),
                     "reconciliation_rules": Rules(rule), "ingestion_jobs": NoJobs(), "matches": matches,
                     "claims": ClaimRepository(table, matches), "run_files": RunFiles(DiskS3(workdir), "bench"),
                     "period_closes": NoCloses(), "limits": Limits(), "data_streams": StreamsOfTheTable()})
    return ports, reconciliation, rule


# The old loader (before the columnar one), copied from git fdda3e4 for the baseline ---------------

def old_open_frames(ports, environment, reconciliation, rules, new_jobs):
    from chalicelib.services.reconciliation_runs import WRITING

    writing = {job.id for job in ports.ingestion_jobs.active()
               if job.environment == environment and job.status in WRITING}
    frames = []
    for streams in (reconciliation.side_a_stream_keys, reconciliation.side_b_stream_keys):
        records = []
        for key in streams:
            adopted = ports.claims.is_adopted(environment, reconciliation.id, key)
            records += [r for r in ports.claims.open_records(environment, key, reconciliation.id, adopted)
                        if r.file_import_id not in writing]
        frames.append(old_open_records_frame(records, [], new_jobs))
    return frames[0], frames[1]


def old_open_records_frame(records, metadata_keys, new_jobs):
    import polars as pl

    columns: dict[str, Any] = {
        "id": [r.id for r in records], "amount": [r.amount for r in records],
        "direction": [r.direction.value for r in records], "date": [date.fromisoformat(r.date) for r in records],
        "currency": [r.currency for r in records], "decimal_places": [r.decimal_places for r in records],
        "description": [r.description for r in records],
        "external_id": [r.external_id for r in records],
        "data_stream_key": [r.data_stream_key for r in records],
        "matched_in": [sorted(r.matched_in) for r in records],
        "is_new": [new_jobs is not None and r.file_import_id in new_jobs for r in records],
    }
    schema: dict[str, Any] = {"id": pl.Int64, "amount": pl.Int64, "direction": pl.Utf8, "date": pl.Date,
                              "currency": pl.Utf8, "decimal_places": pl.Int32, "description": pl.Utf8,
                              "external_id": pl.Utf8, "data_stream_key": pl.Utf8, "matched_in": pl.List(pl.Int64),
                              "is_new": pl.Boolean}
    return pl.DataFrame(columns, schema=schema)


def old_plan(outcome, side_a, side_b, chunk_records):
    import polars as pl

    sizes = outcome.members.group_by("match_no").len().sort("match_no")
    chunk_of: dict[int, int] = {}
    chunk, filled = 0, 0
    for match_no, size in sizes.iter_rows():
        if filled and filled + size > chunk_records:
            chunk, filled = chunk + 1, 0
        chunk_of[match_no] = chunk
        filled += size
    chunks = chunk + 1 if chunk_of else 0
    chunk_frame = pl.DataFrame({"match_no": list(chunk_of), "chunk": list(chunk_of.values())},
                               schema={"match_no": pl.Int64, "chunk": pl.Int64})
    records = pl.concat([side_a.select("id", "data_stream_key", "matched_in"),
                         side_b.select("id", "data_stream_key", "matched_in")])
    members = (outcome.members.join(records, left_on="record_id", right_on="id", how="left")
               .join(chunk_frame, on="match_no", how="left"))
    matches = outcome.matches.join(chunk_frame, on="match_no", how="left")
    return matches, members, chunks


# The cases, each in its own process ------------------------------------------------------------

def load_phase(ports, reconciliation, rule, old: bool):
    """The load task's work: both sides' open records into frames, kept as the run's files."""
    from chalicelib.services.reconciliation_runs import open_frames

    if old:
        side_a, side_b = old_open_frames(ports, ENVIRONMENT, reconciliation, [rule], None)
    else:
        side_a, side_b = open_frames(ports, ENVIRONMENT, reconciliation, [rule], None, adopt=True)
    return side_a, side_b


def match_phase(ports, side_a, side_b, rule, old: bool):
    """The match task's work: the engine, then the plan cut in chunks and kept as files."""
    from chalicelib.domain.matching import match_records
    from chalicelib.domain.matching.frames import engine_frames, plan_chunks
    from chalicelib.domain.runs import CHUNK_RECORDS
    from chalicelib.services.reconciliation_runs import PLAN_ROW_GROUP

    outcome = match_records(*engine_frames(side_a, side_b), [rule])
    matches, members, chunks = (old_plan if old else plan_chunks)(outcome, side_a, side_b, CHUNK_RECORDS)
    group = None if old else PLAN_ROW_GROUP
    ports.run_files.write_frame(ENVIRONMENT, 1, "matches-0", matches, group)
    ports.run_files.write_frame(ENVIRONMENT, 1, "members-0", members, group)
    return outcome.matches.height, chunks


def chunk_read(ports, chunk: int, old: bool):
    """What a persist call (and the fail task's undo) reads: one chunk of the plan, as rows."""
    import polars as pl

    rows = 0
    for name in ("matches-0", "members-0"):
        if old:
            frame = ports.run_files.read_frame(ENVIRONMENT, 1, name).filter(pl.col("chunk") == chunk)
        else:
            frame = ports.run_files.read_frame(ENVIRONMENT, 1, name, chunk=chunk)
        rows += len(list(frame.iter_rows(named=True)))
    return rows


def run_case(case: str, path: str, records: int, port: int, workdir: Path) -> dict[str, Any]:
    started = time.perf_counter()
    ports, reconciliation, rule = ports_for(port, records, workdir, json_pages=path != "botocore")
    import polars  # noqa: F401  (imported before the baseline RSS, as in a warm worker)

    from chalicelib.domain.matching import match_records  # noqa: F401
    from chalicelib.services import reconciliation_runs

    result: dict[str, Any] = {"case": case, "path": path, "records": records,
                              "rss_after_imports_mb": _peak_mb(), "import_s": time.perf_counter() - started}
    old = path == "old"
    t0, c0 = time.perf_counter(), _cpu()
    if case in ("load", "both"):
        side_a, side_b = load_phase(ports, reconciliation, rule, old)
        result["load_s"], result["load_cpu_s"] = time.perf_counter() - t0, _cpu() - c0
        result["loaded"] = side_a.height + side_b.height
        if case == "load":
            ports.run_files.write_frame(ENVIRONMENT, 1, "side_a", side_a)
            ports.run_files.write_frame(ENVIRONMENT, 1, "side_b", side_b)
    if case == "match":
        side_a = ports.run_files.read_frame(ENVIRONMENT, 1, "side_a")
        side_b = ports.run_files.read_frame(ENVIRONMENT, 1, "side_b")
    if case in ("match", "both"):
        t1, c1 = time.perf_counter(), _cpu()
        result["matches"], result["chunks"] = match_phase(ports, side_a, side_b, rule, old)
        result["match_s"], result["match_cpu_s"] = time.perf_counter() - t1, _cpu() - c1
    if case == "chunk":
        result["rows"] = chunk_read(ports, 0, old)
        result["chunk_s"] = time.perf_counter() - t0
    if case == "dryrun":
        ports = replace(ports, limits=replace(ports.limits, dry_run_records=10 ** 9))  # the limit is what this measures
        answer = reconciliation_runs.dry_run(ports, ENVIRONMENT, rule.id)
        result["dry_run_s"], result["dry_run_cpu_s"] = time.perf_counter() - t0, _cpu() - c0
        result["matches"] = answer["matches"]
    result["cpu_s"] = _cpu()
    result["peak_rss_mb"] = _peak_mb()
    return result


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def check(port: int, records: int, workdir: Path) -> None:
    """The columnar loader gives the old loader's frames, and the fake item is the real layout."""
    from datetime import datetime

    from chalicelib.adapters.dynamodb.records import RecordRepository
    from chalicelib.adapters.dynamodb.table import serialize
    from chalicelib.domain.records import Direction, Record, RecordStatus

    record_id, amount, day = record_values("a", records, 3)
    real = Record(ENVIRONMENT, record_id, stream_key("a", records), 1, day, amount, Direction.CREDIT, "USD", 2,
                  RecordStatus.UNRECONCILED, datetime(2026, 11, 1, 9, 30, tzinfo=UTC),
                  description="a payment 3", external_id="a-00000003", metadata={"batch": "b3"}, file_import_id=1)
    assert serialize(RecordRepository.to_item(real)) == record_item("a", records, 3), "the fake item drifted"
    ports, reconciliation, rule = ports_for(port, records, workdir)
    old = old_open_frames(ports, ENVIRONMENT, reconciliation, [rule], None)
    new = load_phase(ports, reconciliation, rule, old=False)
    for before, after in zip(old, new):
        assert before.equals(after), (before, after)
    print(f"check: the columnar loader gives the old frames for {records:,} records a side")


def child(args) -> None:
    print(json.dumps(run_case(args.case, args.path, args.records[0], args.port, Path(args.workdir))))


def spawn(case: str, path: str, records: int, port: int, workdir: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", "--case", case, "--path", path, "--records", str(records),
               "--port", str(port), "--workdir", str(workdir)]
    started = time.perf_counter()
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - started
    print(json.dumps(result), flush=True)
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--dry-run", type=int, nargs="*", default=[50_000, 100_000, 200_000])
    parser.add_argument("--paths", nargs="+", default=["old", "botocore", "new"])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--pages", help="keep the generated pages here, for the next run (about 1 GB a million records)")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--serve", type=int)
    parser.add_argument("--case", default="both")
    parser.add_argument("--path", default="new")
    parser.add_argument("--port", type=int)
    parser.add_argument("--workdir")
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve, args.workdir)
    if args.child:
        return child(args)

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="recon-bench-memory-") as tmp:
        pages = Path(args.pages or Path(tmp) / "pages")
        pages.mkdir(parents=True, exist_ok=True)
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--workdir", str(pages)])
        try:
            _wait_for(port)
            print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}", flush=True)
            if args.check:
                return check(port, 10_000, Path(tmp))
            for records in args.records:
                for path in args.paths:
                    workdir = Path(tmp) / f"{path}-{records}"
                    for case in ("both", "load") if path == "botocore" else ("both", "load", "match", "chunk"):
                        spawn(case, path, records, port, workdir)
            for records in args.dry_run:
                spawn("dryrun", "new", records, port, Path(tmp) / "dry")
        finally:
            server.terminate()
            server.wait()


def _wait_for(port: int) -> None:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the fake DynamoDB endpoint did not start")


if __name__ == "__main__":
    main()
