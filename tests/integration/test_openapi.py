"""The OpenAPI document is valid 3.1, lists every route of the app, and documents every status
an operation answers: a fuzz over the route table checks what the code says against it."""
import json
import re

import pytest
from openapi_spec_validator import validate

from app import app
from chalicelib.api.openapi import IDEMPOTENT_OPERATIONS
from chalicelib.api.routers import ROUTERS
from chalicelib.api.routing import API_PREFIX, query_parameters
from tests.support.worlds import world_of_api

SPECS = [spec for router in ROUTERS for spec in router.specs]
# (OPTIONS: chalice.test.Client answers it itself, as API Gateway would; the local stack sends it to the app.)
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "TRACE")
# Path values: existing resources of the fixture below (id 1, stream "bank"), missing ones, garbage.
PATH_VALUES = ("1", "bank", "999999999", "x%20y")
QUERY_VALUES = ("nonsense", "-1", "", "1", "2026-11-02")
BODIES = (("application/json", "{oops"), ("text/plain", "key=x"), ("application/json", "{}"),
          ("application/json", "[]"), ("application/json", "null"), ("application/json", '{"name": 7}'))


def _document(api):
    response = api.get("/v1/openapi.json", key=None)
    assert response.status_code == 200
    return response.json_body


def test_the_document_is_valid_openapi_3_1(api):
    document = _document(api)
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_every_route_and_method_of_the_app_is_documented(api):
    document = _document(api)
    for path, methods in app.routes.items():
        for method in methods:
            assert method.lower() in document["paths"].get(path, {}), f"{method} {path} is missing"


