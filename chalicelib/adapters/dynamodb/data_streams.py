"""Data streams in DynamoDB, with the conditional writes that keep their keys unique, and a
guard per bank account so that one bank_feed stream at most holds it (statements are routed by it)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, NoReturn

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.counters import Counters
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, Page, confirm_delete_mark
from chalicelib.domain.clock import iso, parse_iso, utc_now
from chalicelib.domain.data_streams import KEY_PATTERN, DataStream, StreamType
from chalicelib.domain.errors import Conflict, NotFound, shown
from chalicelib.domain.record_changes import change_blocks

# A bank-account guard its stream does not hold (a crash between the guard's put and the stream's
# write) is taken back after this long; a younger one may belong to a write still in flight.
STALE_GUARD_AGE = timedelta(seconds=60)
# On a stream's item from its creation until a record of it first changes after its import wrote
# it; a stream created before the mark existed never has it. Every release reads it.
AS_IMPORTED = "records_as_imported"
# On a stream's item from its creation when every change of its records is noted as a block
# (`changed_since_import`): written only where no function of a release that changes records
# without noting blocks may still run (settings.note_changed_blocks).
CHANGES_NOTED = "changes_noted"
# On a stream made before CHANGES_NOTED while the changes of its past are found (the time it was
# set): every change from then on notes its block as for a noted stream, but no run trusts the
# blocks until CHANGES_NOTED replaces it (`finish_noting_changes`).
CHANGES_NOTING = "changes_noting"


class DataStreamRepository:
    def __init__(self, table: DynamoTable, counters: Counters, note_changed_blocks: bool = True) -> None:
        self._table = table
        self._counters = counters
        self._new_marks = {AS_IMPORTED: True, **({CHANGES_NOTED: True} if note_changed_blocks else {})}

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "data_stream")

    def add(self, stream: DataStream) -> None:
        """Reserve a bank_feed's account (guard), then write the stream; a refused stream frees it."""
        self._hold_account(stream)
        if self._table.get(keys.data_stream(stream.environment, stream.key)) is not None:
            self._refuse(stream)  # before the ranges below: a stream made before them must keep none
        # A new stream has no guarded external_id yet: it keeps their ranges from the start, so that
        # its ingestion reads only the guards that may exist (records.py `track_external_ids`). Written
        # before the stream: a job that finds the stream finds them too (one written after them would
        # write guards no range covers, which later jobs would not read). Kept if a stream of the same
        # key left them (deleted, or made at the same moment): they still cover its guards.
        try:
            self._table.put_new({**keys.external_id_ranges(stream.environment, stream.key),
                                 "entity": "external_id_ranges", "ranges": "[]"})
        except ConditionFailed:
            pass
        try:
            self._table.put_new({**self.to_item(stream), **self._new_marks})
        except ConditionFailed:
            self._refuse(stream)

    def _refuse(self, stream: DataStream) -> NoReturn:
        self._free_account(stream.environment, stream.routing_key, stream.id)
        raise Conflict(f"a data stream with key '{stream.key}' already exists") from None

    def _hold_account(self, stream: DataStream) -> None:
        """Put the guard of the stream's account naming it; Conflict naming the stream that holds
        it. The guard names the stream's id, which no other create shares, so a retry of this
        write finds it its own and two racing writes cannot both take it."""
        routing_key = stream.routing_key
        if routing_key is None:
            return
        guard = {**keys.bank_account_guard(stream.environment, routing_key), "entity": "bank_account_guard",
                 "data_stream_key": stream.key, "data_stream_id": stream.id, "created_at": iso(utc_now())}
        for _ in range(2):  # a guard freed between our put and our read: once more
            try:
                self._table.put_new(guard)
                return
            except ConditionFailed:
                pass
            existing = self._table.get(keys.bank_account_guard(stream.environment, routing_key))
            if existing is None:
                continue
            if existing["data_stream_id"] == stream.id:
                return
            if self._held(stream.environment, routing_key, existing) \
                    or utc_now() - parse_iso(existing["created_at"]) < STALE_GUARD_AGE:
                raise Conflict(f"bank account '{shown(stream.bank_account_id or '')}' is already the "
                               f"bank_account_id of data stream '{existing['data_stream_key']}'")
            try:  # abandoned: take it back, unless another write did first
                self._table.put(guard, condition="data_stream_id = :old", values={":old": existing["data_stream_id"]})
                return
            except ConditionFailed:
                continue
        raise Conflict(f"bank account '{shown(stream.bank_account_id or '')}' is being claimed by another "
                       "data stream; retry")

    def _held(self, environment: str, routing_key: str, guard: dict[str, Any]) -> bool:
        """Whether the stream a guard names exists (being deleted too) and holds that account."""
        owner = self.find_including_deleting(environment, guard["data_stream_key"])
        return owner is not None and owner.id == guard["data_stream_id"] and owner.routing_key == routing_key

    def _free_account(self, environment: str, routing_key: str | None, stream_id: int) -> None:
        """Drop the guard of an account, only if it names this stream."""
        if routing_key is None:
            return
        try:
            self._table.delete(keys.bank_account_guard(environment, routing_key),
                               condition="data_stream_id = :id", values={":id": stream_id})
        except ConditionFailed:
            pass

    def changed_since_import(self, environment: str, key: str) -> frozenset[int] | None:
        """The blocks of record ids (domain/record_changes.py) where a record of the stream may no
        longer be as its import wrote it (`note_records_changed` comes first each time): those noted
        where changes are, none while no record ever changed; None when that is not known (a stream
        whose changes are not noted, changed since its creation or created before the marks; one
        being deleted). A run reads the records of every other block from the analytics mirror
        (services/imported_records.py)."""
        item = self._table.get(keys.data_stream(environment, key))  # a consistent read
        if not item or item.get("deleting") or not (item.get(CHANGES_NOTED) or item.get(AS_IMPORTED)):
            return None
        if not item.get(CHANGES_NOTED):
            return frozenset()
        noted = self._table.query_all(keys.BASE_TABLE, item["pk"], sort_prefix=keys.CHANGED_BLOCK_PREFIX,
                                      projection=("sk",), consistent=True)
        return frozenset(int(block["sk"].removeprefix(keys.CHANGED_BLOCK_PREFIX)) for block in noted)

    def note_records_changed(self, environment: str, record_ids: Mapping[str, Iterable[int]]) -> None:
        """Called before records of these streams (ids by stream key) are claimed, deleted or
        written after their import was counted: their blocks are noted where the stream's changes
        are, for good, then the mark of a stream none of whose records changed before goes. What is
        noted already is read first (a read costs less than a write, and nearly every call finds
        its blocks there and the mark gone)."""
        blocks = {k: change_blocks(ids) for k, ids in record_ids.items() if KEY_PATTERN.match(k)}
        wanted = [keys.data_stream(environment, k) for k in blocks]
        wanted += [keys.changed_record_block(environment, k, b) for k, of_stream in blocks.items() for b in of_stream]
        found = {_key_of(i): i for i in self._table.get_many(wanted, projection=("pk", "sk", AS_IMPORTED,
                                                                                 CHANGES_NOTED, CHANGES_NOTING))}
        streams = {k: found.get(_key_of(keys.data_stream(environment, k)), {}) for k in blocks}
        noting = [k for k in sorted(blocks) if streams[k].get(CHANGES_NOTED) or streams[k].get(CHANGES_NOTING)]
        missing = [block for k in noting for b in sorted(blocks[k])
                   if _key_of(block := keys.changed_record_block(environment, k, b)) not in found]
        self._table.batch_write(puts=[{**block, "entity": "changed_record_block"} for block in missing])
        for k, item in sorted(streams.items()):
            if item.get(AS_IMPORTED):
                try:
                    self._table.update(keys.data_stream(environment, k), "REMOVE #mark", names={"#mark": AS_IMPORTED},
                                       condition="attribute_exists(pk)")
                except ConditionFailed:
                    pass  # the stream is gone meanwhile

    def begin_noting_changes(self, environment: str, key: str, at: datetime) -> datetime | None:
        """Mark a stream whose changes are not noted (one made before the marks) so that every change
        from now on is; when the noting began (`at`, or an earlier mark's time), or None when the
        stream's changes are noted already, or it is gone or being deleted. Writers read the mark
        once a call: only the changes of the calls that read the stream before it are left to find."""
        try:
            item = self._table.update(
                keys.data_stream(environment, key), "SET #noting = if_not_exists(#noting, :at)",
                condition="attribute_exists(pk) AND attribute_not_exists(#noted) AND attribute_not_exists(deleting)",
                names={"#noting": CHANGES_NOTING, "#noted": CHANGES_NOTED}, values={":at": iso(at)},
                return_new=True)
        except ConditionFailed:
            return None
        return parse_iso(item[CHANGES_NOTING])

    def finish_noting_changes(self, environment: str, key: str, began_at: datetime, blocks: Iterable[int]) -> bool:
        """Note the blocks where the stream's records changed before its noting began (found once
        every change that read the stream before the mark has ended), then trust them: the stream
        is read as one marked at its creation. False when the mark is not the one `began_at` names
        (the stream was deleted and made again, say) or the stream is being deleted."""
        item = self._table.get(keys.data_stream(environment, key))
        if not item or item.get(CHANGES_NOTING) != iso(began_at) or item.get("deleting"):
            return False  # (checked first too: no block is put beside a stream made again since)
        self._table.batch_write(puts=[{**keys.changed_record_block(environment, key, block),
                                       "entity": "changed_record_block"} for block in sorted(set(blocks))])
        try:
            self._table.update(keys.data_stream(environment, key), "SET #noted = :t REMOVE #noting",
                               condition="#noting = :began AND attribute_not_exists(deleting)",
                               names={"#noting": CHANGES_NOTING, "#noted": CHANGES_NOTED},
                               values={":t": True, ":began": iso(began_at)})
        except ConditionFailed:
            return False
        return True

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

    def find_by_id(self, environment: str, stream_id: int) -> DataStream | None:
        """The visible stream of that id (through the list's index, which is keyed by id)."""
        sort = keys.data_stream_index(environment, stream_id)[keys.GSI1.sort_key]
        items = list(self._table.query_between(keys.GSI1, keys.data_streams_index_pk(environment), sort, sort))
        streams = [s for s in map(self._from_item, items) if not s.deleting]
        return streams[0] if streams else None

    def get_many(self, environment: str, stream_keys: Iterable[str]) -> dict[str, DataStream]:
        """The visible streams among `stream_keys`, by key, read in batches; keys that cannot exist are skipped."""
        wanted = [k for k in dict.fromkeys(stream_keys) if KEY_PATTERN.match(k)]
        streams = [self._from_item(i) for i in self._table.get_many(keys.data_stream(environment, k) for k in wanted)]
        return {s.key: s for s in streams if not s.deleting}

    def list_page(self, environment: str, limit: int, cursor: str | None) -> tuple[list[DataStream], str | None]:
        page: Page = self._table.query_page(keys.GSI1, keys.data_streams_index_pk(environment),
            limit=limit, cursor=cursor,
        )
        return [self._from_item(i) for i in page.items], page.cursor

    def bank_feeds(self, environment: str) -> list[DataStream]:
        """Every bank_feed stream of the environment (what a statement's accounts are routed to)."""
        items = self._table.query_all(keys.GSI1, keys.data_streams_index_pk(environment))
        streams = [self._from_item(i) for i in items]
        return [s for s in streams if s.type is StreamType.BANK_FEED and not s.deleting]

    def save(self, stream: DataStream, previous: DataStream | None = None) -> None:
        """Write a changed stream; `stream.version` must be one past the stored version.

        Only the editable fields are written: counters on the item belong to other writers. A
        bank_feed's new account (`previous` is the stream as read) is held before the write and
        the old one freed after it, so the stream holds one of them at every moment.
        """
        moved = previous is not None and stream.routing_key != previous.routing_key
        if moved:
            self._hold_account(stream)
        try:
            self._table.update(
                keys.data_stream(stream.environment, stream.key),
                "SET #name = :name, description = :description, bank_account_id = :account, #v = :version",
                condition="attribute_exists(pk) AND #v = :expected AND attribute_not_exists(deleting)",
                names={"#v": "version", "#name": "name"},
                values={":name": stream.name, ":description": stream.description,
                        ":account": stream.bank_account_id, ":version": stream.version,
                        ":expected": stream.version - 1},
                keep_nulls=True,
            )
        except ConditionFailed:
            if moved:
                self._free_account(stream.environment, stream.routing_key, stream.id)
            raise Conflict(f"data stream '{stream.key}' changed or is being deleted; retry") from None
        if moved and previous is not None:
            self._free_account(stream.environment, previous.routing_key, stream.id)

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
                               f"SET recount_requested_at = :at, {keys.GSI2.assignment(':recount')}",
                               condition="attribute_exists(pk)",
                               values={":at": iso(requested_at),
                                       **keys.GSI2.assigned_values(keys.recount_index(environment, key), ":recount")})
        except ConditionFailed:
            pass  # the stream is gone: nothing to count

    def clear_recount_request(self, environment: str, key: str, counted_at: datetime) -> None:
        """Drop the request a recount begun at `counted_at` answered; a later request stays."""
        try:
            self._table.update(keys.data_stream(environment, key),
                               f"REMOVE recount_requested_at, {keys.GSI2.attributes}",
                               condition="recount_requested_at <= :at", values={":at": iso(counted_at)})
        except ConditionFailed:
            pass

    def recount_requests(self) -> list[tuple[str, str]]:
        """(environment, stream key) of every stream waiting for a recount, of every environment."""
        items = self._table.index_items(keys.GSI2, keys.RECOUNTS_PK)
        return [(i["environment"], i["key"]) for i in items]

    def mark_deleting(self, environment: str, key: str) -> None:
        try:
            self._table.update(keys.data_stream(environment, key), "SET deleting = if_not_exists(deleting, :t)",
                               condition="attribute_exists(pk)", values={":t": True})
        except ConditionFailed:
            raise NotFound(f"data stream '{key}' not found") from None

    def confirm_deleting(self, environment: str, key: str) -> None:
        """A delete that found no story sharing it goes on: its mark can no longer be taken back."""
        confirm_delete_mark(self._table, keys.data_stream(environment, key))

    def unmark_deleting(self, environment: str, key: str) -> bool:
        """Undo mark_deleting (a delete refused after the mark: a story shares the stream). False
        when another delete confirmed the mark (it is going) or finished."""
        try:
            self._table.update(keys.data_stream(environment, key), "REMOVE deleting",
                               condition="deleting = :t", values={":t": True})
        except ConditionFailed:
            return False
        return True

    def remove(self, environment: str, key: str) -> None:
        """The stream's account first (a retry finds the stream and frees nothing twice), then the stream."""
        stream = self.find_including_deleting(environment, key)
        if stream is not None:
            self._free_account(environment, stream.routing_key, stream.id)
        noted = self._table.query_all(keys.BASE_TABLE, keys.data_stream(environment, key)["pk"],
                                      sort_prefix=keys.CHANGED_BLOCK_PREFIX, projection=("pk", "sk"))
        self._table.batch_write(deletes=[{"pk": block["pk"], "sk": block["sk"]} for block in noted])
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


def _key_of(item_key: dict[str, str]) -> tuple[str, str]:
    return item_key["pk"], item_key["sk"]
