"""Environments never see each other's data: every route, called with another environment's key,
answers 404 for the first environment's things and lists none of them."""
import pytest

from chalicelib.api import ROUTERS
from chalicelib.services.api_keys import create_key

# How to call each route against environment A's data, and what environment B must get.
# A route missing here fails test_every_route_is_covered, so new routes cannot skip isolation.
PD = "/data_stream_property_definitions"
CASES = {
    ("POST", "/data_streams"): ("POST", "/v1/data_streams", {"key": "bank", "name": "B's own"}, "creates"),
    ("GET", "/data_streams"): ("GET", "/v1/data_streams", None, "lists_nothing"),
    ("GET", "/data_streams/{key}"): ("GET", "/v1/data_streams/bank", None, 404),
    ("PATCH", "/data_streams/{key}"): ("PATCH", "/v1/data_streams/bank", {"name": "stolen"}, 404),
    ("DELETE", "/data_streams/{key}"): ("DELETE", "/v1/data_streams/bank", None, 404),
    ("POST", PD): ("POST", f"/v1{PD}", {"key": "x", "name": "x", "type": "string", "data_stream_key": "bank"},
                   "refers_to_unknown_stream"),
    ("GET", PD): ("GET", f"/v1{PD}", None, "lists_nothing"),
    ("GET", PD + "/{id}"): ("GET", f"/v1{PD}/{{definition_id}}", None, 404),
    ("PATCH", PD + "/{id}"): ("PATCH", f"/v1{PD}/{{definition_id}}", {"name": "stolen"}, 404),
    ("DELETE", PD + "/{id}"): ("DELETE", f"/v1{PD}/{{definition_id}}", None, 404),
    ("POST", "/records/bulk"): ("POST", "/v1/records/bulk", {"records": [
        {"date": "2026-11-01", "data_stream_key": "bank", "amount": 1, "direction": "credit"}]},
        "bulk_item_refers_to_unknown_stream"),
    ("GET", "/bulk_requests/{id}"): ("GET", "/v1/bulk_requests/{bulk_request_id}", None, 404),
    ("GET", "/records"): ("GET", "/v1/records?data_stream_key=bank", None, "lists_nothing"),
    ("GET", "/records/{id}"): ("GET", "/v1/records/{record_id}", None, 404),
    ("DELETE", "/records/{id}"): ("DELETE", "/v1/records/{record_id}", None, 404),
    ("POST", "/data_streams/{key}/file_imports"): ("POST", "/v1/data_streams/bank/file_imports",
                                                   {"filename": "x.csv", "format": "csv"}, 404),
    ("GET", "/data_streams/{key}/file_imports"): ("GET", "/v1/data_streams/bank/file_imports", None, 404),
    ("GET", "/file_imports/{id}"): ("GET", "/v1/file_imports/{bulk_request_id}", None, 404),
    ("GET", "/file_imports/{id}/records"): ("GET", "/v1/file_imports/{bulk_request_id}/records", None, 404),
    ("POST", "/file_imports/{id}/cancel"): ("POST", "/v1/file_imports/{bulk_request_id}/cancel", None, 404),
}
OTHER_LISTS = ["/v1/records?status=unreconciled", "/v1/records?external_id=a-1",
               "/v1/records?file_import_id={bulk_request_id}"]


def test_every_route_is_covered():
    routes = {(s.method, s.path) for r in ROUTERS for s in r.specs if not s.public}
    assert routes == set(CASES)


@pytest.fixture
def world(api, services, worker):
    """Environment A ('acme') owns a stream, a definition, a bulk request and its record;
    B ('globex') is a different environment with nothing."""
    assert api.post("/v1/data_streams", {"key": "bank", "name": "A's bank"}).status_code == 201
    definition = api.post(f"/v1{PD}", {"key": "ref", "name": "Ref", "type": "string",
                                       "data_stream_key": "bank"}).json_body
    bulk = api.post("/v1/records/bulk", {"records": [{"date": "2026-11-01", "data_stream_key": "bank", "amount": 5,
                                                      "direction": "credit", "external_id": "a-1",
                                                      "metadata": {"ref": "r"}}]}).json_body
    worker.drain()
    record_id = api.get(bulk["url"]).json_body["results"][0]["record_id"]
    other_key = create_key(services.api_keys, "globex")[1]
    return {"definition_id": definition["id"], "bulk_request_id": bulk["id"], "record_id": record_id,
            "other_key": other_key, "worker": worker}


def _a_still_has_everything(api, world):
    assert api.get("/v1/data_streams/bank").json_body["name"] == "A's bank"
    assert api.get(f"/v1{PD}/{world['definition_id']}").json_body["name"] == "Ref"
    assert api.get(f"/v1/records/{world['record_id']}").json_body["amount"] == 5
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 1


@pytest.mark.parametrize("route", sorted(CASES), ids=lambda r: f"{r[0]} {r[1]}")
def test_another_environment_sees_nothing_of_the_first(api, world, route):
    method, path, body, expected = CASES[route]
    response = api.request(method, path.format(**world), body, key=world["other_key"])
    if expected == "bulk_item_refers_to_unknown_stream":
        assert response.status_code == 202
        world["worker"].drain()
        done = api.get(response.json_body["url"], key=world["other_key"]).json_body
        assert done["results"][0]["error"] == "data_stream_key: no data stream with key 'bank'"
        expected = "done"
    if expected == "lists_nothing":
        assert response.status_code == 200
        data = response.json_body if isinstance(response.json_body, list) else response.json_body["data"]
        assert data == []
    elif expected == "creates":
        # The same key is free in B: keys are unique per environment, not globally.
        assert response.status_code == 201
    elif expected == "refers_to_unknown_stream":
        assert response.status_code == 422
        assert response.json_body["errors"][0]["field"] == "data_stream_key"
    elif expected != "done":
        assert response.status_code == expected, response.json_body
    _a_still_has_everything(api, world)


@pytest.mark.parametrize("path", OTHER_LISTS)
def test_every_record_filter_lists_nothing_of_another_environment(api, world, path):
    assert api.get(path.format(**world)).json_body["data"] != []  # A sees its own
    assert api.get(path.format(**world), key=world["other_key"]).json_body["data"] == []
