"""Stream tallies in DynamoDB: one item per (reconciliation, stream) in the reconciliation's
partition (see domain/tallies.py for what they hold and who writes them)."""
from __future__ import annotations

from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable
from chalicelib.domain.clock import iso, parse_iso
from chalicelib.domain.tallies import StreamTally, money_from_plain, money_plain


class TallyRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def save(self, tally: StreamTally) -> None:
        """Replace the stream's tally unless a newer one is stored (a slow refresh never wins over
        the one that followed it)."""
        item = {**keys.stream_tally(tally.environment, tally.reconciliation_id, tally.data_stream_key),
                "entity": "stream_tally", "data_stream_key": tally.data_stream_key,
                "computed_at": iso(tally.computed_at), "total": money_plain(tally.total),
                "open": money_plain(tally.open),
                "open_matched_in": {str(other): money_plain(m) for other, m in tally.open_matched_in.items()}}
        try:
            self._table.put(item, condition="attribute_not_exists(pk) OR computed_at <= :at",
                            values={":at": item["computed_at"]})
        except ConditionFailed:
            pass  # a later refresh already wrote its own

    def of_reconciliation(self, environment: str, reconciliation_id: int) -> list[StreamTally]:
        items = self._table.query_all(keys.BASE_TABLE, keys.reconciliation(environment, reconciliation_id)["pk"],
                                      sort_prefix=keys.STREAM_TALLY_PREFIX)
        return [self._from_item(environment, reconciliation_id, item) for item in items]

    def remove_all_of_reconciliation(self, environment: str, reconciliation_id: int) -> None:
        items = self._table.query_all(keys.BASE_TABLE, keys.reconciliation(environment, reconciliation_id)["pk"],
                                      sort_prefix=keys.STREAM_TALLY_PREFIX, projection=("pk", "sk"))
        self._table.batch_write(deletes=[{"pk": i["pk"], "sk": i["sk"]} for i in items])

    @staticmethod
    def _from_item(environment: str, reconciliation_id: int, item: dict[str, Any]) -> StreamTally:
        return StreamTally(environment, reconciliation_id, item["data_stream_key"], parse_iso(item["computed_at"]),
                           total=money_from_plain(item["total"]), open=money_from_plain(item["open"]),
                           open_matched_in={int(other): money_from_plain(m)
                                            for other, m in item["open_matched_in"].items()})
