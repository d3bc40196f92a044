"""HTTP middleware: request limits, who sends the request (an API key, or a person's token from the
identity provider) and whether their role allows the route, correlation ids, and one error shape.

Auth lives here rather than in a Chalice authorizer because the authorizer ignores custom
headers under `chalice local`; a middleware behaves the same in tests, locally and on AWS.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from botocore.exceptions import ClientError
from chalice.app import Request, Response

from chalicelib.api.audit_trail import MUTATING_METHODS, audited_request
from chalicelib.api.errors import (
    PayloadTooLarge,
    error_response,
    framework_error_to_message,
    internal_error_response,
)
from chalicelib.api.route_roles import role_needed
from chalicelib.api.routing import ENVIRONMENT_CONTEXT_KEY, PRINCIPAL_CONTEXT_KEY
from chalicelib.container import Container, container
from chalicelib.domain.api_keys import KEY_PREFIX
from chalicelib.domain.audit import RequestInFlight
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import DomainError, Forbidden, ServiceUnavailable
from chalicelib.domain.users import Principal
from chalicelib.observability import flush_metrics, logger, metrics
from chalicelib.services import audit, period_closes
from chalicelib.services.api_keys import authenticate
from chalicelib.services.users import principal_of_key, principal_of_token

BEARER = "bearer "


def api_key_from(headers) -> str | None:
    """The API key sent: X-API-KEY, or a Bearer value that is not a person's token."""
    key = headers.get("x-api-key")
    if key:
        return key.strip()
    bearer = _bearer(headers)
    return bearer if bearer is not None and not is_provider_token(bearer) else None


def token_from(headers) -> str | None:
    """A person's token from the identity provider (`Authorization: Bearer <token>`)."""
    if headers.get("x-api-key"):
        return None
    bearer = _bearer(headers)
    return bearer if bearer is not None and is_provider_token(bearer) else None


def is_provider_token(value: str) -> bool:
    """Our keys start with rk_; the provider's tokens are JWTs (three dot-separated parts). A value
    of neither shape is taken for a key (a local stack's RECON_API_KEY may be any text)."""
    return not value.startswith(KEY_PREFIX) and value.count(".") == 2


def _bearer(headers) -> str | None:
    authorization = headers.get("authorization") or ""
    if authorization.lower().startswith(BEARER):
        return authorization[len(BEARER):].strip()
    return None


def principal_of(services: Container, event: Request) -> Principal:
    token = token_from(event.headers)
    if token is not None:
        return principal_of_token(services.ports, token, services.sign_in_resolution)
    return principal_of_key(authenticate(services.api_keys, api_key_from(event.headers),
                                         services.key_last_used_resolution))


def check_role(principal: Principal, method: str, resource_path: str) -> None:
    needed = role_needed(method, resource_path)
    if not principal.role.allows(needed):
        raise Forbidden(f"{method} {resource_path} needs the {needed.value} role or above; "
                        f"yours is {principal.role.value}")


def make_http_middleware(public_paths: set[str]) -> Callable[[Request, Callable], Response]:
    def http_middleware(event: Request, get_response: Callable[[Request], Response]) -> Response:
        started = time.perf_counter()
        context = event.context or {}
        request_id = context.get("requestId") or uuid.uuid4().hex  # chalice local gives none
        logger.set_correlation_id(request_id)
        resource_path = context.get("resourcePath", "")
        services = container()
        principal: Principal | None = None
        in_flight = False
        notes: dict = {}
        try:
            if len(event.raw_body or b"") > services.settings.max_body_bytes:
                raise PayloadTooLarge(f"request body is over the limit of {services.settings.max_body_bytes} bytes")
            if resource_path not in public_paths:
                principal = principal_of(services, event)
                context[ENVIRONMENT_CONTEXT_KEY] = principal.environment
                context[PRINCIPAL_CONTEXT_KEY] = principal
                logger.thread_safe_append_keys(environment=principal.environment)
                check_role(principal, event.method, resource_path)
                if event.method in MUTATING_METHODS:
                    in_flight = begin_request(services, principal, event, resource_path, request_id)
            with audit.collecting_notes() as notes, audit.acting_as(principal.actor if principal else None), \
                    period_closes.fencing(services.ports):  # the closing fence's writers (docs/period-close.md)
                response = framework_error_to_message(get_response(event))
        except DomainError as error:
            response = error_response(error)
        except Exception as error:  # of the steps above (a view's own errors are answered in routing.py)
            response = unexpected_error_response(error, event.method, resource_path, request_id)
        if principal is not None and event.method in MUTATING_METHODS:
            finish_request(services, principal, event, resource_path, response, request_id, notes, in_flight)
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


