"""The served OpenAPI document and the validation are the same rules: every request a client generated from
the document may send (the minimal one and each boundary of every body and query) is taken, and a request
just past a documented bound is refused."""
import json
from datetime import timedelta
from urllib.parse import urlencode

import pytest

from chalicelib.api.records import STANDALONE_FILTERS
from chalicelib.domain.clock import utc_now
from tests.support.people import add_user
from tests.support.schema_instances import Generator, Instance, SchemaGap
from tests.support.worlds import dated, world_of_api

REFUSED = (400, 422)  # 404 (an id that does not exist) and 409 (state) are not validation refusals
# A webhook URL must resolve (tests resolve loopback only, allowed locally). The endpoints stay inactive, so
# that no delivery to it is retried while the test drains the queues.
HOOK_URL = "http://127.0.0.1:9/hook"


def days_ago(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


def _ok(response, status=201):
    assert response.status_code == status, response.json_body
    return response.json_body


@pytest.fixture
def world(api, worker, services):
    """One of each resource an operation with a body or a query refers to; what refers to them
    (built once a process, restored after)."""
    built = world_of_api(dated("test_openapi_contract.world"), api, lambda: _build_world(api, worker, services))
    # The people the world holds, as the provider holds them (its fake is the test's own).
    services.identity.users.update({USER_EMAIL: USER_SUB, f"{EDITED_SUB}@acme.example": EDITED_SUB})
    return {"api": api, "worker": worker, **built}


USER_SUB, USER_EMAIL = "contract-user", "contract-user@acme.example"
EDITED_SUB = "contract-edited"  # the user PATCH /users/{id} changes (deactivates, too)


def _build_world(api, worker, services):
    user = add_user(services.users, "acme", USER_SUB, email=USER_EMAIL)
    edited = add_user(services.users, "acme", EDITED_SUB)
    for key in ("bank", "ledger"):
        _ok(api.post("/v1/data_streams", {"key": key, "name": key.title()}))
    # A rate stream keyed as the paths' {key} are, for rules that convert and imports of rates.
    _ok(api.post("/v1/rate_streams", {"key": "bank", "name": "Rates"}))
    _ok(api.post("/v1/data_stream_property_definitions", {"key": "ref", "name": "Ref", "type": "string",
                                                          "data_stream_key": "bank", "optional": True}))
    recon = _ok(api.post("/v1/reconciliations", {"name": "R", "run_type": "batch", "side_a_stream_keys": ["bank"],
                                                 "side_b_stream_keys": ["ledger"]}))
    rule = _ok(api.post(f"/v1/reconciliations/{recon['id']}/rules", {
        "name": "amount", "conditions": [{"field": "amount", "operator": "equals"}]}))
    records = [{"date": days_ago(40), "data_stream_key": key, "amount": amount, "direction": "credit"}
               for key, amount in (("bank", 100), ("ledger", 100), ("bank", 5), ("ledger", 7))]
    _ok(api.post("/v1/records/bulk", {"records": records}), 202)
    worker.drain()
    _ok(api.post(f"/v1/reconciliations/{recon['id']}/runs"), 202)
    worker.drain()
    # Two open records of equal amounts, for a match by hand (after the run, so it left them open).
    bulk = _ok(api.post("/v1/records/bulk", {"records": [
        {"date": days_ago(1), "data_stream_key": key, "amount": 300, "direction": "credit"}
        for key in ("bank", "ledger")]}), 202)
    worker.drain()
    open_pair = [r["record_id"] for r in _ok(api.get(bulk["url"]), 200)["results"]]
    file_import = _ok(api.post("/v1/data_streams/bank/file_imports", {"filename": "a.csv", "format": "csv"}))
    exceptions = _ok(api.get(f"/v1/reconciliation_exceptions?reconciliation_id={recon['id']}"), 200)["data"]
    story = _ok(api.post("/v1/reconciliation_stories", {"name": "S", "links": [
        {"reconciliation_id": recon["id"], "position": 1}]}))
    agent = _ok(api.post("/v1/agents", {"name": "A"}))
    endpoint = _ok(api.post("/v1/webhook_endpoints", {"url": HOOK_URL, "events": ["*"], "active": False}))
    matches = _ok(api.get(f"/v1/reconciliation_matches?reconciliation_id={recon['id']}"), 200)["data"]
    period_close = _ok(api.post(f"/v1/reconciliations/{recon['id']}/period_closes", {
        "period_start": "2000-01-01", "period_end": "2000-01-31", "note": "signed"}))
    assert exceptions and matches, "the run left an exception and a match"
    path_ids = {
        "/data_stream_property_definitions/{id}": 1, "/file_imports/{id}": file_import["id"],
        "/reconciliation_exceptions/{id}": exceptions[0]["id"], "/reconciliations/{id}": recon["id"],
        "/reconciliation_rules/{id}": rule["id"], "/reconciliation_stories/{id}": story["id"],
        "/agents/{id}": agent["id"], "/webhook_endpoints/{id}": endpoint["id"], "/users/{id}": edited.id,
        "{close_id}": period_close["id"],
    }
    # Values that refer to what exists: a generator cannot know them.
    known = {"data_stream_key": "bank", "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"],
             "reconciliation_id": recon["id"], "record_ids": open_pair, "record_id": open_pair[0],
             "reconciliation_match_id": matches[0]["id"], "file_import_id": file_import["id"], "url": HOOK_URL, "active": False,
             # What the stream's property definitions require (the test's own requests create and change them).
             "metadata": {"ref": "R-1", "invoice_id": 1, "Payer-Ref": 1},
             "mentions": [{"type": "reconciliation", "id": recon["id"], "label": "R"}],
             # Whom an assignment and a comment name: an active user (sent by an API key, a comment names its author).
             "user_id": user.id, "idp_user_id": USER_SUB, "author_idp_id": USER_SUB, "user_ids": [user.id],
             # A rule's conversion names a rate stream of the world's; an import, rows it can take.
             "rate_stream_key": "bank", "to_currency": "USD", "csv": "date,base,quote,rate\n2026-11-02,EUR,USD,1.0842\n"}
    return {"path_ids": path_ids, "known": known}


