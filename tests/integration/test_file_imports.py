"""File imports end to end on moto: create, upload (presigned PUT), the S3 event, the state machine
run in-process by the local driver, results, aggregates, drops, cancel, crash resume, the sweeper."""
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import requests

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.records import RecordRepository
from chalicelib.domain.clock import utc_now
from chalicelib.domain.ingestion import JobStatus
from chalicelib.local.statemachines import _task_resource_name, load_definition
from chalicelib.services.ingestion import files, sweeper

# Write to the end whatever the machine's load: a real task budget could run out on a busy CI core.
WHOLE_FILE = timedelta(hours=1)

NACHA = Path(__file__).resolve().parents[1] / "data" / "nacha"
CSV = ("date,amount,description,external_id,payout_id\n"
       "2026-11-01,12.34,Coffee,tx-1,po_1\n"
       "2026-11-02,\"1,000.00\",Rent,tx-2,po_1\n"
       "2026-11-03,abc,Broken,tx-3,po_2\n"
       "2026-11-04,-5.00,Refund,tx-4,po_2\n")


@pytest.fixture
def runtime(services):
    from app import app
    from chalicelib.local.runtime import LocalRuntime

    return LocalRuntime(app, services.aws.sqs, "us-east-1", log=print, redelivery_seconds=0)


@pytest.fixture
def bank(api):
    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201


def upload(services, runtime, created, data: bytes):
    response = requests.put(created["upload_url"], data=data, timeout=10)
    assert response.status_code == 200
    key = f"uploads/acme/{created['id']}/{created['filename']}"
    head = services.aws.s3.head_object(Bucket=services.settings.bucket_name, Key=key)
    runtime.deliver_s3_event(services.settings.bucket_name, key, head["ETag"].strip('"'), len(data))


def create(api, **body):
    response = api.post("/v1/data_streams/bank/file_imports", {"filename": "nov.csv", "format": "csv", **body})
    assert response.status_code == 201, response.json_body
    return response.json_body


def uploaded_unannounced(api, rows: int, prefix: str) -> dict:
    """An import whose file of `rows` rows is uploaded, with no S3 event delivered: the test drives
    the steps itself."""
    data = "date,amount,external_id\n" + "".join(f"2026-11-01,{n}.00,{prefix}-{n}\n" for n in range(rows))
    created = create(api)
    assert requests.put(created["upload_url"], data=data.encode(), timeout=10).status_code == 200
    return created


# The cancel and crash tests cut their files in chunks of 50 rows, not 500: the same chunks, a tenth of the writes.
SMALL_CHUNK = 50


def in_small_chunks(services, created: dict) -> dict:
    """The import, its chunk size set on its item as one made with a SMALL_CHUNK default would be."""
    services.table.update(keys.ingestion_job("acme", created["id"]), "SET file_chunk_rows = :rows",
                          {":rows": SMALL_CHUNK})
    assert services.ports.ingestion_jobs.get("acme", created["id"]).chunk_rows == SMALL_CHUNK
    return created


def test_a_csv_upload_is_imported_with_its_bad_rows_reported_by_line(api, services, runtime, bank):
    created = create(api)
    assert created["status"] == "pending" and created["upload_url"].startswith("http")
    assert created["url"] == f"/v1/file_imports/{created['id']}" and created["source"] == "csv"

    upload(services, runtime, created, CSV.encode())

    done = api.get(created["url"]).json_body
    assert done["status"] == "completed", done
    assert (done["total_items"], done["successful_items"], done["failed_items"]) == (4, 3, 1)
    assert done["expected_records_count"] == 4 and done["progress"] == 100 and done["parsing"] is False
    assert done["records_written_at"] and done["started_at"] and done["data_stream_ids"]
    [bad] = done["results"]
    assert bad["line"] == 4 and bad["status"] == "failed" and "abc" in bad["error"]
    records = api.get(f"/v1/file_imports/{created['id']}/records").json_body["data"]
    assert sorted((r["amount"], r["direction"]) for r in records) == [(500, "debit"), (1234, "credit"),
                                                                      (100000, "credit")]
    assert all(r["metadata"]["payout_id"].startswith("po_") for r in records)

    listed = api.get("/v1/data_streams/bank/file_imports").json_body["data"]
    [summary] = listed
    assert (summary["record_count"], summary["total_credits"], summary["total_debits"],
            summary["net_amount"]) == (3, 101234, 500, 100734)
    assert (summary["date_range_start"], summary["date_range_end"], summary["currency"]) == (
        "2026-11-01", "2026-11-04", "USD")
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 3


