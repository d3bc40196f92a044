"""The local stack killed mid-work, and stopped with Ctrl-C mid-work, then started again on the same
data directory: nothing is lost, nothing is doubled, nothing waits for the sweeper's thresholds.

The checks read the table itself (through the adapters, on the stack's own endpoints), not only
the API: a record must never say it is matched unless a committed match holds it."""
from __future__ import annotations

import os
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pytest
import requests

from chalicelib.container import Container
from chalicelib.domain.runs import MATCHED_AT
from chalicelib.local.launcher import StackProcess
from chalicelib.local.processes import descendants
from chalicelib.local.stack import running_stack
from chalicelib.settings import Settings

# One worker runs both: side by side their two stacks (eight processes on CI's two cores) made a
# 500-row chunk outlast the stop's 5 s grace.
pytestmark = pytest.mark.xdist_group("crash_recovery")
ENV = "local"
RUN_PAIRS = 2_000          # bank and ledger records matched one to one by the run in flight
# Small persist chunks: the run's 4,000 records persist in 40 chunks, 10 tasks of 4, a window wide
# enough to be caught part-way on a busy machine (a smaller largest run keeps the setting valid):
# killed, it had written a tenth to a fifth of them on a loaded machine.
# A stop waits up to 20 s for a checkpoint: on a busy machine a 500-row chunk outlasts the default 5.
STOP_GRACE_SECONDS = 20
STACK_ENV = {"RECON_RUN_CHUNK_RECORDS": "100", "RECON_MAX_RUN_RECORDS": "200000",
             "RECON_STOP_GRACE_SECONDS": str(STOP_GRACE_SECONDS)}
# Rows of the file import in flight when the stack is killed (500-row chunks, two written at once):
# the kill waits for a chunk of it counted and for the bulk requests sent after it to have begun, so
# it must outlast them (4,000 rows could end before; of 6,000, 3,000 to 4,000 were written at the
# kill on a loaded machine; 12,000 took twice the time for no more proof).
CSV_ROWS = 8_000
# Rows of the import a Ctrl-C stops: it only has to be seen part-way (a chunk counted, not all).
CTRL_C_ROWS = 4_000
BULK_REQUESTS, BULK_ITEMS = 4, 500
ENDED = ("completed", "failed", "cancelled")
# How long the polls after the restart wait: generous, since what shows that the restart itself
# resumed the work (not the sweeper, after its 5 minutes for imports and 75 for runs) is that nothing
# counts a restart, asserted below, not the time it took on a busy machine.
RESUME_TIMEOUT = 600


def poll(what, check, timeout: float, interval: float = 0.2):
    """`check()` until it returns something truthy; its last answer in the failure otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer:
            return answer
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(interval)


def create_stream(stack: StackProcess, key: str) -> None:
    assert stack.request("POST", "/data_streams", {"key": key, "name": key}).status_code == 201


def bulk(stack: StackProcess, items: list[dict]) -> int:
    answer = stack.request("POST", "/records/bulk", {"records": items})
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def bulk_done(stack: StackProcess, request_id: int) -> dict | None:
    body = stack.request("GET", f"/bulk_requests/{request_id}").json()
    return body if body["status"] in ENDED else None


def pair(stream: str, n: int) -> dict:
    return {"data_stream_key": stream, "external_id": f"{stream}-{n}", "amount": 10_000 + n, "date": "2026-11-02",
            "direction": "credit"}


def upload_csv(stack: StackProcess, stream: str, rows: int) -> dict:
    created = stack.request("POST", f"/data_streams/{stream}/file_imports",
                            {"filename": "nov.csv", "format": "csv"}).json()
    body = "date,amount,external_id\n" + "".join(f"2026-11-01,{n}.{n % 100:02d},c-{n}\n" for n in range(rows))
    assert requests.put(created["upload_url"], data=body.encode(), timeout=60).status_code == 200
    return created


def import_of(stack: StackProcess, import_id: int) -> dict:
    return stack.request("GET", f"/file_imports/{import_id}").json()


def kill_everything(data_dir: Path) -> None:
    """SIGKILL to the stack and every process under it, at once: as if the machine died."""
    info = running_stack(data_dir)
    assert info is not None
    everything = descendants(info.pid)
    assert len(everything) >= 4, everything  # the stack, dynalite, the AWS server, s3rver
    for pid in everything:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def table_of(data_dir: Path) -> Container:
    info = running_stack(data_dir)
    assert info is not None
    return Container(info.settings(Settings()))


def all_records(container: Container, stream: str) -> list:
    from chalicelib.domain.records import RecordQuery

    records, cursor = [], None
    while True:
        page, cursor = container.records.list_page(ENV, RecordQuery(data_stream_key=stream), 500, cursor)
        records += page
        if cursor is None:
            return records


def assert_every_record_in_exactly_one_match(container: Container, reconciliation_id: int, streams: list[str]) -> int:
    """Every record of the streams holds a match of the reconciliation that is committed and lists
    it; every committed match's records hold it. Returns how many matches there are."""
    ids = [r.id for stream in streams for r in all_records(container, stream)]
    held = {h.record.id: h for h in container.claims.held_records(ENV, ids)}
    match_of = {record_id: h.match_in(reconciliation_id) for record_id, h in held.items()}
    unmatched = sorted(i for i, m in match_of.items() if m is None)
    assert not unmatched, f"{len(unmatched)} records in no match, e.g. {unmatched[:5]}"
    match_ids = set(match_of.values())
    committed = container.matches.existing_ids(ENV, match_ids)
    assert committed == match_ids, f"records held by matches never committed: {sorted(match_ids - committed)[:5]}"
    holding: dict[int, set[int]] = {}
    for record_id, match_id in match_of.items():
        holding.setdefault(match_id, set()).add(record_id)
    ordered = sorted(match_ids)
    with ThreadPoolExecutor(4) as pool:  # a query a match, side by side
        read = pool.map(lambda match_id: {m.record_id for m in container.matches.members(ENV, match_id)}, ordered)
        for match_id, members in zip(ordered, read):
            assert members == holding[match_id], match_id
    return len(match_ids)


