"""HTTP middleware: request limits, API-key auth, correlation ids, and one error shape.

Auth lives here rather than in a Chalice authorizer because the authorizer ignores custom
headers under `chalice local`; a middleware behaves the same in tests, locally and on AWS.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from chalice.app import Request, Response

from chalicelib.api.audit_trail import MUTATING_METHODS, audited_request
from chalicelib.api.errors import PayloadTooLarge, error_response, framework_error_to_message
from chalicelib.api.routing import ENVIRONMENT_CONTEXT_KEY
from chalicelib.container import Container, container
from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.audit import api_key_actor
from chalicelib.domain.errors import DomainError
from chalicelib.observability import flush_metrics, logger, metrics
from chalicelib.services import audit
from chalicelib.services.api_keys import authenticate

BEARER = "bearer "


def api_key_from(headers) -> str | None:
    key = headers.get("x-api-key")
    if key:
        return key.strip()
    authorization = headers.get("authorization") or ""
    if authorization.lower().startswith(BEARER):
        return authorization[len(BEARER):].strip()
    return None


def make_http_middleware(public_paths: set[str]) -> Callable[[Request, Callable], Response]:
    def http_middleware(event: Request, get_response: Callable[[Request], Response]) -> Response:
        started = time.perf_counter()
        context = event.context or {}
        logger.set_correlation_id(context.get("requestId"))
        resource_path = context.get("resourcePath", "")
        services = container()
        key: ApiKey | None = None
        notes: dict = {}
        try:
            if len(event.raw_body or b"") > services.settings.max_body_bytes:
                raise PayloadTooLarge(f"request body is over the limit of {services.settings.max_body_bytes} bytes")
            if resource_path not in public_paths:
                key = authenticate(services.api_keys, api_key_from(event.headers),
                                   services.key_last_used_resolution)
                context[ENVIRONMENT_CONTEXT_KEY] = key.environment
                logger.thread_safe_append_keys(environment=key.environment)
            with audit.collecting_notes() as notes:
                response = framework_error_to_message(get_response(event))
        except DomainError as error:
            response = error_response(error)
        if key is not None and 200 <= response.status_code < 300 and event.method in MUTATING_METHODS:
            record_request(services, key, event, resource_path, response, notes)
        elapsed_ms = (time.perf_counter() - started) * 1000
        logger.info("request", extra={"method": event.method, "path": resource_path,
                                      "status": response.status_code, "duration_ms": round(elapsed_ms, 1)})
        metrics.add_metric(name="Requests", unit="Count", value=1)
        metrics.add_metric(name="Latency", unit="Milliseconds", value=elapsed_ms)
        if response.status_code >= 500:
            metrics.add_metric(name="ServerErrors", unit="Count", value=1)
        logger.thread_safe_remove_keys(["environment"])
        flush_metrics(enabled=not services.settings.local_mode)
        return response

    return http_middleware


def record_request(services: Container, key: ApiKey, event: Request, resource_path: str, response: Response,
                   notes: dict) -> None:
    """One audit entry for a successful state-changing request. The change is already made, so a
    failed append does not turn the answer into an error: it is logged as an error with the entry
    it would have written (never the request's values) and counted in the AuditAppendFailures metric."""
    entry = None
    try:
        entry = audited_request(event.method, resource_path, event.uri_params, event.raw_body, response.body, notes)
        if entry is not None:
            audit.record(services.ports, key.environment, actor=api_key_actor(key.id), action=entry.action,
                         resource_type=entry.resource_type, resource_id=entry.resource_id, summary=entry.summary)
    except Exception:
        logger.exception("audit entry not recorded", extra={
            "audit_action": entry.action if entry else None, "audit_resource_id": entry.resource_id if entry else None,
            "method": event.method, "path": resource_path, "api_key_id": key.id})
        metrics.add_metric(name="AuditAppendFailures", unit="Count", value=1)
