"""Domain errors. The API maps each type to one HTTP status in `api/errors.py`."""
from __future__ import annotations

from dataclasses import dataclass


def shown(value: object, limit: int = 64) -> str:
    """A client's value quoted in a message, cut short so that messages and results stay small."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."


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
