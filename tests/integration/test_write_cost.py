"""What ingestion writes beside the records stays small: a file import keeps the results of its
problem rows only (nobody reads the others), a bulk request every row's (its API shows them)."""
import pytest
import requests

from chalicelib.adapters.dynamodb import keys

CSV = ("date,amount,description,external_id\n"
       "2026-11-01,12.34,Coffee,tx-1\n"
       "2026-11-03,abc,Broken,tx-3\n"
       "2026-11-04,-5.00,Refund,tx-4\n")


@pytest.fixture
def runtime(services):
    from app import app
    from chalicelib.local.runtime import LocalRuntime

    return LocalRuntime(app, services.aws.sqs, "us-east-1", log=print, redelivery_seconds=0)


def result_items(services, job_id):
    partition = keys.ingestion_job("acme", job_id)["pk"]
    return list(services.table.query_all(keys.BASE_TABLE, partition, sort_prefix=keys.RESULTS_PREFIX))


def test_a_file_import_keeps_the_results_of_its_problem_rows_only(api, services, runtime):
    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    created = api.post("/v1/data_streams/bank/file_imports", {"filename": "nov.csv", "format": "csv"}).json_body
    assert requests.put(created["upload_url"], data=CSV.encode(), timeout=10).status_code == 200
    key = f"uploads/acme/{created['id']}/{created['filename']}"
    head = services.aws.s3.head_object(Bucket=services.settings.bucket_name, Key=key)
    runtime.deliver_s3_event(services.settings.bucket_name, key, head["ETag"].strip('"'), len(CSV))

    done = api.get(created["url"]).json_body
    assert done["status"] == "completed" and done["successful_items"] == 2
    [bad] = done["results"]
    assert bad["line"] == 3 and bad["status"] == "failed"
    [item] = result_items(services, created["id"])
    assert "results" not in item and len(item["problems"]) == 1


def test_a_bulk_request_keeps_every_rows_result(api, worker):
    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    rows = [{"date": "2026-11-01", "data_stream_key": "bank", "amount": n, "direction": "credit"} for n in range(3)]
    summary = api.post("/v1/records/bulk", {"records": rows}).json_body
    worker.drain()
    assert [r["status"] for r in api.get(summary["url"]).json_body["results"]] == ["successful"] * 3
