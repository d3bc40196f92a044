"""GET /records, GET /records/{id}, DELETE /records/{id}."""
import pytest

from chalicelib.adapters.dynamodb import keys
from chalicelib.services.data_streams import sweep_recounts
from tests.support.worlds import world_of_api


@pytest.fixture
def ingested(api, worker):
    """bank: 3 records (two dates), ledger: 1 record; returns the bulk request. Built once a
    process, restored after."""
    return world_of_api("test_records_api.ingested", api, lambda: _ingested(api, worker))


def _ingested(api, worker):
    for key in ("bank", "ledger"):
        api.post("/v1/data_streams", {"key": key, "name": key})
    records = [
        {"date": "2026-10-01", "data_stream_key": "bank", "amount": 100, "direction": "credit", "external_id": "a"},
        {"date": "2026-10-15", "data_stream_key": "bank", "amount": 200, "direction": "debit", "external_id": "b",
         "currency": "jpy", "description": "fee"},
        {"date": "2026-11-01", "data_stream_key": "bank", "amount": 300, "direction": "credit"},
        {"date": "2026-11-01", "data_stream_key": "ledger", "amount": 300, "direction": "debit", "external_id": "a"},
    ]
    summary = api.post("/v1/records/bulk", {"records": records}).json_body
    worker.drain()
    return api.get(summary["url"]).json_body


def keys_of(page):
    return [(r["data_stream_key"], r["amount"]) for r in page["data"]]


def test_a_record_has_every_field(api, ingested):
    record = api.get(f"/v1/records/{ingested['results'][1]['record_id']}").json_body
    assert set(record) == {"id", "data_stream_key", "data_stream_id", "date", "amount", "currency",
                           "decimal_places", "direction", "description", "external_id", "metadata", "status",
                           "file_import_id", "created_at", "allocations"}
    assert record["allocations"] == []  # never paid in part (docs/partial-payments.md)
    assert record["currency"] == "JPY" and record["decimal_places"] == 0 and record["description"] == "fee"
    assert record["data_stream_id"] == api.get("/v1/data_streams/bank").json_body["id"]


def test_records_of_a_stream_come_newest_first_in_pages(api, ingested):
    first = api.get("/v1/records?data_stream_key=bank&limit=2").json_body
    assert keys_of(first) == [("bank", 300), ("bank", 200)]
    rest = api.get(f"/v1/records?data_stream_key=bank&limit=2&cursor={first['next_cursor']}").json_body
    assert keys_of(rest) == [("bank", 100)] and rest["next_cursor"] is None


@pytest.mark.parametrize("query, expected", [
    ("status=unreconciled&limit=10", [("ledger", 300), ("bank", 300), ("bank", 200), ("bank", 100)]),
    ("external_id=a", [("ledger", 300), ("bank", 100)]),
    ("external_id=a&data_stream_key=bank", [("bank", 100)]),
    ("data_stream_key=bank&date_from=2026-10-10&date_to=2026-10-31", [("bank", 200)]),
    ("status=reconciled", []),
])
def test_filters_narrow_the_list(api, ingested, query, expected):
    assert keys_of(api.get(f"/v1/records?{query}").json_body) == expected


def test_records_of_an_ingestion_job(api, ingested):
    page = api.get(f"/v1/records?file_import_id={ingested['id']}").json_body
    assert len(page["data"]) == 4


def ids_of(page):
    return [r["id"] for r in page["data"]]


def test_records_of_an_ingestion_job_come_newest_first_in_pages(api, ingested):
    ids = sorted(r["record_id"] for r in ingested["results"])
    first = api.get(f"/v1/records?file_import_id={ingested['id']}&limit=3").json_body
    assert ids_of(first) == ids[::-1][:3] and first["next_cursor"]
    rest = api.get(f"/v1/records?file_import_id={ingested['id']}&limit=3&cursor={first['next_cursor']}").json_body
    assert ids_of(rest) == ids[:1] and rest["next_cursor"] is None


