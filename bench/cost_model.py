"""DynamoDB write units per stored and per matched record, metered on the real code paths against the
indexes of infra/template.yaml, and the monthly AWS cost they imply (bench/RESULTS.md, "Cost model").
A run's claims are metered as a deployed stage sends them (one by one) unless asked otherwise.
Usage: .venv/bin/python bench/cost_model.py [--records 2000] [--claims-in-transactions]"""
from __future__ import annotations

import argparse
import json
import logging
import math
import re
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
# A transaction's writes cost twice a write's units on the table (prepare and commit); its indexes are
# counted as any write's (they follow the committed item).
TRANSACTIONAL = 2
READS = {"GetItem", "BatchGetItem", "Query", "Scan"}
KB = 1024


# Sizes, by DynamoDB's rules ---------------------------------------------------------------------------

def value_size(value: dict[str, Any]) -> int:
    """The stored size of one attribute value in DynamoDB's wire format ({"S": ...}, {"N": ...}, ...):
    text and binary by their bytes, a number about one byte per two significant digits plus one,
    null and booleans one byte, lists and maps three bytes plus one per element and the elements."""
    (kind, raw), = value.items()
    if kind == "S":
        return len(raw.encode())
    if kind == "B":
        return len(raw)
    if kind == "N":
        digits = Decimal(raw).normalize().as_tuple().digits
        return 1 + math.ceil(len(digits) / 2)
    if kind in ("NULL", "BOOL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in raw)
    if kind == "NS":
        return sum(value_size({"N": n}) for n in raw)
    if kind == "BS":
        return sum(len(b) for b in raw)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in raw)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in raw.items())
    raise ValueError(kind)


def item_size(item: dict[str, Any] | None) -> int:
    return sum(len(name.encode()) + value_size(value) for name, value in (item or {}).items())


def units(size: int, per: int = KB) -> int:
    return max(1, math.ceil(size / per))