def test_column_mapping_and_date_format_apply(api, services, runtime, bank):
    created = create(api, column_mapping={"Posted": "date", "Value": "amount"}, date_format="DD/MM/YYYY")
    upload(services, runtime, created, b"Posted,Value\n31/10/2026,7.00\n")
    [record] = api.get(f"/v1/file_imports/{created['id']}/records").json_body["data"]
    assert record["date"] == "2026-10-31" and record["amount"] == 700


def test_a_valid_nacha_file_becomes_one_record_per_entry(api, services, runtime, bank):
    created = create(api, filename="payroll.ach", format="nacha")
    upload(services, runtime, created, (NACHA / "ppd.ach").read_bytes())
    done = api.get(created["url"]).json_body
    assert done["status"] == "completed" and done["successful_items"] == 3
    records = api.get(f"/v1/file_imports/{created['id']}/records").json_body["data"]
    assert {r["metadata"]["trace_number"] for r in records} == {"076401250000001", "076401250000002",
                                                               "076401250000003"}
    assert {r["external_id"] for r in records} == {
        f"076401251-2611020930A-0000001-07640125000000{n}" for n in (1, 2, 3)}


def test_a_nacha_file_that_fails_validation_fails_whole_and_writes_nothing(api, services, runtime, bank):
    created = create(api, filename="bad.ach", format="nacha")
    upload(services, runtime, created, (NACHA / "broken_bad_batch_totals.ach").read_bytes())
    done = api.get(created["url"]).json_body
    assert done["status"] == "failed" and "line 6" in done["error_message"]
    assert done["error_details"]["errors"][0]["field"] == "total_debit_amount"
    assert api.get(f"/v1/file_imports/{created['id']}/records").json_body["data"] == []
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 0


def test_a_file_dropped_in_the_bucket_imports_itself_once(api, services, runtime, bank):
    bucket = services.settings.bucket_name
    key = "drops/acme/bank/2026-11-03.ach"
    data = (NACHA / "web.ach").read_bytes()
    services.aws.s3.put_object(Bucket=bucket, Key=key, Body=data)
    etag = services.aws.s3.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
    runtime.deliver_s3_event(bucket, key, etag, len(data))
    runtime.deliver_s3_event(bucket, key, etag, len(data))  # EventBridge delivers at least once
    [imported] = api.get("/v1/data_streams/bank/file_imports").json_body["data"]
    assert imported["status"] == "completed" and imported["source"] == "nacha"
    assert imported["filename"] == "2026-11-03.ach" and imported["record_count"] == 2


def test_a_drop_for_an_unknown_stream_or_environment_is_ignored(api, services, runtime, bank):
    bucket = services.settings.bucket_name
    for key in ("drops/acme/ghost/x.csv", "drops/other-env/bank/x.csv"):
        services.aws.s3.put_object(Bucket=bucket, Key=key, Body=CSV.encode())
        runtime.deliver_s3_event(bucket, key, "e", 1)
    assert api.get("/v1/data_streams/bank/file_imports").json_body["data"] == []


def test_cancel_a_pending_import_that_never_got_its_file(api, bank):
    # Given a pending import waiting for its file
    created = create(api)
    # When it is cancelled, and the cancel is repeated a little later
    response = api.post(f"/v1/file_imports/{created['id']}/cancel")
    again = api.post(f"/v1/file_imports/{created['id']}/cancel")
    # Then both answer 202 with the import cancelled: the repeat only moves cancellation_requested_at
    assert response.status_code == 202
    assert response.json_body["status"] == "cancelled" and response.json_body["cancellation_requested_at"]
    assert again.status_code == 202, again.json_body
    assert again.json_body["status"] == "cancelled"
    assert again.json_body["cancellation_requested_at"] >= response.json_body["cancellation_requested_at"]
    assert {k: v for k, v in again.json_body.items() if k != "cancellation_requested_at"} == {
        k: v for k, v in response.json_body.items() if k != "cancellation_requested_at"}
    assert api.post("/v1/file_imports/999/cancel").status_code == 404


def test_cancelling_a_completed_import_is_a_conflict(api, services, runtime, bank):
    # Given an import that completed
    created = create(api)
    upload(services, runtime, created, CSV.encode())
    assert api.get(created["url"]).json_body["status"] == "completed"
    # When it is cancelled
    response = api.post(f"/v1/file_imports/{created['id']}/cancel")
    # Then 409, saying why, and nothing moves
    assert response.status_code == 409 and set(response.json_body) == {"message"}
    assert "completed" in response.json_body["message"]
    assert api.get(created["url"]).json_body["cancellation_requested_at"] is None


