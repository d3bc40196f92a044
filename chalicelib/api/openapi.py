"""The OpenAPI 3.1 document, generated from the route specs and their pydantic models.

The statuses of an operation come from what the shared machinery can answer for any route of
its shape (auth, path ids, bodies, query strings, limits) plus the route's own `errors`, so a
new route is documented completely without listing the common ones again.
"""
from __future__ import annotations

from typing import Any, get_args, get_origin

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from chalicelib.api.route_roles import role_needed
from chalicelib.api.routing import API_PREFIX, RouteSpec
from chalicelib.api.schemas.common import ErrorOut, ValidationErrorOut
from chalicelib.domain.users import Role

REF = "#/components/schemas/{model}"
ERROR_DESCRIPTIONS = {
    400: "Malformed JSON, a bad cursor, a query parameter of bad syntax or one the operation does not take",
    401: "Missing, unknown or revoked API key, or a token that is expired, not the identity provider's for this "
         "service, or of no user or a deactivated one",
    403: "Your role does not allow the operation; the message names the role it needs",
    404: "Not found in this environment",
    409: "Conflict with the current state",
    413: "Body over the size limit",
    415: "Content-Type is not application/json",
    422: "Validation failed",
    500: "A bug of ours, never the client's input; the request id identifies it in our logs",
    503: "A service the API needs does not answer (locally: the embedded DynamoDB or moto server); "
         "the message names it",
}
# Operations that honour an Idempotency-Key header, and what a repeated key does there.
IDEMPOTENT_OPERATIONS = {
    ("POST", "/records/bulk"): "Makes retries safe: the same key with the same body returns the first request "
                               "(same status); the same key with another body is 409. 1 to 255 characters.",
    ("POST", "/reconciliation_exceptions/bulk"): "Makes retries safe: the same key with the same body returns the "
                                                 "first bulk action; another body is 409. 1 to 255 characters.",
    ("POST", "/reconciliation_matches/bulk"): "Makes retries safe: the same key with the same body returns the first "
                                              "bulk action; another body is 409. 1 to 255 characters.",
}
# Where a created resource is read, for the OpenAPI links of its create: (method, path) -> the reads, each
# (operationId of the read, {its parameter: where the value comes from}). A POST to P whose answer has an id
# is linked to GET P/{id} without being listed here.
RESPONSE_ID = "$response.body#/id"
READS_OF_CREATES: dict[tuple[str, str], list[tuple[str, dict[str, str]]]] = {
    ("POST", "/data_streams"): [("get_data_streams_key", {"key": "$response.body#/key"})],
    ("POST", "/rate_streams"): [("get_rate_streams_key", {"key": "$response.body#/key"})],
    ("POST", "/records/bulk"): [("get_bulk_requests_id", {"id": RESPONSE_ID}),
                                ("get_file_imports_id_results", {"id": RESPONSE_ID})],
    ("POST", "/reconciliation_exceptions/bulk"): [("get_bulk_actions_id", {"id": RESPONSE_ID})],
    ("POST", "/reconciliation_matches/bulk"): [("get_bulk_actions_id", {"id": RESPONSE_ID})],
    ("POST", "/data_streams/{key}/file_imports"): [("get_file_imports_id", {"id": RESPONSE_ID})],
    ("POST", "/file_imports"): [("get_file_imports_id", {"id": RESPONSE_ID})],
    ("POST", "/reconciliations/{id}/rules"): [("get_reconciliation_rules_id", {"id": RESPONSE_ID})],
    ("POST", "/reconciliations/{id}/runs"): [("get_reconciliations_id_runs_run_id",
                                              {"id": "$request.path.id", "run_id": RESPONSE_ID})],
    ("POST", "/reconciliation_exceptions/{id}/assignees"): [("get_reconciliation_exceptions_id",
                                                             {"id": "$request.path.id"})],
    ("POST", "/reconciliation_exceptions/{id}/comments"): [("get_reconciliation_exceptions_id",
                                                            {"id": "$request.path.id"})],
    ("POST", "/reconciliation_exceptions/{id}/investigations"): [("get_reconciliation_exceptions_id",
                                                                  {"id": "$request.path.id"})],
    ("POST", "/reconciliation_exceptions/{id}/investigations/{investigation_id}/accept"): [
        ("get_reconciliation_matches_id", {"id": RESPONSE_ID})],
    ("POST", "/agents/{id}/files"): [("get_agents_id", {"id": "$request.path.id"})],
    ("POST", "/agents/{id}/runs"): [("get_agents_id_runs_run_id", {"id": "$request.path.id", "run_id": RESPONSE_ID})],
    ("POST", "/api_keys"): [("get_api_keys", {})],  # no read of one key: the list holds it
    ("POST", "/reconciliations/{id}/period_closes"): [("get_reconciliations_id_period_closes_close_id",
                                                       {"id": "$request.path.id", "close_id": RESPONSE_ID})],
    ("POST", "/reconciliations/{id}/routing_rules"): [("get_reconciliations_id_routing_rules_rule_id",
                                                       {"id": "$request.path.id", "rule_id": RESPONSE_ID})],
}
DESCRIPTION = """\
Financial-data reconciliation: data streams of records, reconciliations with rules, runs,
matches, exceptions and investigations.

* **Auth**: send your key as `X-API-KEY: <key>` or `Authorization: Bearer <key>`. The key
  selects its environment; another environment's data answers 404.
* **Errors** are `{"message"}`; a 422 also lists `errors: [{"field", "message"}]`. A method a
  path does not serve answers 405 with an `Allow` header.
* **Paging**: cursor lists take `?cursor=&limit=` and answer `next_cursor` (null on the last
  page); the exception queue takes `?offset=&limit=` and answers `has_more`.
* **Money** is integer minor units with `decimal_places`; amounts are never negative (the sign
  is `direction`).
"""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _schema_ref(annotation: Any) -> dict[str, Any]:
    if get_origin(annotation) is list:
        return {"type": "array", "items": _schema_ref(get_args(annotation)[0])}
    if annotation is str:
        return {"type": "string"}
    if _model_of(annotation) is None:
        return {"type": "object"}
    return {"$ref": REF.format(model=annotation.__name__)}


