"""The one table from error types to HTTP statuses, and the `{"message"}` bodies built from it."""
from __future__ import annotations

from typing import Any

from chalice.app import Response
from pydantic import ValidationError

from chalicelib.domain.approvals import ApprovalRequired
from chalicelib.domain.errors import (  # ServiceUnavailable is raised here too (meta.py)
    BadRequest,
    Conflict,
    DomainError,
    FieldError,
    Forbidden,
    NotFound,
    ServiceUnavailable,
    Unauthorized,
    ValidationFailed,
)


class PayloadTooLarge(DomainError):
    pass


class UnsupportedMediaType(DomainError):
    pass


ERROR_STATUSES: dict[type[DomainError], int] = {
    ApprovalRequired: 202,  # not an error: the action waits for an approver; the body is the approval
    BadRequest: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    PayloadTooLarge: 413,
    UnsupportedMediaType: 415,
    ValidationFailed: 422,
    ServiceUnavailable: 503,
}
INTERNAL_ERROR_MESSAGE = "internal error; the request id identifies it in our logs"


def status_of(error: DomainError) -> int:
    for cls in type(error).__mro__:
        if cls in ERROR_STATUSES:
            return ERROR_STATUSES[cls]
    raise TypeError(f"{type(error).__name__} has no HTTP status in ERROR_STATUSES")


def error_body(error: DomainError) -> dict[str, Any]:
    if isinstance(error, ApprovalRequired):  # the route's 202 (RouteSpec.accepted): the approval
        from chalicelib.api.approvals import approval_out

        return approval_out(error.approval).model_dump(mode="json")
    body: dict[str, Any] = {"message": error.message}
    if isinstance(error, ValidationFailed):
        body["errors"] = [{"field": e.field, "message": e.message} for e in error.errors]
    return body


def error_response(error: DomainError, headers: dict[str, str | list[str]] | None = None) -> Response:
    return Response(body=error_body(error), status_code=status_of(error), headers=headers or {})


def internal_error_response(request_id: str | None) -> Response:
    return Response(body={"message": INTERNAL_ERROR_MESSAGE, "request_id": request_id}, status_code=500)


def field_path(location: tuple[Any, ...]) -> str:
    """('records', 3, 'amount') -> 'records[3].amount'"""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


_FRIENDLY = {"missing": "is required", "extra_forbidden": "is not allowed"}


def validation_failed(error: ValidationError, prefix: tuple[Any, ...] = ()) -> ValidationFailed:
    errors = [
        FieldError(field_path(prefix + tuple(e["loc"])) or "body", _FRIENDLY.get(e["type"], e["msg"]))
        for e in error.errors(include_url=False)
    ]
    return ValidationFailed(errors)


def framework_error_to_message(response: Response) -> Response:
    """Chalice answers some errors itself ({"Code", "Message"}); give them our shape."""
    body = response.body
    if response.status_code >= 400 and isinstance(body, dict) and "Message" in body:
        response.body = {"message": body["Message"]}
    return response
