"""Data streams (with their bank-account guards) and their property definitions, as
`adapters/dynamodb/data_streams.py` and `adapters/dynamodb/property_definitions.py` keep them."""
from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from chalicelib.domain.clock import iso, parse_iso, utc_now
from chalicelib.domain.data_streams import KEY_PATTERN, DataStream, PropertyDefinition, StreamType
from chalicelib.domain.errors import Conflict, NotFound, shown
from chalicelib.domain.record_changes import change_blocks
from tests.fakes._support import newest_first_page, padded, stored_time
from tests.fakes.counters import FakeCounters

# The adapters' age after which a guard its owner does not hold is taken back.
STALE_GUARD_AGE = timedelta(seconds=60)


@dataclass
class _AccountGuard:
    data_stream_key: str
    data_stream_id: int
    created_at: datetime


@dataclass
class _StreamRow:
    stream: DataStream
    records_counted_at: str | None = None  # ISO text, compared as the table compares it
    recount_requested_at: str | None = None  # set while the stream waits in the recount index
    delete_confirmed: bool = False  # the adapter's `deleting = "confirmed"`
    records_as_imported: bool = True  # the adapter's marks, put with the stream
    changes_noted: bool = True
    changes_noting: str | None = None  # the adapter's mark while a stream's past changes are found (ISO text)
    changed_blocks: set[int] = field(default_factory=set)  # the adapter's block items beside the stream


