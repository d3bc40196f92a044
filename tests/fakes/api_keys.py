"""API keys by hash, listed by id, as `adapters/dynamodb/api_keys.py` keeps them."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.errors import NotFound
from tests.fakes._support import ConditionFailed, stored_time


class FakeApiKeyRepository:
    def __init__(self) -> None:
        self.keys: dict[str, ApiKey] = {}  # by hash
        self._last_id = 0  # the one global counter of API keys

    def next_id(self) -> int:
        self._last_id += 1
        return self._last_id

    def add(self, key: ApiKey) -> None:
        if key.key_hash in self.keys:
            raise ConditionFailed()  # the adapter's put_new lets it through
        self.keys[key.key_hash] = replace(key, created_at=stored_time(key.created_at), last_used_at=None,
                                          revoked_at=None)

    def find_by_hash(self, key_hash: str) -> ApiKey | None:
        return self.keys.get(key_hash)

    def list(self) -> list[ApiKey]:
        return sorted(self.keys.values(), key=lambda k: k.id)

    def revoke(self, key_id: int) -> ApiKey:
        key = next((k for k in self.list() if k.id == key_id), None)
        if key is None:
            raise NotFound(f"API key {key_id} not found")
        if key.revoked_at is None:
            self.keys[key.key_hash] = replace(key, revoked_at=stored_time(utc_now()))
        return self.keys[key.key_hash]

    def touch(self, key: ApiKey, resolution: timedelta) -> None:
        """Record use, at most once per `resolution`, so authenticating costs no write per request."""
        now = utc_now()
        if key.last_used_at and now - key.last_used_at < resolution:
            return
        stored = self.keys.get(key.key_hash)
        if stored is None:
            return
        if stored.last_used_at is not None and not iso(stored.last_used_at) < iso(now - resolution):
            return  # another request recorded it first
        self.keys[key.key_hash] = replace(stored, last_used_at=stored_time(now))
