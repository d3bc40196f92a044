"""Time as `chalicelib.domain.clock.utc_now` tells it to the services, the adapters and the fakes,
frozen and moved by hand: `with clock_in_use(FrozenClock())` gives it to them for a block. The
fakes answer in microseconds where DynamoDB answers in milliseconds or more, so a test whose
outcome hangs on one moment being later than another moves the clock rather than wait."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

START = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)


class FrozenClock:
    def __init__(self, now: datetime = START) -> None:
        self.now = now

    def current(self) -> datetime:
        return self.now

    def set(self, moment: datetime) -> datetime:
        self.now = moment
        return moment

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now
