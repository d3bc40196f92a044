"""Records in DynamoDB: batch writes, the external_id uniqueness guard, the listings by index."""
from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.allocations import PAID_IN, shares_of
from chalicelib.adapters.dynamodb.table import (
    FILTERED_READ_STEP,
    MAX_READS_PER_PAGE,
    PARTITION_THREADS,
    ConditionalPut,
    ConditionFailed,
    DynamoTable,
    Filter,
    Page,
    decode_cursor,
    deserialize,
    encode_key,
    serialize,
    started,
    status_in,
)
from chalicelib.domain.allocation import paid_in_part
from chalicelib.domain.clock import iso, parse_iso, utc_now
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.records import Direction, ExternalIdClaim, Record, RecordQuery, RecordStatus, lease_owner

# What the open-records index (gsi5, infra/template.yaml) projects besides the keys: every
# attribute that a run's load, the exception refresh, investigations and the claims read from an
# open record (`matched_in` stands for the `match_<id>` attributes, `exception_holds` for the
# `exception_<id>` ones: an index cannot project attributes whose names vary).
OPEN_RECORD_ATTRIBUTES = ("id", "data_stream_key", "date", "amount", "direction", "currency", "decimal_places",
                          "description", "external_id", "metadata", "file_import_id", "matched_in",
                          keys.EXCEPTION_HOLDS, "deleting")

# What an import writes on a record item (`to_item` of an unreconciled record: listed in its stream and
# as open): an attribute beyond these came with a change since (a claim, an allocation, a hold, a
# delete's mark).
IMPORTED_ATTRIBUTES = frozenset({
    "pk", "sk", "gsi1pk", "gsi1sk", "gsi5pk", "gsi5sk", "entity", "environment", "id", "data_stream_key",
    "data_stream_id", "date", "amount", "direction", "currency", "decimal_places", "description", "external_id",
    "metadata", "status", "file_import_id", "created_at"})
# Keys a partition's Query reads at a time for `unreconciled_ids` (DynamoDB stops a page at 1 MB of
# index entries read, about 2,500 of gsi5's, whatever the limit).
UNRECONCILED_PAGE = 5000
# Records a stream's delete removes per BatchWriteItem stream (with their guards).
DELETE_BATCH = 500
# BatchWriteItem requests an ingestion chunk's records (and guards) go out in side by side: all of a
# bulk chunk's 10 at once (4 at a time measured 0.37 s a chunk of 250 on the local stack, 10 0.25 s).
WRITE_THREADS = 10
# A record item at most this large goes in a transaction of conditional puts: 100 of them stay
# inside DynamoDB's 4 MB a transaction (a record's metadata alone may be 64 KB).
TRANSACTION_ITEM_BYTES = 32 * 1024


