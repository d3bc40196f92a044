"""HTTP middleware: request limits, API-key auth, correlation ids, and one error shape.

Auth lives here rather than in a Chalice authorizer because the authorizer ignores custom
headers under `chalice local`; a middleware behaves the same in tests, locally and on AWS.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from chalice.app import Request, Response

from chalicelib.api.errors import PayloadTooLarge, error_response, framework_error_to_message
from chalicelib.api.routing import ENVIRONMENT_CONTEXT_KEY
from chalicelib.container import container
from chalicelib.domain.errors import DomainError
from chalicelib.observability import flush_metrics, logger, metrics
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
        try:
            if len(event.raw_body or b"") > services.settings.max_body_bytes:
                raise PayloadTooLarge(f"request body is over the limit of {services.settings.max_body_bytes} bytes")
            if resource_path not in public_paths:
                key = authenticate(services.api_keys, api_key_from(event.headers),
                                   services.key_last_used_resolution)
                context[ENVIRONMENT_CONTEXT_KEY] = key.environment
                logger.thread_safe_append_keys(environment=key.environment)
            response = framework_error_to_message(get_response(event))
        except DomainError as error:
            response = error_response(error)
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