def test_key_auth_is_declared_and_public_routes_need_none(api):
    document = _document(api)
    assert document["components"]["securitySchemes"]["ApiKey"] == {"type": "apiKey", "in": "header",
                                                                   "name": "X-API-KEY"}
    assert document["paths"]["/v1/health"]["get"]["security"] == []
    create = document["paths"]["/v1/data_streams"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/CreateDataStream"}
    assert {"201", "401", "409", "422"} <= set(create["responses"])


def test_bearer_auth_is_declared_as_the_alternative_the_api_accepts(api):
    document = _document(api)
    assert document["components"]["securitySchemes"]["BearerAuth"]["scheme"] == "bearer"
    assert {"ApiKey": []} in document["security"] and {"BearerAuth": []} in document["security"]
    bearer = api.get("/v1/data_streams", key=None, headers={"Authorization": f"Bearer {api.key}"})
    assert bearer.status_code == 200


def test_servers_name_where_the_document_was_served_from(api):
    document = _document(api)
    assert [s["url"] for s in document["servers"]] and all(
        s["url"].startswith("http") for s in document["servers"])


def test_the_idempotency_key_header_is_documented_where_it_is_honoured(api):
    document = _document(api)
    routes = {(spec.method, spec.path) for spec in SPECS}
    assert IDEMPOTENT_OPERATIONS and set(IDEMPOTENT_OPERATIONS) <= routes
    bulk = document["paths"]["/v1/records/bulk"]["post"]
    [header] = [p for p in bulk["parameters"] if p["in"] == "header"]
    assert header["name"] == "Idempotency-Key" and header["schema"]["maxLength"] == 255


def test_the_api_reference_is_served_without_a_key_and_without_any_cdn(api):
    page = api.get("/v1/docs", key=None)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    html = page.body.decode()
    assert "//" not in html.replace("<!DOCTYPE html>", ""), "every asset is served by the API itself"
    for asset in ("docs/swagger-ui-bundle.js", "docs/swagger-ui.css"):
        assert asset in html
        served = api.get(f"/v1/{asset}", key=None)
        assert served.status_code == 200 and len(served.body) > 10_000, asset
    assert api.get("/v1/docs/../../etc/passwd", key=None).status_code in (403, 404)
    assert api.get("/v1/docs/index.html", key=None).status_code == 404


# --- every status an operation answers is documented for it --------------------------------------

@pytest.fixture
def populated(api, worker):
    """One of most things, so that fuzzed ids find real resources as well as missing ones: built
    once a process, restored for each test."""
    world_of_api("test_openapi.populated", api, lambda: _populate(api, worker))
    return api


def _populate(api, worker) -> None:
    for key in ("bank", "ledger"):
        assert api.post("/v1/data_streams", {"key": key, "name": key}).status_code == 201
    assert api.post("/v1/data_stream_property_definitions", {
        "key": "ref", "name": "Ref", "type": "string", "data_stream_key": "bank", "optional": True}).status_code == 201
    assert api.post("/v1/reconciliations", {"name": "R", "run_type": "batch", "side_a_stream_keys": ["bank"],
                                            "side_b_stream_keys": ["ledger"]}).status_code == 201
    assert api.post("/v1/reconciliations/1/rules", {
        "name": "amount", "conditions": [{"field": "amount", "operator": "equals"}]}).status_code == 201
    records = [{"date": "2026-08-03", "data_stream_key": key, "amount": amount, "direction": "credit"}
               for key, amount in (("bank", 100), ("ledger", 100), ("bank", 5), ("ledger", 7))]
    assert api.post("/v1/records/bulk", {"records": records}).status_code == 202
    worker.drain()
    assert api.post("/v1/reconciliations/1/runs").status_code == 202
    assert api.post("/v1/data_streams/bank/file_imports", {"filename": "a.csv", "format": "csv"}).status_code == 201


def _fill(path: str, value: str) -> str:
    for name in [part[1:-1] for part in path.split("/") if part.startswith("{")]:
        path = path.replace("{" + name + "}", value)
    return API_PREFIX + path


def _requests(spec):
    """(method, path, query, headers, body, key) tuples: good and bad inputs of every kind the route takes."""
    key = "default"
    for value in PATH_VALUES if spec.path_params else ("",):
        path = _fill(spec.path, value)
        yield path, {}, {}, None, None
        yield path, {}, {}, None, "rk_nobody"
        yield path, {"zzz_not_a_parameter": "1"}, {}, None, key
        yield path, {"cursor": "!!not-a-cursor"}, {}, None, key
        for name in sorted(query_parameters(spec)):
            for query_value in QUERY_VALUES:
                yield path, {name: query_value}, {}, None, key
        if spec.body is not None:
            for content_type, body in BODIES:
                yield path, {}, {"Content-Type": content_type}, body, key
        else:
            yield path, {}, {}, None, key


@pytest.mark.parametrize("spec", SPECS, ids=[f"{s.method} {s.path}" for s in SPECS])
def test_every_status_an_operation_answers_to_good_and_bad_input_is_documented(populated, spec):
    api = populated
    documented = set(_document(api)["paths"][API_PREFIX + spec.path][spec.method.lower()]["responses"])
    undocumented = []
    for path, query, headers, body, key in _requests(spec):
        url = path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
        response = api.request(spec.method, url, key=key, headers=headers, body=body)
        assert response.status_code < 500 or response.status_code == 503, (url, response.body)
        if str(response.status_code) not in documented:
            undocumented.append((response.status_code, spec.method, url, body, response.body[:200]))
        if response.status_code >= 400 and response.headers.get("Content-Type", "").startswith("application/json"):
            assert "message" in json.loads(response.body)
    assert not undocumented, undocumented


def test_a_body_over_the_limit_is_413_and_documented_for_every_operation(api, services):
    services.settings = services.settings.model_copy(update={"max_body_bytes": 64})
    document = _document(api)
    for spec in SPECS:
        path = _fill(spec.path, "1")
        response = api.request(spec.method, path, headers={"Content-Type": "application/json"},
                               body=json.dumps({"padding": "x" * 100}))
        assert response.status_code == 413, (spec.method, path, response.body)
        assert "413" in document["paths"][API_PREFIX + spec.path][spec.method.lower()]["responses"]


def test_a_method_a_path_does_not_serve_answers_405_with_allow_as_documented(api):
    document = _document(api)
    assert "Allow" in document["components"]["responses"]["MethodNotAllowed"]["headers"]
    for path, served in app.routes.items():
        for method in METHODS:
            if method in served:
                continue
            response = api.request(method, path.replace("{", "").replace("}", ""))
            assert response.status_code == 405, (method, path, response.body)
            assert json.loads(response.body).keys() == {"message"}
            assert set(response.headers["Allow"].replace(" ", "").split(",")) == set(served)


# --- what a client generated from the document needs --------------------------------------------

def test_a_bulk_record_item_is_documented_as_an_object_with_its_required_fields(api):
    records = _document(api)["components"]["schemas"]["BulkRecordsBody"]["properties"]["records"]
    item = records["items"]
    assert item["type"] == "object"
    assert set(item["required"]) == {"date", "data_stream_key", "amount", "direction"}
    assert item["properties"]["direction"]["enum"] == ["credit", "debit"]
    assert item["properties"]["amount"]["minimum"] == 0


def test_every_operation_is_tagged_with_its_resource(api):
    document = _document(api)
    tags = {tag["name"] for tag in document["tags"]}
    operations = [o for methods in document["paths"].values() for o in methods.values()]
    assert len(operations) == len(SPECS)
    assert all(len(o["tags"]) == 1 and o["tags"][0] in tags for o in operations)
    assert document["paths"]["/v1/agents/{id}/runs"]["post"]["tags"] == ["agents"]


def test_every_create_links_to_where_what_it_made_is_read(api):
    document = _document(api)
    operations = {o["operationId"]: (path, o) for path, methods in document["paths"].items()
                  for o in methods.values()}
    creates = [(path, o) for path, methods in document["paths"].items() for method, o in methods.items()
               if method == "post" and ("201" in o["responses"] or path.endswith(("/runs", "/bulk")))]
    assert len(creates) >= 17
    for path, create in creates:
        success = next(r for status, r in create["responses"].items() if status.startswith("2"))
        assert success.get("links"), f"POST {path} has no link to a read"
        for link in success["links"].values():
            target_path, target = operations[link["operationId"]]
            assert target_path.startswith("/v1/") and "get" in document["paths"][target_path]
            needed = {p["name"] for p in target["parameters"] if p["in"] == "path"}
            assert set(link["parameters"]) == needed, (path, link)


def test_the_api_reference_works_with_a_trailing_slash_too(api):
    from urllib.parse import urljoin

    for page_url in ("/v1/docs", "/v1/docs/"):
        page = api.get(page_url, key=None)
        assert page.status_code == 200, page_url
        html = page.body.decode()
        [base] = re.findall(r'<base href="([^"]+)">', html)
        for relative in re.findall(r'(?:href|src|url): ?"([^"]+)"|(?:href|src)="([^"]+)"', html):
            relative = relative[0] or relative[1]
            if relative == base or relative.startswith("data:"):
                continue
            resolved = urljoin(urljoin("http://h" + page_url, base), relative).removeprefix("http://h")
            assert api.get(resolved, key=None).status_code == 200, (page_url, relative, resolved)
