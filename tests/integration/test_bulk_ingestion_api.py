"""POST /records/bulk, the SQS worker, GET /bulk_requests/{id}: the bulk path end to end on moto."""
import pytest

from chalicelib.handlers.sweeper import sweep_task


@pytest.fixture
def streams(api):
    for key in ("bank", "ledger"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201


def item(n, stream="bank", **fields):
    return {"date": "2026-11-01", "data_stream_key": stream, "amount": 1000 + n, "direction": "credit",
            "external_id": f"ext-{n}", **fields}


def submit(api, records, on_conflict=None, key=None):
    body = {"records": records, **({"on_conflict": on_conflict} if on_conflict else {})}
    headers = {"Idempotency-Key": key} if key else {}
    return api.post("/v1/records/bulk", body, headers=headers)


def test_a_bulk_request_is_accepted_then_processed_with_results_in_order(api, streams, worker):
    response = submit(api, [item(1), item(2, stream="ledger", direction="debit")])
    assert response.status_code == 202
    summary = response.json_body
    assert summary["status"] == "pending" and summary["total_items"] == 2
    assert summary["url"] == f"/v1/bulk_requests/{summary['id']}"
    assert {summary[k] for k in ("processed_items", "successful_items", "failed_items", "skipped_items")} == {0}

    worker.drain()

    done = api.get(summary["url"]).json_body
    assert done["status"] == "completed" and done["source"] == "bulk_api" and done["progress"] == 100
    assert done["successful_items"] == 2 and done["processed_items"] == 2
    assert done["started_at"] and done["completed_at"] and done["last_progress_at"]
    assert [r["index"] for r in done["results"]] == [0, 1]
    assert [r["status"] for r in done["results"]] == ["successful", "successful"]
    assert [r["external_id"] for r in done["results"]] == ["ext-1", "ext-2"]
    record = api.get(f"/v1/records/{done['results'][1]['record_id']}").json_body
    assert record["data_stream_key"] == "ledger" and record["amount"] == 1002 and record["direction"] == "debit"
    assert record["status"] == "unreconciled" and record["file_import_id"] == summary["id"]
    assert record["currency"] == "USD" and record["decimal_places"] == 2
    assert sorted(done["data_stream_ids"]) == sorted(
        api.get(f"/v1/data_streams/{k}").json_body["id"] for k in ("bank", "ledger"))


BAD_ITEMS = [
    ({"data_stream_key": "bank", "amount": 1, "direction": "credit"}, "date: is required"),
    (item(0, date="2026-02-30"), "date: must be a real date"),
    (item(0, date="01/02/2026"), "date: must be a real date"),
    (item(0, amount=10.5), "amount: must be an integer"),
    (item(0, amount="100"), "amount: must be an integer"),
    (item(0, amount=-5), "amount: must not be negative"),
    (item(0, direction="sideways"), "direction: must be 'credit' or 'debit'"),
    (item(0, stream="ghost"), "data_stream_key: no data stream with key 'ghost'"),
    (item(0, currency="XYZ"), "currency: must be an ISO 4217"),
    (item(0, metadata=[1]), "metadata: must be an object"),
    ("not an object", "must be an object"),
    # 86 characters but 258 bytes: the limit is in bytes, which the guard key and the results are counted in
    (item(0, external_id="\u20ac" * 86), "external_id: must be a non-empty string of at most 255 bytes in UTF-8"),
    (item(0, external_id="x" * 256), "external_id: must be a non-empty string of at most 255 bytes in UTF-8"),
]


@pytest.mark.parametrize("bad, message", BAD_ITEMS)
def test_a_bad_item_fails_alone_with_a_message_naming_its_field(api, streams, worker, bad, message):
    summary = submit(api, [item(1), bad, item(3)]).json_body
    worker.drain()
    done = api.get(summary["url"]).json_body
    assert (done["successful_items"], done["failed_items"], done["status"]) == (2, 1, "completed")
    failed = done["results"][1]
    assert failed["status"] == "failed" and failed["record_id"] is None
    assert message in failed["error"]
    if isinstance(bad, dict) and "external_id" in message:  # quoted cut to what fits, as valid text
        assert len(failed["external_id"].encode()) <= 255 and failed["external_id"].endswith("...")


def test_metadata_is_checked_against_the_property_definitions(api, streams, worker):
    api.post("/v1/data_stream_property_definitions",
             {"key": "payout_id", "name": "Payout", "type": "string", "data_stream_key": "bank"})
    api.post("/v1/data_stream_property_definitions",
             {"key": "fee", "name": "Fee", "type": "number", "data_stream_key": "bank", "optional": True})
    summary = submit(api, [
        item(1, metadata={"payout_id": "po_1", "fee": 1.5, "free": "form"}),
        item(2, metadata={"fee": 2}),
        item(3, metadata={"payout_id": "po_3", "fee": "two"}),
        item(4, stream="ledger", metadata={"anything": True}),
    ]).json_body
    worker.drain()
    results = api.get(summary["url"]).json_body["results"]
    assert [r["status"] for r in results] == ["successful", "failed", "failed", "successful"]
    assert results[1]["error"].startswith("metadata.payout_id: is required")
    assert results[2]["error"].startswith("metadata.fee: must be a number")
    record = api.get(f"/v1/records/{results[0]['record_id']}").json_body
    assert record["metadata"] == {"payout_id": "po_1", "fee": 1.5, "free": "form"}


def test_an_existing_external_id_is_skipped_by_default_and_fails_with_error(api, streams, worker):
    first = submit(api, [item(1)]).json_body
    worker.drain()
    original_id = api.get(first["url"]).json_body["results"][0]["record_id"]

    skipped = submit(api, [item(1), item(2)]).json_body
    failed = submit(api, [item(1)], on_conflict="error").json_body
    worker.drain()

    skip_result = api.get(skipped["url"]).json_body
    assert (skip_result["skipped_items"], skip_result["successful_items"]) == (1, 1)
    assert skip_result["results"][0] == {"index": 0, "external_id": "ext-1", "status": "skipped",
                                         "record_id": original_id, "error": None}
    error_result = api.get(failed["url"]).json_body
    assert error_result["failed_items"] == 1
    assert "already exists" in error_result["results"][0]["error"]
    assert len(api.get("/v1/records?external_id=ext-1").json_body["data"]) == 1


def test_the_same_external_id_in_another_stream_is_a_different_record(api, streams, worker):
    summary = submit(api, [item(1), item(1, stream="ledger")]).json_body
    worker.drain()
    assert api.get(summary["url"]).json_body["successful_items"] == 2


def test_a_duplicate_inside_one_request_is_skipped_after_the_first(api, streams, worker):
    summary = submit(api, [item(1), item(1, amount=5)]).json_body
    worker.drain()
    results = api.get(summary["url"]).json_body["results"]
    assert [r["status"] for r in results] == ["successful", "skipped"]
    assert results[1]["record_id"] == results[0]["record_id"]


@pytest.mark.parametrize("records, field", [([], "records"), ([item(i) for i in range(1001)], "records"),
                                            (None, "records"), ("nope", "records")])
def test_an_empty_missing_or_over_long_records_array_is_422(api, streams, records, field):
    body = {} if records is None else {"records": records}
    response = api.post("/v1/records/bulk", body)
    assert response.status_code == 422
    assert response.json_body["errors"][0]["field"] == field


def test_an_unknown_on_conflict_is_422(api, streams):
    response = submit(api, [item(1)], on_conflict="overwrite")
    assert response.status_code == 422 and response.json_body["errors"][0]["field"] == "on_conflict"


def test_a_reused_idempotency_key_returns_the_first_request_and_creates_nothing(api, streams, worker):
    first = submit(api, [item(1), item(2)], key="batch-1")
    again = submit(api, [item(1), item(2)], key="batch-1")
    assert first.status_code == again.status_code == 202
    assert again.json_body["id"] == first.json_body["id"]
    worker.drain()
    after = submit(api, [item(1), item(2)], key="batch-1").json_body
    assert after["id"] == first.json_body["id"] and after["status"] == "completed"
    assert len(api.get("/v1/records?data_stream_key=bank").json_body["data"]) == 2


def test_idempotency_keys_are_per_environment(api, streams, services, worker):
    from chalicelib.services.api_keys import create_key

    other = create_key(services.api_keys, "globex")[1]
    api.post("/v1/data_streams", {"key": "bank", "name": "Globex bank"}, key=other)
    mine = submit(api, [item(1)], key="shared-key").json_body
    theirs = api.post("/v1/records/bulk", {"records": [item(9)]}, key=other, headers={"Idempotency-Key": "shared-key"})
    assert theirs.status_code == 202  # a different body under the same key, but in another environment
    worker.drain()
    assert api.get(mine["url"]).json_body["results"][0]["external_id"] == "ext-1"
    assert api.get(theirs.json_body["url"], key=other).json_body["results"][0]["external_id"] == "ext-9"


def test_stream_records_count_is_read_from_the_mirror_as_records_come_and_go(api, streams, worker, services):
    summary = submit(api, [item(1), item(2), item(3, stream="ledger")]).json_body
    worker.drain()
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 2
    assert api.get("/v1/data_streams/ledger").json_body["records_count"] == 1
    assert services.mirror.count_records("acme", "bank") == 2
    record_id = api.get(summary["url"]).json_body["results"][0]["record_id"]
    assert api.delete(f"/v1/records/{record_id}").status_code == 204
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 2  # until the sweeper recounts
    assert services.data_streams.recount_requests() == [("acme", "bank")]
    sweep_task()
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 1
    assert services.data_streams.recount_requests() == []


def test_a_stream_deleted_and_made_again_starts_with_an_empty_mirror(api, streams, worker, services):
    submit(api, [item(1), item(2)])
    worker.drain()
    assert api.delete("/v1/data_streams/bank").status_code == 204
    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    submit(api, [item(3)])
    worker.drain()
    assert services.mirror.count_records("acme", "bank") == 1
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 1


def test_an_item_too_large_to_store_fails_alone(api, streams, worker):
    huge = item(2, metadata={"blob": "x" * 450_000})
    summary = submit(api, [item(1), huge, item(3)]).json_body
    worker.drain()
    done = api.get(summary["url"]).json_body
    assert (done["status"], done["successful_items"], done["failed_items"]) == ("completed", 2, 1)
    assert done["results"][1]["error"].startswith("metadata: is ")


def test_metadata_with_nan_fails_alone(api, streams, worker):
    body = '{"records": [{"date": "2026-11-01", "data_stream_key": "bank", "amount": 1, "direction": "credit", ' \
           '"metadata": {"rate": NaN}}]}'
    summary = api.request("POST", "/v1/records/bulk", body=body, headers={"Content-Type": "application/json"})
    if summary.status_code == 202:
        worker.drain()
        result = api.get(summary.json_body["url"]).json_body["results"][0]
        assert result["status"] == "failed" and "NaN" in result["error"]
    else:
        assert summary.status_code in (400, 422)


def test_an_absurdly_long_stream_key_fails_the_item_with_a_short_message(api, streams, worker):
    summary = submit(api, [item(1, stream="k" * 3000)]).json_body
    worker.drain()
    result = api.get(summary["url"]).json_body["results"][0]
    assert result["status"] == "failed" and len(result["error"]) < 200


def test_a_job_that_fails_on_every_delivery_ends_failed_with_the_reason(api, streams, services, worker):
    summary = submit(api, [item(1)]).json_body
    # The payload vanishes (say, a lifecycle rule ran too early): every delivery now fails.
    services.aws.s3.delete_object(Bucket=services.settings.bucket_name, Key=f"bulk/acme/{summary['id']}.json")
    from app import app
    from chalicelib.local.runtime import LocalRuntime

    failures = []
    runtime = LocalRuntime(app, services.aws.sqs, "us-east-1", log=failures.append, redelivery_seconds=0)
    [config] = [c for c in runtime.queue_handlers if c.queue == services.settings.bulk_queue_name]
    for _ in range(services.settings.bulk_max_receives):
        runtime.deliver_once(config)

    done = api.get(summary["url"]).json_body
    assert done["status"] == "failed"
    assert "failed 5 times" in done["error_message"] and done["error_details"]["attempts"] == 5
    assert len(failures) == services.settings.bulk_max_receives - 1  # the last delivery fails the job instead
    assert runtime.deliver_once(config) == 0  # nothing left on the bulk queue for its dead-letter queue


def test_a_delivery_that_fails_because_the_process_is_stopping_never_fails_the_job(api, streams, services, worker):
    summary = submit(api, [item(1)]).json_body
    key = f"bulk/acme/{summary['id']}.json"
    payload = services.aws.s3.get_object(Bucket=services.settings.bucket_name, Key=key)["Body"].read()
    services.aws.s3.delete_object(Bucket=services.settings.bucket_name, Key=key)  # S3 going away as it stops
    from app import app
    from chalicelib.local.runtime import LocalRuntime

    runtime = LocalRuntime(app, services.aws.sqs, "us-east-1", log=lambda _: None, redelivery_seconds=0)
    [config] = [c for c in runtime.queue_handlers if c.queue == services.settings.bulk_queue_name]
    for _ in range(services.settings.bulk_max_receives - 1):
        runtime.deliver_once(config)
    services.stop_requested.set()  # the last delivery fails while the process stops
    try:
        runtime.deliver_once(config)
    finally:
        services.stop_requested.clear()

    assert api.get(summary["url"]).json_body["status"] == "processing"  # not failed: it goes on at the next start
    services.aws.s3.put_object(Bucket=services.settings.bucket_name, Key=key, Body=payload)
    # A fresh message was queued; the spent one is the dead-letter queue's.
    assert runtime.deliver_once(config) == 1
    assert api.get(summary["url"]).json_body["status"] == "completed"


def test_within_one_request_the_first_of_duplicates_always_wins(api, streams, worker):
    records = [item(n % 3, amount=n) for n in range(30)]
    summary = submit(api, records).json_body
    worker.drain()
    results = api.get(summary["url"]).json_body["results"]
    assert [r["status"] for r in results[:3]] == ["successful"] * 3
    assert all(r["status"] == "skipped" and r["record_id"] == results[i % 3]["record_id"]
               for i, r in enumerate(results[3:], start=3))


def test_bulk_requests_replicate_to_the_mirror_per_stream(api, streams, services, worker):
    summary = submit(api, [item(1), item(2), item(3, stream="ledger")]).json_body
    worker.drain()
    keys = [o["Key"] for o in services.aws.s3.list_objects_v2(
        Bucket=services.settings.bucket_name, Prefix="mirror/environment=acme/").get("Contents", [])]
    assert sorted(keys) == [
        f"mirror/environment=acme/data_stream=bank/import={summary['id']}/_rows=2",
        f"mirror/environment=acme/data_stream=bank/import={summary['id']}/compact.parquet",
        f"mirror/environment=acme/data_stream=bank/import={summary['id']}/part-000000.parquet",
        # The stream's index of markers, whole since the recount that ended the import filled it in
        "mirror/environment=acme/data_stream=bank/rows/_whole",
        f"mirror/environment=acme/data_stream=bank/rows/import={summary['id']}/_rows=2",
        f"mirror/environment=acme/data_stream=ledger/import={summary['id']}/_rows=1",
        f"mirror/environment=acme/data_stream=ledger/import={summary['id']}/compact.parquet",
        f"mirror/environment=acme/data_stream=ledger/import={summary['id']}/part-000000.parquet",
        "mirror/environment=acme/data_stream=ledger/rows/_whole",
        f"mirror/environment=acme/data_stream=ledger/rows/import={summary['id']}/_rows=1",
    ]


def test_a_replicating_job_reads_as_processing_in_the_bulk_request_view_only(api, streams, services):
    from chalicelib.domain.ingestion import JobStatus

    summary = submit(api, [item(1)], key="k-1").json_body
    jobs = services.ingestion_jobs
    job = jobs.move(jobs.get("acme", summary["id"]), JobStatus.PROCESSING)
    jobs.move(job, JobStatus.REPLICATING)

    assert api.get(summary["url"]).json_body["status"] == "processing"
    assert submit(api, [item(1)], key="k-1").json_body["status"] == "processing"  # the same request again
    assert api.get(f"/v1/file_imports/{summary['id']}").json_body["status"] == "replicating"


@pytest.mark.parametrize("records, places", [
    ([item(1), item(2, currency="usd")], 2), ([item(1, currency="JPY"), item(2, currency="jpy")], 0),
    ([item(1, decimal_places=4), item(2, currency="KWD", decimal_places=4)], 4),
    ([item(1), item(2, currency="JPY")], None),  # mixed decimal places: no one value to give
])
def test_a_bulk_request_gives_the_decimal_places_of_its_records(api, streams, worker, records, places):
    summary = submit(api, records).json_body
    worker.drain()
    assert api.get(summary["url"]).json_body["decimal_places"] == places
    assert api.get(f"/v1/file_imports/{summary['id']}").json_body["decimal_places"] == places


def test_a_cancelled_bulk_request_gives_every_item_a_result_and_its_totals_add_up(api, streams, services):
    from dataclasses import replace

    from chalicelib.adapters.dynamodb.records import RecordRepository
    from chalicelib.domain.ingestion import BULK_CHUNK_ROWS as CHUNK
    from chalicelib.services.ingestion.bulk import process_job

    summary = submit(api, [item(n) for n in range(2 * CHUNK)]).json_body

    class CancelledAfterTheFirstChunk(RecordRepository):
        def put_many(self, records):
            written = super().put_many(records)
            assert api.post(f"/v1/file_imports/{summary['id']}/cancel").status_code == 202
            return written

    ports = services.ports
    process_job(replace(ports, records=CancelledAfterTheFirstChunk(services.table)), "acme", summary["id"])
    process_job(ports, "acme", summary["id"])  # a redelivery changes nothing

    done = api.get(summary["url"]).json_body
    assert (done["status"], done["total_items"], done["processed_items"]) == ("cancelled", 2 * CHUNK, 2 * CHUNK)
    assert (done["successful_items"], done["failed_items"], done["skipped_items"]) == (CHUNK, CHUNK, 0)
    assert [r["index"] for r in done["results"]] == list(range(2 * CHUNK))
    assert {r["status"] for r in done["results"][:CHUNK]} == {"successful"}
    assert all(r == {"index": n, "external_id": f"ext-{n}", "status": "failed", "record_id": None,
                     "error": "not processed: the bulk request was cancelled before this item was reached"}
               for n, r in enumerate(done["results"][CHUNK:], start=CHUNK))


def test_a_chunk_a_late_execution_stored_is_counted_as_stored_when_the_job_ends_not_as_unprocessed(
        api, streams, services):
    """A worker wrote a chunk's records and results, and the job ended (cancelled) just before it
    counted them: the end of the job counts the stored results instead of calling them unprocessed."""
    from dataclasses import replace

    from chalicelib.adapters.dynamodb.jobs import IngestionJobRepository
    from chalicelib.domain.ingestion import BULK_CHUNK_ROWS as CHUNK
    from chalicelib.domain.ingestion import JobStatus
    from chalicelib.services.ingestion.bulk import process_job

    summary = submit(api, [item(n) for n in range(CHUNK + 50)]).json_body

    class EndedBeforeCounting(IngestionJobRepository):
        def save_chunk_and_begin_ahead(self, job, outcome):  # a worker's save of a chunk it processed
            if outcome.index == 0:
                self.request_cancellation(job, (JobStatus.PROCESSING,))
                self.begin_ending(job, JobStatus.CANCELLED, {})
            return super().save_chunk_and_begin_ahead(job, outcome)

    ports = services.ports
    process_job(replace(ports, ingestion_jobs=EndedBeforeCounting(services.table)), "acme", summary["id"])
    process_job(ports, "acme", summary["id"])  # a redelivery changes nothing

    done = api.get(summary["url"]).json_body
    assert (done["status"], done["total_items"], done["processed_items"]) == ("cancelled", CHUNK + 50, CHUNK + 50)
    assert (done["successful_items"], done["failed_items"]) == (CHUNK, 50)
    assert {r["status"] for r in done["results"][:CHUNK]} == {"successful"}
    assert {r["status"] for r in done["results"][CHUNK:]} == {"failed"}


def test_a_bulk_request_whose_items_all_failed_ends_failed_and_a_partly_failed_one_says_how_many(
        api, streams, worker):
    all_bad = submit(api, [item(1, amount=-1), item(2, stream="ghost")]).json_body
    partly = submit(api, [item(3), item(4, amount=-1)]).json_body
    worker.drain()
    failed = api.get(all_bad["url"]).json_body
    assert failed["status"] == "failed"
    assert failed["error_message"] == ("every item failed (2 of 2); first errors: item 0: amount: must not be "
                                       "negative; the sign is given by direction; item 1: data_stream_key: no data "
                                       "stream with key 'ghost'")
    completed = api.get(partly["url"]).json_body
    assert completed["status"] == "completed" and completed["error_message"].startswith("1 of 2 items failed")


def test_a_stream_lists_the_bulk_requests_that_fed_it_among_its_file_imports(api, streams, worker):
    mixed = submit(api, [item(1), item(2, amount=5, direction="debit"), item(3, stream="ledger")]).json_body
    ledger_only = submit(api, [item(4, stream="ledger"), item(5, stream="bank", amount=-1)]).json_body
    worker.drain()

    bank = api.get("/v1/data_streams/bank/file_imports").json_body["data"]
    assert [(j["id"], j["source"]) for j in bank] == [(ledger_only["id"], "bulk_api"), (mixed["id"], "bulk_api")]
    assert (bank[1]["record_count"], bank[1]["total_credits"], bank[1]["total_debits"]) == (2, 1001, 5)
    assert bank[0]["record_count"] == 0  # it named the stream, but its item there failed
    ledger = api.get("/v1/data_streams/ledger/file_imports").json_body["data"]
    assert [(j["id"], j["record_count"], j["total_credits"]) for j in ledger] == [
        (ledger_only["id"], 1, 1004), (mixed["id"], 1, 1003)]
    page = api.get("/v1/data_streams/bank/file_imports?limit=1").json_body
    assert [j["id"] for j in page["data"]] == [ledger_only["id"]] and page["next_cursor"]


def test_a_bulk_requests_results_are_paged_by_status_too(api, streams, worker):
    summary = submit(api, [item(1), item(2, amount=-1), item(1)]).json_body
    worker.drain()
    url = f"/v1/file_imports/{summary['id']}/results"
    assert [r["status"] for r in api.get(url).json_body["data"]] == ["successful", "failed", "skipped"]
    assert [r["index"] for r in api.get(f"{url}?status=skipped").json_body["data"]] == [2]
    first = api.get(f"{url}?limit=2").json_body
    assert [r["index"] for r in api.get(f"{url}?limit=2&cursor={first['next_cursor']}").json_body["data"]] == [2]


def test_an_imports_totals_of_two_records_at_the_largest_amount_are_exact(api, streams, worker):
    # Given two credits and two debits, each at the largest amount a record may hold
    largest = 2**63 - 1
    submit(api, [item(1, amount=largest), item(2, amount=largest),
                 item(3, amount=largest, direction="debit"), item(4, amount=largest, direction="debit")])
    # When the bulk request has been processed
    worker.drain()
    # Then the stream's list of imports sums them exactly, past 64 bits
    listed = api.get("/v1/data_streams/bank/file_imports").json_body["data"][0]
    assert (listed["record_count"], listed["total_credits"], listed["total_debits"]) == (4, 2 * largest, 2 * largest)
    assert listed["net_amount"] == 0


def test_a_bulk_request_read_as_a_file_import_gives_the_file_import_url(api, streams, worker):
    # Given a bulk request, processed
    summary = submit(api, [item(1)]).json_body
    worker.drain()
    # When it is read in the file-import shape (its own view and the stream's list)
    as_import = api.get(f"/v1/file_imports/{summary['id']}").json_body
    [listed] = api.get("/v1/data_streams/bank/file_imports").json_body["data"]
    # Then its url is the file import's, as the spec fixes it; the bulk request's own view keeps its own
    assert as_import["url"] == listed["url"] == f"/v1/file_imports/{summary['id']}"
    assert api.get(summary["url"]).json_body["url"] == f"/v1/bulk_requests/{summary['id']}"


@pytest.mark.parametrize("end, final", [("cancel", "cancelled"), ("fail", "failed")])
def test_a_bulk_request_that_ends_early_is_never_read_final_before_its_counts_are(api, streams, services, end,
                                                                                   final):
    from dataclasses import replace

    from chalicelib.adapters.dynamodb.records import RecordRepository
    from chalicelib.services.ingestion.bulk import process_job
    from chalicelib.services.ingestion.lifecycle import fail
    from tests.support.ingestion_watch import FinalCountsWatch, WatchedJobs

    # Given a bulk request of two chunks (of 50 rows: their size makes no difference) whose first is
    # written, then cancelled or failed
    chunk = 50
    services.ports = replace(services.ports, limits=replace(services.ports.limits, bulk_chunk_rows=chunk))
    summary = submit(api, [item(n) for n in range(2 * chunk)]).json_body
    watch = FinalCountsWatch(api, summary["id"])
    ports = replace(services.ports, ingestion_jobs=WatchedJobs(services.table, watch))

    class EndsAfterTheFirstChunk(RecordRepository):
        def put_many(self, records):
            written = super().put_many(records)
            if end == "cancel":
                assert api.post(f"/v1/file_imports/{summary['id']}/cancel").status_code == 202
                return written
            raise RuntimeError("the worker died after the first chunk")

    # When the worker runs it to its end (a failure: on its last delivery), a client polling all along
    if end == "cancel":
        process_job(replace(ports, records=EndsAfterTheFirstChunk(services.table)), "acme", summary["id"])
    else:
        with pytest.raises(RuntimeError):
            process_job(replace(ports, records=EndsAfterTheFirstChunk(services.table)), "acme", summary["id"])
        fail(ports, "acme", summary["id"], RuntimeError("died"), 5)

    # Then the final status is never read with counts that do not add up, nor without one result per item
    assert watch.violations == []
    assert watch.seen[-1] == final and "processing" in watch.seen
    done = api.get(summary["url"]).json_body
    assert (done["status"], done["successful_items"], done["failed_items"]) == (final, chunk, chunk)
    assert len(done["results"]) == 2 * chunk


def test_a_bulk_request_made_before_chunks_were_500_rows_keeps_its_250_row_chunks(api, streams, services):
    """An upgrade can find a bulk request half-written in 250-row chunks: its done chunks, begin marks and
    results count in them, so it keeps them (its item has no bulk_chunk_rows) and loses no row."""
    from dataclasses import replace

    from chalicelib.adapters.dynamodb import keys
    from chalicelib.adapters.dynamodb.jobs import result_rows
    from chalicelib.adapters.dynamodb.records import RecordRepository
    from chalicelib.domain.ingestion import LEGACY_BULK_CHUNK_ROWS
    from chalicelib.services.ingestion.bulk import process_job

    # Given a request of 600 items stored as a job made before (no bulk_chunk_rows), whose worker died
    # after its first chunk of 250
    summary = submit(api, [item(n) for n in range(600)]).json_body
    services.table.update(keys.ingestion_job("acme", summary["id"]), "REMOVE bulk_chunk_rows")

    class DiesAfterTheFirstChunk(RecordRepository):
        calls = 0

        def put_many(self, records):
            records = list(records)
            assert len(records) <= LEGACY_BULK_CHUNK_ROWS
            DiesAfterTheFirstChunk.calls += 1
            if DiesAfterTheFirstChunk.calls > 1:
                raise RuntimeError("the worker died")
            return super().put_many(records)

    with pytest.raises(RuntimeError):
        process_job(replace(services.ports, records=DiesAfterTheFirstChunk(services.table)), "acme", summary["id"])
    assert services.ports.ingestion_jobs.get("acme", summary["id"]).done_chunks == {0}

    # When the next delivery runs it to the end
    process_job(services.ports, "acme", summary["id"])

    # Then every item has its record and result, in three chunks of 250, 250 and 100
    done = api.get(summary["url"]).json_body
    assert (done["status"], done["successful_items"], done["processed_items"]) == ("completed", 600, 600)
    assert [r["index"] for r in done["results"]] == list(range(600))
    assert len({r["record_id"] for r in done["results"]}) == 600
    stored = services.table.query_all(keys.BASE_TABLE, keys.ingestion_job("acme", summary["id"])["pk"],
                                      sort_prefix=keys.RESULTS_PREFIX, projection="results")
    assert [len(result_rows(i, "results")) for i in stored] == [250, 250, 100]