# The template's indexes --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Index:
    name: str
    keys: tuple[str, ...]
    projection: str
    attributes: frozenset[str]

    def entry(self, item: dict[str, Any] | None) -> dict[str, Any] | None:
        """The item's entry in this index (None when the item lacks the index's keys)."""
        if not item or not all(k in item for k in self.keys):
            return None
        if self.projection == "ALL":
            return item
        kept = {"pk", "sk", *self.keys} | (self.attributes if self.projection == "INCLUDE" else set())
        return {k: v for k, v in item.items() if k in kept}

    def write_units(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> int:
        old, new = self.entry(before), self.entry(after)
        if old is None and new is None:
            return 0
        if old is None:
            return units(item_size(new))
        if new is None:
            return units(item_size(old))
        if any(old[k] != new[k] for k in self.keys):
            return units(item_size(old)) + units(item_size(new))
        return units(max(item_size(old), item_size(new))) if old != new else 0


def template_indexes() -> list[Index]:
    from chalicelib.local.provision import load_template

    table = load_template()["Resources"]["Table"]["Properties"]
    return [Index(i["IndexName"], tuple(k["AttributeName"] for k in i["KeySchema"]), i["Projection"]["ProjectionType"],
                  frozenset(i["Projection"].get("NonKeyAttributes", ()))) for i in table["GlobalSecondaryIndexes"]]


# The meter ---------------------------------------------------------------------------------------------

def kind_of(item: dict[str, Any] | None) -> str:
    if not item:
        return "missing item"
    if "entity" in item:
        return item["entity"]["S"]
    return "id counter" if item["pk"]["S"].endswith("#COUNTER") else item["sk"]["S"].split("#")[0].lower()


@dataclass
class Tally:
    requests: Counter = field(default_factory=Counter)        # operation -> requests
    write_units: Counter = field(default_factory=Counter)     # (item kind, "table" or index) -> units
    items_written: Counter = field(default_factory=Counter)   # item kind -> writes
    failed_conditions: int = 0
    read_units: float = 0.0
    s3: Counter = field(default_factory=Counter)
    sqs_sent: int = 0
    events: int = 0  # EventBridge events billed: one per entry and 64 KB started
    log_bytes: int = 0  # the service's own log lines (JSON, one per line)

    def total_write_units(self) -> int:
        return sum(self.write_units.values())


class Meter:
    """Hooks on the service's DynamoDB, S3 and SQS clients; `take()` hands over what was counted.

    Every DynamoDB write is billed as on-demand DynamoDB bills it: the item's before and after
    images are read (with a client of the meter's own) and sized; the table write costs one unit
    per started KB of the larger image, and each index of the template whose keys the item carries
    one more write of its projected entry (two when its keys change, a delete and a put; none when
    neither its keys nor its projected attributes change). Reads are estimated from what comes
    back (a key that finds nothing still costs a read; items a filter drops are not counted).
    """

    def __init__(self, container, indexes: list[Index], watched_prefixes: tuple[str, ...]) -> None:
        self._raw = container.aws.client("dynamodb")  # a client of its own: its reads are not metered
        self._table = container.settings.table_name
        self._indexes = indexes
        self._watched = watched_prefixes
        self._lock = threading.Lock()
        self._tally = Tally()
        events = container.aws.dynamodb.meta.events
        events.register("provide-client-params.dynamodb", self._before)
        events.register("after-call.dynamodb", self._after)
        container.aws.s3.meta.events.register("provide-client-params.s3", self._s3)
        container.aws.sqs.meta.events.register("provide-client-params.sqs", self._sqs)
        container.events._events.meta.events.register("provide-client-params.events.PutEvents", self._events)
        for handler in logging.getLogger("recon").handlers:  # powertools' handler: counted, not shown
            handler.setStream(_CountingSink(self))

    def take(self) -> Tally:
        with self._lock:
            tally, self._tally = self._tally, Tally()
        return tally

    def _keys(self, operation: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        if operation == "PutItem":
            return [{"pk": params["Item"]["pk"], "sk": params["Item"]["sk"]}]
        if operation in ("UpdateItem", "DeleteItem"):
            return [params["Key"]]
        if operation == "TransactWriteItems":  # this table's writes (a ConditionCheck writes nothing)
            writes = [a.get("Put") or a.get("Update") or a["Delete"] for a in params["TransactItems"]
                      if "ConditionCheck" not in a]
            return [{"pk": w["Item"]["pk"], "sk": w["Item"]["sk"]} if "Item" in w else w["Key"] for w in writes
                    if w["TableName"] == self._table]
        requests = params["RequestItems"][self._table]
        return [r["DeleteRequest"]["Key"] if "DeleteRequest" in r else
                {"pk": r["PutRequest"]["Item"]["pk"], "sk": r["PutRequest"]["Item"]["sk"]} for r in requests]

    def _images(self, item_keys: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
        found: dict[tuple[str, str], dict[str, Any]] = {}
        unique = list({(k["pk"]["S"], k["sk"]["S"]): k for k in item_keys}.values())
        for start in range(0, len(unique), 100):
            pending = {self._table: {"Keys": unique[start:start + 100], "ConsistentRead": True}}
            while pending:
                response = self._raw.batch_get_item(RequestItems=pending)
                for item in response["Responses"].get(self._table, []):
                    found[(item["pk"]["S"], item["sk"]["S"])] = item
                pending = response.get("UnprocessedKeys") or {}
        return found

    def _before(self, params, model, context, **_) -> None:
        if model.name == "BatchGetItem":
            context["meter_keys"] = sum(len(r["Keys"]) for r in params["RequestItems"].values())
        if model.name in WRITES:
            item_keys = self._keys(model.name, params)
            context["meter"] = (item_keys, self._images(item_keys))

    def _after(self, http_response, parsed, model, context, **_) -> None:
        operation = model.name
        with self._lock:
            self._tally.requests[operation] += 1
        if operation in READS:
            self._count_read(operation, parsed, context)
        if operation not in WRITES or "meter" not in context:
            return
        item_keys, before = context["meter"]
        if parsed.get("Error", {}).get("Code") == "TransactionCanceledException":
            # Assumed: each item's prepare is billed a unit; the reasons name the failed conditions.
            reasons = [r.get("Code") for r in parsed.get("CancellationReasons", [])]
            with self._lock:
                self._tally.failed_conditions += reasons.count("ConditionalCheckFailed")
                for key in item_keys:
                    self._tally.write_units[(kind_of(before.get(_k(key))) + " (transaction cancelled)", "table")] += 1
            return
        if parsed.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            with self._lock:
                self._tally.failed_conditions += 1
                self._tally.write_units[(kind_of(before.get(_k(item_keys[0]))) + " (condition failed)", "table")] += 1
            return
        if "Error" in parsed:  # refused whole (validation, throttling after its retries): nothing written
            return
        unprocessed = {_k(r["DeleteRequest"]["Key"] if "DeleteRequest" in r else r["PutRequest"]["Item"])
                       for r in parsed.get("UnprocessedItems", {}).get(self._table, [])}
        done = [k for k in item_keys if _k(k) not in unprocessed]
        after = self._images(done)
        with self._lock:
            for key in done:
                old, new = before.get(_k(key)), after.get(_k(key))
                kind = kind_of(new or old)
                self._tally.items_written[kind] += 1
                self._tally.write_units[(kind, "table")] += units(max(item_size(old), item_size(new))) * (
                    TRANSACTIONAL if operation == "TransactWriteItems" else 1)
                for index in self._indexes:
                    spent = index.write_units(old, new)
                    if spent:
                        self._tally.write_units[(kind, index.name)] += spent

    def _count_read(self, operation: str, parsed: dict[str, Any], context) -> None:
        share = 1.0
        if operation in ("Query", "Scan"):
            size = sum(item_size(i) for i in parsed.get("Items", []))
            spent = math.ceil(size / (4 * KB)) or 1
            share = 0.5  # our queries are eventually consistent (indexes can only be)
        elif operation == "GetItem":
            spent = units(item_size(parsed.get("Item")), 4 * KB)
        else:  # a key that finds nothing is read all the same
            found = [i for items in parsed.get("Responses", {}).values() for i in items]
            pending = sum(len(r["Keys"]) for r in (parsed.get("UnprocessedKeys") or {}).values())
            spent = sum(units(item_size(i), 4 * KB) for i in found) + context.get("meter_keys", 0) - len(found) - pending
        with self._lock:
            self._tally.read_units += spent * share

    def _s3(self, params, model, **_) -> None:
        if model.name == "ListObjectsV2" and str(params.get("Prefix", "")).startswith(self._watched):
            return  # the local stack's stand-in for S3 event notifications, not the app's
        with self._lock:
            self._tally.s3[model.name] += 1

    def _sqs(self, params, model, **_) -> None:
        if model.name in ("SendMessage", "SendMessageBatch"):
            with self._lock:
                self._tally.sqs_sent += 1

    def _events(self, params, **_) -> None:
        billed = sum(math.ceil(len(json.dumps(entry).encode()) / (64 * KB)) for entry in params.get("Entries", []))
        with self._lock:
            self._tally.events += billed

    def count_log(self, text: str) -> None:
        with self._lock:
            self._tally.log_bytes += len(text.encode())


class _CountingSink:
    """A log handler's stream that counts what the service would have written to CloudWatch Logs."""

    def __init__(self, meter: Meter) -> None:
        self._meter = meter

    def write(self, text: str) -> None:
        self._meter.count_log(text)

    def flush(self) -> None:
        pass


def _k(key: dict[str, Any]) -> tuple[str, str]:
    return key["pk"]["S"], key["sk"]["S"]


# The flows ---------------------------------------------------------------------------------------------

def wait(session, url: str, busy: tuple[str, ...]) -> dict:
    while True:
        body = session.get(url).json()
        if body["status"] not in busy:
            return body
        time.sleep(0.25)


def bulk(service, session, records: int) -> int:
    from ingestion import batches

    assert session.post(f"{service.url}/data_streams", json={"key": "bulk", "name": "Bulk"}).ok
    stored = 0
    for work in batches(records, 1000, "bulk"):
        summary = session.post(f"{service.url}/records/bulk", json={"records": work}).json()
        done = wait(session, f"{service.url}{summary['url'].removeprefix('/v1')}",
                    ("pending", "processing", "replicating"))
        assert done["status"] == "completed", done["status"]
        stored += done["successful_items"]
    return stored


def csv_import(service, session, records: int, side: str) -> int:
    import requests
    from reconciliation_run import side_csv

    assert session.post(f"{service.url}/data_streams", json={"key": f"side-{side}", "name": side}).ok
    created = session.post(f"{service.url}/data_streams/side-{side}/file_imports",
                           json={"filename": f"{side}.csv", "format": "csv"}).json()
    assert requests.put(created["upload_url"], data=side_csv(records, side), timeout=300).ok
    done = wait(session, f"{service.url}/file_imports/{created['id']}", ("pending", "processing", "replicating"))
    assert done["status"] == "completed", (done["status"], done.get("error_message"))
    return done["successful_items"]


def batch_run(service, session) -> dict:
    api = service.url
    reconciliation = session.post(f"{api}/reconciliations", json={
        "name": "Cost", "run_type": "batch", "side_a_stream_keys": ["side-a"], "side_b_stream_keys": ["side-b"]}).json()
    assert session.post(f"{api}/reconciliations/{reconciliation['id']}/rules", json={
        "name": "Amount, 3 days", "priority": 1, "cardinality": "one_to_one",
        "conditions": [{"field": "amount", "operator": "equals"},
                       {"field": "date", "operator": "within", "days": 3}]}).ok
    run = session.post(f"{api}/reconciliations/{reconciliation['id']}/runs").json()
    run = wait(session, f"{api}/reconciliations/{reconciliation['id']}/runs/{run['id']}", ("pending", "running"))
    assert run["status"] == "completed", (run["status"], run.get("error_message"))
    return run


def record_layout(container, indexes: list[Index]) -> list[tuple[str, int, int]]:
    """A record of the bulk flow as stored: its size, and each index entry's size and write units."""
    from chalicelib.adapters.dynamodb import keys

    client = container.aws.client("dynamodb")
    page = client.query(TableName=container.settings.table_name, IndexName="gsi1", Limit=1,
                        KeyConditionExpression="gsi1pk = :p",
                        ExpressionAttributeValues={":p": {"S": keys.record_of_stream_shard("local", "bulk", 1)}})
    record = page["Items"][0]
    rows = [("table (record item)", item_size(record), units(item_size(record)))]
    for index in indexes:
        entry = index.entry(record)
        if entry is not None:
            rows.append((f"{index.name} ({index.projection.lower()})", item_size(entry), units(item_size(entry))))
    guard = client.get_item(TableName=container.settings.table_name, Key=keys_of(
        keys.external_id_guard("local", "bulk", record["external_id"]["S"])))["Item"]
    rows.append(("external id guard", item_size(guard), units(item_size(guard))))
    return rows


def stored_bytes(container, indexes: list[Index], leave_out_stream: str) -> tuple[int, Counter]:
    """What the table and its indexes store (DynamoDB adds 100 bytes to every item and every index
    entry), leaving out the records and guards of one stream; and the bytes by item kind."""
    client = container.aws.client("dynamodb")
    total, by_kind = 0, Counter()
    for page in client.get_paginator("scan").paginate(TableName=container.settings.table_name):
        for item in page["Items"]:
            if item.get("data_stream_key", {}).get("S") == leave_out_stream or \
                    item["sk"]["S"] == f"DS#{leave_out_stream}":
                continue
            size = item_size(item) + 100 + sum(item_size(e) + 100 for e in map(index_entry(item), indexes) if e)
            total += size
            by_kind[kind_of(item)] += size
    return total, by_kind


def index_entry(item):
    return lambda index: index.entry(item)


def keys_of(key: dict[str, str]) -> dict[str, Any]:
    return {k: {"S": v} for k, v in key.items()}


def breakdown(tally: Tally, per: int) -> list[str]:
    by_kind: dict[str, Counter] = defaultdict(Counter)
    for (kind, target), spent in tally.write_units.items():
        by_kind[kind][target] += spent
    lines = []
    for kind, spent in sorted(by_kind.items(), key=lambda kv: -sum(kv[1].values())):
        parts = ", ".join(f"{target} {n / per:.4f}" for target, n in sorted(spent.items()))
        lines.append(f"    {kind}: {sum(spent.values()) / per:.4f} ({parts})")
    return lines


# Monthly cost ------------------------------------------------------------------------------------------

PRICES = {  # us-east-1
    "dynamodb_write_per_million": 0.625, "dynamodb_read_per_million": 0.125,  # on demand, since Nov 2024
    "dynamodb_gb_month": 0.25, "dynamodb_pitr_gb_month": 0.20,
    "s3_gb_month": 0.023, "s3_put_per_thousand": 0.005, "s3_get_per_thousand": 0.0004,
    "lambda_gb_second": 0.0000166667, "lambda_per_million": 0.20,
    "sfn_per_thousand_transitions": 0.025, "sqs_per_million": 0.40,
    "api_gateway_rest_per_million": 3.50, "eventbridge_per_million_events": 1.00,
    "logs_ingested_per_gb": 0.50, "logs_stored_gb_month": 0.03,
    "alarm_month": 0.10, "dashboard_month": 3.00,  # standard-resolution metric alarms; a dashboard
    # The template's default model (ModelId): amazon.nova-pro-v1:0, on demand.
    "model_input_per_million_tokens": 0.80, "model_output_per_million_tokens": 3.20,
}
IMPORT_ROWS = 100_000         # rows per CSV file (assumed)
RUNS_PER_MONTH = 30           # one batch run a day, matching that day's records
FILE_CHUNK_ROWS = 500         # chalicelib/domain/ingestion.py
RUN_CHUNK_RECORDS = 2_000     # chalicelib/domain/runs.py CHUNK_RECORDS
PERSIST_CHUNKS = 4            # chunks a persist task writes: chalicelib/services/reconciliation_runs.py
CHUNK_TASK_SECONDS = 60       # chalicelib/services/ingestion/files.py CHUNK_TASK_BUDGET
# Seconds at the memory infra/functions.py gives each function. Measured locally (bench/RESULTS.md),
# where dynalite's single thread bounds them; DynamoDB serves the same calls in parallel, so these
# are upper bounds. The others are estimates.
SECONDS_PER_IMPORTED_ROW = 352.0 / 100_000     # measured: CSV import of 100,000 rows, upload to completed
SECONDS_PER_MATCHED_RECORD = 552.7 / 190_000   # measured: batch run 100,000 x 100,000, 190,000 matched
PREPARE_SECONDS_PER_FILE = 5.0    # estimate: parse 100,000 rows (0.28 s measured) and write the chunk files
FINISH_SECONDS_PER_FILE = 5.0     # estimate: publish to the mirror, aggregates, recounts
LOAD_SECONDS_PER_RECORD = 0.0001  # estimate: 1 MB index pages; the engine takes 1.2-2.4 s per 1M x 1M
SWEEPS_PER_MONTH = 30 * 24 * 60   # the sweeper runs every minute (app.py)
SWEEP_SECONDS = 0.5               # estimate: a warm sweep of a quiet table
SWEEP_READ_UNITS = 4.0            # estimate: six small gsi2 queries and their BatchGetItem
MINUTES_PER_MONTH = 60 * 24 * 30
IDLE_POLLERS, LONG_POLLS_PER_MINUTE = 5, 3  # an event source mapping's pollers of an idle queue, one receive per 20 s
LAMBDA_PLATFORM_LOG_BYTES = 400  # estimate: START, END and REPORT lines (with the X-Ray trace id) an invocation
EVENT_WORKER_SECONDS = 0.05      # estimate: the webhook fan-out of one event to no endpoint
# Estimates of what people and clients ask the API: per file a create and 30 status reads, per run a
# start and 30 reads, and 1,000 other requests a day (the exception queue worked, lists, exports).
API_REQUESTS_PER_FILE, API_REQUESTS_PER_RUN, API_REQUESTS_PER_DAY = 31, 31, 1_000
API_LOG_BYTES = 350              # the service's one log line a request (middleware), measured locally
# Estimate: one agent run a day of 40,000 tokens in and 2,000 out (a run is capped at
# settings.agent_max_tokens, 400,000, which at this model's prices is at most about $0.33 of input).
AGENT_RUNS_PER_MONTH, AGENT_INPUT_TOKENS, AGENT_OUTPUT_TOKENS = 30, 40_000, 2_000


def consumed_queues() -> int:
    """Queues a Lambda event source mapping polls: app.py's SQS handlers (their dead-letter queues are not polled)."""
    return len(re.findall(r"@app\.on_sqs_message\(", (ROOT / "app.py").read_text()))


def template_count(resource_type: str) -> int:
    return len(re.findall(rf"Type: {re.escape(resource_type)}\s*$", (ROOT / "infra" / "template.yaml").read_text(),
                          re.MULTILINE))


def monthly(records: int, per: dict[str, float]) -> list[tuple[str, str, float]]:
    """(service, what is counted, dollars) for `records` imported and matched once in a month. With no
    records the stage is idle: no runs, no agent runs and no API requests either, only what runs anyway."""
    from infra.functions import FUNCTIONS

    gb = {name: f.memory_mb / 1024 for name, f in FUNCTIONS.items()}
    used = 1 if records else 0
    runs = RUNS_PER_MONTH * used
    files = math.ceil(records / IMPORT_ROWS)
    chunk_tasks = files * math.ceil(IMPORT_ROWS * SECONDS_PER_IMPORTED_ROW / CHUNK_TASK_SECONDS)
    persist_tasks = runs * math.ceil(records / RUNS_PER_MONTH / (RUN_CHUNK_RECORDS * PERSIST_CHUNKS))
    gb_seconds = (records * SECONDS_PER_IMPORTED_ROW * gb["file_import_chunks"]
                  + files * (PREPARE_SECONDS_PER_FILE * gb["file_import_prepare"]
                             + FINISH_SECONDS_PER_FILE * gb["file_import_finish"])
                  + records * SECONDS_PER_MATCHED_RECORD * gb["reconciliation_run_persist"]
                  + records * LOAD_SECONDS_PER_RECORD * (gb["reconciliation_run_load"] + gb["reconciliation_run_match"])
                  + SWEEPS_PER_MONTH * SWEEP_SECONDS * gb["sweep_stuck_jobs"])
    # Per file: the API's create, the S3 event, prepare, the chunk tasks, finish. Per run: the API's
    # start, load, match, one persist per PERSIST_CHUNKS chunks, exceptions, finish. The sweeper every minute.
    events = round(records * per["events"])  # each reaches the webhook event queue through the bus's rule
    invocations = files * 4 + chunk_tasks + runs * 5 + persist_tasks + SWEEPS_PER_MONTH + events
    gb_seconds += events * EVENT_WORKER_SECONDS * gb["webhook_fanout"]
    # infra/statemachines: an import is Prepare, WhatNext, (WriteChunks, WhatNext) per task, Finish;
    # a run is Load, WhatNext, Match, WhatNext, (Persist, WhatNext) per task, RefreshExceptions, Finish.
    transitions = files * 3 + chunk_tasks * 2 + runs * 6 + persist_tasks * 2
    writes = records * (per["wcu_import"] + per["wcu_run"])
    reads = records * (per["rru_import"] + per["rru_run"]) + SWEEPS_PER_MONTH * SWEEP_READ_UNITS
    table_gb = records * per["table_bytes"] / 1e9
    s3_gb = records * per["s3_kept_bytes"] / 1e9
    s3_puts, s3_gets = records * per["s3_put"] + files, records * per["s3_get"]
    # A message costs a send, a receive and a delete; an idle queue its pollers' long polls.
    sqs = 3 * (records * per["sqs_sent"] + events) + consumed_queues() * IDLE_POLLERS * LONG_POLLS_PER_MINUTE * \
        MINUTES_PER_MONTH
    api_requests = files * API_REQUESTS_PER_FILE + runs * API_REQUESTS_PER_RUN + used * 30 * API_REQUESTS_PER_DAY
    log_gb = (invocations * LAMBDA_PLATFORM_LOG_BYTES + records * per["log_bytes"]
              + api_requests * API_LOG_BYTES) / 1e9
    alarms, dashboards = template_count("AWS::CloudWatch::Alarm"), template_count("AWS::CloudWatch::Dashboard")
    agent_runs = AGENT_RUNS_PER_MONTH * used
    tokens_in, tokens_out = agent_runs * AGENT_INPUT_TOKENS, agent_runs * AGENT_OUTPUT_TOKENS
    return [
        ("DynamoDB writes", f"{writes / 1e6:,.2f} M write units", writes / 1e6 * PRICES["dynamodb_write_per_million"]),
        ("DynamoDB reads", f"{reads / 1e6:,.2f} M read units", reads / 1e6 * PRICES["dynamodb_read_per_million"]),
        ("DynamoDB storage", f"+{table_gb:,.2f} GB a month kept", table_gb * PRICES["dynamodb_gb_month"]),
        ("DynamoDB point-in-time recovery", f"+{table_gb:,.2f} GB", table_gb * PRICES["dynamodb_pitr_gb_month"]),
        ("S3 requests", f"{s3_puts:,.0f} PUT/COPY/LIST, {s3_gets:,.0f} GET",
         s3_puts / 1e3 * PRICES["s3_put_per_thousand"] + s3_gets / 1e3 * PRICES["s3_get_per_thousand"]),
        ("S3 storage", f"+{s3_gb:,.3f} GB a month kept", s3_gb * PRICES["s3_gb_month"]),
        ("Lambda", f"{gb_seconds:,.0f} GB-s, {invocations:,} invocations",
         gb_seconds * PRICES["lambda_gb_second"] + invocations / 1e6 * PRICES["lambda_per_million"]),
        ("Step Functions (standard)", f"{transitions:,} transitions",
         transitions / 1e3 * PRICES["sfn_per_thousand_transitions"]),
        ("SQS", f"{sqs / 1e6:,.2f} M requests, {consumed_queues()} queues polled", sqs / 1e6 * PRICES["sqs_per_million"]),
        ("EventBridge", f"{events:,.0f} events", events / 1e6 * PRICES["eventbridge_per_million_events"]),
        ("API Gateway (REST)", f"{api_requests:,} requests", api_requests / 1e6 * PRICES["api_gateway_rest_per_million"]),
        ("CloudWatch Logs", f"{log_gb:,.2f} GB ingested, kept 30 days",
         log_gb * (PRICES["logs_ingested_per_gb"] + PRICES["logs_stored_gb_month"])),
        ("CloudWatch alarms and dashboard", f"{alarms} alarms, {dashboards} dashboard",
         alarms * PRICES["alarm_month"] + dashboards * PRICES["dashboard_month"]),
        ("Bedrock (agents' model)", f"{tokens_in / 1e6:,.1f} M tokens in, {tokens_out / 1e6:,.2f} M out",
         tokens_in / 1e6 * PRICES["model_input_per_million_tokens"]
         + tokens_out / 1e6 * PRICES["model_output_per_million_tokens"]),
    ]


def bucket_bytes(container, prefixes: tuple[str, ...]) -> Counter:
    """Bytes of the data bucket's objects, by first path segment, for `prefixes`."""
    s3, by_prefix = container.aws.client("s3"), Counter()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=container.settings.bucket_name):
        for obj in page.get("Contents", []):
            top = obj["Key"].split("/", 1)[0] + "/"
            if top in prefixes:
                by_prefix[top] += obj["Size"]
    return by_prefix


# Main --------------------------------------------------------------------------------------------------

def main() -> None:
    import shutil
    import tempfile

    import requests

    from chalicelib.local.__main__ import LocalService
    from chalicelib.local.processes import free_port
    from chalicelib.services.ingestion.drops import DROPS_PREFIX
    from chalicelib.services.ingestion.files import UPLOADS_PREFIX
    from chalicelib.settings import Settings

    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2_000, help="records per flow (a side, for the run)")
    parser.add_argument("--claims-in-transactions", action="store_true",
                        help="a run's claims and its exception refresh's holds as the local stack sends them "
                             "(TransactWriteItems: twice the table's units), not one by one as a deployed stage "
                             "does")
    args = parser.parse_args()
    indexes = template_indexes()
    workdir = Path(tempfile.mkdtemp(prefix="recon-cost-"))
    service = LocalService(Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_cost",
                                    claims_in_transactions=args.claims_in_transactions),
                           log=lambda m: None).start()
    service.serve_in_background()
    meter = Meter(service.container, indexes, (UPLOADS_PREFIX, DROPS_PREFIX))
    session = requests.Session()
    session.headers["X-API-KEY"] = service.key
    try:
        meter.take()
        stored_bulk = bulk(service, session, args.records)
        bulk_tally = meter.take()
        layout = record_layout(service.container, indexes)
        before_imports = bucket_bytes(service.container, ("uploads/", "mirror/"))
        meter.take()
        imported = sum(csv_import(service, session, args.records, side) for side in ("a", "b"))
        import_tally = meter.take()
        run = batch_run(service, session)
        run_tally = meter.take()
        table_bytes, table_by_kind = stored_bytes(service.container, indexes, leave_out_stream="bulk")
        kept = bucket_bytes(service.container, ("uploads/", "mirror/"))
        kept.subtract(before_imports)
    finally:
        service.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    matched = run["matched_records"]
    print("indexes of infra/template.yaml:")
    for index in indexes:
        extra = f" {sorted(index.attributes)}" if index.attributes else ""
        print(f"  {index.name}: {index.projection}{extra}")
    print("\na record of the bulk flow as stored (bytes, write units per put):")
    for name, size, spent in layout:
        print(f"  {name}: {size} B, {spent}")
    for title, tally, per_count, unit in (
            (f"bulk ingestion, {stored_bulk:,} records in requests of 1,000", bulk_tally, stored_bulk, "stored record"),
            (f"CSV imports, 2 x {args.records:,} rows", import_tally, imported, "stored record"),
            (f"batch run, {matched:,} records matched", run_tally, matched, "matched record")):
        requests_sent = sum(n for op, n in tally.requests.items() if op in WRITES)
        print(f"\n{title}:")
        print(f"  write requests: {requests_sent / per_count:.3f} per {unit} ("
              + ", ".join(f"{op} {n:,}" for op, n in sorted(tally.requests.items()) if op in WRITES) + ")")
        print(f"  write units: {tally.total_write_units() / per_count:.3f} per {unit}"
              f" ({tally.failed_conditions} failed conditions counted at 1 unit, an item of a cancelled transaction too)")
        print("\n".join(breakdown(tally, per_count)))
        print(f"  read units (estimate): {tally.read_units / per_count:.3f} per {unit}")
        print("  S3 requests: " + ", ".join(f"{op} {n}" for op, n in sorted(tally.s3.items()))
              + f"; SQS messages sent: {tally.sqs_sent}")

    print(f"\nstored after the imports and the run, indexes and DynamoDB's 100 B an entry included: "
          f"{table_bytes / imported:,.0f} B per record ("
          + ", ".join(f"{kind} {n / imported:,.0f}" for kind, n in table_by_kind.most_common(6)) + ")")
    print("kept in S3 per record: " + ", ".join(f"{prefix} {n / imported:,.1f} B" for prefix, n in kept.items()))
    s3 = import_tally.s3 + run_tally.s3
    per = {"wcu_import": import_tally.total_write_units() / imported, "rru_import": import_tally.read_units / imported,
           "wcu_run": run_tally.total_write_units() / matched, "rru_run": run_tally.read_units / matched,
           "table_bytes": table_bytes / imported, "s3_kept_bytes": sum(kept.values()) / imported,
           "s3_put": sum(n for op, n in s3.items() if op not in ("GetObject", "HeadObject")) / imported,
           "s3_get": sum(n for op, n in s3.items() if op in ("GetObject", "HeadObject")) / imported,
           "sqs_sent": (import_tally.sqs_sent + run_tally.sqs_sent) / imported,
           "events": (import_tally.events + run_tally.events) / imported,
           "log_bytes": (import_tally.log_bytes + run_tally.log_bytes) / imported}
    print("per record (CSV import + one match):", json.dumps({k: round(v, 4) for k, v in per.items()}))
    volumes = (0, 1_000_000, 10_000_000)
    tables = [monthly(records, per) for records in volumes]
    heads = [f"{v // 1_000_000}M records: counted | cost" if v else "idle (no records): counted | cost"
             for v in volumes]
    print("\n| monthly, us-east-1 | " + " | ".join(heads) + " |")
    print("|---|" + "---|---:|" * len(volumes))
    for row in zip(*tables):
        print(f"| {row[0][0]} | " + " | ".join(f"{what} | ${dollars:,.2f}" for _, what, dollars in row) + " |")
    print("| **total** | " + " | ".join(f" | **${sum(d for _, _, d in t):,.2f}**" for t in tables) + " |")


if __name__ == "__main__":
    main()