def _path(world, path: str) -> str:
    for prefix, value in world["path_ids"].items():
        if prefix.startswith("{"):  # a second id in the path, named by itself
            path = path.replace(prefix, str(value))
        elif path.startswith("/v1" + prefix):
            path = path.replace("{id}", str(value), 1)
    return path.replace("{key}", "bank")


def _document(api):
    return _ok(api.get("/v1/openapi.json", key=None), 200)


def _operations(document, having):
    return sorted((method.upper(), path) for path, methods in document["paths"].items()
                  for method, operation in methods.items() if having(operation))


def _has_body(operation):
    return "requestBody" in operation


def _has_query(operation):
    return any(p["in"] == "query" for p in operation.get("parameters", []))


# Rules between query parameters, which OpenAPI parameters cannot state (the operation's summary says them).
QUERY_RULES = {("GET", "/v1/records"): {"anyOf": [{"required": [name]} for name in STANDALONE_FILTERS]},
               ("GET", "/v1/audit_events"): {"allOf": [{"if": {"required": ["resource_id"]},
                                                        "then": {"required": ["resource_type"]}}]}}


def _query_schema(method, path, operation):
    params = [p for p in operation["parameters"] if p["in"] == "query"]
    return {"type": "object", "properties": {p["name"]: p["schema"] for p in params},
            "required": [p["name"] for p in params if p.get("required")], **QUERY_RULES.get((method, path), {})}


def _state_refusal(method, path, label, message) -> bool:
    """A refusal of the agent's state, not of the body: a PATCH may not clear a field its current cadence needs
    (the document says which cadence needs which; the generator cannot know the cadence a variant left)."""
    return (method, path) == ("PATCH", "/v1/agents/{id}") and label.endswith(":null") and \
        "is required for cadence" in message


def _as_text(value) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def _send(world, method, path, operation, instance: Instance, where: str):
    api = world["api"]
    url = _path(world, path)
    if where == "query":
        return api.request(method, f"{url}?{urlencode({k: _as_text(v) for k, v in instance.value.items()})}")
    return api.request(method, url, instance.value)


def _schema(method, path, operation, where):
    if where == "query":
        return _query_schema(method, path, operation)
    return operation["requestBody"]["content"]["application/json"]["schema"]


def _sent(world, document, method, path, where, instances):
    operation = document["paths"][path][method.lower()]
    return [(instance, _send(world, method, path, operation, instance, where)) for instance in instances]


BODY_OPERATIONS_OF_THE_APP = 41  # so that a route table that lost its bodies cannot pass by testing nothing
QUERY_OPERATIONS_OF_THE_APP = 30


