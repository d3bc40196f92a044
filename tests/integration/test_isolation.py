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
}


def test_every_route_is_covered():
    routes = {(s.method, s.path) for r in ROUTERS for s in r.specs if not s.public}
    assert routes == set(CASES)


@pytest.fixture
def world(api, services):
    """Environment A ('acme') owns a stream and a definition; B is a different environment."""
    assert api.post("/v1/data_streams", {"key": "bank", "name": "A's bank"}).status_code == 201
    definition = api.post(f"/v1{PD}", {"key": "ref", "name": "Ref", "type": "string",
                                       "data_stream_key": "bank"}).json_body
    other_key = create_key(services.api_keys, "globex")[1]
    return {"definition_id": definition["id"], "other_key": other_key}


def _a_still_has_everything(api, world):
    assert api.get("/v1/data_streams/bank").json_body["name"] == "A's bank"
    assert api.get(f"/v1{PD}/{world['definition_id']}").json_body["name"] == "Ref"


@pytest.mark.parametrize("route", sorted(CASES), ids=lambda r: f"{r[0]} {r[1]}")
def test_another_environment_sees_nothing_of_the_first(api, world, route):
    method, path, body, expected = CASES[route]
    response = api.request(method, path.format(**world), body, key=world["other_key"])
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
    else:
        assert response.status_code == expected, response.json_body
    _a_still_has_everything(api, world)
