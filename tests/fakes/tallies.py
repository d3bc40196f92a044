"""Stream tallies, as `adapters/dynamodb/tallies.py` keeps them."""
from __future__ import annotations

from chalicelib.domain.tallies import StreamTally


class FakeTallyRepository:
    def __init__(self) -> None:
        self.tallies: dict[tuple[str, int, str], StreamTally] = {}

    def save(self, tally: StreamTally) -> None:
        key = (tally.environment, tally.reconciliation_id, tally.data_stream_key)
        stored = self.tallies.get(key)
        if stored is None or stored.computed_at <= tally.computed_at:
            self.tallies[key] = tally

    def of_reconciliation(self, environment: str, reconciliation_id: int) -> list[StreamTally]:
        return [t for (env, rid, _), t in sorted(self.tallies.items()) if (env, rid) == (environment, reconciliation_id)]

    def remove_all_of_reconciliation(self, environment: str, reconciliation_id: int) -> None:
        self.tallies = {k: t for k, t in self.tallies.items() if k[:2] != (environment, reconciliation_id)}
