"""Records, as `adapters/dynamodb/records.py` keeps them: whole-item writes, the external-id
guards, the listings (by stream, import, external id or status; newest first, with cursors) and
the two-step delete.

Records live in a `FakeRecordStore` that the fake repositories share, as the adapters share one
table: FakeMatchRepository claims and releases the same rows (`matched_in`, the match holding a
record in each reconciliation, the status that follows), and a fake of the exceptions can keep its
holds on them (`exception_holds`). A row's index entries follow its status as the adapters write
them: a record sits in its stream's open listing (gsi5) until reconciled, and in the listing of
its status (gsi4) once matched somewhere.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from chalicelib.adapters.dynamodb.records import RecordRepository
from chalicelib.adapters.dynamodb.table import FILTERED_READ_STEP, MAX_READS_PER_PAGE
from chalicelib.domain.allocation import paid_in_part
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.records import ExternalIdClaim, Record, RecordQuery, RecordStatus, lease_owner
from tests.fakes._support import NOT_THIS_LIST, decode_cursor, encode_cursor, padded, stored_time
from tests.fakes.data_streams import FakeDataStreamRepository
from tests.fakes.jobs import FakeIngestionJobRepository

T = TypeVar("T")


@dataclass
class RecordRow:
    """A record item: the record as stored (its status follows the claims), and the attributes
    the other repositories write on it."""
    record: Record
    matched_in: set[int] = field(default_factory=set)  # the reconciliations that matched it
    proposed_in: set[int] = field(default_factory=set)  # those of them whose match is proposed
    match_ids: dict[int, int] = field(default_factory=dict)  # `match_<reconciliation>`: the match holding it
    exception_holds: dict[int, int] = field(default_factory=dict)  # `exception_<reconciliation>` / `exception_holds`
    deleting: bool = False
    deleting_at: str | None = None  # ISO text, compared as the table compares it

    @property
    def open(self) -> bool:
        """In its stream's open-records index (gsi5): until reconciled."""
        return self.record.status is not RecordStatus.RECONCILED

    @property
    def metadata_text(self) -> str | None:
        """`metadata` as the item keeps it: JSON text, absent when empty."""
        metadata = self.record.metadata
        return json.dumps(metadata, separators=(",", ":")) if metadata else None


@dataclass
class ExternalIdGuard:
    owner: str
    record_id: int


@dataclass
class _Lease:
    owner: str  # the job
    holders: set[str]  # its executions holding the lease
    expires_at: datetime


class FakeRecordStore:
    """The record items (and external-id guards) of every environment, shared by the fakes of the
    repositories that read or write them."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], RecordRow] = {}
        self.guards: dict[tuple[str, str, str], ExternalIdGuard] = {}  # (environment, stream key, external id)
        self.leases: dict[tuple[str, str], _Lease] = {}  # streams' writer leases
        # Streams that keep the ranges of their guarded external_ids (those created since they exist)
        self.external_id_ranges: dict[tuple[str, str], list[tuple[str, str]]] = {}
        # The marks of events owed by a saved change, by the item that carries them (the outbox:
        # services/events.py `save_and_emit`): (environment, origin kind, origin ids) -> marks.
        self.pending_events: dict[tuple[str, str, tuple[int, ...]], set[str]] = {}

    def owe(self, environment: str, kind: str, ids: tuple[int, ...], mark: str | None) -> None:
        """A saving write adds its event's mark to the item it saves (none: it owes nothing)."""
        if mark is not None:
            self.pending_events.setdefault((environment, kind, ids), set()).add(mark)

    def row(self, environment: str, record_id: int) -> RecordRow | None:
        return self.rows.get((environment, record_id))

    def of_stream(self, environment: str, stream_key: str) -> list[RecordRow]:
        """The stream's records (gsi1), by id."""
        return sorted((r for (env, _), r in self.rows.items()
                       if env == environment and r.record.data_stream_key == stream_key), key=lambda r: r.record.id)


def stored_record(record: Record) -> Record:
    """A record as it reads back: timestamps to the millisecond, metadata through its JSON text."""
    metadata = json.loads(json.dumps(record.metadata, separators=(",", ":"))) if record.metadata else {}
    return replace(record, created_at=stored_time(record.created_at), metadata=metadata)


def id_cursor(listing: str, record_id: int) -> str:
    return encode_cursor(listing, padded(record_id))


def cursor_id(cursor: str, listing: str) -> int:
    after = decode_cursor(cursor, listing)["after"]
    if not (after.isascii() and after.isdigit()):
        raise BadRequest(NOT_THIS_LIST)
    return int(after)