def test_records_of_an_ingestion_job_leave_out_failed_rows_and_deleted_records(api, worker):
    api.post("/v1/data_streams", {"key": "bank", "name": "bank"})
    rows = [{"date": "2026-10-01", "data_stream_key": "bank", "amount": n, "direction": "credit"} for n in range(5)]
    rows[2]["direction"] = "sideways"
    job = api.post("/v1/records/bulk", {"records": rows}).json_body
    worker.drain()
    written = [r["record_id"] for r in api.get(job["url"]).json_body["results"] if r["record_id"]]
    assert len(written) == 4
    assert api.delete(f"/v1/records/{written[0]}").status_code == 204
    page = api.get(f"/v1/records?file_import_id={job['id']}&limit=2").json_body
    rest = api.get(f"/v1/records?file_import_id={job['id']}&limit=2&cursor={page['next_cursor']}").json_body
    assert ids_of(page) + ids_of(rest) == written[:0:-1] and rest["next_cursor"] is None
    assert api.get("/v1/records?file_import_id=999").json_body["data"] == []


def test_records_of_a_status_come_newest_first_in_pages_read_as_stored(api, ingested, services):
    ids = sorted(r["record_id"] for r in ingested["results"])
    first = api.get("/v1/records?status=unreconciled&limit=2").json_body
    assert ids_of(first) == ids[::-1][:2] and first["next_cursor"]
    rest = api.get(f"/v1/records?status=unreconciled&limit=2&cursor={first['next_cursor']}").json_body
    assert ids_of(rest) == ids[1::-1] and rest["next_cursor"] is None
    services.table.update(keys.record("acme", ids[0]), "SET deleting = :t", values={":t": True})
    assert ids_of(api.get("/v1/records?status=unreconciled&date_to=2026-10-31").json_body) == [ids[1]]


def test_records_of_an_external_id_come_from_every_stream_in_pages(api, ingested):
    first = api.get("/v1/records?external_id=a&limit=1").json_body
    assert keys_of(first) == [("ledger", 300)] and first["next_cursor"]
    rest = api.get(f"/v1/records?external_id=a&limit=1&cursor={first['next_cursor']}").json_body
    assert keys_of(rest) == [("bank", 100)] and rest["next_cursor"] is None
    assert api.get("/v1/records?external_id=nobody").json_body["data"] == []


def test_a_cursor_of_one_list_is_refused_by_another(api, ingested):
    cursor = api.get("/v1/records?external_id=a&limit=1").json_body["next_cursor"]
    for query in (f"external_id=b&cursor={cursor}", f"file_import_id={ingested['id']}&cursor={cursor}",
                  f"status=unreconciled&cursor={cursor}"):
        response = api.get(f"/v1/records?{query}")
        assert response.status_code == 400, query
        assert "cursor" in response.json_body["message"]


def test_a_filtered_page_is_filled_across_many_reads(api, worker):
    api.post("/v1/data_streams", {"key": "bank", "name": "bank"})
    records = [{"date": f"2026-01-{1 + i % 28:02d}", "data_stream_key": "bank", "amount": i, "direction": "credit"}
               for i in range(600)]
    api.post("/v1/records/bulk", {"records": records[:500]})
    api.post("/v1/records/bulk", {"records": records[500:]})
    worker.drain()
    page = api.get("/v1/records?data_stream_key=bank&date_from=2026-01-28&limit=15").json_body
    assert len(page["data"]) == 15 and page["next_cursor"]
    assert all(r["date"] == "2026-01-28" for r in page["data"])


def test_a_list_needs_at_least_one_standalone_filter(api):
    response = api.get("/v1/records?date_from=2026-01-01")
    assert response.status_code == 422
    assert "data_stream_key" in response.json_body["message"]


@pytest.mark.parametrize("query", ["status=matched", "date_from=2026-13-01&data_stream_key=x",
                                   "file_import_id=abc"])
def test_bad_filter_values_are_rejected(api, query):
    assert api.get(f"/v1/records?{query}").status_code in (400, 422)


def test_unknown_records_are_404(api):
    assert api.get("/v1/records/999").status_code == 404
    assert api.get("/v1/records/abc").status_code == 404
    assert api.delete("/v1/records/999").status_code == 404


