"""A 100,000 x 100,000 batch run end to end on the local stack: records go in as two CSV imports
(not timed), a one-to-one rule on amount plus a 3-day window, then POST /reconciliations/{id}/runs
polled until it ends. Reports the run's time, its persist phase (from the plan to the end) against
a BatchWriteItem-only write of about as many items as the persist writes (the baseline of
bench/ingestion.py, same run: once before the run and once after it, their mean), the DynamoDB write requests per matched record, and the partition
keys of the table and each index the persist's writes land in, the heaviest first (counted from the
requests the service's client sends: items put, and index keys an update sets).

    .venv/bin/python bench/reconciliation_run.py [--records 100000] [--direct] [--baseline-items N]
"""
from __future__ import annotations

import argparse
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingestion import WriteCounter, baseline  # noqa: E402

from chalicelib.local.__main__ import LocalService  # noqa: E402
from chalicelib.local.processes import free_port  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402


def side_csv(records: int, side: str) -> bytes:
    """Side B books the same amounts 0 to 3 days later; one record in 20 has no partner."""
    lines = ["date,amount,description,external_id"]
    for n in range(records):
        day = 1 + n % 25 + (n % 4 if side == "b" else 0)
        amount = 100 + n * 7 if (side == "a" or n % 20) else 5 + n * 7 + 3
        lines.append(f"2026-10-{day:02d},{amount // 100}.{amount % 100:02d},{side} payment {n},{side}-{n:08d}")
    return ("\n".join(lines) + "\n").encode()


class PartitionCounter:
    """Writes by partition key: (index or "table", key) -> items written there. A put counts its
    item's pk and every gsiNpk it carries; an update its pk and the gsiNpk values it sets (what it
    removes from an index, or rewrites in one projecting every attribute, the request does not tell)."""
    SETS_INDEX_KEY = re.compile(r"(gsi\d)pk = (:\w+)")

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.items = 0
        self._lock = threading.Lock()

    def __call__(self, model, params, **_) -> None:
        found: list[tuple[str, str]] = []
        if model.name == "BatchWriteItem":
            for requests_of_table in params["RequestItems"].values():
                for request in requests_of_table:
                    item = request.get("PutRequest", {}).get("Item") or request.get("DeleteRequest", {}).get("Key")
                    found += self._of_item(item)
        elif model.name == "PutItem":
            found += self._of_item(params["Item"])
        elif model.name in ("UpdateItem", "DeleteItem"):
            found += self._of_update(params)
        elif model.name == "TransactWriteItems":  # a run's claims, whole matches at a time
            for action in params["TransactItems"]:
                if "Put" in action:
                    found += self._of_item(action["Put"]["Item"])
                elif "Update" in action or "Delete" in action:
                    found += self._of_update(action.get("Update") or action["Delete"])
        else:
            return
        with self._lock:
            self.items += sum(1 for where, _ in found if where == "table")
            self.counts.update(found)

    @classmethod
    def _of_update(cls, params: dict) -> list[tuple[str, str]]:
        found = [("table", params["Key"]["pk"]["S"])]
        values = params.get("ExpressionAttributeValues", {})
        for index, name in cls.SETS_INDEX_KEY.findall(params.get("UpdateExpression", "")):
            found.append((index, values[name]["S"]))
        for name, update in params.get("AttributeUpdates", {}).items():  # a claim's plain parameters
            if re.fullmatch(r"gsi\dpk", name) and update["Action"] == "PUT":
                found.append((name[:4], update["Value"]["S"]))
        return found

    @staticmethod
    def _of_item(item: dict) -> list[tuple[str, str]]:
        return [("table", item["pk"]["S"])] + [(name[:4], value["S"]) for name, value in item.items()
                                               if re.fullmatch(r"gsi\dpk", name)]

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.items = 0


def write_directly(service: LocalService, records: int, side: str, stream_id: int) -> None:
    """The rows of `side_csv` as record items, by BatchWriteItem (--direct: no import, which a busy
    machine makes the longest part of the benchmark)."""
    from chalicelib.domain.clock import utc_now
    from chalicelib.domain.records import Direction, Record, RecordStatus
    from chalicelib.local.__main__ import LOCAL_ENVIRONMENT

    rows = side_csv(records, side).decode().splitlines()[1:]
    first_id = 1 if side == "a" else 1 + records
    now = utc_now()
    for start in range(0, records, 1000):
        service.container.records.put_many(
            Record(environment=LOCAL_ENVIRONMENT, id=first_id + n, data_stream_key=f"side-{side}",
                   data_stream_id=stream_id, date=day, amount=int(amount.replace(".", "")),
                   direction=Direction.CREDIT, currency="USD", decimal_places=2,
                   status=RecordStatus.UNRECONCILED, created_at=now, description=description, external_id=external)
            for n, (day, amount, description, external) in
            ((n, rows[n].split(",")) for n in range(start, min(start + 1000, records))))


def batch_reconciliation(session: requests.Session, api: str) -> dict:
    """side-a against side-b, one one-to-one rule: amount equals, date within 3 days."""
    reconciliation = session.post(f"{api}/reconciliations", json={
        "name": "Bench", "run_type": "batch", "side_a_stream_keys": ["side-a"],
        "side_b_stream_keys": ["side-b"]}).json()
    assert session.post(f"{api}/reconciliations/{reconciliation['id']}/rules", json={
        "name": "Amount, 3 days", "priority": 1, "cardinality": "one_to_one",
        "conditions": [{"field": "amount", "operator": "equals"},
                       {"field": "date", "operator": "within", "days": 3}]}).ok
    return reconciliation