def _absent_not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A query parameter is given or absent, never null: its schema without the model's null branch."""
    branches = [b for b in schema.get("anyOf", []) if b.get("type") != "null"]
    if "anyOf" not in schema or len(branches) != 1:
        return schema
    rest = {k: v for k, v in schema.items() if k != "anyOf" and not (k == "default" and v is None)}
    return {**branches[0], **rest}


def error_statuses(spec: RouteSpec) -> set[int]:
    """Every error status the operation can answer."""
    statuses = set(spec.errors) | {413, 500}  # the body limit holds for every request
    if not spec.public:
        statuses |= {400, 401}  # a query parameter the operation does not take; the key or token
        if role_needed(spec.method, API_PREFIX + spec.path) is not Role.VIEWER:
            statuses.add(403)  # a role below the one it needs (every caller is a viewer at least)
    if spec.path_params:
        statuses.add(404)
    if spec.body is not None:
        statuses |= {400, 415, 422}
    if spec.query is not None:
        statuses |= {400, 422}
    return statuses


def build_openapi(specs: list[RouteSpec], version: str = "1.0.0",
                  servers: list[dict[str, str]] | None = None) -> dict[str, Any]:
    models: set[type[BaseModel]] = {ErrorOut, ValidationErrorOut}
    for spec in specs:
        for annotation in (spec.body, spec.response, spec.accepted):
            inner = get_args(annotation)[0] if get_origin(annotation) is list else annotation
            model = _model_of(inner)
            if model:
                models.add(model)
    _, schemas = models_json_schema(
        [(m, "serialization" if m.__name__.endswith("Out") or m.__name__.endswith("Page") else "validation")
         for m in sorted(models, key=lambda m: m.__name__)],
        ref_template=REF,
    )
    paths: dict[str, dict[str, Any]] = {}
    for spec in specs:
        paths.setdefault(API_PREFIX + spec.path, {})[spec.method.lower()] = _operation(spec)
    _link_creates_to_reads(specs, paths, schemas.get("$defs", {}))
    return {
        "openapi": "3.1.0",
        "info": {"title": "Reconciliation Service API", "version": version, "description": DESCRIPTION},
        "servers": servers or [{"url": "http://127.0.0.1:8000", "description": "the local stack (make run)"}],
        "tags": [{"name": tag} for tag in dict.fromkeys(spec.tag for spec in specs)],
        "paths": paths,
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {
                "ApiKey": {"type": "apiKey", "in": "header", "name": "X-API-KEY"},
                "BearerAuth": {"type": "http", "scheme": "bearer",
                               "description": "A person's token from the identity provider (a JWT), or the same "
                                              "API key, sent as `Authorization: Bearer <key>`"},
            },
            "responses": {
                "MethodNotAllowed": {
                    "description": "The path exists but does not serve this method; `Allow` lists those it does",
                    "headers": {"Allow": {"schema": {"type": "string"}}},
                    "content": {"application/json": {"schema": _schema_ref(ErrorOut)}},
                },
            },
        },
        "security": [{"ApiKey": []}, {"BearerAuth": []}],
    }


