"""Property definitions in DynamoDB, a key guard per (stream, key) so that two creates cannot both win."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.counters import Counters
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable
from chalicelib.domain.clock import iso, parse_iso, utc_now
from chalicelib.domain.data_streams import KEY_PATTERN, PropertyDefinition, PropertyType
from chalicelib.domain.errors import Conflict, NotFound

# A property-key guard whose definition never got written (a crash between the two puts)
# is reclaimed after this long; a younger one may belong to a create still in flight.
STALE_GUARD_AGE = timedelta(seconds=60)


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
        items = self._table.query_all(keys.GSI1, keys.property_definitions_index_pk(environment), sort_prefix=prefix)
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
        guards = self._table.query_all(keys.BASE_TABLE, keys.data_stream(environment, stream_key)["pk"],
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