THROTTLED = {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}


def unexpected_error_response(error: Exception, method: str, resource_path: str, request_id: str) -> Response:
    """A throttled read (say, the principal's lookup) after botocore's own retries: 503, try again.
    Anything else is a bug of ours: logged, and our 500 with the request id, never its text."""
    if isinstance(error, ClientError) and error.response.get("Error", {}).get("Code") in THROTTLED:
        logger.warning("throttled", extra={"method": method, "path": resource_path,
                                           "code": error.response["Error"]["Code"]})
        return error_response(ServiceUnavailable("the service is busy; try again"))
    logger.exception("unhandled error in the middleware", extra={"method": method, "path": resource_path})
    return internal_error_response(request_id)


def begin_request(services: Container, principal: Principal, event: Request, resource_path: str,
                  request_id: str) -> bool:
    """Note a state-changing request before it runs, so that its entry is written even if its
    process dies before writing it (the sweeper's `audit.record_unfinished`). False when its route
    changes nothing, or the note could not be written (logged and counted: the request still runs,
    as a failed append does not turn an answer into an error)."""
    try:
        entry = audited_request(event.method, resource_path, event.uri_params, event.raw_body, None, {})
        if entry is None:
            return False
        audit.begin_request(services.ports, RequestInFlight(
            environment=principal.environment, request_id=request_id, actor=principal.actor, action=entry.action,
            resource_type=entry.resource_type, resource_id=entry.resource_id, summary=entry.summary,
            began_at=utc_now()))
        return True
    except Exception:
        logger.exception("request in flight not noted", extra={"method": event.method, "path": resource_path,
                                                               "actor": principal.actor})
        metrics.add_metric(name="AuditAppendFailures", unit="Count", value=1)
        return False


def finish_request(services: Container, principal: Principal, event: Request, resource_path: str, response: Response,
                   request_id: str, notes: dict, in_flight: bool) -> None:
    """A successful request's entry, then its note in flight goes; a refused one (4xx) changed
    nothing, and its note goes at once. The note stays after a server error, or when the entry
    could not be written: the sweeper writes the entry, outcome unknown."""
    succeeded = 200 <= response.status_code < 300
    recorded = succeeded and record_request(services, principal, event, resource_path, response, request_id, notes)
    if not in_flight or not (recorded or (not succeeded and response.status_code < 500)):
        return
    try:
        audit.end_request(services.ports, principal.environment, request_id)
    except Exception:  # the sweeper finds the entry and writes no second one (or one, outcome unknown)
        logger.exception("request in flight not dropped", extra={"method": event.method, "path": resource_path})


def record_request(services: Container, principal: Principal, event: Request, resource_path: str, response: Response,
                   request_id: str, notes: dict) -> bool:
    """One audit entry for a successful state-changing request (its summary names the request id).
    The change is already made, so a failed append does not turn the answer into an error: it is
    logged as an error with the entry it would have written (never the request's values), counted
    in the AuditAppendFailures metric, and False is returned."""
    entry = None
    try:
        entry = audited_request(event.method, resource_path, event.uri_params, event.raw_body, response.body, notes)
        if entry is not None:
            audit.record(services.ports, principal.environment, actor=principal.actor, action=entry.action,
                         resource_type=entry.resource_type, resource_id=entry.resource_id,
                         summary={**entry.summary, "request_id": request_id})
        return True
    except Exception:
        logger.exception("audit entry not recorded", extra={
            "audit_action": entry.action if entry else None, "audit_resource_id": entry.resource_id if entry else None,
            "method": event.method, "path": resource_path, "actor": principal.actor})
        metrics.add_metric(name="AuditAppendFailures", unit="Count", value=1)
        return False