def test_every_operation_with_a_body_or_a_query_is_covered(api):
    document = _document(api)
    assert len(_operations(document, _has_body)) == BODY_OPERATIONS_OF_THE_APP
    assert len(_operations(document, _has_query)) == QUERY_OPERATIONS_OF_THE_APP


def _served(world, where):
    """The API, its served document, a request generator over its schemas, and the operations
    that take a body or a query (as `where` says)."""
    api = world["api"]
    document = _document(api)
    generator = Generator(document["components"]["schemas"], world["known"],
                          always=frozenset({"metadata", "author_idp_id"}))
    return api, document, generator, _operations(document, _has_body if where == "body" else _has_query)


# The bodies' requests (over 500) are sent in parts, each to a world of its own: moto reads a whole table
# for each index query, so a request costs more the more the ones before it wrote (one world for all of
# them took minutes), and xdist spreads the parts over its workers. Together the parts send every request.
BODY_PARTS = 6
TAKEN_PARTS = [("body", part) for part in range(BODY_PARTS)] + [("query", 0)]


def _instances(generator, document, where, operations) -> dict:
    """Each operation's valid requests, or the SchemaGap that keeps the generator from building them."""
    built = {}
    for method, path in operations:
        try:
            built[method, path] = generator.instances(_schema(method, path, document["paths"][path][method.lower()],
                                                              where))
        except SchemaGap as gap:
            built[method, path] = gap
    return built


def _parts(built: dict, count: int) -> list[list]:
    """The operations in `count` parts of about as many requests each (the largest first, each to the lightest
    part), every part in the document's order; the same parts in every part's test."""
    parts, loads = [[] for _ in range(count)], [0] * count
    size = {op: len(value) if isinstance(value, list) else 0 for op, value in built.items()}
    for op in sorted(built, key=lambda op: -size[op]):
        lightest = loads.index(min(loads))
        parts[lightest].append(op)
        loads[lightest] += size[op]
    return [sorted(part) for part in parts]


@pytest.mark.parametrize(("where", "part"), TAKEN_PARTS)
def test_every_request_the_document_allows_is_taken(world, where, part):
    api, document, generator, operations = _served(world, where)
    built = _instances(generator, document, where, operations)
    if part == 0:  # what all the parts send together, counted once
        assert sum(len(v) for v in built.values() if isinstance(v, list)) >= 2 * len(operations)
    mine = _parts(built, sum(w == where for w, _ in TAKEN_PARTS))[part]
    refused, sent, bulk_requests = [], 0, []
    for method, path in mine:
        instances = built[method, path]
        if isinstance(instances, SchemaGap):
            refused.append(f"{method} {path}: the schema is too vague to build a request: {instances}")
            continue
        for instance, response in _sent(world, document, method, path, where, instances):
            sent += 1
            assert response.status_code < 500, (method, path, instance, response.body)
            if response.status_code == 202 and path == "/v1/records/bulk":
                bulk_requests.append((instance, response.json_body["url"]))
            if response.status_code in REFUSED and not _state_refusal(method, path, instance.label,
                                                                      response.json_body["message"]):
                refused.append(f"{method} {path} [{instance.label}] {json.dumps(instance.value)[:150]} -> "
                               f"{response.json_body['message'][:200]}")
        if bulk_requests and path == "/v1/records/bulk":
            # A bulk request refuses an item in its results, not with a 422. (Drained now: the webhook
            # endpoints created later would have deliveries to retry.)
            world["worker"].drain(max_batches=1000)  # one message a batch per queue: many requests
            for instance, url in bulk_requests:
                failed = [r["error"] for r in _ok(api.get(url), 200)["results"] if r["status"] == "failed"]
                if failed:
                    refused.append(f"POST /v1/records/bulk [{instance.label}] item refused: {failed}")
    assert where == "query" or ("POST", "/v1/records/bulk") not in mine or bulk_requests, "the bulk records were tried"
    assert not refused, "\n".join(refused)
    assert sent >= len(mine)


@pytest.mark.parametrize("where", ["body", "query"])
def test_every_request_just_past_a_documented_bound_is_refused(world, where):
    api, document, generator, operations = _served(world, where)
    taken, sent = [], 0
    for method, path in operations:
        operation = document["paths"][path][method.lower()]
        violations = list(generator.violations(_schema(method, path, operation, where)))
        for instance, response in _sent(world, document, method, path, where, violations):
            sent += 1
            if response.status_code not in REFUSED:
                taken.append((method, path, instance.label, response.status_code))
    assert sent >= len(operations)
    assert not taken, "\n".join(map(repr, taken))
