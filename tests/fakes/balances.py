"""Statement days of bank_feed streams, as `adapters/dynamodb/balances.py` keeps them: one per
stream and statement (the same statement again replaces it), newest first, and each stream's
newest day, which only moves forward."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import date

from chalicelib.domain.balances import StatementDay
from tests.fakes._support import newest_first_page


def _sort_key(day: StatementDay) -> str:
    return f"{day.date.isoformat()}#{day.statement_id}"  # the adapter's sort key: date, then statement


class FakeBalanceRepository:
    def __init__(self) -> None:
        self.days: dict[tuple[str, str, str], StatementDay] = {}  # (environment, stream key, sort key)
        self.latest: dict[tuple[str, str], StatementDay] = {}  # (environment, stream key)

    def put_many(self, days: list[StatementDay]) -> None:
        for day in days:
            self.days[(day.environment, day.data_stream_key, _sort_key(day))] = day
        for day in days:
            held = self.latest.get((day.environment, day.data_stream_key))
            if held is None or _sort_key(held) <= _sort_key(day):
                self.latest[(day.environment, day.data_stream_key)] = day

    def latest_of(self, environment: str, stream_keys: Iterable[str]) -> dict[str, StatementDay]:
        return {key: self.latest[(environment, key)] for key in stream_keys if (environment, key) in self.latest}

    def page(self, environment: str, stream_key: str, limit: int, cursor: str | None,
             date_from: date | None = None, date_to: date | None = None) -> tuple[list[StatementDay], str | None]:
        return newest_first_page(f"balances:{environment}:{stream_key}", (
            (sort_key, day) for (env, key, sort_key), day in self.days.items()
            if (env, key) == (environment, stream_key) and (date_from is None or day.date >= date_from)
            and (date_to is None or day.date <= date_to)), limit, cursor)

    def older_than(self, day: StatementDay) -> StatementDay | None:
        older = [(sort_key, d) for (env, key, sort_key), d in self.days.items()
                 if (env, key) == (day.environment, day.data_stream_key) and d.date < day.date]
        return max(older, key=lambda pair: pair[0])[1] if older else None

    def remove_stream(self, environment: str, stream_key: str) -> None:
        self.days = {k: d for k, d in self.days.items() if k[:2] != (environment, stream_key)}
        self.latest.pop((environment, stream_key), None)
