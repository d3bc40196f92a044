"""Statement days of `bank_feed` streams: one item per stream and statement (a day), listed newest
first. Written when the import of the statement completes; the same statement imported again
writes the same item (the later import's id).

Beside them, each stream's newest day once more, at a key of its own (keys.stream_latest_balance):
the stream list reads the latest balance of a page of streams in one BatchGetItem instead of a
query per stream. It only moves forward: a conditional put keeps the day with the highest sort key.
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, Filter
from chalicelib.domain.balances import StatementDay


class BalanceRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def put_many(self, days: list[StatementDay]) -> None:
        self._table.batch_write(puts=[self._to_item(d) for d in days])
        newest: dict[str, StatementDay] = {}
        for day in days:
            held = newest.get(day.data_stream_key)
            if held is None or self._sk(day) >= self._sk(held):
                newest[day.data_stream_key] = day
        for day in newest.values():  # after the days: a retry of a crashed import writes both again
            item = self._to_item(day) | keys.stream_latest_balance(day.environment, day.data_stream_key) | {
                "entity": "latest_statement_day", "day_sk": self._sk(day)}
            try:
                self._table.put(item, condition="attribute_not_exists(pk) OR day_sk <= :sk",
                                values={":sk": self._sk(day)})
            except ConditionFailed:
                pass  # the stream already holds a newer day

    def latest_of(self, environment: str, stream_keys: Iterable[str]) -> dict[str, StatementDay]:
        """The newest statement day of each stream that has one: one BatchGetItem per 100 streams."""
        items = self._table.get_many([keys.stream_latest_balance(environment, k) for k in stream_keys])
        return {day.data_stream_key: day for day in map(self._from_item, items)}

    def page(self, environment: str, stream_key: str, limit: int, cursor: str | None,
             date_from: date | None = None, date_to: date | None = None) -> tuple[list[StatementDay], str | None]:
        clauses, values = [], {}
        if date_from is not None:
            clauses.append("#fd >= :ffrom")
            values[":ffrom"] = date_from.isoformat()
        if date_to is not None:
            clauses.append("#fd <= :fto")
            values[":fto"] = date_to.isoformat()
        window = Filter(" AND ".join(clauses), {"#fd": "date"}, values) if clauses else None
        page = self._table.query_page(keys.BASE_TABLE, keys.stream_balances_pk(environment, stream_key), limit=limit,
                                      cursor=cursor, filter=window)
        return [self._from_item(i) for i in page.items], page.cursor

    def older_than(self, day: StatementDay) -> StatementDay | None:
        """The newest statement day of the stream before `day`'s date (for its gap flag). By the
        `date` attribute: a filter may not name the sort key."""
        page = self._table.query_page(keys.BASE_TABLE, keys.stream_balances_pk(day.environment, day.data_stream_key),
                                      limit=1,
                                      filter=Filter("#fd < :fday", {"#fd": "date"}, {":fday": day.date.isoformat()}))
        return self._from_item(page.items[0]) if page.items else None

    def remove_stream(self, environment: str, stream_key: str) -> None:
        items = self._table.query_all(keys.BASE_TABLE, keys.stream_balances_pk(environment, stream_key),
                                      projection=("pk", "sk"))
        self._table.batch_write(deletes=[{"pk": i["pk"], "sk": i["sk"]} for i in items]
                                + [keys.stream_latest_balance(environment, stream_key)])

    @staticmethod
    def _sk(day: StatementDay) -> str:
        return keys.stream_balance_sk(day.date, day.statement_id)

    @staticmethod
    def _to_item(day: StatementDay) -> dict[str, Any]:
        return {**keys.stream_balance(day.environment, day.data_stream_key, day.date, day.statement_id),
                "entity": "statement_day",
                "environment": day.environment, "data_stream_key": day.data_stream_key, "date": day.date.isoformat(),
                "statement_id": day.statement_id, "account": day.account, "currency": day.currency,
                "decimal_places": day.decimal_places, "opening_booked": day.opening_booked,
                "closing_booked": day.closing_booked, "closing_available": day.closing_available,
                "file_import_id": day.file_import_id}

    @staticmethod
    def _from_item(item: dict[str, Any]) -> StatementDay:
        def amount(name: str) -> int | None:
            return int(item[name]) if item.get(name) is not None else None
        return StatementDay(environment=item["environment"], data_stream_key=item["data_stream_key"],
                            date=date.fromisoformat(item["date"]), statement_id=item["statement_id"],
                            account=item["account"],
                            currency=item["currency"], decimal_places=int(item["decimal_places"]),
                            opening_booked=amount("opening_booked"), closing_booked=amount("closing_booked"),
                            closing_available=amount("closing_available"), file_import_id=int(item["file_import_id"]))
