"""What every fake shares: timestamps kept as the table keeps them (ISO text, milliseconds),
opaque cursors that refuse what they did not hand out, and newest-first pages."""
from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import fields, replace
from datetime import datetime
from typing import Any, TypeVar, overload

from chalicelib.adapters.dynamodb.table import ConditionFailed  # what the adapters let through, as they do
from chalicelib.domain.clock import iso, parse_iso
from chalicelib.domain.errors import BadRequest

__all__ = ["ConditionFailed", "stored_time", "as_stored", "moved", "encode_cursor", "decode_cursor",
           "may_restart", "newest_first_page", "padded"]

T = TypeVar("T")
E = TypeVar("E")

NOT_VALID = "cursor is not valid; pass the next_cursor of a previous page unchanged"
NOT_THIS_LIST = "cursor does not belong to this list; pass the next_cursor of a previous page unchanged"


def padded(number: int) -> str:
    """An id as a sort value: 12 digits, so that string order is numeric order (as the adapters' keys)."""
    return str(number).zfill(12)


@overload
def stored_time(moment: datetime) -> datetime: ...
@overload
def stored_time(moment: None) -> None: ...
def stored_time(moment: datetime | None) -> datetime | None:
    """A timestamp as it reads back from the table: UTC, to the millisecond."""
    return parse_iso(iso(moment)) if moment is not None else None


def as_stored(value: Any) -> Any:
    """A field as it reads back after a write: timestamps to the millisecond, lists as tuples
    (the entities keep sequences as tuples)."""
    if isinstance(value, datetime):
        return stored_time(value)
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value


def may_restart(statuses: Any, stored: Any, seen: Any, restarts_written: bool) -> bool:
    """The adapter's condition for a sweeper's restart claim (StatusMoves._claim_restart): the stored
    entity is unfinished, its restarts (once written) and its heartbeat are still those `seen`."""
    if stored.status in statuses.finished:
        return False
    if restarts_written and stored.restarts != seen.restarts:
        return False
    if seen.last_progress_at is None:
        return stored.last_progress_at is None
    return stored.last_progress_at is not None and iso(stored.last_progress_at) == iso(seen.last_progress_at)


def moved(entity: E, target: Any, values: dict[str, Any]) -> E:
    """`entity` with `status` and the fields a move sets; a field the entity does not have is
    written by the adapter but never read back, so it is dropped here."""
    names = {f.name for f in fields(entity)}  # type: ignore[arg-type]
    return replace(entity, status=target, **{k: as_stored(v) for k, v in values.items() if k in names})  # type: ignore[type-var]


def encode_cursor(listing: str, after: str, attrs: tuple[str, str] = ("list", "after")) -> str:
    raw = json.dumps({attrs[0]: listing, attrs[1]: after}, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, listing: str, attrs: tuple[str, str] = ("list", "after")) -> dict[str, str]:
    """The cursor's fields; BadRequest (with the adapters' messages) for one that cannot be read or
    was handed out by another list."""
    try:
        key = json.loads(base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode()).decode())
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise BadRequest(NOT_VALID) from None
    if not isinstance(key, dict) or key.get(attrs[0]) != listing or set(key) != set(attrs) or \
            not all(isinstance(v, str) for v in key.values()):
        raise BadRequest(NOT_THIS_LIST)
    return key


def newest_first_page(listing: str, entries: Iterable[tuple[str, T]], limit: int,
                      cursor: str | None) -> tuple[list[T], str | None]:
    """A page of `(sort value, item)` entries, highest sort value first, after the cursor's
    position; a cursor only when another entry follows (so no cursor leads to an empty page)."""
    ordered = sorted(entries, key=lambda e: e[0], reverse=True)
    if cursor:
        after = decode_cursor(cursor, listing)["after"]
        ordered = [e for e in ordered if e[0] < after]
    if len(ordered) <= limit:
        return [item for _, item in ordered], None
    page = ordered[:limit]
    return [item for _, item in page], encode_cursor(listing, page[-1][0])