def test_deleting_an_unreconciled_record_frees_its_external_id(api, ingested, worker):
    record_id = ingested["results"][0]["record_id"]
    assert api.delete(f"/v1/records/{record_id}").status_code == 204
    assert api.get(f"/v1/records/{record_id}").status_code == 404
    assert keys_of(api.get("/v1/records?data_stream_key=bank").json_body) == [("bank", 300), ("bank", 200)]
    again = api.post("/v1/records/bulk", {"records": [{"date": "2026-10-01", "data_stream_key": "bank",
                                                       "amount": 100, "direction": "credit",
                                                       "external_id": "a"}]}).json_body
    worker.drain()
    assert api.get(again["url"]).json_body["successful_items"] == 1


def test_a_reconciled_record_cannot_be_deleted(api, ingested, services):
    record_id = ingested["results"][1]["record_id"]
    services.table.update(keys.record("acme", record_id), "SET #s = :s", names={"#s": "status"},
                          values={":s": "reconciled"})
    response = api.delete(f"/v1/records/{record_id}")
    assert response.status_code == 409
    assert "unreconciled" in response.json_body["message"]
    assert api.get(f"/v1/records/{record_id}").status_code == 200


def test_a_record_of_an_import_still_writing_cannot_be_deleted(api, ingested, services):
    record_id, job_id = ingested["results"][0]["record_id"], ingested["id"]
    job = keys.ingestion_job("acme", job_id)
    # still processing, as after a crash: a retry of the record's chunk would write it again
    services.table.update(job, "SET #s = :s", names={"#s": "status"}, values={":s": "processing"})
    response = api.delete(f"/v1/records/{record_id}")
    assert response.status_code == 409
    assert response.json_body["message"] == (f"record {record_id} belongs to import {job_id}, which is still "
                                             "writing; delete it once the import has finished")
    assert api.get(f"/v1/records/{record_id}").status_code == 200
    services.table.update(job, "SET #s = :s", names={"#s": "status"}, values={":s": "completed"})
    assert api.delete(f"/v1/records/{record_id}").status_code == 204


def test_deleting_a_stream_removes_its_records(api, ingested):
    record_id = ingested["results"][0]["record_id"]
    assert api.delete("/v1/data_streams/bank").status_code == 204
    assert api.get(f"/v1/records/{record_id}").status_code == 404
    assert api.get("/v1/records?external_id=a").json_body["data"][0]["data_stream_key"] == "ledger"


def _mark_deleting(services, record_id, minutes_ago):
    from datetime import timedelta

    from chalicelib.domain.clock import iso, utc_now

    services.table.update(keys.record("acme", record_id), "SET deleting = :t, deleting_at = :at",
                          values={":t": True, ":at": iso(utc_now() - timedelta(minutes=minutes_ago))})


def test_a_delete_already_running_elsewhere_is_not_done_twice(api, ingested, services):
    record_id = ingested["results"][0]["record_id"]
    _mark_deleting(services, record_id, minutes_ago=0)  # another request is half-way
    assert api.delete(f"/v1/records/{record_id}").status_code == 204
    assert api.get(f"/v1/records/{record_id}").status_code == 404
    sweep_recounts(services.ports)
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 3  # that request counts it out


def test_a_delete_abandoned_by_a_dead_request_is_finished_by_the_retry(api, ingested, services):
    record_id = ingested["results"][0]["record_id"]
    _mark_deleting(services, record_id, minutes_ago=10)
    assert api.delete(f"/v1/records/{record_id}").status_code == 204
    assert services.table.get(keys.record("acme", record_id)) is None
    sweep_recounts(services.ports)
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 2


@pytest.mark.parametrize("raw", ["²", "١٢", "-1", "1e3", "9" * 40])
def test_ids_that_are_not_plain_digits_are_not_found(api, raw):
    assert api.get(f"/v1/records/{raw}").status_code == 404
    assert api.get(f"/v1/data_stream_property_definitions/{raw}").status_code == 404
