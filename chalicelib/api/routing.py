"""Declarative routes: each route names its body, query and response models, so one wrapper
parses and validates requests, maps domain errors, and feeds the OpenAPI document."""
from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chalice.app import Chalice, Request, Response
from pydantic import BaseModel, TypeAdapter, ValidationError

from chalicelib.api.errors import (
    UnsupportedMediaType,
    error_response,
    internal_error_response,
    validation_failed,
)
from chalicelib.domain.errors import BadRequest, DomainError, NotFound, ValidationFailed
from chalicelib.observability import logger

API_PREFIX = "/v1"
ENVIRONMENT_CONTEXT_KEY = "recon_environment"
PRINCIPAL_CONTEXT_KEY = "recon_principal"  # who sends the request (domain.users.Principal)
NUMERIC_ID = re.compile(r"^[0-9]{1,15}$")
JSON_CONTENT_TYPE = re.compile(r"^application/([a-z0-9.+-]+\+)?json\s*(;.*)?$", re.IGNORECASE)


@dataclass(frozen=True)
class RouteSpec:
    method: str
    path: str
    summary: str
    status: int = 200
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    response: Any = None  # a model, list[model], or None for no body
    public: bool = False
    errors: tuple[int, ...] = ()
    media_type: str = "application/json"  # of the success body; a view of another type returns a Response
    tag: str = ""  # the resource it belongs to: its router's name
    # The model answered 202 when the action waits for a second person's approval (domain/approvals.py).
    accepted: Any = None

    @property
    def path_params(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.path)


@dataclass
class ApiRequest:
    """What a view gets: the caller's environment and the validated inputs, and who the caller is
    (`principal`: a signed-in user, or an API key; None on a public route)."""
    environment: str
    body: Any
    query: Any
    headers: dict[str, str] = field(default_factory=dict)
    principal: Any = None  # domain.users.Principal (not imported: a cold start's routing stays small)


class Router:
    """A resource's routes. app.py registers them all at import from the route table
    (chalicelib/api/route_table.py) and imports a router's module at the first request of one of
    its routes, binding the router to the app then: its views read the request the app handles."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.specs: list[RouteSpec] = []
        # (method, path under API_PREFIX) -> the view Chalice calls, with the path's parameters.
        self.views: dict[tuple[str, str], Callable[..., Response]] = {}
        self._app: Chalice | None = None

    def bind(self, app: Chalice) -> None:
        self._app = app

    @property
    def current_request(self) -> Request:
        request = self._app.current_request if self._app is not None else None
        if request is None:
            raise RuntimeError(f"router {self.name!r} serves no request (chalicelib/api/mount.py binds it to the app)")
        return request

    def route(self, method: str, path: str, **spec_fields: Any) -> Callable:
        if not spec_fields.get("public"):  # it answers 400 to a query parameter it does not take
            spec_fields["errors"] = tuple(sorted(set(spec_fields.get("errors", ())) | {400}))
        spec = RouteSpec(method=method, path=path, tag=self.name, **spec_fields)
        self.specs.append(spec)

        def register(view: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(view)
            def chalice_view(**path_params: str) -> Response:
                request = self.current_request
                try:
                    query = _parse_query(spec, request.query_params or {})
                    api_request = ApiRequest(
                        environment=(request.context or {}).get(ENVIRONMENT_CONTEXT_KEY, ""),
                        body=_parse_body(spec, request), query=query, headers=dict(request.headers or {}),
                        principal=(request.context or {}).get(PRINCIPAL_CONTEXT_KEY),
                    )
                    result = view(api_request, **path_params)
                    return _to_response(spec, result)
                except DomainError as error:
                    return error_response(error)
                except Exception:
                    logger.exception("unhandled error in %s %s", spec.method, spec.path)
                    return internal_error_response((request.context or {}).get("requestId"))

            if (method, API_PREFIX + path) in self.views:
                raise ValueError(f"{method} {path} is served twice by router {self.name!r}")
            self.views[(method, API_PREFIX + path)] = chalice_view
            return view

        return register


MAX_IDEMPOTENCY_KEY = 255


def idempotency_key(request: ApiRequest) -> str | None:
    """The request's Idempotency-Key header, if any: 1 to MAX_IDEMPOTENCY_KEY characters, else 422."""
    key = request.headers.get("idempotency-key")
    if key is not None and not (0 < len(key) <= MAX_IDEMPOTENCY_KEY):
        raise ValidationFailed.on("Idempotency-Key", f"must be 1 to {MAX_IDEMPOTENCY_KEY} characters")
    return key


def numeric_id(raw: str, what: str) -> int:
    """A path id: ASCII digits only (str.isdigit would take '²'); anything else is simply not found."""
    if not NUMERIC_ID.match(raw):
        raise NotFound(f"{what} '{raw[:40]}' not found")
    return int(raw)


def _parse_body(spec: RouteSpec, request: Any) -> BaseModel | None:
    if spec.body is None:
        return None
    raw = request.raw_body or b""
    if not raw.strip():
        raw = b"{}"
    else:
        content_type = request.headers.get("content-type", "")
        if not JSON_CONTENT_TYPE.match(content_type):
            raise UnsupportedMediaType(
                f"Content-Type must be application/json, got '{content_type or 'none'}'"
            )
    try:
        return spec.body.model_validate_json(raw)
    except ValidationError as error:
        if any(e["type"] == "json_invalid" for e in error.errors()):
            raise BadRequest("request body is not valid JSON") from None
        raise validation_failed(error) from None


_SYNTAX_ERRORS = ("int_parsing", "bool_parsing", "float_parsing", "date_from_datetime_parsing", "date_parsing")


def _parse_query(spec: RouteSpec, params: Mapping[str, str]) -> BaseModel | None:
    """The route's query model from the query string. A parameter the route does not take is 400
    naming it: a mistyped filter must never silently return everything."""
    known = query_parameters(spec)
    unknown = sorted(name for name in params if name not in known)
    if unknown and not spec.public:
        takes = f"it takes {', '.join(sorted(known))}" if known else "it takes none"
        names = ", ".join(f"'{name[:40]}'" for name in unknown[:5])
        raise BadRequest(f"unknown query parameter{'s' if len(unknown) > 1 else ''} {names} for "
                         f"{spec.method} {API_PREFIX}{spec.path}; {takes}")
    if spec.query is None:
        return None
    try:
        return spec.query.model_validate(dict(params))
    except ValidationError as error:
        syntax = [e for e in error.errors() if e["type"] in _SYNTAX_ERRORS]
        if syntax:
            name = syntax[0]["loc"][0]
            raise BadRequest(f"query parameter '{name}': {syntax[0]['msg']}") from None
        raise validation_failed(error) from None


def query_parameters(spec: RouteSpec) -> frozenset[str]:
    if spec.query is None:
        return frozenset()
    return frozenset(field.alias or name for name, field in spec.query.model_fields.items())


@functools.cache
def _adapter(response_type: Any) -> TypeAdapter:
    return TypeAdapter(response_type)


def _to_response(spec: RouteSpec, result: Any) -> Response:
    if isinstance(result, Response):
        return result
    if spec.response is None:
        return Response(body="", status_code=spec.status, headers={"Content-Type": "application/json"})
    body = _adapter(spec.response).dump_python(result, mode="json")
    return Response(body=body, status_code=spec.status)