def wait(session: requests.Session, url: str, busy: tuple[str, ...]) -> dict:
    while True:
        body = session.get(url).json()
        if body["status"] not in busy:
            return body
        time.sleep(0.25)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--direct", action="store_true", help="write the records by BatchWriteItem, not two imports")
    parser.add_argument("--baseline-items", type=int, default=None,
                        help="items the baseline writes, before the run and again after it (default: 5 per record "
                             "of a side, about what the persist writes)")
    args = parser.parse_args()
    baseline_items = args.baseline_items or 5 * args.records
    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-run-"))
    service = LocalService(Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_bench"),
                           log=lambda m: print(f"[local] {m}")).start()
    service.serve_in_background()
    counter, partitions = WriteCounter(), PartitionCounter()
    service.container.aws.dynamodb.meta.events.register("before-call.dynamodb.*", counter)
    service.container.aws.dynamodb.meta.events.register("before-parameter-build.dynamodb.*", partitions)
    session = requests.Session()
    session.headers["X-API-KEY"] = service.key
    api = service.url
    try:
        # Written before the run and again after it: on a shared machine the two differ, and their
        # mean is what the persist, in between, is set against.
        base_before = baseline(service, baseline_items, 4)
        for side in ("a", "b"):
            stream = session.post(f"{api}/data_streams", json={"key": f"side-{side}", "name": side})
            assert stream.ok
            if args.direct:
                write_directly(service, args.records, side, stream.json()["id"])
                continue
            created = session.post(f"{api}/data_streams/side-{side}/file_imports",
                                   json={"filename": f"{side}.csv", "format": "csv"}).json()
            assert requests.put(created["upload_url"], data=side_csv(args.records, side), timeout=300).ok
            done = wait(session, f"{api}/file_imports/{created['id']}", ("pending", "processing", "replicating"))
            assert done["status"] == "completed", done
        reconciliation = batch_reconciliation(session, api)
        counter.reset()
        started = time.perf_counter()
        run = session.post(f"{api}/reconciliations/{reconciliation['id']}/runs").json()
        url = f"{api}/reconciliations/{reconciliation['id']}/runs/{run['id']}"
        planned_at, steps = None, []
        while run["status"] in ("pending", "running"):  # the persist begins once the plan is saved (40%)
            run = session.get(url).json()
            ended = time.perf_counter()  # the last poll's answer: when the run was seen ended
            if planned_at is None and run["progress"] >= 40:
                planned_at = time.perf_counter()
                partitions.reset()
            if planned_at is not None and (not steps or steps[-1][1] != run["matched_records"]):
                steps.append((time.perf_counter() - planned_at, run["matched_records"], run["progress"]))
            time.sleep(0.25)
        seconds = ended - started
        persist_seconds = ended - (planned_at or started)
        events = service.container.aws.dynamodb.meta.events  # the baseline's writes are not the run's
        events.unregister("before-call.dynamodb.*", counter)
        events.unregister("before-parameter-build.dynamodb.*", partitions)
        base_after = baseline(service, baseline_items, 4, environment="baseline-after")
        base_seconds = (base_before + base_after) / 2
        assert run["status"] == "completed", run
        writes = sum(counter.counts.values())
        matched = run["matched_records"]
        print(f"\nmachine: {platform.machine()}, {platform.system()} {platform.release()}, "
              f"python {platform.python_version()}")
        print(f"baseline, BatchWriteItem only: {baseline_items:,} items in {base_before:.1f} s before the run, "
              f"{base_after:.1f} s after it: {baseline_items / base_seconds:,.0f} items/s (their mean)")
        print(f"batch run {args.records:,} x {args.records:,}: {seconds:.1f} s, {matched:,} records matched "
              f"({run['rule_summary']['unmatched']} unmatched), {matched / seconds:,.0f} matched records/s")
        print(f"DynamoDB write requests: {writes:,} = {writes / max(matched, 1):.3f} per matched record; "
              + ", ".join(f"{op} {n:,}" for op, n in sorted(counter.counts.items())))
        items, base_rate = partitions.items, baseline_items / base_seconds
        print(f"persist phase: {persist_seconds:.1f} s, {items:,} items written = {items / persist_seconds:,.0f} "
              f"items/s = {items / persist_seconds / base_rate:.2f}x the baseline's items/s; "
              f"{matched / persist_seconds:,.0f} matched records/s = {matched / persist_seconds / base_rate:.2f}x")
        print("matched_records while persisting (s, records, progress): "
              + ", ".join(f"{t:.0f} {m:,} {p}" for t, m, p in steps[:: max(1, len(steps) // 12)]))
        last_match = next((t for t, m, _ in steps if m == matched), None)
        if matched and last_match is not None:  # the exceptions of what stayed unmatched, the totals, the story tallies
            print(f"the run's end: {persist_seconds - last_match:.1f} s after the last matched record "
                  f"(matched by {last_match:.1f} s of the persist)")
        for index in ("table", "gsi1", "gsi2", "gsi4", "gsi5"):
            heaviest = [(key, n) for (where, key), n in partitions.counts.most_common() if where == index][:2]
            if heaviest:
                print(f"heaviest {index} keys: " + "; ".join(
                    f"{key} {n:,} writes = {n / max(items, 1):.4f} of the items, {n / persist_seconds:,.0f}/s"
                    for key, n in heaviest))
    finally:
        service.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