def filtered_query_page(listing: str, entries: Iterable[tuple[int, T]], limit: int, cursor: str | None,
                        admits: Callable[[T], bool]) -> tuple[list[T], str | None]:
    """A filtered query page of `(id, item)` entries, highest id first, as DynamoTable.query_page reads
    it: steps of max(limit + 1, FILTERED_READ_STEP) entries, at most MAX_READS_PER_PAGE of them, a
    cursor only when more follows (or, when the steps ran out, from where the reading stopped)."""
    ordered = sorted(entries, key=lambda e: e[0], reverse=True)
    if cursor:
        after = cursor_id(cursor, listing)
        ordered = [e for e in ordered if e[0] < after]
    step = max(limit + 1, FILTERED_READ_STEP)
    found: list[tuple[int, T]] = []
    read = 0
    for _ in range(MAX_READS_PER_PAGE):
        chunk = ordered[read:read + step]
        read += len(chunk)
        found += [e for e in chunk if admits(e[1])]
        if len(found) > limit or read >= len(ordered):
            break
    else:
        return [item for _, item in found], id_cursor(listing, ordered[read - 1][0])
    if len(found) <= limit:
        return [item for _, item in found], None
    page = found[:limit]
    return [item for _, item in page], id_cursor(listing, page[-1][0])


def page_of_ids(listing: str, ids: Iterable[int], limit: int,
                admitted: Callable[[int], T | None]) -> tuple[list[T], str | None]:
    """A page of the items of candidate ids in list order, as DynamoTable.page_of_keys reads them:
    limit + 1 first, then steps of max(limit + 1, FILTERED_READ_STEP), at most MAX_READS_PER_PAGE."""
    source = iter(ids)
    found: list[tuple[T, int]] = []
    step = limit + 1
    batch: list[int] = []
    for _ in range(MAX_READS_PER_PAGE):
        batch = list(itertools.islice(source, step))
        for i in batch:
            item = admitted(i)
            if item is not None:
                found.append((item, i))
        if len(found) > limit:
            return [item for item, _ in found[:limit]], id_cursor(listing, found[limit - 1][1])
        if len(batch) < step:
            return [item for item, _ in found], None
        step = max(limit + 1, FILTERED_READ_STEP)
    more = next(source, None) is not None
    return [item for item, _ in found], id_cursor(listing, batch[-1]) if more else None


