"""DynamoDB repositories: entities to items and back, with the conditional writes that keep rules.

No TransactWriteItems anywhere: multi-item changes are ordered, idempotent writes
(reserve with a conditional put, write, then commit), so a retry after a crash finishes the work.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Iterable

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, Page
from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.data_streams import KEY_PATTERN, DataStream, PropertyDefinition, PropertyType, StreamType
from chalicelib.domain.errors import Conflict, NotFound, shown

GSI1 = "gsi1"
# A property-key guard whose definition never got written (a crash between the two puts)
# is reclaimed after this long; a younger one may belong to a create still in flight.
STALE_GUARD_AGE = timedelta(seconds=60)



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

class ApiKeyRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def next_id(self) -> int:
        return self._table.add_to_counter(keys.global_counter("api_key"), 1)

    def add(self, key: ApiKey) -> None:
        self._table.put_new({
            **keys.api_key(key.key_hash), **keys.api_key_index(key.id), "entity": "api_key",
            "id": key.id, "environment": key.environment, "key_hash": key.key_hash,
            "created_at": iso(key.created_at), "label": key.label,
        })

    def find_by_hash(self, key_hash: str) -> ApiKey | None:
        item = self._table.get(keys.api_key(key_hash))
        return self._from_item(item) if item else None

    def list(self) -> list[ApiKey]:
        items = self._table.query_all("gsi1pk", keys.API_KEYS_INDEX_PK, index=GSI1)
        return [self._from_item(i) for i in items]

    def revoke(self, key_id: int) -> ApiKey:
        key = next((k for k in self.list() if k.id == key_id), None)
        if key is None:
            raise NotFound(f"API key {key_id} not found")
        if key.revoked_at is None:
            self._table.update(keys.api_key(key.key_hash), "SET revoked_at = if_not_exists(revoked_at, :t)",
                               values={":t": iso(utc_now())})
        return self.find_by_hash(key.key_hash)

    def touch(self, key: ApiKey, resolution: timedelta) -> None:
        """Record use, at most once per `resolution`, so authenticating costs no write per request."""
        now = utc_now()
        if key.last_used_at and now - key.last_used_at < resolution:
            return
        try:
            self._table.update(
                keys.api_key(key.key_hash), "SET last_used_at = :now",
                condition="attribute_exists(pk) AND (attribute_not_exists(last_used_at) OR last_used_at < :cutoff)",
                values={":now": iso(now), ":cutoff": iso(now - resolution)},
            )
        except ConditionFailed:
            pass  # another request recorded it first

    @staticmethod
    def _from_item(item: dict[str, Any]) -> ApiKey:
        return ApiKey(
            id=item["id"], environment=item["environment"], key_hash=item["key_hash"],
            created_at=parse_iso(item["created_at"]), last_used_at=parse_optional_iso(item.get("last_used_at")),
            revoked_at=parse_optional_iso(item.get("revoked_at")), label=item.get("label"),
        )


# Data streams ---------------------------------------------------------------------------

class DataStreamRepository:
    def __init__(self, table: DynamoTable, counters: Counters) -> None:
        self._table = table
        self._counters = counters

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "data_stream")

    def add(self, stream: DataStream) -> None:
        try:
            self._table.put_new(self.to_item(stream))
        except ConditionFailed:
            raise Conflict(f"a data stream with key '{stream.key}' already exists") from None

    def get(self, environment: str, key: str) -> DataStream:
        stream = self.find_including_deleting(environment, key)
        if stream is None or stream.deleting:
            raise NotFound(f"data stream '{shown(key)}' not found")
        return stream

    def find_including_deleting(self, environment: str, key: str) -> DataStream | None:
        if not KEY_PATTERN.match(key):
            return None  # cannot exist, and would overflow DynamoDB's key size
        item = self._table.get(keys.data_stream(environment, key))
        return self._from_item(item) if item else None

    def get_many(self, environment: str, stream_keys: Iterable[str]) -> dict[str, DataStream]:
        """The visible streams among `stream_keys`, by key, read in batches; keys that cannot exist are skipped."""
        wanted = [k for k in dict.fromkeys(stream_keys) if KEY_PATTERN.match(k)]
        streams = [self._from_item(i) for i in self._table.get_many(keys.data_stream(environment, k) for k in wanted)]
        return {s.key: s for s in streams if not s.deleting}

    def list_page(self, environment: str, limit: int, cursor: str | None) -> tuple[list[DataStream], str | None]:
        page: Page = self._table.query_page(
            "gsi1pk", keys.data_streams_index_pk(environment), index=GSI1, sort_attr="gsi1sk",
            limit=limit, cursor=cursor,
        )
        return [self._from_item(i) for i in page.items], page.cursor

    def save(self, stream: DataStream) -> None:
        """Write a renamed stream; `stream.version` must be one past the stored version.

        Only the editable fields are written: counters on the item belong to other writers.
        """
        try:
            self._table.update(
                keys.data_stream(stream.environment, stream.key),
                "SET #name = :name, description = :description, #v = :version",
                condition="attribute_exists(pk) AND #v = :expected AND attribute_not_exists(deleting)",
                names={"#v": "version", "#name": "name"},
                values={":name": stream.name, ":description": stream.description, ":version": stream.version,
                        ":expected": stream.version - 1},
                keep_nulls=True,
            )
        except ConditionFailed:
            raise Conflict(f"data stream '{stream.key}' changed or is being deleted; retry") from None

    def set_records_count(self, environment: str, key: str, count: int, counted_at: datetime) -> bool:
        """Store a count read from the mirror, unless a recount that began later stored one first
        (two jobs finishing together both recount; the later reading is the fuller one)."""
        try:
            self._table.update(
                keys.data_stream(environment, key), "SET records_count = :count, records_counted_at = :at",
                condition="attribute_exists(pk) AND "
                          "(attribute_not_exists(records_counted_at) OR records_counted_at < :at)",
                values={":count": count, ":at": iso(counted_at)},
            )
        except ConditionFailed:
            return False
        return True

    def request_recount(self, environment: str, key: str, requested_at: datetime) -> None:
        try:
            self._table.update(keys.data_stream(environment, key),
                               "SET recount_requested_at = :at, gsi2pk = :gsi2pk, gsi2sk = :gsi2sk",
                               condition="attribute_exists(pk)",
                               values={":at": iso(requested_at),
                                       **{f":{k}": v for k, v in keys.recount_index(environment, key).items()}})
        except ConditionFailed:
            pass  # the stream is gone: nothing to count

    def clear_recount_request(self, environment: str, key: str, counted_at: datetime) -> None:
        """Drop the request a recount begun at `counted_at` answered; a later request stays."""
        try:
            self._table.update(keys.data_stream(environment, key), "REMOVE recount_requested_at, gsi2pk, gsi2sk",
                               condition="recount_requested_at <= :at", values={":at": iso(counted_at)})
        except ConditionFailed:
            pass

    def recount_requests(self) -> list[tuple[str, str]]:
        """(environment, stream key) of every stream waiting for a recount, of every environment."""
        items = self._table.index_items("gsi2pk", keys.RECOUNTS_PK, index="gsi2")
        return [(i["environment"], i["key"]) for i in items]

    def mark_deleting(self, environment: str, key: str) -> None:
        try:
            self._table.update(keys.data_stream(environment, key), "SET deleting = :t",
                               condition="attribute_exists(pk)", values={":t": True})
        except ConditionFailed:
            raise NotFound(f"data stream '{key}' not found") from None

    def remove(self, environment: str, key: str) -> None:
        self._table.delete(keys.data_stream(environment, key))

    @staticmethod
    def to_item(stream: DataStream) -> dict[str, Any]:
        return {
            **keys.data_stream(stream.environment, stream.key),
            **keys.data_stream_index(stream.environment, stream.id),
            "entity": "data_stream", "environment": stream.environment, "id": stream.id,
            "key": stream.key, "name": stream.name, "description": stream.description,
            "type": stream.type.value, "bank_account_id": stream.bank_account_id,
            "program_id": stream.program_id, "records_count": stream.records_count,
            "created_at": iso(stream.created_at), "version": stream.version,
            "deleting": True if stream.deleting else None,
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> DataStream:
        return DataStream(
            environment=item["environment"], id=item["id"], key=item["key"], name=item["name"],
            type=StreamType(item["type"]), created_at=parse_iso(item["created_at"]),
            description=item.get("description"), bank_account_id=item.get("bank_account_id"),
            program_id=item.get("program_id"), records_count=item.get("records_count", 0),
            deleting=bool(item.get("deleting")), version=item.get("version", 1),
        )


# Property definitions -------------------------------------------------------------------

class PropertyDefinitionRepository:
    def __init__(self, table: DynamoTable, counters: Counters) -> None:
        self._table = table
        self._counters = counters

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "property_definition")

    def add(self, definition: PropertyDefinition) -> None:
        """Reserve the key in its stream (guard), then write the definition."""
        guard = {
            **keys.property_key_guard(definition.environment, definition.data_stream_key, definition.key),
            "entity": "property_key_guard", "definition_id": definition.id, "created_at": iso(utc_now()),
        }
        try:
            self._table.put_new(guard)
        except ConditionFailed:
            if not self._reclaim_abandoned_guard(definition.environment, guard):
                raise Conflict(
                    f"data stream '{definition.data_stream_key}' already has a property '{definition.key}'"
                ) from None
        self._table.put(self._to_item(definition))

    def _reclaim_abandoned_guard(self, environment: str, guard: dict[str, Any]) -> bool:
        existing = self._table.get({"pk": guard["pk"], "sk": guard["sk"]})
        if existing is None:
            return self._try_put_new(guard)
        owner = self._table.get(keys.property_definition(environment, existing["definition_id"]))
        if owner is not None or utc_now() - parse_iso(existing["created_at"]) < STALE_GUARD_AGE:
            return False
        try:
            self._table.put(guard, condition="definition_id = :old", values={":old": existing["definition_id"]})
        except ConditionFailed:
            return False
        return True

    def _try_put_new(self, item: dict[str, Any]) -> bool:
        try:
            self._table.put_new(item)
        except ConditionFailed:
            return False
        return True

    def get(self, environment: str, definition_id: int) -> PropertyDefinition:
        item = self._table.get(keys.property_definition(environment, definition_id))
        if item is None:
            raise NotFound(f"property definition {definition_id} not found")
        return self._from_item(item)

    def list(self, environment: str, stream_key: str | None = None) -> list[PropertyDefinition]:
        if stream_key is not None and not KEY_PATTERN.match(stream_key):
            return []  # no stream can have that key
        prefix = keys.property_definitions_of_stream_prefix(stream_key) if stream_key is not None else None
        items = self._table.query_all("gsi1pk", keys.property_definitions_index_pk(environment), index=GSI1,
                                      sort_attr="gsi1sk", sort_prefix=prefix)
        return [self._from_item(i) for i in items]

    def save(self, definition: PropertyDefinition) -> None:
        try:
            self._table.put(self._to_item(definition), condition="attribute_exists(pk)")
        except ConditionFailed:
            raise NotFound(f"property definition {definition.id} not found") from None

    def remove(self, definition: PropertyDefinition) -> None:
        """Delete the definition first, then free its key, so a crash never frees a key in use."""
        self._table.delete(keys.property_definition(definition.environment, definition.id))
        try:
            self._table.delete(
                keys.property_key_guard(definition.environment, definition.data_stream_key, definition.key),
                condition="definition_id = :id", values={":id": definition.id},
            )
        except ConditionFailed:
            pass  # already freed, or reclaimed by a newer definition of the same key

    def remove_all_of_stream(self, environment: str, stream_key: str) -> None:
        definitions = self.list(environment, stream_key)
        self._table.batch_write(deletes=[keys.property_definition(environment, d.id) for d in definitions])
        guards = self._table.query_all("pk", keys.data_stream(environment, stream_key)["pk"],
                                       sort_prefix=keys.PROPERTY_GUARD_PREFIX)
        self._table.batch_write(deletes=[{"pk": g["pk"], "sk": g["sk"]} for g in guards])

    @staticmethod
    def _to_item(definition: PropertyDefinition) -> dict[str, Any]:
        return {
            **keys.property_definition(definition.environment, definition.id),
            **keys.property_definition_index(definition.environment, definition.data_stream_key, definition.id),
            "entity": "property_definition", "environment": definition.environment, "id": definition.id,
            "key": definition.key, "name": definition.name, "type": definition.type.value,
            "data_stream_key": definition.data_stream_key, "optional": definition.optional,
            "created_at": iso(definition.created_at),
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> PropertyDefinition:
        return PropertyDefinition(
            environment=item["environment"], id=item["id"], key=item["key"], name=item["name"],
            type=PropertyType(item["type"]), data_stream_key=item["data_stream_key"],
            optional=item["optional"], created_at=parse_iso(item["created_at"]),
        )
