"""Rate streams and their rates in DynamoDB: the stream item and its rates share one partition
(`{E}#RS#<key>`), so a stream's rates are one query; the streams of an environment are listed by
gsi1 (docs/access-patterns.md)."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable
from chalicelib.domain.clock import iso, parse_iso
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.fx import KEY_PATTERN, RateRow, RateStream, parse_rate


class RateStreamRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def add(self, stream: RateStream) -> None:
        try:
            self._table.put_new(self._to_item(stream))
        except ConditionFailed:
            raise Conflict(f"a rate stream with key '{stream.key}' already exists") from None

    def get(self, environment: str, key: str) -> RateStream:
        item = self._table.get(keys.rate_stream(environment, key)) if KEY_PATTERN.match(key) else None
        if item is None:
            raise NotFound(f"rate stream '{key}' not found")
        return self._from_item(item)

    def streams(self, environment: str) -> list[RateStream]:
        items = self._table.query_all(keys.GSI1, keys.rate_streams_index_pk(environment))
        return [self._from_item(i) for i in items]

    def rates(self, environment: str, key: str) -> list[RateRow]:
        """Every rate of the stream, by pair then date."""
        items = self._table.query_all(keys.BASE_TABLE, keys.rate_stream(environment, key)["pk"],
                                      sort_prefix=keys.RATE_PREFIX, consistent=True)
        return [self._rate_of(i) for i in items]

    def put_rates(self, stream: RateStream, rates: Iterable[RateRow]) -> None:
        self._table.batch_write(puts=[{
            **keys.rate(stream.environment, stream.key, r.base, r.quote, r.day), "entity": "rate",
            "date": r.day.isoformat(), "base": r.base, "quote": r.quote, "rate": r.rate.text} for r in rates])

    def count_rates(self, stream: RateStream, added: int) -> RateStream:
        """Add `added` to the stream's count of rates; the stream as it is now."""
        item = self._table.update(keys.rate_stream(stream.environment, stream.key),
                                  "SET rates_count = if_not_exists(rates_count, :zero) + :added",
                                  {":zero": 0, ":added": added}, return_new=True)
        return self._from_item(item)

    @staticmethod
    def _rate_of(item: dict[str, Any]) -> RateRow:
        rate = parse_rate(item["rate"])
        assert not isinstance(rate, str), item  # stored only once checked
        return RateRow(date.fromisoformat(item["date"]), item["base"], item["quote"], rate)

    @staticmethod
    def _to_item(stream: RateStream) -> dict[str, Any]:
        return {**keys.rate_stream(stream.environment, stream.key),
                **keys.rate_stream_index(stream.environment, stream.key),
                "entity": "rate_stream", "environment": stream.environment, "key": stream.key, "name": stream.name,
                "description": stream.description, "rates_count": stream.rates_count,
                "created_at": iso(stream.created_at)}

    @staticmethod
    def _from_item(item: dict[str, Any]) -> RateStream:
        return RateStream(environment=item["environment"], key=item["key"], name=item["name"],
                          description=item.get("description"), rates_count=int(item.get("rates_count", 0)),
                          created_at=parse_iso(item["created_at"]))