class FakeRecordRepository:
    def __init__(self, store: FakeRecordStore | None = None, data_streams: FakeDataStreamRepository | None = None,
                 ingestion_jobs: FakeIngestionJobRepository | None = None) -> None:
        self.store = store or FakeRecordStore()
        self.data_streams = data_streams or FakeDataStreamRepository()  # the unreconciled listing's streams
        self.ingestion_jobs = ingestion_jobs or FakeIngestionJobRepository()  # an import's block of ids

    # Writing -------------------------------------------------------------------------------

    def put_many(self, records: Iterable[Record]) -> list[Record]:
        """Write whole items (what claims, holds or a delete mark had written on them is gone); the
        fake leaves nothing unprocessed, so none is left."""
        for record in records:
            self.store.rows[(record.environment, record.id)] = RecordRow(stored_record(record))
        return []

    def put_absent(self, records: Sequence[Record]) -> list[Record]:
        """Write the records whose item is not stored; those whose item is, left as it is."""
        left = [record for record in records if (record.environment, record.id) in self.store.rows]
        self.put_many(record for record in records if (record.environment, record.id) not in self.store.rows)
        return left

    def claim_external_id(self, environment: str, stream_key: str, external_id: str, owner: str,
                          record_id: int) -> ExternalIdClaim:
        key = (environment, stream_key, external_id)
        guard = self.store.guards.get(key)
        if guard is None or guard.owner == owner:
            self.store.guards[key] = ExternalIdGuard(owner, record_id)
            return ExternalIdClaim(True, record_id)
        return ExternalIdClaim(False, guard.record_id)

    def release_external_id(self, environment: str, stream_key: str, external_id: str, owner: str) -> bool:
        """Drop the claim only if `owner` holds it; whether it was dropped."""
        key = (environment, stream_key, external_id)
        guard = self.store.guards.get(key)
        if guard is None or guard.owner != owner:
            return False
        del self.store.guards[key]
        return True

    def external_id_claims(self, environment: str,
                           wanted: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, int]]:
        found = ((key, self.store.guards.get((environment, *key))) for key in wanted)
        return {key: (guard.owner, guard.record_id) for key, guard in found if guard is not None}

    def put_external_id_guards(self, environment: str, guards: Iterable[tuple[str, str, str, int]]) -> None:
        for stream_key, external_id, owner, record_id in guards:
            self.store.guards[(environment, stream_key, external_id)] = ExternalIdGuard(owner, record_id)

    def external_id_ranges(self, environment: str, stream_key: str) -> list[tuple[str, str]] | None:
        ranges = self.store.external_id_ranges.get((environment, stream_key))
        return None if ranges is None else list(ranges)

    def track_external_ids(self, environment: str, stream_key: str) -> None:
        self.store.external_id_ranges.setdefault((environment, stream_key), [])

    def put_external_id_ranges(self, environment: str, stream_key: str, ranges: list[tuple[str, str]],
                               previous: list[tuple[str, str]]) -> bool:
        kept = self.store.external_id_ranges.get((environment, stream_key))
        if kept is None:
            return True
        if kept != list(previous):
            return False
        self.store.external_id_ranges[(environment, stream_key)] = list(ranges)
        return True

    def take_writer_lease(self, environment: str, stream_key: str, holder: str, lease: timedelta) -> bool:
        """Free, lapsed, or held by executions of the same job (held together then)."""
        now, owner = utc_now(), lease_owner(holder)
        current = self.store.leases.get((environment, stream_key))
        if current is not None and current.expires_at >= now:
            if current.owner != owner:
                return False
            current.holders.add(holder)
            current.expires_at = now + lease
            return True
        self.store.leases[(environment, stream_key)] = _Lease(owner, {holder}, now + lease)
        return True

    def renew_writer_lease(self, environment: str, stream_key: str, holder: str, lease: timedelta) -> bool:
        current = self.store.leases.get((environment, stream_key))
        if current is None or holder not in current.holders:
            return False
        current.expires_at = utc_now() + lease
        return True

    def release_writer_lease(self, environment: str, stream_key: str, holder: str) -> None:
        """The last holder's release gives the lease back."""
        current = self.store.leases.get((environment, stream_key))
        if current is not None and holder in current.holders:
            current.holders.discard(holder)
            if not current.holders:
                del self.store.leases[(environment, stream_key)]

    # Reading -------------------------------------------------------------------------------

    def get(self, environment: str, record_id: int) -> Record:
        row = self.store.row(environment, record_id)
        if row is None or row.deleting:
            raise NotFound(f"record {record_id} not found")
        return row.record

    def find_many(self, environment: str, record_ids: Iterable[int],
                  including_deleting: bool = False) -> dict[int, Record]:
        rows = (self.store.row(environment, i) for i in record_ids)
        return {r.record.id: r.record for r in rows if r is not None and (including_deleting or not r.deleting)}

    def unreconciled_ids(self, environment: str, stream_key: str | None,
                         below: int | None) -> Iterator[tuple[int, str]]:
        """The open records no reconciliation matched (not being deleted), newest first, with their stream."""
        streams = {key for env, key in self.data_streams.rows if env == environment}
        listed = sorted(((r.record.id, r.record.data_stream_key) for r in self.store.rows.values()
                         if r.record.environment == environment and r.record.data_stream_key in streams
                         and (stream_key is None or r.record.data_stream_key == stream_key)
                         and r.open and not r.matched_in and not r.deleting
                         and (below is None or r.record.id < below)), reverse=True)
        return iter(listed)

    def list_page(self, environment: str, query: RecordQuery, limit: int,
                  cursor: str | None) -> tuple[list[Record], str | None]:
        """Newest first, from the listing the adapter picks: the import's block of ids, else the
        stream's records, else an external id's guards, else the status (unreconciled: the open
        records of every stream that no reconciliation matched)."""
        if query.file_import_id is not None:
            job = self.ingestion_jobs.find(environment, query.file_import_id)
            if job is None or (block := job.record_ids) is None:
                return [], None
            listing = f"records/{environment}/import/{job.id}"
            last = block.stop - 1
            if cursor:
                last = min(last, cursor_id(cursor, listing) - 1)
            return self._page(listing, range(last, block.start - 1, -1), environment, query, limit)
        if query.data_stream_key is not None:
            rows, next_cursor = filtered_query_page(
                f"records/{environment}/stream/{query.data_stream_key}",
                ((r.record.id, r) for r in self.store.of_stream(environment, query.data_stream_key)), limit, cursor,
                lambda r: not r.deleting and query.admits(r.record))
            return [r.record for r in rows], next_cursor
        if query.external_id is not None:
            listing = f"records/{environment}/external_id/{query.external_id}"
            ids = sorted({g.record_id for (env, _, ext), g in self.store.guards.items()
                          if env == environment and ext == query.external_id}, reverse=True)
            if cursor:
                after = cursor_id(cursor, listing)
                ids = [i for i in ids if i < after]
            return self._page(listing, ids, environment, query, limit)
        assert query.status is not None
        listing = f"records/{environment}/status/{query.status.value}"
        if query.status is RecordStatus.UNRECONCILED:
            streams = {key for env, key in self.data_streams.rows if env == environment}
            listed = [r for r in self.store.rows.values() if r.record.environment == environment
                      and r.record.data_stream_key in streams and r.open and not r.matched_in]
        else:
            listed = [r for r in self.store.rows.values() if r.record.environment == environment
                      and r.record.status is query.status]
        ids = sorted((r.record.id for r in listed), reverse=True)
        if cursor:
            after = cursor_id(cursor, listing)
            ids = [i for i in ids if i < after]
        return self._page(listing, ids, environment, query, limit)

    def _page(self, listing: str, ids: Iterable[int], environment: str, query: RecordQuery,
              limit: int) -> tuple[list[Record], str | None]:
        def admitted(record_id: int) -> Record | None:
            row = self.store.row(environment, record_id)
            return row.record if row is not None and not row.deleting and query.admits(row.record) else None
        return page_of_ids(listing, ids, limit, admitted)

    # Deleting ------------------------------------------------------------------------------

    def mark_deleting(self, environment: str, record_id: int, deletable: tuple[RecordStatus, ...],
                      stale_after: timedelta) -> Record | None:
        """Hide the record while its status allows deleting; None when another delete holds a mark
        younger than `stale_after`; NotFound when missing; Conflict for any other status."""
        if not deletable:
            raise ValueError("Bad IN expression: no deletable status")  # the adapter's `#status IN ()`
        now = utc_now()
        row = self.store.row(environment, record_id)
        if row is None:
            raise NotFound(f"record {record_id} not found")
        paid_in = [r for r, shares in row.record.allocations.items() if shares]
        if row.record.status in deletable and not paid_in and (
                row.deleting_at is None or row.deleting_at < iso(now - stale_after)):
            row.deleting, row.deleting_at = True, iso(now)
            return row.record
        if row.deleting:
            return None
        if paid_in:
            raise paid_in_part(record_id, paid_in)
        raise Conflict(f"record {record_id} is {row.record.status.value}; only unreconciled records can be deleted")

    def remove(self, record: Record) -> None:
        """Free the external_id (only if this record holds it), then delete the record."""
        if record.external_id is not None:
            key = (record.environment, record.data_stream_key, record.external_id)
            guard = self.store.guards.get(key)
            if guard is not None and guard.record_id == record.id:
                del self.store.guards[key]
        self.store.rows.pop((record.environment, record.id), None)

    def ids_since_import(self, environment: str, stream_key: str) -> tuple[set[int], set[int]]:
        rows = list(self.store.of_stream(environment, stream_key))
        changed = {row.record.id for row in rows if row.record.status is not RecordStatus.UNRECONCILED
                   or row.matched_in or row.proposed_in or row.match_ids or row.exception_holds or row.deleting
                   or row.record.allocations}
        return {row.record.id for row in rows if row.record.id is not None}, {i for i in changed if i is not None}

    def remove_all_of_stream(self, environment: str, stream_key: str) -> None:
        """Delete the stream's records (those being deleted too) and the guards of their external ids."""
        for row in self.store.of_stream(environment, stream_key):
            del self.store.rows[(environment, row.record.id)]
            if row.record.external_id is not None:
                self.store.guards.pop((environment, stream_key, row.record.external_id), None)

    @staticmethod
    def from_item(item: dict[str, Any]) -> Record:
        """A record item read into a Record: the adapter's own reading of its storage format."""
        return RecordRepository.from_item(item)


def rows_of_stream(store: FakeRecordStore, environment: str, stream_key: str, adopted: bool) -> Iterator[RecordRow]:
    """Where the adapters read a stream's records open in a reconciliation: its open index (gsi5)
    once adopted, all its records (gsi1) before; by id."""
    return (r for r in store.of_stream(environment, stream_key) if not adopted or r.open)