@pytest.fixture
def stack(tmp_path):
    running = StackProcess(tmp_path / "data", api_key=f"rk_crash-{uuid.uuid4().hex[:8]}", extra_env=STACK_ENV).start()
    yield running
    running.stop()


def test_a_stack_killed_mid_work_finishes_all_of_it_after_a_restart(stack, tmp_path):
    # Given records on both sides of a batch reconciliation
    for key in ("bank", "ledger", "cards", "fees"):
        create_stream(stack, key)
    reconciliation = stack.request("POST", "/reconciliations", {
        "name": "Bank to ledger", "run_type": "batch", "side_a_stream_keys": ["bank"],
        "side_b_stream_keys": ["ledger"]}).json()
    rule = stack.request("POST", f"/reconciliations/{reconciliation['id']}/rules", {
        "name": "Amount, 3 days", "conditions": [{"field": "amount", "operator": "equals"},
                                                 {"field": "date", "operator": "within", "days": 3}]})
    assert rule.status_code == 201, rule.text
    seeded = [bulk(stack, [pair(side, n) for n in range(start, min(start + 1000, RUN_PAIRS))])
              for side in ("bank", "ledger") for start in range(0, RUN_PAIRS, 1000)]
    for request_id in seeded:
        assert poll("seeding", lambda i=request_id: bulk_done(stack, i), 120)["status"] == "completed"

    # When a run is part-way through its persist chunks, a file import is writing its rows...
    run = stack.request("POST", f"/reconciliations/{reconciliation['id']}/runs", {}).json()
    run_url = f"/reconciliations/{reconciliation['id']}/runs/{run['id']}"
    created = upload_csv(stack, "cards", CSV_ROWS)
    seen: list[str] = []

    def look(fees: list[int]) -> tuple[dict, dict, list[int]]:
        written = import_of(stack, created["id"])
        running = stack.request("GET", run_url).json()
        bulks = [stack.request("GET", f"/bulk_requests/{i}").json()["processed_items"] for i in fees]
        seen[:] = [f"import {written['status']} {written['processed_items']}/{CSV_ROWS}",
                   f"run {running['status']} at {running['progress']}%", f"bulk requests at {bulks}"]
        return written, running, bulks

    def persisting_and_writing(fees: list[int]) -> bool:
        written, running, bulks = look(fees)
        return (written["status"] == "processing" and running["status"] == "running"
                and MATCHED_AT < running["progress"] < 100 and (not fees or (
                    0 < written["processed_items"] < CSV_ROWS
                    and any(n > 0 for n in bulks) and any(n < BULK_ITEMS for n in bulks))))

    def poll_seen(what: str, check) -> None:
        try:
            poll(what, check, 120, interval=0.02)
        except AssertionError as error:
            raise AssertionError(f"{error}; last seen: {', '.join(seen)}") from None
    poll_seen("a run persisting while an import writes", lambda: persisting_and_writing([]))
    # ... and bulk requests sent then have begun, with a chunk of the import counted (the run's 40
    # persist chunks last far longer)
    fee_items = [[{"data_stream_key": "fees", "external_id": f"fee-{r}-{n}", "amount": 100 + n,
                   "date": "2026-11-03", "direction": "debit"} for n in range(BULK_ITEMS)]
                 for r in range(BULK_REQUESTS)]
    fees = [bulk(stack, items) for items in fee_items]
    poll_seen("bulk requests begun, with the run and the import still part-way",
              lambda: persisting_and_writing(fees))
    # ... and the whole process tree dies at once
    kill_everything(stack.data_dir)
    stack.process.wait(timeout=30)

    # Then, started again on the same data, everything finishes by itself, well before any sweeper
    stack.start()
    imported = poll("the import", lambda: (b := import_of(stack, created["id"]))["status"] in ENDED and b,
                    RESUME_TIMEOUT)
    requests_done = [poll("a bulk request", lambda i=i: bulk_done(stack, i), RESUME_TIMEOUT) for i in fees]
    finished_run = poll("the run", lambda: (r := stack.request("GET", run_url).json())["status"] in
                        ("completed", "failed") and r, RESUME_TIMEOUT)
    assert finished_run["status"] == "completed", finished_run  # its files were kept: it goes on, not over
    container = table_of(stack.data_dir)
    # Resumed by the start itself: a resume counts no restart; the sweeper's would.
    for job_id in (created["id"], *fees):  # the import and the bulk requests (each an ingestion job)
        assert container.ingestion_jobs.get(ENV, job_id).restarts == 0, job_id
    assert container.runs.get(ENV, run["id"]).restarts == 0

    # The import: exactly its rows
    assert imported["status"] == "completed", imported
    assert (imported["total_items"], imported["successful_items"], imported["failed_items"]) == (CSV_ROWS, CSV_ROWS, 0)
    # Every bulk request: totals that add up, and exactly its records
    fee_records = all_records(container, "fees")
    for done in requests_done:
        assert done["status"] == "completed", done
        assert done["successful_items"] + done["failed_items"] + done["skipped_items"] == BULK_ITEMS == \
            done["total_items"]
        assert done["successful_items"] == BULK_ITEMS
    assert sorted(r.external_id for r in fee_records) == sorted(i["external_id"] for items in fee_items
                                                                for i in items)
    # The run: every record in exactly one match
    assert assert_every_record_in_exactly_one_match(container, reconciliation["id"], ["bank", "ledger"]) == RUN_PAIRS
    # Stream counts equal the records
    for key, expected in (("bank", RUN_PAIRS), ("ledger", RUN_PAIRS), ("cards", CSV_ROWS),
                          ("fees", BULK_REQUESTS * BULK_ITEMS)):
        assert len(all_records(container, key)) == expected, key
        assert poll(f"{key}'s count", lambda k=key, n=expected: stack.request(
            "GET", f"/data_streams/{k}").json()["records_count"] == n, 30), key


