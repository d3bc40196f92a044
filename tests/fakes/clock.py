"""Time as `chalicelib.domain.clock.utc_now` tells it to the services, the adapters and the fakes,
frozen and moved by hand: `freeze(monkeypatch)` replaces `utc_now` wherever it was imported. The
fakes answer in microseconds where DynamoDB answers in milliseconds or more, so a test whose
outcome hangs on one moment being later than another moves the clock rather than wait."""
from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.domain import clock as clock_module

START = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)


class FrozenClock:
    def __init__(self, now: datetime = START) -> None:
        self.now = now

    def set(self, moment: datetime) -> datetime:
        self.now = moment
        return moment

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


def freeze(monkeypatch: pytest.MonkeyPatch, at: datetime = START) -> FrozenClock:
    """`utc_now` answers `clock.now` in every module of chalicelib and tests that imported it (and
    is imported by then: import what you test before freezing)."""
    original = clock_module.utc_now
    frozen = FrozenClock(at)

    def now() -> datetime:
        return frozen.now

    for name, module in list(sys.modules.items()):
        if (name.startswith("chalicelib") or name.startswith("tests.")) and \
                getattr(module, "utc_now", None) is original:
            monkeypatch.setattr(module, "utc_now", now)
    return frozen