class RecordRepository:
    def __init__(self, table: DynamoTable, in_transactions: bool = True) -> None:
        self._table, self.in_transactions = table, in_transactions

    # Writing -------------------------------------------------------------------------------

    def put_many(self, records: Iterable[Record]) -> list[Record]:
        """Write records with BatchWriteItem (a record's id fixes its item), each batch sent once:
        what DynamoDB leaves unprocessed (throttled) goes again only where none is (`put_absent`),
        since by then another execution of the chunk may have written it, and a run claimed it.
        The records left (found there)."""
        records = list(records)
        unprocessed = {(item["environment"], item["id"])
                       for item in self._table.batch_put_once(map(self.to_item, records), threads=WRITE_THREADS)}
        return self.put_absent([record for record in records if _key(record) in unprocessed]) if unprocessed else []

    def put_absent(self, records: Sequence[Record]) -> list[Record]:
        """Write each record whose item is not in the table, leaving an item that is there as it is
        (a run may have claimed it); the records left. For a chunk another execution may have
        written. Conditional puts in transactions of 100 where `in_transactions` (a transaction
        holding a record that is there is sent again without it, `write_whole`), then one by one
        (WRITE_THREADS at a time) those a transaction did not write or that are too large for one
        (DynamoDB takes 4 MB a transaction): on the local stack a put of its own costs several
        times an item of a batch (bench/RESULTS.md, issue 30), and on AWS a transaction twice the
        write units."""
        pending = list(records)
        items = {_key(record): self.to_item(record) for record in pending}  # built once, whichever way it goes
        if self.in_transactions and (small := [r for r in pending
                                               if _json_bytes(items[_key(r)]) <= TRANSACTION_ITEM_BYTES]):
            together = {_key(r) for r in self._table.write_whole(
                small, lambda r: [ConditionalPut(items[_key(r)], "attribute_not_exists(pk)")], threads=WRITE_THREADS)}
            pending = [record for record in pending if _key(record) not in together]

        def put(record: Record) -> bool:
            try:
                self._table.put_new(items[_key(record)])
                return True
            except ConditionFailed:
                return False

        with ThreadPoolExecutor(WRITE_THREADS) as pool:
            written = list(pool.map(put, pending))
        return [record for record, put_now in zip(pending, written) if not put_now]

    def claim_external_id(self, environment: str, stream_key: str, external_id: str, owner: str,
                          record_id: int) -> ExternalIdClaim:
        """Reserve an external_id in a stream for `owner` (a job item). The owner may claim again
        (a retried delivery); anyone else finds it taken and learns the existing record id."""
        guard = {**keys.external_id_guard(environment, stream_key, external_id), "entity": "external_id_guard",
                 "owner": owner, "record_id": record_id}
        try:
            self._table.put(guard, condition="attribute_not_exists(pk) OR #owner = :owner",
                            names={"#owner": "owner"}, values={":owner": owner})
            return ExternalIdClaim(True, record_id)
        except ConditionFailed:
            existing = self._table.get(keys.external_id_guard(environment, stream_key, external_id))
            return ExternalIdClaim(False, existing["record_id"] if existing else None)

    def release_external_id(self, environment: str, stream_key: str, external_id: str, owner: str) -> bool:
        """Drop the claim of an external_id only if `owner` holds it (a job item whose record was
        never written); a claim anyone else holds stays. Whether it was dropped."""
        try:
            self._table.delete(keys.external_id_guard(environment, stream_key, external_id),
                               condition="#owner = :owner", names={"#owner": "owner"}, values={":owner": owner})
            return True
        except ConditionFailed:  # someone else's, or none
            return False

    def external_id_claims(self, environment: str,
                           wanted: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, int]]:
        """Who holds each (stream key, external_id) of `wanted` that someone claimed: its owner and
        record id (BatchGetItem, consistent reads, the requests side by side)."""
        guards = self._table.get_many((keys.external_id_guard(environment, s, e) for s, e in wanted),
                                      projection=("pk", "sk", "owner", "record_id"), threads=WRITE_THREADS)
        prefix = len(keys.external_id_guards_pk(environment, ""))
        return {(g["sk"].removeprefix(keys.EXTERNAL_ID_GUARD_PREFIX), g["pk"][prefix:]): (g["owner"], g["record_id"])
                for g in guards}

    def put_external_id_guards(self, environment: str, guards: Iterable[tuple[str, str, str, int]]) -> None:
        """Claim (stream key, external_id, owner, record id) with BatchWriteItem, unconditionally:
        only the holder of each stream's writer lease may, after reading the claims under it."""
        self._table.batch_write(puts=[{**keys.external_id_guard(environment, stream_key, external_id),
                                       "entity": "external_id_guard", "owner": owner, "record_id": record_id}
                                      for stream_key, external_id, owner, record_id in guards],
                                threads=WRITE_THREADS)

    def external_id_ranges(self, environment: str, stream_key: str) -> list[tuple[str, str]] | None:
        """The ranges a stream's guarded external_ids lie in (consistent read), or None if the
        stream keeps none (created before them): any external_id may be claimed then."""
        item = self._table.get(keys.external_id_ranges(environment, stream_key))
        return None if item is None else [(low, high) for low, high in json.loads(item["ranges"])]

    def track_external_ids(self, environment: str, stream_key: str) -> None:
        """Start keeping a new stream's ranges (none yet: it has no guard). Kept if they exist
        already (a stream of the same key deleted before: its ranges still cover what it left)."""
        try:
            self._table.put_new({**keys.external_id_ranges(environment, stream_key), "entity": "external_id_ranges",
                                 "ranges": "[]"})
        except ConditionFailed:
            pass

    def put_external_id_ranges(self, environment: str, stream_key: str, ranges: list[tuple[str, str]],
                               previous: list[tuple[str, str]]) -> bool:
        """Widened ranges of a stream that keeps them, written by the holder of its writer lease before
        the guards they cover, only over the `previous` ranges it read: False when they changed
        meanwhile (another writer, whose widening must not be lost). A stream that keeps none: nothing
        is kept, and any external_id may be claimed there (True)."""
        try:
            self._table.put({**keys.external_id_ranges(environment, stream_key), "entity": "external_id_ranges",
                             "ranges": _ranges_text(ranges)},
                            condition="#ranges = :previous", names={"#ranges": "ranges"},
                            values={":previous": _ranges_text(previous)})
            return True
        except ConditionFailed:
            return self.external_id_ranges(environment, stream_key) is None

    def take_writer_lease(self, environment: str, stream_key: str, holder: str, lease: timedelta) -> bool:
        """Hold the stream's writer lease for `lease` from now, if it is free, lapsed, or held by
        executions of the same job (`holder` is `<job>/<execution>`, see `lease_owner`): a delivery
        of a job again after a crash need not wait for the lapse. The lease records each execution
        holding it and goes back once the last one gives it back, so no other job writes guards
        while any of them may. Read first: a lease another job holds is waited for with reads, not
        failed writes (a failed conditional write costs a write unit)."""
        now, key, owner = utc_now(), keys.stream_writer_lease(environment, stream_key), lease_owner(holder)
        current = self._table.get(key) or {}
        live = current.get("expires_at", "") >= iso(now)
        if live and current.get("owner") != owner:
            return False
        try:
            if live:  # another execution of the job holds it: held together
                self._table.update(key, "SET expires_at = :until ADD holders :me",
                                   condition="#owner = :owner AND expires_at >= :now", names={"#owner": "owner"},
                                   values={":until": iso(now + lease), ":me": {holder}, ":owner": owner,
                                           ":now": iso(now)})
            else:  # whoever held it before and did not give it back holds it no more
                self._table.put({**key, "entity": "stream_writer_lease", "owner": owner, "holders": {holder},
                                 "expires_at": iso(now + lease)},
                                condition="attribute_not_exists(pk) OR expires_at < :now", values={":now": iso(now)})
            return True
        except ConditionFailed:
            return False

    def renew_writer_lease(self, environment: str, stream_key: str, holder: str, lease: timedelta) -> bool:
        """Hold the lease `lease` longer, only if `holder` still does (no one took it when it lapsed)."""
        try:
            self._table.update(keys.stream_writer_lease(environment, stream_key), "SET expires_at = :until",
                               condition="contains(holders, :me)",
                               values={":until": iso(utc_now() + lease), ":me": holder})
            return True
        except ConditionFailed:
            return False

    def release_writer_lease(self, environment: str, stream_key: str, holder: str) -> None:
        """`holder` holds the lease no more; the last holder's release gives it back."""
        key = keys.stream_writer_lease(environment, stream_key)
        try:
            left = self._table.update(key, "DELETE holders :us", condition="contains(holders, :me)",
                                      values={":us": {holder}, ":me": holder}, return_new=True)
        except ConditionFailed:
            return  # not its holder (any more)
        if not left.get("holders"):  # DynamoDB drops a set left empty
            try:
                self._table.delete(key, condition="attribute_not_exists(holders)")
            except ConditionFailed:
                pass  # another execution of the job took it meanwhile

    # Reading -------------------------------------------------------------------------------

    def get(self, environment: str, record_id: int) -> Record:
        item = self._table.get(keys.record(environment, record_id))
        if item is None or item.get("deleting"):
            raise NotFound(f"record {record_id} not found")
        return self.from_item(item)

    def find_many(self, environment: str, record_ids: Iterable[int],
                  including_deleting: bool = False) -> dict[int, Record]:
        """The records of these ids that exist (and are not being deleted, unless
        `including_deleting`: an ingestion job owns those it wrote until they are gone), by id."""
        items = self._table.get_many(keys.record(environment, i) for i in record_ids)
        return {i["id"]: self.from_item(i) for i in items if including_deleting or not i.get("deleting")}

    def list_page(self, environment: str, query: RecordQuery, limit: int,
                  cursor: str | None) -> tuple[list[Record], str | None]:
        """Newest first, from the most selective listing the filters allow; the other filters
        narrow it. Only the stream's listing is an index holding whole items: the others list
        ids (an import's block, an external id's guards, the keys-only status index) and read
        the page's records by BatchGetItem."""
        if query.file_import_id is not None:
            page = self._page_of_job(environment, query.file_import_id, query, limit, cursor)
        elif query.data_stream_key is not None:
            page = self._page_of_stream(environment, query.data_stream_key, query, limit, cursor)
        elif query.external_id is not None:
            page = self._page_of_external_id(environment, query.external_id, query, limit, cursor)
        elif query.status is RecordStatus.UNRECONCILED:
            page = self._page_of_unreconciled(environment, query, limit, cursor)
        else:
            assert query.status is not None
            page = self._page_of_status(environment, query, limit, cursor)
        return [self.from_item(i) for i in page.items], page.cursor

    def _page_of_job(self, environment: str, job_id: int, query: RecordQuery, limit: int,
                     cursor: str | None) -> Page:
        """An ingestion job's records are the existing records of its block of ids."""
        from chalicelib.adapters.dynamodb.jobs import IngestionJobRepository

        job = IngestionJobRepository(self._table).find(environment, job_id)
        if job is None or (block := job.record_ids) is None:
            return Page(items=[], cursor=None)
        listing = keys.ingestion_job(environment, job.id)["pk"]
        last = block.stop - 1
        if cursor:
            last = min(last, _cursor_id(cursor, listing) - 1)
        ids = range(last, block.start - 1, -1)
        return self._table.page_of_keys(((keys.record(environment, i), _id_cursor(listing, i)) for i in ids),
                                        limit, self._admits(query))

    def _page_of_stream(self, environment: str, stream_key: str, query: RecordQuery, limit: int,
                        cursor: str | None) -> Page:
        """A stream's records, newest first: its gsi1 shards merged by id (each read only as far as
        the page needs), the other filters applied to the items read. A page stops after reading
        as much as MAX_READS_PER_PAGE filtered reads would, with a cursor from where it stopped."""
        listing = keys.records_of_stream_pk(environment, stream_key)
        below = keys.record_sort_key(_cursor_id(cursor, listing)) if cursor else None
        partitions = keys.records_of_stream_shards(environment, stream_key)
        items = self._table.merged_below(keys.GSI1, partitions,
                                         below=below, page_size=-(-(limit + 1) // len(partitions)) + 1)
        admits = self._admits(query)
        found: list[dict[str, Any]] = []
        examined = None
        for examined in itertools.islice(items, max(limit + 1, FILTERED_READ_STEP) * MAX_READS_PER_PAGE):
            if admits(examined):
                found.append(examined)
                if len(found) > limit:
                    return Page(items=found[:limit], cursor=_id_cursor(listing, found[limit - 1]["id"]))
        else:
            if examined is not None and next(items, None) is not None:  # read enough: resume from here
                return Page(items=found, cursor=_id_cursor(listing, examined["id"]))
        return Page(items=found, cursor=None)

    def _page_of_external_id(self, environment: str, external_id: str, query: RecordQuery, limit: int,
                             cursor: str | None) -> Page:
        """The records an external id names: one guard per stream holding it, each naming its record."""
        listing = keys.external_id_guards_pk(environment, external_id)
        guards = self._table.query_all(keys.BASE_TABLE, listing, sort_prefix=keys.EXTERNAL_ID_GUARD_PREFIX,
                                       projection="record_id")
        ids = sorted({g["record_id"] for g in guards}, reverse=True)
        if cursor:
            after = _cursor_id(cursor, listing)
            ids = [i for i in ids if i < after]
        return self._table.page_of_keys(((keys.record(environment, i), _id_cursor(listing, i)) for i in ids),
                                        limit, self._admits(query))

    def _page_of_unreconciled(self, environment: str, query: RecordQuery, limit: int, cursor: str | None) -> Page:
        """Unreconciled records sit in no status index (an entry there would cost every new record
        a write unit): they are the records of the streams' open partitions (gsi5: every shard, and
        the unsharded partition of records written before the shards) that no reconciliation
        matched, merged newest first; each partition's first page is read at once."""
        listing = keys.records_with_status_pk(environment, RecordStatus.UNRECONCILED.value)
        below = keys.record_sort_key(_cursor_id(cursor, listing)) if cursor else None
        streams = self._table.query_all(keys.GSI1, keys.data_streams_index_pk(environment),
                                        projection="key")
        unmatched = Filter("attribute_not_exists(#fm)", {"#fm": "matched_in"}, {})
        partitions = started([self._table.sort_values_below(keys.GSI5, partition,
                                                            below=below, page_size=limit + 1, filter=unmatched)
                              for s in streams
                              for partition in keys.open_records_of_stream_partitions(environment, s["key"])])
        ids = (int(sort) for sort in heapq.merge(*partitions, reverse=True))
        return self._table.page_of_keys(((keys.record(environment, i), _id_cursor(listing, i)) for i in ids),
                                        limit, self._admits(query))

    def unreconciled_ids(self, environment: str, stream_key: str | None,
                         below: int | None) -> Iterator[tuple[int, str]]:
        """The ids of the unreconciled records of one stream (None: of every stream), newest first,
        each with its stream, strictly below `below` when given: what `_page_of_unreconciled` lists,
        keys alone (a tenth of the whole items' reading) for readers of millions that take the
        records' other columns from the analytics mirror. Each partition is read UNRECONCILED_PAGE
        keys at a time, its next page asked for as soon as one arrives."""
        streams = [stream_key] if stream_key is not None else [
            s["key"] for s in self._table.query_all(keys.GSI1, keys.data_streams_index_pk(environment),
                                                    projection="key")]
        open_here = Filter("attribute_not_exists(#fm) AND attribute_not_exists(#dl)",
                           {"#fm": "matched_in", "#dl": "deleting"}, {})
        bound = keys.record_sort_key(below) if below is not None else None

        def tagged(values: Iterator[str], stream: str) -> Iterator[tuple[int, str]]:
            return ((int(sort), stream) for sort in values)

        with ThreadPoolExecutor(PARTITION_THREADS) as pool:
            partitions = [tagged(self._table.sort_values_read_ahead(keys.GSI5, partition, below=bound,
                                                                    page_size=UNRECONCILED_PAGE, filter=open_here,
                                                                    pool=pool), stream)
                          for stream in streams
                          for partition in keys.open_records_of_stream_partitions(environment, stream)]
            yield from heapq.merge(*partitions, reverse=True)

    def _page_of_status(self, environment: str, query: RecordQuery, limit: int, cursor: str | None) -> Page:
        """Matched records of a status: the shards of its list (keys only) merged newest first, the
        unsharded partition too (records claimed before the shards sit there until they move)."""
        assert query.status is not None
        listing = keys.records_with_status_pk(environment, query.status.value)
        below = keys.record_sort_key(_cursor_id(cursor, listing)) if cursor else None
        partitions = keys.records_with_status_partitions(environment, query.status.value)
        entries = self._table.merged_below(keys.GSI4, partitions, below=below,
                                           page_size=limit + 1, projection=(keys.GSI4.sort_key,))
        ids = (int(entry[keys.GSI4.sort_key]) for entry in entries)
        return self._table.page_of_keys(((keys.record(environment, i), _id_cursor(listing, i)) for i in ids),
                                        limit, self._admits(query))

    def _admits(self, query: RecordQuery):
        return lambda item: not item.get("deleting") and query.admits(self.from_item(item))

    # Deleting ------------------------------------------------------------------------------

    def mark_deleting(self, environment: str, record_id: int, deletable: tuple[RecordStatus, ...],
                      stale_after: timedelta) -> Record | None:
        """First step of a delete: hide the record, only while its status allows deleting.

        Only one delete runs at a time: a second one finds the mark and gets None, unless the
        mark is older than `stale_after` (its request died), and then it takes over.
        """
        now = utc_now()
        allowed, statuses = status_in(deletable)
        try:
            item = self._table.update(
                keys.record(environment, record_id), "SET deleting = :t, deleting_at = :now",
                condition=f"attribute_exists(pk) AND {allowed} AND attribute_not_exists({PAID_IN}) "
                          "AND (attribute_not_exists(deleting_at) OR deleting_at < :stale)",
                names={"#status": "status"},
                values={":t": True, ":now": iso(now), ":stale": iso(now - stale_after), **statuses},
                return_new=True,
            )
        except ConditionFailed:
            current = self._table.get(keys.record(environment, record_id))
            if current is None:
                raise NotFound(f"record {record_id} not found") from None
            if current.get("deleting"):
                return None  # another request is deleting it right now
            if paid_in := current.get(PAID_IN):
                raise paid_in_part(record_id, map(int, paid_in)) from None
            raise Conflict(f"record {record_id} is {current['status']}; only unreconciled records can be "
                           "deleted") from None
        return self.from_item(item)

    def remove(self, record: Record) -> None:
        """Free the external_id (only if this record holds it), then delete the record."""
        if record.external_id is not None:
            try:
                self._table.delete(keys.external_id_guard(record.environment, record.data_stream_key,
                                                          record.external_id),
                                   condition="record_id = :id", values={":id": record.id})
            except ConditionFailed:
                pass
        self._table.delete(keys.record(record.environment, record.id))

    def remove_all_of_stream(self, environment: str, stream_key: str) -> None:
        """Delete a stream's records and their guards, DELETE_BATCH records at a time (a stream
        being deleted: a retry finds what is left)."""
        batch: list[dict[str, Any]] = []
        for item in self._table.query_partitions(keys.GSI1, keys.records_of_stream_shards(environment, stream_key)):
            batch.append(item)
            if len(batch) == DELETE_BATCH:
                self._remove_items(batch)
                batch = []
        self._remove_items(batch)

    def ids_since_import(self, environment: str, stream_key: str) -> tuple[set[int], set[int]]:
        """The ids of every record of the stream, and of those no longer as their import wrote them:
        reconciled, in a match, holding an allocation or a hold, being deleted: whatever carries an
        attribute an import does not write (services/changed_blocks.py)."""
        every, changed = set(), set()
        for item in self._table.query_partitions(keys.GSI1, keys.records_of_stream_shards(environment, stream_key)):
            every.add(item["id"])
            if item.get("status") != RecordStatus.UNRECONCILED.value or not item.keys() <= IMPORTED_ATTRIBUTES:
                changed.add(item["id"])
        return every, changed

    def _remove_items(self, items: list[dict[str, Any]]) -> None:
        deletes = [{"pk": i["pk"], "sk": i["sk"]} for i in items]
        deletes += [keys.external_id_guard(i["environment"], i["data_stream_key"], i["external_id"])
                    for i in items if i.get("external_id") is not None]
        self._table.batch_write(deletes=deletes)

    # Items ---------------------------------------------------------------------------------

    @staticmethod
    def to_item(record: Record) -> dict[str, Any]:
        return {
            **keys.record(record.environment, record.id),
            **keys.record_indexes(record.environment, record.id, record.data_stream_key, record.status.value),
            "entity": "record", "environment": record.environment, "id": record.id,
            "data_stream_key": record.data_stream_key, "data_stream_id": record.data_stream_id,
            "date": record.date, "amount": record.amount, "direction": record.direction.value,
            "currency": record.currency, "decimal_places": record.decimal_places,
            "description": record.description, "external_id": record.external_id,
            # JSON text: metadata may hold floats, which DynamoDB's number type would not round-trip.
            "metadata": json.dumps(record.metadata, separators=(",", ":")) if record.metadata else None,
            "status": record.status.value, "file_import_id": record.file_import_id,
            "created_at": _iso(record.created_at),
        }

    @staticmethod
    def from_item(item: dict[str, Any]) -> Record:
        return Record(
            environment=item["environment"], id=item["id"], data_stream_key=item["data_stream_key"],
            data_stream_id=item["data_stream_id"], date=item["date"], amount=item["amount"],
            direction=Direction(item["direction"]), currency=item["currency"],
            decimal_places=item["decimal_places"], status=RecordStatus(item["status"]),
            created_at=parse_iso(item["created_at"]), description=item.get("description"),
            external_id=item.get("external_id"),
            metadata=json.loads(item["metadata"]) if item.get("metadata") else {},
            file_import_id=item.get("file_import_id"), allocations=shares_of(item),
        )


def _key(record: Record) -> tuple[str, int | None]:
    return record.environment, record.id


def _json_bytes(item: dict[str, Any]) -> int:
    """About the size of an item (its JSON): a record's metadata may make one 64 KB."""
    return len(json.dumps(item, default=str).encode())


def _ranges_text(ranges: list[tuple[str, str]]) -> str:
    """A stream's external_id ranges as its item keeps them (one text for one list: a write compares it)."""
    return json.dumps(ranges, separators=(",", ":"))


@lru_cache(maxsize=16)
def _iso(moment: datetime) -> str:
    """iso(), once per moment: a chunk's records are all created at the same one."""
    return iso(moment)


def _id_cursor(listing: str, record_id: int) -> str:
    return encode_key(serialize({"listing": listing, "after": str(record_id)}))


def _cursor_id(cursor: str, listing: str) -> int:
    """The record id a cursor of an id listing resumes after; refused unless it is this listing's."""
    after = deserialize(decode_cursor(cursor, "listing", listing, ("listing", "after")))["after"]
    if not (after.isascii() and after.isdigit()):
        raise BadRequest("cursor does not belong to this list; pass the next_cursor of a previous page unchanged")
    return int(after)