def test_a_cancel_during_processing_stops_at_the_next_heartbeat_keeping_what_was_written(
        api, services, runtime, bank):
    created = in_small_chunks(services, uploaded_unannounced(api, 5 * SMALL_CHUNK, "c"))
    ports = services.ports
    assert files.prepare(ports, "acme", created["id"]) == "chunk"
    assert files.write_chunks(ports, "acme", created["id"], budget=timedelta(0)) == "chunk"  # one chunk
    first = api.post(f"/v1/file_imports/{created['id']}/cancel").json_body
    second = api.post(f"/v1/file_imports/{created['id']}/cancel").json_body
    assert first["status"] == second["status"] == "processing"
    assert second["cancellation_requested_at"] >= first["cancellation_requested_at"]

    assert files.write_chunks(ports, "acme", created["id"]) == "stop"

    done = api.get(created["url"]).json_body
    one_chunk = SMALL_CHUNK
    assert done["status"] == "cancelled" and done["successful_items"] == one_chunk
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == one_chunk
    [listed] = api.get("/v1/data_streams/bank/file_imports").json_body["data"]
    assert listed["record_count"] == one_chunk  # what was written before the cancel is replicated too


class RecordsThatDie(RecordRepository):
    def __init__(self, table, die_on_call: int) -> None:
        super().__init__(table)
        self.calls, self.die_on_call = 0, die_on_call

    def put_many(self, records):
        self.calls += 1
        written = super().put_many(records)
        if self.calls == self.die_on_call:
            raise RuntimeError("Lambda died after writing the records, before the checkpoint")
        return written


