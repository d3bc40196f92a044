"""An export on the real local stack: records in through a bulk request, POST /exports polled until
completed by the stack's own worker, and the file downloaded through its presigned URL from the
embedded S3 (CSV read back with the csv module, Parquet with polars)."""
import csv
import io
import time
import uuid

import polars as pl
import requests


def wait_done(stack, path, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = stack.request("GET", path).json()
        if body["status"] not in ("pending", "processing"):
            return body
        time.sleep(0.2)
    raise TimeoutError(body)


def test_an_export_is_downloaded_through_its_url(stack):
    key = f"exports-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/data_streams", {"key": key, "name": key}).status_code == 201
    bulk = stack.request("POST", "/records/bulk", {"records": [
        {"data_stream_key": key, "external_id": f"e-{n}", "amount": 1000 + n, "date": "2026-11-02",
         "direction": "credit", "description": "=SUM(A1)" if n == 3 else f"row {n}"} for n in range(250)]}).json()
    deadline = time.monotonic() + 120
    while stack.request("GET", f"/bulk_requests/{bulk['id']}").json()["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    created = stack.request("POST", "/exports", {"kind": "records", "format": "csv",
                                                 "filters": {"data_stream_key": key}}).json()
    done = wait_done(stack, f"/exports/{created['id']}")
    assert done["status"] == "completed" and done["rows_written"] == 250
    response = requests.get(done["download_url"], timeout=60)
    assert response.status_code == 200 and len(response.content) == done["byte_size"]
    assert done["filename"] in response.headers.get("Content-Disposition", done["filename"])
    rows = list(csv.DictReader(io.StringIO(response.content.decode(), newline="")))
    by_id = {r["external_id"]: r for r in rows}
    assert len(rows) == 250 and by_id["e-7"]["amount"] == "10.07" and by_id["e-7"]["amount_minor"] == "1007"
    assert by_id["e-3"]["description"] == "'=SUM(A1)"

    created = stack.request("POST", "/exports", {"kind": "records", "format": "parquet",
                                                 "filters": {"data_stream_key": key}}).json()
    done = wait_done(stack, f"/exports/{created['id']}")
    frame = pl.read_parquet(io.BytesIO(requests.get(done["download_url"], timeout=60).content))
    assert frame.height == 250 and frame["amount_minor"].sum() == sum(1000 + n for n in range(250))
