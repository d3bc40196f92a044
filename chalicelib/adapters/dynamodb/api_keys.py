"""API keys in DynamoDB: stored by hash, listed through gsi1."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable
from chalicelib.domain.api_keys import ApiKey, KeyAccess
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.errors import NotFound


class ApiKeyRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def next_id(self) -> int:
        return self._table.add_to_counter(keys.global_counter("api_key"), 1)

    def add(self, key: ApiKey) -> None:
        self._table.put_new({
            **keys.api_key(key.key_hash), **keys.api_key_index(key.id), "entity": "api_key",
            "id": key.id, "environment": key.environment, "key_hash": key.key_hash,
            "created_at": iso(key.created_at), "label": key.label, "access": key.access.value,
            **({"owner_user_id": key.owner_user_id} if key.owner_user_id is not None else {}),
        })

    def find_by_hash(self, key_hash: str) -> ApiKey | None:
        item = self._table.get(keys.api_key(key_hash))
        return self._from_item(item) if item else None

    def list(self) -> list[ApiKey]:
        items = self._table.query_all(keys.GSI1, keys.API_KEYS_INDEX_PK)
        return [self._from_item(i) for i in items]

    def revoke(self, key_id: int) -> ApiKey:
        key = next((k for k in self.list() if k.id == key_id), None)
        if key is None:
            raise NotFound(f"API key {key_id} not found")
        if key.revoked_at is None:
            self._table.update(keys.api_key(key.key_hash), "SET revoked_at = if_not_exists(revoked_at, :t)",
                               values={":t": iso(utc_now())})
        revoked = self.find_by_hash(key.key_hash)
        if revoked is None:  # deleted meanwhile
            raise NotFound(f"API key {key_id} not found")
        return revoked

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
            access=KeyAccess(item.get("access", KeyAccess.FULL.value)),  # keys made before roles: full
            owner_user_id=int(item["owner_user_id"]) if item.get("owner_user_id") is not None else None,
        )