class FakeDataStreamRepository:
    def __init__(self, counters: FakeCounters | None = None, note_changed_blocks: bool = True) -> None:
        self._counters = counters or FakeCounters()
        self._note_changed_blocks = note_changed_blocks
        self.rows: dict[tuple[str, str], _StreamRow] = {}
        self.account_guards: dict[tuple[str, str], _AccountGuard] = {}  # (environment, account routing key)
        self._lock = threading.Lock()  # the table's conditional writes are atomic

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "data_stream")

    def add(self, stream: DataStream) -> None:
        """Reserve a bank_feed's account (guard), then write the stream; a refused stream frees it."""
        with self._lock:
            self._hold_account(stream)
            key = (stream.environment, stream.key)
            if key in self.rows:
                self._free_account(stream.environment, stream.routing_key, stream.id)
                raise Conflict(f"a data stream with key '{stream.key}' already exists")
            self.rows[key] = _StreamRow(replace(stream, created_at=stored_time(stream.created_at)),
                                        changes_noted=self._note_changed_blocks)

    def _hold_account(self, stream: DataStream) -> None:
        routing_key = stream.routing_key
        if routing_key is None:
            return
        existing = self.account_guards.get((stream.environment, routing_key))
        if existing is not None and existing.data_stream_id != stream.id:
            owner = self.rows.get((stream.environment, existing.data_stream_key))
            held = owner is not None and owner.stream.id == existing.data_stream_id \
                and owner.stream.routing_key == routing_key
            if held or utc_now() - existing.created_at < STALE_GUARD_AGE:
                raise Conflict(f"bank account '{stream.bank_account_id}' is already the bank_account_id of data "
                               f"stream '{existing.data_stream_key}'")
        if existing is None or existing.data_stream_id != stream.id:
            self.account_guards[(stream.environment, routing_key)] = _AccountGuard(stream.key, stream.id,
                                                                                   stored_time(utc_now()))

    def _free_account(self, environment: str, routing_key: str | None, stream_id: int) -> None:
        if routing_key is None:
            return
        guard = self.account_guards.get((environment, routing_key))
        if guard is not None and guard.data_stream_id == stream_id:
            del self.account_guards[(environment, routing_key)]

    def get(self, environment: str, key: str) -> DataStream:
        stream = self.find_including_deleting(environment, key)
        if stream is None or stream.deleting:
            raise NotFound(f"data stream '{shown(key)}' not found")
        return stream

    def find_including_deleting(self, environment: str, key: str) -> DataStream | None:
        if not KEY_PATTERN.match(key):
            return None
        row = self.rows.get((environment, key))
        return row.stream if row else None

    def changed_since_import(self, environment: str, key: str) -> frozenset[int] | None:
        row = self.rows.get((environment, key))
        if row is None or row.stream.deleting or not (row.changes_noted or row.records_as_imported):
            return None
        return frozenset(row.changed_blocks) if row.changes_noted else frozenset()

    def note_records_changed(self, environment: str, record_ids: Mapping[str, Iterable[int]]) -> None:
        with self._lock:
            for key, ids in record_ids.items():
                if (row := self.rows.get((environment, key))) is not None:
                    if row.changes_noted or row.changes_noting:
                        row.changed_blocks |= change_blocks(ids)
                    row.records_as_imported = False

    def begin_noting_changes(self, environment: str, key: str, at: datetime) -> datetime | None:
        with self._lock:
            row = self.rows.get((environment, key))
            if row is None or row.changes_noted or row.stream.deleting:
                return None
            row.changes_noting = row.changes_noting or iso(at)
            return parse_iso(row.changes_noting)

    def finish_noting_changes(self, environment: str, key: str, began_at: datetime, blocks: Iterable[int]) -> bool:
        with self._lock:
            row = self.rows.get((environment, key))
            if row is None or row.changes_noting != iso(began_at) or row.stream.deleting:
                return False
            row.changed_blocks |= set(blocks)
            row.changes_noted, row.changes_noting = True, None
            return True

    def find_by_id(self, environment: str, stream_id: int) -> DataStream | None:
        found = [r.stream for (env, _), r in self.rows.items()
                 if env == environment and r.stream.id == stream_id and not r.stream.deleting]
        return found[0] if found else None

    def get_many(self, environment: str, stream_keys: Iterable[str]) -> dict[str, DataStream]:
        """The visible streams among `stream_keys`, by key; keys that cannot exist are skipped."""
        wanted = [k for k in dict.fromkeys(stream_keys) if KEY_PATTERN.match(k)]
        rows = [self.rows[(environment, k)] for k in wanted if (environment, k) in self.rows]
        return {r.stream.key: r.stream for r in rows if not r.stream.deleting}

    def list_page(self, environment: str, limit: int, cursor: str | None) -> tuple[list[DataStream], str | None]:
        """Newest first (by id); streams being deleted stay listed, as in the adapter's index."""
        entries = [(padded(r.stream.id), r.stream) for (env, _), r in self.rows.items() if env == environment]
        return newest_first_page(f"streams/{environment}", entries, limit, cursor)

    def bank_feeds(self, environment: str) -> list[DataStream]:
        return [r.stream for (env, _), r in sorted(self.rows.items()) if env == environment
                and r.stream.type is StreamType.BANK_FEED and not r.stream.deleting]

    def save(self, stream: DataStream, previous: DataStream | None = None) -> None:
        """Write a changed stream; `stream.version` must be one past the stored version. A new
        account is held before the write, the old one freed after it."""
        with self._lock:
            moved = previous is not None and stream.routing_key != previous.routing_key
            if moved:
                self._hold_account(stream)
            row = self.rows.get((stream.environment, stream.key))
            if row is None or row.stream.version != stream.version - 1 or row.stream.deleting:
                if moved:
                    self._free_account(stream.environment, stream.routing_key, stream.id)
                raise Conflict(f"data stream '{stream.key}' changed or is being deleted; retry")
            row.stream = replace(row.stream, name=stream.name, description=stream.description,
                                 bank_account_id=stream.bank_account_id, version=stream.version)
            if moved and previous is not None:
                self._free_account(stream.environment, previous.routing_key, stream.id)

    def set_records_count(self, environment: str, key: str, count: int, counted_at: datetime) -> bool:
        """Store a count unless a recount that began later stored one first."""
        row = self.rows.get((environment, key))
        at = iso(counted_at)
        if row is None or (row.records_counted_at is not None and not row.records_counted_at < at):
            return False
        row.stream = replace(row.stream, records_count=count)
        row.records_counted_at = at
        return True

    def request_recount(self, environment: str, key: str, requested_at: datetime) -> None:
        row = self.rows.get((environment, key))
        if row is not None:
            row.recount_requested_at = iso(requested_at)

    def clear_recount_request(self, environment: str, key: str, counted_at: datetime) -> None:
        """Drop the request a recount begun at `counted_at` answered; a later request stays."""
        row = self.rows.get((environment, key))
        if row is not None and row.recount_requested_at is not None and row.recount_requested_at <= iso(counted_at):
            row.recount_requested_at = None

    def recount_requests(self) -> list[tuple[str, str]]:
        """(environment, stream key) of every stream waiting for a recount, of every environment."""
        waiting = [(f"{env}#{key}", (env, key)) for (env, key), r in self.rows.items()
                   if r.recount_requested_at is not None]
        return [pair for _, pair in sorted(waiting)]

    def mark_deleting(self, environment: str, key: str) -> None:
        row = self.rows.get((environment, key))
        if row is None:
            raise NotFound(f"data stream '{key}' not found")
        row.stream = replace(row.stream, deleting=True)

    def confirm_deleting(self, environment: str, key: str) -> None:
        row = self.rows.get((environment, key))
        if row is not None and row.stream.deleting:
            row.delete_confirmed = True

    def unmark_deleting(self, environment: str, key: str) -> bool:
        """Undo mark_deleting, unless another delete confirmed it or it is gone."""
        row = self.rows.get((environment, key))
        if row is None or not row.stream.deleting or row.delete_confirmed:
            return False
        row.stream = replace(row.stream, deleting=False)
        return True

    def remove(self, environment: str, key: str) -> None:
        """The stream's account first, then the stream."""
        row = self.rows.get((environment, key))
        if row is not None:
            self._free_account(environment, row.stream.routing_key, row.stream.id)
        self.rows.pop((environment, key), None)


