"""Per-environment id counters, as `adapters/dynamodb/counters.py` hands them out."""
from __future__ import annotations


class FakeCounters:
    def __init__(self) -> None:
        self.values: dict[tuple[str, str], int] = {}

    def next_id(self, environment: str, entity: str) -> int:
        return self._add(environment, entity, 1)

    def next_ids(self, environment: str, entity: str, count: int) -> range:
        """Reserve a block of `count` ids in one write."""
        last = self._add(environment, entity, count)
        return range(last - count + 1, last + 1)

    def _add(self, environment: str, entity: str, amount: int) -> int:
        key = (environment, entity)
        self.values[key] = self.values.get(key, 0) + amount
        return self.values[key]
