"""Domain errors. The API maps each type to one HTTP status in `api/errors.py`."""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def shown(value: object, limit: int = 64) -> str:
    """A client's value quoted in a message, cut short so that messages and results stay small."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."


# What an AWS error's text may name of the deployment: its resources' ARNs and its account id.
_DEPLOYMENT_NAMES = re.compile(r"arn:aws[\w-]*:[^\s'\",;()]*|(?<![\d.,])\d{12}(?!\d|[.,]\d)")  # not in a number


def failure_reason(error: Mapping[str, Any] | BaseException | str | None, otherwise: str = "an error",
                   limit: int = 500) -> str:
    """Why a job failed, as its client reads it (`error_message`, webhooks): a state machine's
    `{Error, Cause}` (a Lambda error's Cause is JSON, its errorMessage what a person needs), an
    exception (`Type: message`), or words; any ARN or account id the text names is hidden (the
    operators' log has the error whole), and the text is cut to `limit` characters."""
    if isinstance(error, Mapping):
        cause: Any = error.get("Cause") or ""
        try:
            parsed = json.loads(cause)
            cause = parsed.get("errorMessage", cause) if isinstance(parsed, dict) else cause
        except (TypeError, ValueError):
            pass
        text = f"{error.get('Error') or otherwise}" + (f": {cause}" if cause else "")
    elif isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}"
    else:
        text = str(error) if error else otherwise
    return shown(_DEPLOYMENT_NAMES.sub("<hidden>", text), limit)


class DomainError(Exception):
    """Base of every error a client can cause; the message is safe to show."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BrokenInvariant(RuntimeError):
    """Stored state lacks what the code path guarantees it has (a bug or corrupt data, never a
    client's doing): raised where an optional field is read at a point where it must be set."""


class NotFound(DomainError):
    pass


class Conflict(DomainError):
    pass


class TransitionRefused(Conflict):
    """The stored state no longer allows the change (another writer moved it first)."""


class BadRequest(DomainError):
    """The request cannot be read at all: malformed JSON, a bad cursor, a bad parameter syntax."""


class Unauthorized(DomainError):
    pass


class ServiceUnavailable(DomainError):
    """A service the API depends on does not answer (the local stack's health check, the identity
    provider's keys): the client may try again."""


class Forbidden(DomainError):
    """Who sent the request is known, and their role does not allow it."""


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str


class ValidationFailed(DomainError):
    def __init__(self, errors: list[FieldError], message: str | None = None) -> None:
        self.errors = errors
        summary = "; ".join(f"{e.field}: {e.message}" for e in errors[:3])
        super().__init__(message or f"Validation failed: {summary}")

    @classmethod
    def on(cls, field: str, message: str) -> ValidationFailed:
        return cls([FieldError(field, message)])
