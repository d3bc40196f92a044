"""UTC timestamps in the API's format (ISO 8601 with `Z`)."""
from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def optional_iso(moment: datetime | None) -> str | None:
    return iso(moment) if moment is not None else None


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def parse_optional_iso(text: str | None) -> datetime | None:
    return parse_iso(text) if text else None
