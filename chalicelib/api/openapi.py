"""The OpenAPI 3.1 document, generated from the route specs and their pydantic models."""
from __future__ import annotations

from typing import Any, get_args, get_origin

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from chalicelib.api.routing import API_PREFIX, RouteSpec
from chalicelib.api.schemas import ErrorOut, ValidationErrorOut

REF = "#/components/schemas/{model}"
ERROR_DESCRIPTIONS = {
    400: "Malformed JSON, bad cursor or bad query parameter syntax",
    401: "Missing, unknown or revoked API key",
    404: "Not found in this environment",
    409: "Conflict with the current state",
    413: "Body over the size limit",
    415: "Content-Type is not application/json",
    422: "Validation failed",
}


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _schema_ref(annotation: Any) -> dict[str, Any]:
    if get_origin(annotation) is list:
        return {"type": "array", "items": _schema_ref(get_args(annotation)[0])}
    if _model_of(annotation) is None:
        return {"type": "object"}
    return {"$ref": REF.format(model=annotation.__name__)}


def build_openapi(specs: list[RouteSpec], version: str = "1.0.0") -> dict[str, Any]:
    models: set[type[BaseModel]] = {ErrorOut, ValidationErrorOut}
    for spec in specs:
        for annotation in (spec.body, spec.response):
            inner = get_args(annotation)[0] if get_origin(annotation) is list else annotation
            if _model_of(inner):
                models.add(inner)
    _, schemas = models_json_schema(
        [(m, "serialization" if m.__name__.endswith("Out") or m.__name__.endswith("Page") else "validation")
         for m in sorted(models, key=lambda m: m.__name__)],
        ref_template=REF,
    )
    paths: dict[str, dict[str, Any]] = {}
    for spec in specs:
        paths.setdefault(API_PREFIX + spec.path, {})[spec.method.lower()] = _operation(spec)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Reconciliation Service API", "version": version},
        "paths": paths,
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"ApiKey": {"type": "apiKey", "in": "header", "name": "X-API-KEY"}},
        },
        "security": [{"ApiKey": []}],
    }


def _operation(spec: RouteSpec) -> dict[str, Any]:
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}} for name in spec.path_params
    ]
    if spec.query is not None:
        query_schema = spec.query.model_json_schema()
        for name, schema in query_schema.get("properties", {}).items():
            parameters.append({"name": name, "in": "query", "required": name in query_schema.get("required", []),
                               "schema": schema})
    success: dict[str, Any] = {"description": spec.summary}
    if spec.response is not None:
        success["content"] = {"application/json": {"schema": _schema_ref(spec.response)}}
    responses: dict[str, Any] = {str(spec.status): success}
    statuses = set(spec.errors) | ({413, 415, 422} if spec.body else set()) | ({401} if not spec.public else set())
    for status in sorted(statuses):
        model = ValidationErrorOut if status == 422 else ErrorOut
        responses[str(status)] = {
            "description": ERROR_DESCRIPTIONS[status],
            "content": {"application/json": {"schema": _schema_ref(model)}},
        }
    operation: dict[str, Any] = {
        "operationId": f"{spec.method.lower()}_{spec.path.strip('/').replace('/', '_').replace('{', '').replace('}', '')}",
        "summary": spec.summary,
        "parameters": parameters,
        "responses": responses,
    }
    if spec.body is not None:
        operation["requestBody"] = {
            "required": True, "content": {"application/json": {"schema": _schema_ref(spec.body)}}
        }
    if spec.public:
        operation["security"] = []
    return operation
