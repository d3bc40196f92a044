"""Fixtures of the reconciliation tests: streams, a batch reconciliation between them, and a way to ingest."""
import pytest


def record(stream, n, amount, day="2026-11-02", direction="credit", **fields):
    return {"data_stream_key": stream, "external_id": f"{stream}-{n}", "amount": amount, "date": day,
            "direction": direction, **fields}


@pytest.fixture
def ingest(api, worker):
    def ingest(*records):
        response = api.post("/v1/records/bulk", {"records": list(records)})
        assert response.status_code == 202, response.json_body
        worker.drain()
        results = api.get(response.json_body["url"]).json_body["results"]
        assert all(r["status"] == "successful" for r in results), results
        return [r["record_id"] for r in results]
    return ingest


@pytest.fixture
def reconciliation(api):
    for key in ("bank", "ledger"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
    created = api.post("/v1/reconciliations", {"name": "Bank to ledger", "run_type": "batch",
                                               "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"]})
    assert created.status_code == 201, created.json_body
    return created.json_body