def test_ctrl_c_mid_import_stops_within_seconds_at_a_checkpoint_and_the_import_resumes(stack):
    create_stream(stack, "cards")
    created = upload_csv(stack, "cards", CTRL_C_ROWS)
    poll("the import part-way", lambda: 0 < import_of(stack, created["id"])["processed_items"] < CTRL_C_ROWS, 120,
         interval=0.05)

    asked = time.monotonic()
    stack.process.send_signal(signal.SIGINT)
    stack.process.wait(timeout=30)
    stopped_in = time.monotonic() - asked
    log = stack.log_path.read_text()
    assert stopped_in < STOP_GRACE_SECONDS + 5, f"took {stopped_in:.1f} s to stop"
    assert "Traceback" not in log, log[max(0, log.index("Traceback") - 200):][:6000]  # pytest cuts it short
    assert "paused before state" in log and "stopping without waiting" not in log  # a checkpoint, not a cut

    stack.start()
    done = poll("the import", lambda: (b := import_of(stack, created["id"]))["status"] in ENDED and b, 120)
    assert (done["status"], done["successful_items"], done["failed_items"]) == ("completed", CTRL_C_ROWS, 0)
    assert len(all_records(table_of(stack.data_dir), "cards")) == CTRL_C_ROWS
    assert stack.request("GET", "/data_streams/cards").json()["records_count"] == CTRL_C_ROWS

    # The analytics mirror lost: rebuilt by hand, and by the stack itself at its next start
    info = running_stack(stack.data_dir)
    s3 = boto3.client("s3", endpoint_url=info.s3_endpoint, region_name="us-east-1", aws_access_key_id="local",
                      aws_secret_access_key="local")

    def lose_the_mirror() -> int:
        keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=info.bucket_name,
                                                                                  Prefix="mirror/")
                for o in page.get("Contents", [])]
        for key in keys:
            s3.delete_object(Bucket=info.bucket_name, Key=key)
        return len(keys)

    assert lose_the_mirror() > 0
    rebuilt = stack.cli("mirror", "rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert f"rewrote 1 import(s) ({CTRL_C_ROWS} records)" in rebuilt.stdout
    assert stack.request("GET", "/data_streams/cards").json()["records_count"] == CTRL_C_ROWS
    assert "nothing to repair" in stack.cli("mirror", "rebuild").stdout

    lose_the_mirror()
    stack.stop()
    stack.start()
    poll("the mirror repaired at start", lambda: f"rewrote 1 import(s) ({CTRL_C_ROWS} records)" in
         stack.log_path.read_text(), 60)
    assert stack.request("GET", "/data_streams/cards").json()["records_count"] == CTRL_C_ROWS