def operation_id(spec: RouteSpec) -> str:
    path_name = spec.path.strip("/").replace("/", "_").replace("{", "").replace("}", "")
    return f"{spec.method.lower()}_{path_name}"


def _link_creates_to_reads(specs: list[RouteSpec], paths: dict[str, Any], schemas: dict[str, Any]) -> None:
    """OpenAPI links from each create to where what it made is read, so a client can follow the ids."""
    reads = {(spec.method, spec.path): operation_id(spec) for spec in specs}
    for spec in specs:
        if spec.method != "POST" or spec.status not in (201, 202):
            continue
        links = list(READS_OF_CREATES.get((spec.method, spec.path), []))
        model = _model_of(spec.response)
        answers_id = model is not None and "id" in schemas.get(model.__name__, {}).get("properties", {})
        if answers_id and ("GET", spec.path + "/{id}") in reads:
            links.append((reads[("GET", spec.path + "/{id}")], {"id": RESPONSE_ID}))
        success = paths[API_PREFIX + spec.path]["post"]["responses"][str(spec.status)]
        if links:
            success["links"] = {read: {"operationId": read, "parameters": parameters} for read, parameters in links}


def _operation(spec: RouteSpec) -> dict[str, Any]:
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}} for name in spec.path_params
    ]
    if spec.query is not None:
        query_schema = spec.query.model_json_schema()
        for name, schema in query_schema.get("properties", {}).items():
            parameters.append({"name": name, "in": "query", "required": name in query_schema.get("required", []),
                               "schema": _absent_not_null(schema)})
    idempotency = IDEMPOTENT_OPERATIONS.get((spec.method, spec.path))
    if idempotency:
        parameters.append({"name": "Idempotency-Key", "in": "header", "required": False, "description": idempotency,
                           "schema": {"type": "string", "minLength": 1, "maxLength": 255}})
    success: dict[str, Any] = {"description": spec.summary}
    if spec.response is not None:
        success["content"] = {spec.media_type: {"schema": _schema_ref(spec.response)}}
    responses: dict[str, Any] = {str(spec.status): success}
    if spec.accepted is not None:
        responses["202"] = {"description": "The reconciliation's approval policy holds the action for a second "
                                           "person: nothing changed; the body is the pending approval (approve or "
                                           "reject it at its url)",
                            "content": {"application/json": {"schema": _schema_ref(spec.accepted)}}}
    for status in sorted(error_statuses(spec)):
        model = ValidationErrorOut if status == 422 else ErrorOut
        responses[str(status)] = {
            "description": ERROR_DESCRIPTIONS[status],
            "content": {"application/json": {"schema": _schema_ref(model)}},
        }
    operation: dict[str, Any] = {
        "operationId": operation_id(spec),
        "summary": spec.summary,
        "tags": [spec.tag],
        "parameters": parameters,
        "responses": responses,
    }
    if spec.body is not None:
        operation["requestBody"] = {
            "required": True, "content": {"application/json": {"schema": _schema_ref(spec.body)}}
        }
    if spec.public:
        operation["security"] = []
    else:  # the role table's (docs/users.md), beside the route table
        needed = role_needed(spec.method, API_PREFIX + spec.path).value
        operation["description"] = f"Needs the {needed} role or above."
        operation["x-role"] = needed
    return operation