@dataclass
class _Guard:
    definition_id: int
    created_at: datetime


class FakePropertyDefinitionRepository:
    def __init__(self, counters: FakeCounters | None = None) -> None:
        self._counters = counters or FakeCounters()
        self.definitions: dict[tuple[str, int], PropertyDefinition] = {}
        self.guards: dict[tuple[str, str, str], _Guard] = {}  # (environment, stream key, property key)

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "property_definition")

    def add(self, definition: PropertyDefinition) -> None:
        """Reserve the key in its stream (guard), then write the definition."""
        guard_key = (definition.environment, definition.data_stream_key, definition.key)
        existing = self.guards.get(guard_key)
        if existing is not None:
            owner = self.definitions.get((definition.environment, existing.definition_id))
            if owner is not None or utc_now() - existing.created_at < STALE_GUARD_AGE:
                raise Conflict(f"data stream '{definition.data_stream_key}' already has a property '{definition.key}'")
        self.guards[guard_key] = _Guard(definition.id, stored_time(utc_now()))
        self.definitions[(definition.environment, definition.id)] = self._stored(definition)

    def get(self, environment: str, definition_id: int) -> PropertyDefinition:
        definition = self.definitions.get((environment, definition_id))
        if definition is None:
            raise NotFound(f"property definition {definition_id} not found")
        return definition

    def list(self, environment: str, stream_key: str | None = None) -> list[PropertyDefinition]:
        """In the order of (stream key, id) as text: one stream's, or every stream's."""
        if stream_key is not None and not KEY_PATTERN.match(stream_key):
            return []
        entries = [(f"{d.data_stream_key}#{padded(d.id)}", d) for (env, _), d in self.definitions.items()
                   if env == environment]
        prefix = f"{stream_key}#" if stream_key is not None else ""
        return [d for sort, d in sorted(entries, key=lambda e: e[0]) if sort.startswith(prefix)]

    def save(self, definition: PropertyDefinition) -> None:
        key = (definition.environment, definition.id)
        if key not in self.definitions:
            raise NotFound(f"property definition {definition.id} not found")
        self.definitions[key] = self._stored(definition)

    def remove(self, definition: PropertyDefinition) -> None:
        """Delete the definition first, then free its key (only if the key is still its own)."""
        self.definitions.pop((definition.environment, definition.id), None)
        guard_key = (definition.environment, definition.data_stream_key, definition.key)
        guard = self.guards.get(guard_key)
        if guard is not None and guard.definition_id == definition.id:
            del self.guards[guard_key]

    def remove_all_of_stream(self, environment: str, stream_key: str) -> None:
        for definition in self.list(environment, stream_key):
            self.definitions.pop((environment, definition.id), None)
        for guard_key in [k for k in self.guards if k[:2] == (environment, stream_key)]:
            del self.guards[guard_key]

    @staticmethod
    def _stored(definition: PropertyDefinition) -> PropertyDefinition:
        return replace(definition, created_at=stored_time(definition.created_at))