def test_a_crashed_chunk_resumes_from_its_checkpoint_without_duplicates_or_gaps(api, services, bank):
    created = in_small_chunks(services, uploaded_unannounced(api, 310, "r"))  # six chunks and a part; the 2nd dies
    ports = services.ports
    files.prepare(ports, "acme", created["id"])
    dying = replace(ports, records=RecordsThatDie(services.table, 2))
    with pytest.raises(RuntimeError):
        files.write_chunks(dying, "acme", created["id"])

    assert files.write_chunks(ports, "acme", created["id"], budget=WHOLE_FILE) == "finish"
    files.finish(ports, "acme", created["id"])

    done = api.get(created["url"]).json_body
    assert (done["status"], done["successful_items"], done["processed_items"]) == ("completed", 310, 310)
    ids, cursor = [], None
    while True:
        page = api.get(f"/v1/file_imports/{created['id']}/records?limit=50" +
                       (f"&cursor={cursor}" if cursor else "")).json_body
        ids += [r["external_id"] for r in page["data"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(ids) == sorted(f"r-{n}" for n in range(310))
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 310


def test_the_sweeper_restarts_a_stuck_import_and_fails_it_after_too_many_restarts(api, services, bank):
    created = create(api)
    requests.put(created["upload_url"], data=CSV.encode(), timeout=10)
    ports = services.ports
    files.prepare(ports, "acme", created["id"])  # then the workflow "dies": no more heartbeats
    job = services.ingestion_jobs.get("acme", created["id"])
    assert job.status is JobStatus.PROCESSING and not job.stuck(utc_now())
    later = utc_now() + timedelta(minutes=6)
    assert api.get(created["url"]).json_body["stuck"] is False

    counts = sweeper.sweep(ports, now=later)

    assert counts["restarted"] == 1
    assert api.get(created["url"]).json_body["status"] == "completed"  # the restarted run finished it

    stuck = create(api)
    requests.put(stuck["upload_url"], data=CSV.encode(), timeout=10)
    files.prepare(ports, "acme", stuck["id"])
    job = services.ingestion_jobs.get("acme", stuck["id"])
    services.table.update({"pk": f"E#acme#JOB#{stuck['id']:012d}", "sk": "JOB"}, "SET restarts = :r",
                          values={":r": sweeper.MAX_RESTARTS})
    sweeper.sweep(ports, now=utc_now() + timedelta(minutes=6))
    failed = api.get(stuck["url"]).json_body
    assert failed["status"] == "failed" and "restarts" in failed["error_message"]


def test_bulk_requests_are_file_imports_too(api, bank, worker):
    summary = api.post("/v1/records/bulk", {"records": [
        {"date": "2026-11-01", "data_stream_key": "bank", "amount": 5, "direction": "credit"}]}).json_body
    worker.drain()
    job = api.get(f"/v1/file_imports/{summary['id']}").json_body
    assert job["source"] == "bulk_api" and job["status"] == "completed"
    assert job["url"] == f"/v1/file_imports/{summary['id']}" and summary["url"] == f"/v1/bulk_requests/{summary['id']}"


@pytest.mark.parametrize("asl, resource", [("file_import", "FileImportStateMachine"),
                                           ("reconciliation_run", "ReconciliationRunStateMachine")])
def test_every_task_of_each_state_machine_is_a_function_of_the_app(asl, resource):
    from app import app

    def tasks_of(states: dict) -> list[str]:  # a Map's own states (its ItemProcessor's) included
        return [resource for state in states.values() for resource in (
            [state["Resource"]] if state["Type"] == "Task" else
            tasks_of(state["ItemProcessor"]["States"]) if state["Type"] == "Map" else [])]

    tasks = tasks_of(load_definition(asl)["States"])
    from chalicelib.local.provision import state_machine_definition, workflows_resolver

    template, resolver = workflows_resolver({"DataBucketName": "b"}, "us-east-1")
    _, substitutions = state_machine_definition(template, resolver, resource)
    assert tasks and set(substitutions) == {_task_resource_name(t) for t in tasks}
    for task in tasks:
        function = substitutions[_task_resource_name(task)].rsplit(":", 1)[-1].removeprefix("recon-dev-")
        assert function in app.handler_map, function


@pytest.mark.parametrize("body, field", [
    ({"filename": "x.csv", "format": "xlsx"}, "format"), ({"format": "csv"}, "filename"),
    ({"filename": "x.csv", "format": "csv", "date_format": "YY"}, "date_format"),
    ({"filename": "x.ach", "format": "nacha", "decimal_places": 3}, "decimal_places"),
])
def test_bad_create_bodies_are_422(api, bank, body, field):
    response = api.post("/v1/data_streams/bank/file_imports", body)
    assert response.status_code == 422 and response.json_body["errors"][0]["field"] == field


def test_an_import_into_an_unknown_stream_is_404(api):
    assert api.post("/v1/data_streams/ghost/file_imports", {"filename": "x.csv", "format": "csv"}).status_code == 404


def test_a_completed_import_is_in_the_mirror_as_parquet_partitioned_by_environment_stream_and_import(
        api, services, runtime, bank):
    import io

    import polars as pl

    created = create(api)
    upload(services, runtime, created, CSV.encode())
    s3, bucket = services.aws.s3, services.settings.bucket_name
    prefix = f"mirror/environment=acme/data_stream=bank/import={created['id']}/"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
    # The marker the count is read from, the part, and the part's rows again in the import's one
    # compact object (what the agents' sql reads).
    assert keys == [prefix + "_rows=3", prefix + "compact.parquet", prefix + "part-000000.parquet"]
    assert s3.list_objects_v2(Bucket=bucket, Prefix="staging/").get("KeyCount", 0) == 0
    frame = pl.read_parquet(io.BytesIO(s3.get_object(Bucket=bucket, Key=keys[2])["Body"].read()))
    compact = pl.read_parquet(io.BytesIO(s3.get_object(Bucket=bucket, Key=keys[1])["Body"].read()))
    assert compact.sort("id").equals(frame.sort("id"))
    assert frame["amount"].dtype == pl.Int64 and sorted(frame["amount"].to_list()) == [500, 1234, 100000]
    assert set(frame["external_id"].to_list()) == {"tx-1", "tx-2", "tx-4"}


@pytest.mark.parametrize("filename", ["..", ".", "../../etc/passwd", "rapport d'été.csv"])
def test_any_filename_gets_an_upload_key_http_clients_keep(api, services, runtime, bank, filename):
    created = create(api, filename=filename)
    environment, job_id, name = created["upload_url"].split("?")[0].split("/uploads/")[1].split("/")
    assert (environment, job_id) == ("acme", str(created["id"]))
    assert name.strip(".") and created["filename"] == filename


def test_an_empty_column_mapping_key_is_422(api, bank):
    response = api.post("/v1/data_streams/bank/file_imports",
                        {"filename": "x.csv", "format": "csv", "column_mapping": {"": "date"}})
    assert response.status_code == 422


def test_an_empty_dropped_file_fails_its_import_with_a_reason(api, services, runtime, bank):
    bucket = services.settings.bucket_name
    etag = services.aws.s3.put_object(Bucket=bucket, Key="drops/acme/bank/empty.csv", Body=b"")["ETag"].strip('"')
    runtime.deliver_s3_event(bucket, "drops/acme/bank/empty.csv", etag, 0)
    [imported] = api.get("/v1/data_streams/bank/file_imports").json_body["data"]
    assert imported["status"] == "failed" and "empty" in imported["error_message"]


def test_a_file_over_the_import_limit_is_refused_with_a_message(api, services, runtime, bank):
    # settings.max_import_bytes (100 MB)
    services.ports = replace(services.ports, limits=replace(services.ports.limits, max_import_bytes=1000))
    created = create(api)
    big = b"date,amount\n" + b"2026-11-01,1.00\n" * 100
    upload(services, runtime, created, big)
    done = api.get(created["url"]).json_body
    assert done["status"] == "failed" and "split it" in done["error_message"]
    assert done["error_details"] == {"bytes": len(big), "limit": 1000}


def test_a_failed_csv_row_keeps_its_external_id_and_a_date_error_names_the_declared_format(
        api, services, runtime, bank):
    created = create(api, date_format="DD/MM/YYYY")
    upload(services, runtime, created, b"date,amount,external_id\n"
                                       b"01/11/2026,1.00,ok-1\n30/02/2026,2.00,bad-date\n02/11/2026,x,bad-amount\n")
    results = api.get(created["url"]).json_body["results"]
    assert [(r["line"], r["external_id"], r["status"]) for r in results] == [
        (3, "bad-date", "failed"), (4, "bad-amount", "failed")]
    assert "DD/MM/YYYY" in results[0]["error"] and "YYYY-MM-DD" not in results[0]["error"]


@pytest.mark.parametrize("options, data, places", [
    ({}, b"date,amount\n2026-11-01,1.00\n", 2), ({"decimal_places": 3}, b"date,amount\n2026-11-01,1.000\n", 3),
    ({}, b"date,amount,currency\n2026-11-01,100,JPY\n", 0), ({}, b"date,amount\n2026-11-01,x\n", 2),
])
def test_a_csv_import_gives_the_decimal_places_of_its_option_or_its_rows_currency(
        api, services, runtime, bank, options, data, places):
    created = create(api, **options)
    upload(services, runtime, created, data)
    assert api.get(created["url"]).json_body["decimal_places"] == places


def test_a_nacha_import_is_in_cents_from_the_start(api, bank):
    assert create(api, filename="payroll.ach", format="nacha")["decimal_places"] == 2


def test_a_pending_upload_gets_a_fresh_upload_url_that_works(api, services, runtime, bank):
    created = create(api)
    pending = api.get(created["url"]).json_body
    assert pending["status"] == "pending" and pending["upload_url"].startswith("http")
    upload(services, runtime, dict(created, upload_url=pending["upload_url"]), CSV.encode())  # the first URL lost
    done = api.get(created["url"]).json_body
    assert done["status"] == "completed" and done["upload_url"] is None


def test_no_upload_url_once_cancelled_or_past_the_upload_deadline(api, services, bank):
    cancelled = create(api)
    api.post(f"/v1/file_imports/{cancelled['id']}/cancel")
    assert api.get(cancelled["url"]).json_body["upload_url"] is None
    late = services.ingestion_jobs.get("acme", create(api)["id"])
    assert files.fresh_upload_url(services.ports, late, now=utc_now() + files.UPLOAD_WAIT) is None


# NACHA files written by other tools (tests/data/nacha/moov-io, see its README) ---------------

MOOV = NACHA / "moov-io"


def test_batches_restarting_trace_numbers_import_every_entry_and_a_second_import_skips_them_all(
        api, services, runtime, bank):
    data = (MOOV / "flattenBatchesTraceNumberCollision.ach").read_bytes()  # traces 1 and 2 in two batches
    first = create(api, filename="collision.ach", format="nacha", on_conflict="skip")
    upload(services, runtime, first, data)
    done = api.get(first["url"]).json_body
    assert done["status"] == "completed", done
    assert (done["total_items"], done["successful_items"], done["skipped_items"]) == (15, 15, 0)
    records = api.get(f"/v1/file_imports/{first['id']}/records?limit=50").json_body["data"]
    assert len({r["external_id"] for r in records}) == 15
    assert sorted(r["metadata"]["trace_number"] for r in records).count("121042880000001") == 2

    again = create(api, filename="collision.ach", format="nacha", on_conflict="skip")
    upload(services, runtime, again, data)
    repeated = api.get(again["url"]).json_body
    assert (repeated["status"], repeated["successful_items"], repeated["skipped_items"]) == ("completed", 0, 15)
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 15


def test_a_nacha_file_whose_control_counts_disagree_is_refused_unless_the_import_accepts_it_with_warnings(
        api, services, runtime, bank):
    data = (MOOV / "nonascii.ach").read_bytes()  # file control: 1 block and 1 entry/addenda; the file has 2 and 13
    refused = create(api, filename="counts.ach", format="nacha")
    upload(services, runtime, refused, data)
    failed = api.get(refused["url"]).json_body
    assert failed["status"] == "failed" and "block_count" in failed["error_message"]
    assert [e["field"] for e in failed["error_details"]["errors"]] == ["block_count", "entry_addenda_count"]

    accepted = create(api, filename="counts.ach", format="nacha", nacha_control_mismatch="warn")
    upload(services, runtime, accepted, data)
    done = api.get(accepted["url"]).json_body
    assert done["status"] == "completed" and done["successful_items"] == 1, done
    warnings = done["error_details"]["warnings"]
    assert [(w["line"], w["field"], w["expected"], w["found"]) for w in warnings] == [
        (17, "block_count", "000002", "000001"), (17, "entry_addenda_count", "00000013", "00000001")]
    assert done["error_details"]["warning_count"] == 2


def test_the_control_mismatch_option_takes_only_refuse_or_warn(api, bank):
    response = api.post("/v1/data_streams/bank/file_imports",
                        {"filename": "x.ach", "format": "nacha", "nacha_control_mismatch": "ignore"})
    assert response.status_code == 422
    assert response.json_body["errors"][0]["field"] == "nacha_control_mismatch"


def all_results(api, job_id, **query):
    results, cursor = [], None
    while True:
        params = "&".join(f"{k}={v}" for k, v in {**query, **({"cursor": cursor} if cursor else {})}.items())
        response = api.get(f"/v1/file_imports/{job_id}/results?{params}")
        assert response.status_code == 200, response.json_body
        results += response.json_body["data"]
        cursor = response.json_body["next_cursor"]
        if not cursor:
            return results


def test_an_imports_results_are_paged_in_row_order_with_the_successful_rows_from_their_records(
        api, services, runtime, bank):
    created = create(api)
    upload(services, runtime, created, CSV.encode())
    assert api.get(created["url"]).json_body["results_url"] == f"/v1/file_imports/{created['id']}/results"

    page = api.get(f"/v1/file_imports/{created['id']}/results?limit=3").json_body
    assert page["limit"] == 3 and len(page["data"]) == 3 and page["next_cursor"]
    results = all_results(api, created["id"], limit=1)
    assert [(r["index"], r["status"], r["external_id"]) for r in results] == [
        (0, "successful", "tx-1"), (1, "successful", "tx-2"), (2, "failed", "tx-3"), (3, "successful", "tx-4")]
    assert results[2]["line"] == 4 and "abc" in results[2]["error"] and results[2]["record_id"] is None
    records = {r["id"]: r["external_id"] for r in
               api.get(f"/v1/file_imports/{created['id']}/records").json_body["data"]}
    assert {r["record_id"]: r["external_id"] for r in results if r["status"] == "successful"} == records
    assert [r["index"] for r in all_results(api, created["id"], status="successful")] == [0, 1, 3]
    assert [r["index"] for r in all_results(api, created["id"], status="failed")] == [2]
    assert all_results(api, created["id"], status="skipped") == []


def test_every_result_of_a_large_import_is_listed_and_only_problem_rows_are_stored(api, services, runtime, bank):
    rows = "".join(f"2026-11-01,{'x' if n % 97 == 0 else n},r-{n}\n" for n in range(1234))
    created = create(api)
    upload(services, runtime, created, ("date,amount,external_id\n" + rows).encode())
    done = api.get(created["url"]).json_body
    assert (done["successful_items"], done["failed_items"]) == (1221, 13)

    results = all_results(api, created["id"], limit=200)
    assert [r["index"] for r in results] == list(range(1234))
    assert [r["external_id"] for r in results] == [f"r-{n}" for n in range(1234)]
    assert len(all_results(api, created["id"], status="successful", limit=200)) == 1221
    assert [r["line"] for r in all_results(api, created["id"], status="failed")] == [n + 2 for n in range(0, 1234, 97)]
    stored = services.table.query_all(keys.BASE_TABLE, f"E#acme#JOB#{created['id']:012d}", sort_prefix="RES#")
    assert sum(len(i.get("problems") or ()) for i in stored) == 13 and not any(i.get("results") for i in stored)


def test_a_bad_results_query_is_refused(api, services, runtime, bank):
    created = create(api)
    upload(services, runtime, created, CSV.encode())
    url = f"/v1/file_imports/{created['id']}/results"
    assert api.get(f"{url}?status=success").status_code == 422
    assert api.get(f"{url}?limit=201").status_code == 422
    assert api.get(f"{url}?cursor=nonsense").status_code == 400
    other_listing = api.get(f"{url}?limit=1&status=successful").json_body["next_cursor"]
    assert api.get(f"{url}?cursor={other_listing}").status_code == 400
    assert api.get("/v1/file_imports/999/results").status_code == 404


def _with_after(cursor: str, after: str) -> str:
    """A real cursor with its position changed, as a client could forge it."""
    import base64
    import json

    key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    key["after"] = after
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


def test_a_results_cursor_moved_past_the_import_is_refused_not_a_500(api, services, runtime, bank):
    created = create(api)
    upload(services, runtime, created, CSV.encode())
    url = f"/v1/file_imports/{created['id']}/results"
    cursor = api.get(f"{url}?limit=1").json_body["next_cursor"]
    assert api.get(f"{url}?cursor={_with_after(cursor, '0')}").status_code == 200
    for after in ("9" * 5000, "2499999750", "12345"):
        assert api.get(f"{url}?cursor={_with_after(cursor, after)}").status_code == 400, after[:12]


def test_an_import_where_every_row_failed_ends_failed_with_its_first_errors(api, services, runtime, bank):
    created = create(api)
    upload(services, runtime, created, b"date,amount,external_id\n2026-11-01,abc,a\n2026-13-01,1.00,b\n")
    done = api.get(created["url"]).json_body
    assert done["status"] == "failed" and done["failed_items"] == 2
    assert done["error_message"].startswith("every row failed (2 of 2); first errors: line 2: amount: 'abc'")
    assert "line 3: date:" in done["error_message"]
    assert [e["external_id"] for e in done["error_details"]["first_errors"]] == ["a", "b"]


def test_a_partly_failed_import_says_how_many_rows_failed(api, services, runtime, bank):
    created = create(api)
    upload(services, runtime, created, CSV.encode())
    done = api.get(created["url"]).json_body
    assert done["status"] == "completed"
    assert done["error_message"].startswith("1 of 4 rows failed; first errors: line 4: amount: 'abc'")
    assert done["error_details"]["failed_items"] == 1


def test_a_cancelled_import_gives_every_row_a_result_and_its_totals_add_up(api, services, bank):
    created = in_small_chunks(services, uploaded_unannounced(api, 120, "c"))
    ports = services.ports
    files.prepare(ports, "acme", created["id"])
    files.write_chunks(ports, "acme", created["id"], budget=timedelta(0))  # one chunk of 50
    api.post(f"/v1/file_imports/{created['id']}/cancel")
    assert files.write_chunks(ports, "acme", created["id"]) == "stop"

    done = api.get(created["url"]).json_body
    assert (done["status"], done["total_items"], done["processed_items"]) == ("cancelled", 120, 120)
    assert (done["successful_items"], done["failed_items"], done["skipped_items"]) == (50, 70, 0)
    failed = all_results(api, created["id"], status="failed", limit=20)  # four pages
    assert [(r["index"], r["line"], r["external_id"]) for r in failed] == [(n, n + 2, f"c-{n}") for n in range(50, 120)]
    assert all(r["error"] == "not processed: the import was cancelled before this row was reached" for r in failed)
    files.finish(ports, "acme", created["id"])  # a late task changes nothing
    assert api.get(created["url"]).json_body["failed_items"] == 70


def test_a_cancel_while_the_last_chunk_is_claimed_ends_the_import_cancelled_at_once(api, services, bank):
    """The pipeline claims the last chunk while the one before is written; a cancel that lands then
    leaves the last chunk unwritten, and the task ends the import itself (not the sweeper, minutes later)."""
    # Given a CSV import of two chunks (50 and 10 rows), cancelled while its first chunk's records are written
    created = in_small_chunks(services, uploaded_unannounced(api, SMALL_CHUNK + 10, "c"))
    files.prepare(services.ports, "acme", created["id"])

    class CancelledWhileWriting(RecordRepository):
        def put_many(self, records):
            written = super().put_many(records)
            assert api.post(f"/v1/file_imports/{created['id']}/cancel").status_code == 202
            return written

    # When the task writes its chunks
    ports = replace(services.ports, records=CancelledWhileWriting(services.table))
    assert files.write_chunks(ports, "acme", created["id"]) == "stop"

    # Then the import is cancelled with the first chunk kept and the last one's rows not processed
    done = api.get(created["url"]).json_body
    assert (done["status"], done["total_items"], done["processed_items"]) == ("cancelled", 60, 60)
    assert (done["successful_items"], done["failed_items"]) == (50, 10)
    failed = all_results(api, created["id"], status="failed", limit=200)
    assert [r["index"] for r in failed] == list(range(50, 60))
    assert all(r["error"] == "not processed: the import was cancelled before this row was reached" for r in failed)


def test_a_windows_1252_semicolon_export_of_a_bank_is_imported_and_says_how_it_was_read(api, services, runtime, bank):
    # Given a bank's export: Windows-1252, ';'-separated, no options given
    data = "date;amount;description\n2026-11-01;12.00;Überweisung Müller\n".encode("cp1252")
    created = create(api)

    # When it is uploaded
    upload(services, runtime, created, data)

    # Then it is imported whole, and the import says it was read as Windows-1252
    done = api.get(f"/v1/file_imports/{created['id']}").json_body
    assert (done["status"], done["successful_items"]) == ("completed", 1), done
    assert "Windows-1252" in done["error_details"]["warnings"][0]
    [record] = api.get(f"/v1/file_imports/{created['id']}/records").json_body["data"]
    assert record["description"] == "Überweisung Müller"


def test_the_encoding_and_delimiter_given_are_kept_on_the_import_and_used(api, services, runtime, bank):
    # Given an import that names its encoding and delimiter
    created = create(api, encoding="iso-8859-1", delimiter="|")
    # When its file is uploaded
    upload(services, runtime, created, "date|amount|description\n2026-11-01|1.00|Zoë\n".encode("latin-1"))
    # Then it was read with them, and with no warning
    done = api.get(f"/v1/file_imports/{created['id']}").json_body
    assert (done["status"], done["successful_items"], done["error_details"]) == ("completed", 1, None), done
    assert services.ports.ingestion_jobs.get("acme", created["id"]).options["delimiter"] == "|"


@pytest.mark.parametrize("body, field", [
    ({"encoding": "ebcdic"}, "encoding"), ({"delimiter": "::"}, "delimiter"), ({"delimiter": "x"}, "delimiter"),
    ({"format": "nacha", "encoding": "utf-8"}, "encoding"),
])
def test_an_unknown_encoding_or_a_bad_delimiter_is_422_naming_the_field(api, bank, body, field):
    response = api.post("/v1/data_streams/bank/file_imports", {"filename": "x.csv", "format": "csv", **body})
    assert response.status_code == 422, response.json_body
    assert field in [e["field"] for e in response.json_body["errors"]]


def test_a_cancelled_csv_import_is_never_read_cancelled_before_its_counts_are(api, services, bank):
    from tests.support.ingestion_watch import FinalCountsWatch, WatchedJobs

    # Given a CSV import of 120 rows with its first chunk of 50 written, then a cancel
    created = in_small_chunks(services, uploaded_unannounced(api, 120, "w"))
    ports = services.ports
    files.prepare(ports, "acme", created["id"])
    files.write_chunks(ports, "acme", created["id"], budget=timedelta(0))
    assert api.post(f"/v1/file_imports/{created['id']}/cancel").status_code == 202
    watch = FinalCountsWatch(api, created["id"])
    # When the next chunk task honours the cancel, a client polling all along
    watched = replace(ports, ingestion_jobs=WatchedJobs(services.table, watch))
    assert files.write_chunks(watched, "acme", created["id"]) == "stop"
    # Then `cancelled` is never read with counts that do not add up, nor without one result per row
    assert watch.violations == []
    assert watch.seen[0] == "processing" and watch.seen[-1] == "cancelled"
    done = api.get(created["url"]).json_body
    assert (done["successful_items"], done["failed_items"], done["processed_items"]) == (50, 70, 120)


def test_a_second_upload_to_an_import_that_already_ran_is_shown_on_the_import_as_not_imported(
        api, services, runtime, bank):
    # Given an import whose upload was imported
    created = create(api)
    upload(services, runtime, created, CSV.encode())
    done = api.get(created["url"]).json_body
    assert done["status"] == "completed" and done["ignored_uploads"] == []
    # When another file is PUT to the same upload URL (S3 takes it), and its event comes twice
    other = CSV.replace("tx-", "again-").encode()
    upload(services, runtime, created, other)
    key = f"uploads/acme/{created['id']}/{created['filename']}"
    runtime.deliver_s3_event(services.settings.bucket_name, key,
                             services.aws.s3.head_object(Bucket=services.settings.bucket_name,
                                                         Key=key)["ETag"].strip('"'), len(other))
    # Then nothing more is imported, and the import says, once, that this file was not imported
    after = api.get(created["url"]).json_body
    assert (after["status"], after["successful_items"], after["total_items"]) == ("completed", 3, 4)
    [ignored] = after["ignored_uploads"]
    assert ignored["byte_size"] == len(other) and ignored["received_at"]
    assert "not imported" in ignored["message"] and "completed" in ignored["message"]
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 3
