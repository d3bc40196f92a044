"""Per-environment id counters: one atomic ADD per id, or per block of ids."""
from __future__ import annotations

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import DynamoTable


class Counters:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def next_id(self, environment: str, entity: str) -> int:
        return self._table.add_to_counter(keys.counter(environment, entity), 1)

    def next_ids(self, environment: str, entity: str, count: int) -> range:
        """Reserve a block of `count` ids in one write."""
        last = self._table.add_to_counter(keys.counter(environment, entity), count)
        return range(last - count + 1, last + 1)


# API keys -------------------------------------------------------------------------------
