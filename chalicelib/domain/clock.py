"""UTC timestamps in the API's format (ISO 8601 with `Z`), and the clock every `utc_now()` reads:
the system's, unless a test gives its own for a block (`clock_in_use`)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def current(self) -> datetime: ...


class SystemClock:
    def current(self) -> datetime:
        return datetime.now(UTC)


_clock: Clock = SystemClock()


def utc_now() -> datetime:
    return _clock.current()


@contextmanager
def clock_in_use(clock: Clock) -> Iterator[Clock]:
    """For tests: every `utc_now()`, in every thread, answers from `clock` until the block ends (one
    seam, however the caller imported `utc_now`). Blocks nest; they must not overlap across threads."""
    global _clock
    previous, _clock = _clock, clock
    try:
        yield clock
    finally:
        if _clock is not clock:
            raise RuntimeError("clock_in_use blocks overlapped: another clock was put in use meanwhile")
        _clock = previous


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def optional_iso(moment: datetime | None) -> str | None:
    return iso(moment) if moment is not None else None


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def parse_optional_iso(text: str | None) -> datetime | None:
    return parse_iso(text) if text else None
