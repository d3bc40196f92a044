"""Matches and the record side of matching in DynamoDB.

A match is written without transactions, in an order a retry can finish and a failure can undo:
1. its member items (one per record, in the match's partition), by BatchWriteItem;
2. a claim on each record: a conditional update that names the match in the record's
   `match_<reconciliation>` attribute, adds the reconciliation to `matched_in`, and moves the
   record's status (and its open-records index entry) accordingly; a claim fails when another
   match of that reconciliation holds the record, or the record is being deleted. A proposed
   match's claim also adds the reconciliation to `proposed_in`: the record is claimed (no run
   matches it again) but `pending_confirmation`, until a confirm confirms it or a reject releases it;
3. the match item, the commit marker: until it exists nothing lists or shows the match.
A failed claim releases the claims this match made and deletes its members.

A run's chunk writes fewer items (its matches are mostly pairs, and a member item each was two of the
five items a pair cost): before step 1, the chunk's **journal** keeps the members of every match of at
most INLINE_MEMBERS records, a few items for the whole chunk; step 1 writes member items only for the
larger matches, and step 3's match item carries the small one's members itself. An undo finds every
claim of an uncommitted match in its member items or in the journal; once the chunk is written (each
match committed, or released), its journal goes.
"""
from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.allocations import (
    allocated_attribute,
    claim_share,
    partly_paid,
    release_share,
    share_attribute,
)
from chalicelib.adapters.dynamodb.event_ledger import owes, owing
from chalicelib.adapters.dynamodb.record_columns import page_columns, record_attributes
from chalicelib.adapters.dynamodb.records import OPEN_RECORD_ATTRIBUTES, RecordRepository
from chalicelib.adapters.dynamodb.table import (
    PARTITION_THREADS,
    TRANSACTION_LIMIT,
    ConditionalUpdate,
    ConditionFailed,
    DynamoTable,
    Filter,
    decode_cursor,
    deserialize,
    encode_key,
    in_parallel,
    listing_cursor,
    listing_cursor_value,
    serialize,
    started,
)
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.matches import Match, MatchMember, MatchStatus, record_status
from chalicelib.domain.records import (
    Direction,
    HeldRecord,
    OpenRecord,
    ReconciledRecord,
    RecordColumns,
    RecordStatus,
)
from chalicelib.domain.story_trace import MatchState, Passing
from chalicelib.domain.tallies import Money, money_from_plain, money_plain

CLAIM_ATTEMPTS = 8  # a record another reconciliation keeps matching at the same moment
CLAIM_THREADS = 8  # transactions of claims in flight at once
SHARD_READERS = 16  # partitions of a reconciliation's match list read at once
# A journaled match of at most this many records keeps its members in its own item: with short
# stream keys, eight keep it within one write unit (1 KB) beside the match's other attributes.
INLINE_MEMBERS = 8
# The members an item of a chunk's journal holds, as JSON text, within DynamoDB's 400 KB an item:
# thousands of pairs, or about 370 matches of eight records with 64-character stream keys.
JOURNAL_PAGE_BYTES = 300_000
# A chunk's journal is read only while its persist may be in flight (minutes); TTL takes one a crash left.
JOURNAL_LIFETIME = timedelta(days=7)


def carries_members(members: Sequence[MatchMember]) -> bool:
    """A journaled match whose members its own item carries (the module docstring)."""
    return len(members) <= INLINE_MEMBERS


class MatchRepository:
    """Matches and their members (the `Matches` port): steps 1 and 3 of writing a match, in the order of
    the module docstring; the claims of step 2 are ClaimRepository's."""

    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    # Writing a match (see the module docstring for the order) --------------------------------

    def journal_members(self, environment: str, run_id: int, chunk: int,
                        batch: Sequence[tuple[Match, Sequence[MatchMember]]]) -> None:
        """Before any claim of a run's chunk (`batch`: every match it plans, so a retry that leaves some
        out writes the same journal): the members of those that will carry them (see the module
        docstring), in items of at most JOURNAL_PAGE_BYTES of them."""
        entries = [f'"{match.id}":{json.dumps(_members_plain(members), separators=(",", ":"))}'
                   for match, members in batch if carries_members(members)]  # ASCII: a character a byte
        expires = int((utc_now() + JOURNAL_LIFETIME).timestamp())
        self._table.batch_write(puts=[
            {**keys.match_journal(environment, run_id, chunk, page), "entity": "match_journal", "expires_at": expires,
             "members": "{" + ",".join(entries) + "}"}
            for page, entries in enumerate(_pages(entries, JOURNAL_PAGE_BYTES))])

    def journaled_members(self, environment: str, run_id: int, chunk: int) -> dict[int, list[MatchMember]]:
        """The members a chunk's journal keeps, by match id (read consistently: an undo follows a crash)."""
        found: dict[int, list[MatchMember]] = {}
        for item in self._table.query_all(keys.BASE_TABLE, keys.match_journal_pk(environment, run_id),
                                          sort_prefix=keys.match_journal_chunk(chunk), consistent=True):
            found.update({int(match_id): _members_of_plain(plain)
                          for match_id, plain in json.loads(item["members"]).items()})
        return found

    def forget_journal(self, environment: str, run_id: int, chunk: int) -> None:
        """Once the chunk is written: each of its matches committed, or released."""
        self._table.batch_write(deletes=[
            {"pk": item["pk"], "sk": item["sk"]} for item in self._table.query_all(
                keys.BASE_TABLE, keys.match_journal_pk(environment, run_id),
                sort_prefix=keys.match_journal_chunk(chunk), projection=("pk", "sk"), consistent=True)])

    def put_members_of(self, batch: Iterable[tuple[Match, Sequence[MatchMember]]], journaled: bool = False) -> None:
        """Step 1: a member item each record; of a `journaled` batch (`journal_members`), only for the
        matches too large to carry their members."""
        self._table.batch_write(puts=[
            {**keys.match_member(match.environment, match.id, m.record_id), "entity": "match_member",
             "record_id": m.record_id, "side": m.side, "data_stream_key": m.data_stream_key, "share": m.share}
            for match, members in batch if not (journaled and carries_members(members)) for m in members])

    def commit_many(self, matches: list[Match], pending_events: Mapping[int, str] | None = None,
                    journaled: Mapping[int, Sequence[MatchMember]] | None = None) -> None:
        """Write the match items, the commit markers, batched. Not conditional: a match id is
        reserved for one match only (a run's block, or a person's single id), and a retry first
        leaves out the matches already written (see `existing_ids`). `pending_events` names the
        event a match's commit owes (see event_ledger), by match id. `journaled`: the members of a
        journaled batch's matches, by match id; the small ones' items carry theirs."""
        pending_events, journaled = pending_events or {}, journaled or {}
        self._table.batch_write(puts=[
            {**self.to_item(m), **owing(pending_events.get(m.id)),
             **({"members": _members_plain(journaled[m.id])} if m.id in journaled and carries_members(journaled[m.id])
                else {})}
            for m in matches])

    def delete_members(self, environment: str, match_id: int) -> None:
        """The members (their items, or those the match item carries), and the money a trace kept of them."""
        match_key, member_keys, carried = keys.match(environment, match_id), [], False
        for item in self._table.query_all(keys.BASE_TABLE, match_key["pk"], consistent=True,
                                          projection=("pk", "sk", "members")):
            if item["sk"].startswith(keys.MATCH_MEMBER_PREFIX):
                member_keys.append({"pk": item["pk"], "sk": item["sk"]})
            carried = carried or (item["sk"] == match_key["sk"] and "members" in item)
        if carried:
            try:
                self._table.update(match_key, "REMOVE members", condition="attribute_exists(pk)")
            except ConditionFailed:
                pass  # gone meanwhile: nothing carries them
        self._table.batch_write(deletes=[keys.match_money(environment, match_id)] + member_keys)

    # Reading ---------------------------------------------------------------------------------

    def get(self, environment: str, match_id: int) -> Match:
        match = self.find(environment, match_id)
        if match is None or not match.shown:
            raise NotFound(f"reconciliation match {match_id} not found")
        return match

    def find(self, environment: str, match_id: int) -> Match | None:
        item = self._table.get(keys.match(environment, match_id))
        return self._from_item(item) if item else None

    def matches_between(self, environment: str, reconciliation_id: int, low_id: int,
                        high_id: int) -> dict[int, MatchState]:
        """The reconciliation's matches with ids from `low_id` to `high_id`, those `find_many` finds,
        projected to what a story trace needs of them (from its match index: eventually consistent)."""
        def between(partition: str) -> list[dict[str, Any]]:
            return list(self._table.query_between(keys.GSI1, partition, keys.match_sort_key(low_id),
                                                  keys.match_sort_key(high_id), projection=MATCH_STATE_ATTRIBUTES,
                                                  typed=True))

        partitions = keys.matches_of_reconciliation_partitions(environment, reconciliation_id)
        with ThreadPoolExecutor(SHARD_READERS) as pool:  # the list's shards, and its unsharded partition
            items = [item for found in pool.map(between, partitions) for item in found]
        return {state.id: state for state in map(_match_state, items)}

    def find_many(self, environment: str, match_ids: Iterable[int]) -> dict[int, Match]:
        """The matches of these ids that were written (begun, committed or unmatched: as `find`), by id."""
        return {match.id: match for match in (self._from_item(item) for item in
                                              self._table.get_many(keys.match(environment, i) for i in match_ids))}

    def members(self, environment: str, match_id: int) -> list[MatchMember]:
        """By record id. Read consistently: an undo that follows a crashed write by milliseconds must
        see every member written, or a claim would outlive it."""
        return self.members_and_money(environment, match_id)[0]

    def members_and_money(self, environment: str, match_id: int) -> tuple[list[MatchMember], Money | None]:
        """The members (by record id), and the money of their records if it was kept (None otherwise):
        one consistent query of the match's partition."""
        members: list[MatchMember] = []
        carried: list[MatchMember] = []
        money: Money | None = None
        for item in self._table.query_all(keys.BASE_TABLE, keys.match(environment, match_id)["pk"], consistent=True,
                                          projection=("sk", "side", "record_id", "data_stream_key", "share", "money",
                                                      "members"),
                                          typed=True):  # a payout's 10,000 members: parsed directly
            sort_key = item["sk"]["S"]
            if sort_key.startswith(keys.MATCH_MEMBER_PREFIX):
                members.append(MatchMember(item["side"]["S"], _number(item["record_id"]),
                                           item["data_stream_key"]["S"],
                                           share=_number(item["share"]) if "N" in item.get("share", {}) else None))
            elif sort_key == keys.MATCH_MONEY_SK:
                money = money_from_plain(_plain(item["money"]))
            elif "members" in item:  # a retry that carries them may follow an attempt that wrote their items
                carried += _members_of_plain(_plain(item["members"]))
        by_record = {m.record_id: m for m in carried} | {m.record_id: m for m in members}
        return [by_record[i] for i in sorted(by_record)], money

    def keep_money(self, environment: str, match_id: int, money: Money) -> None:
        """Keep the money of a committed match's records: its members and their amounts never change,
        so a later trace reads the members alone."""
        self._table.put({**keys.match_money(environment, match_id), "entity": "match_money",
                         "money": money_plain(money)})

    def member_page(self, environment: str, match_id: int, limit: int,
                    cursor: str | None) -> tuple[list[int], str | None]:
        """A page of the match's record ids, highest first (record lists go newest first), and the cursor of
        the next. Members the match item carries are paged with the cursors their items would give."""
        match_key = keys.match(environment, match_id)
        partition, match = match_key["pk"], self._table.get(match_key)
        if not match or "members" not in match:
            page = self._table.query_page(keys.BASE_TABLE, partition, limit=limit, cursor=cursor,
                                          sort_prefix=keys.MATCH_MEMBER_PREFIX)
            return [i["record_id"] for i in page.items], page.cursor
        ids = sorted((m.record_id for m in _members_of_plain(match["members"])), reverse=True)
        if cursor:
            after = decode_cursor(cursor, keys.BASE_TABLE.partition_key, partition, _MEMBER_KEY)["sk"]["S"]
            ids = [i for i in ids if keys.match_member(environment, match_id, i)["sk"] < after]
        if len(ids) <= limit:
            return ids, None
        return ids[:limit], encode_key(serialize(keys.match_member(environment, match_id, ids[limit - 1])))

    def list_page(self, environment: str, reconciliation_id: int, limit: int, cursor: str | None,
                  include_unmatching: bool = False,
                  status: MatchStatus | None = None) -> tuple[list[Match], str | None]:
        """Newest first, of one status when given; a match being unmatched is left out, except for
        whoever finishes unmatching."""
        expression = "attribute_not_exists(#fp)" + ("" if include_unmatching else " AND attribute_not_exists(#fu)")
        names = {"#fp": "pending_since", **({} if include_unmatching else {"#fu": "unmatching"})}
        values: dict[str, Any] = {}
        if status is not None:
            expression += " AND #fs = :fs"
            names["#fs"], values[":fs"] = "status", status.value
        hidden = Filter(expression, names, values)
        # The shards of the list merged newest first, and the unsharded partition, where matches
        # written before the shards stay.
        listing = keys.matches_of_reconciliation_pk(environment, reconciliation_id)
        below = listing_cursor_value(cursor, listing) if cursor else None
        items = list(itertools.islice(self._table.merged_below(
            keys.GSI1, keys.matches_of_reconciliation_partitions(environment, reconciliation_id), below=below,
            page_size=limit + 1, filter=hidden), limit + 1))
        more = len(items) > limit
        return ([self._from_item(i) for i in items[:limit]],
                listing_cursor(listing, items[limit - 1][keys.GSI1.sort_key]) if more else None)

    # Changing a committed match ---------------------------------------------------------------

    def confirm(self, match: Match, pending_event: str | None = None) -> Match:
        owed, owed_values = owes(pending_event)
        try:
            item = self._table.update(
                keys.match(match.environment, match.id), "SET #status = :confirmed" + owed,
                condition="attribute_exists(pk) AND attribute_not_exists(unmatching) "
                          "AND attribute_not_exists(pending_since)",
                names={"#status": "status"}, values={":confirmed": MatchStatus.CONFIRMED.value, **owed_values},
                return_new=True)
        except ConditionFailed:
            raise NotFound(f"reconciliation match {match.id} not found") from None
        return self._from_item(item)

    def mark_unmatching(self, match: Match) -> bool:
        """First step of an unmatch: hide the match, only as `match` saw it (its status, which the
        unmatch was judged and gated by, and committed: not a match still being written); a retry
        finds the mark and goes on. False when the match is marked already (another unmatch).
        Raises Conflict when it changed since it was read, NotFound when it is gone."""
        try:
            self._table.update(keys.match(match.environment, match.id), "SET unmatching = :t",
                               condition="attribute_exists(pk) AND attribute_not_exists(pending_since) "
                                         "AND attribute_not_exists(unmatching) AND #status = :seen",
                               names={"#status": "status"}, values={":t": True, ":seen": match.status.value})
            return True
        except ConditionFailed:
            pass
        stored = self.find(match.environment, match.id)
        if stored is None:
            raise NotFound(f"reconciliation match {match.id} not found")
        if stored.unmatching:
            return False
        raise Conflict(f"reconciliation match {match.id} changed while it was being unmatched "
                       f"(it is {stored.status.value} now): try again")

    def begin(self, match: Match) -> None:
        """Write a person's match hidden, in the sweeper's pending-matches index; the commit
        (`commit_many`) replaces it with the visible item."""
        self._table.put_new({**self.to_item(match), **keys.pending_match_index(match.environment, match.id),
                             "pending_since": iso(utc_now())})

    def pending(self) -> list[Match]:
        """Begun matches of every environment (for the sweeper)."""
        return [self._from_item(i) for i in self._table.index_items(keys.GSI2, keys.PENDING_MATCHES_PK)]

    def remove(self, match: Match) -> None:
        """Drop a match that was never committed (a committed one stays, as a tombstone once unmatched)."""
        self._table.delete(keys.match(match.environment, match.id), condition="attribute_exists(pending_since)")

    def mark_unmatched(self, match: Match, pending_event: str | None = None) -> None:
        owed, owed_values = owes(pending_event)
        self._table.update(keys.match(match.environment, match.id), "SET unmatched_at = :now" + owed,
                           condition="attribute_exists(pk)", values={":now": iso(utc_now()), **owed_values})

    def existing_ids(self, environment: str, match_ids: Iterable[int]) -> set[int]:
        """Which of these matches were written already (committed, or unmatched since)."""
        return {item["id"] for item in self._table.get_many(keys.match(environment, i) for i in match_ids)}

    @staticmethod
    def to_item(match: Match) -> dict[str, Any]:
        return {
            **keys.match(match.environment, match.id),
            **keys.match_index(match.environment, match.reconciliation_id, match.id),
            "entity": "match", "environment": match.environment, "id": match.id,
            "reconciliation_id": match.reconciliation_id, "reconciliation_rule_id": match.reconciliation_rule_id,
            "status": match.status.value, "group_key": match.group_key, "record_count": match.record_count,
            "created_at": iso(match.created_at), "run_id": match.run_id,
            "differences": match.differences or None, "reason": match.reason,
            "allocations": {str(record): share for record, share in match.allocations.items()} or None,
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> Match:
        return Match(
            environment=item["environment"], id=item["id"], reconciliation_id=item["reconciliation_id"],
            status=MatchStatus(item["status"]), group_key=item.get("group_key", ""),
            record_count=item.get("record_count", 0), created_at=parse_iso(item["created_at"]),
            reconciliation_rule_id=item.get("reconciliation_rule_id"), run_id=item.get("run_id"),
            differences=item.get("differences") or {}, reason=item.get("reason"),
            unmatching=bool(item.get("unmatching")), unmatched_at=parse_optional_iso(item.get("unmatched_at")),
            pending_since=parse_optional_iso(item.get("pending_since")),
            allocations={int(record): int(share) for record, share in (item.get("allocations") or {}).items()},
        )


class ClaimRepository:
    """The record side of matching (the `Claims` port), on the record items: the claims that hold a record
    in a reconciliation's match (step 2 of the module docstring's order), the records open in a
    reconciliation, and the streams it adopted. `matches` lists the proposed matches `proposed_records`
    reads."""

    def __init__(self, table: DynamoTable, matches: MatchRepository, in_transactions: bool = True) -> None:
        self._table, self._matches, self.in_transactions = table, matches, in_transactions

    # Claiming a record (step 2 of writing a match) ------------------------------------------------

    def claim_together(self, batch: Sequence[tuple[Match, Sequence[MatchMember]]],
                       users: Mapping[str, frozenset[int]]) -> set[int]:
        """Claim every record of the matches, each match's all at once or none (TransactWriteItems of
        whole matches, TRANSACTION_LIMIT actions each, sent from CLAIM_THREADS threads): the ids of
        the matches now holding all their records. Each claim is `claim_record`'s with its member as
        seen. A match left out holds none of its records and is for `claim_record`, record by
        record: one whose member was refused (stale as seen, claimed by another match, being deleted;
        a retry after this call already claimed it), one taking shares, one sharing a record with
        another of the batch, and all of them where claims are not made in transactions
        (settings.claims_in_transactions: a transaction's writes cost AWS twice the write units)."""
        if not self.in_transactions:
            return set()
        written = self._table.write_whole(
            claimable_together(batch), threads=CLAIM_THREADS,
            updates_of=lambda entry: [_claim_update(entry[0], member, users[member.data_stream_key])
                                      for member in entry[1]])
        return {match.id for match, _ in written}

    def claim_record(self, environment: str, record_id: int, reconciliation_id: int, match_id: int,
                     users: frozenset[int], seen: MatchMember | None = None, proposed: bool = False,
                     share: int | None = None) -> bool:
        """Mark the record matched by `match_id` in the reconciliation (a `proposed` match: held,
        pending confirmation). False when another match of it holds the record, or the record is
        gone or being deleted, or holds shares of partial payments there. `seen` is the record as
        the match read it (saves a read; a stale one only costs a retry). With a `share`, the match
        takes that much of the record (see allocations.py)."""
        if share is not None:
            return claim_share(self._table, environment, record_id, reconciliation_id, match_id, share, users,
                               proposed)
        attribute = keys.match_attribute(reconciliation_id)
        item: dict[str, Any] | None = None if seen is None else {
            "id": seen.record_id, "data_stream_key": seen.data_stream_key, "matched_in": set(seen.matched_in)}
        for _ in range(CLAIM_ATTEMPTS):
            if item is None:
                item = self._table.get(keys.record(environment, record_id))
            if item is None or item.get("deleting"):
                return False
            if item.get(attribute) is not None:
                return item[attribute] == match_id
            if item.get(allocated_attribute(reconciliation_id)):
                return False  # paid in part: only a share of what is left may take it
            matched_in, proposed_in = set(item.get("matched_in") or ()), set(item.get("proposed_in") or ())
            status = record_status(matched_in | {reconciliation_id}, users | {reconciliation_id},
                                   proposed_in | ({reconciliation_id} if proposed else set()))
            try:
                claim_write(self._table, environment, record_id, item["data_stream_key"], reconciliation_id,
                            match_id, status, matched_in, proposed_in, proposed)
                return True
            except ConditionFailed:
                item = None  # changed meanwhile: read it again
        raise RuntimeError(f"record {record_id} kept changing while being matched")

    def partly_paid(self, environment: str, reconciliation_id: int) -> dict[int, dict[int, int]]:
        """The records paid in part in the reconciliation, with their shares there (see allocations.py)."""
        return partly_paid(self._table, environment, reconciliation_id)

    def release_record(self, environment: str, record_id: int, reconciliation_id: int, match_id: int,
                       users: frozenset[int]) -> None:
        """Undo `claim_record` (only if `match_id` holds the record): it is open again there."""
        self._move_held(environment, record_id, reconciliation_id, match_id, users, release=True)

    def confirm_record(self, environment: str, record_id: int, reconciliation_id: int, match_id: int,
                      users: frozenset[int]) -> None:
        """A proposed match confirmed: the record it holds is matched there for good (nothing to
        do when `match_id` does not hold it, or holds it confirmed already)."""
        self._move_held(environment, record_id, reconciliation_id, match_id, users, release=False)

    def _move_held(self, environment: str, record_id: int, reconciliation_id: int, match_id: int,
                   users: frozenset[int], release: bool) -> None:
        attribute = keys.match_attribute(reconciliation_id)
        for _ in range(CLAIM_ATTEMPTS):
            item = self._table.get(keys.record(environment, record_id))
            if release and item is not None and str(match_id) in (item.get(share_attribute(reconciliation_id)) or {}) \
                    and release_share(self._table, environment, record_id, reconciliation_id, match_id, users, item):
                return
            if item is None or item.get(attribute) != match_id:
                return
            matched_in, proposed_in = set(item.get("matched_in") or ()), set(item.get("proposed_in") or ())
            if not release and reconciliation_id not in proposed_in:
                return
            status = record_status(matched_in - {reconciliation_id} if release else matched_in, users,
                                   proposed_in - {reconciliation_id})
            removed = "DELETE proposed_in :r" if reconciliation_id in proposed_in else ""
            if release:
                removed = ", ".join(filter(None, ["matched_in :r", removed.removeprefix("DELETE ")]))
                removed = "DELETE " + removed
            try:
                self._table.update(
                    keys.record(environment, record_id),
                    _status_update(status, "REMOVE #m" if release else "", removed),
                    condition="#m = :match AND " + _same_sets(matched_in, proposed_in),
                    names={"#m": attribute, "#status": "status"},
                    values={":match": match_id, ":r": {reconciliation_id},
                            **_status_values(environment, record_id, item["data_stream_key"], status),
                            **_sets_values(matched_in, proposed_in)})
                return
            except ConditionFailed:
                continue
        raise RuntimeError(f"record {record_id} kept changing while being {'unmatched' if release else 'confirmed'}")

    # Reading ---------------------------------------------------------------------------------

    def open_records(self, environment: str, stream_key: str, reconciliation_id: int,
                     adopted: bool) -> Iterator[OpenRecord]:
        """Records of the stream not yet matched in the reconciliation (nor being deleted), with
        what the open-records index projects (OPEN_RECORD_ATTRIBUTES). Once the stream is adopted
        they come from that sparse index alone (a record matched elsewhere but not here is still
        open here); before, from all the stream's records, since some may have been reconciled in
        every other reconciliation before this one used the stream."""
        index, partitions = _stream_records(environment, stream_key, adopted)
        shards = started([self._table.query_all(index, partition,
                                                projection=None if adopted else OPEN_RECORD_ATTRIBUTES)
                          for partition in partitions])
        return (_open_record(item) for item in heapq.merge(*shards, key=lambda item: item["id"])
                if reconciliation_id not in (item.get("matched_in") or ()) and not item.get("deleting"))

    def open_record_columns(self, environment: str, stream_key: str, reconciliation_id: int, adopted: bool,
                            with_metadata: bool = False,
                            id_ranges: Sequence[tuple[int, int]] | None = None) -> Iterator[RecordColumns]:
        """The records of `open_records`, a page at a time as columns (see record_columns): what a run
        loads, a million a side, without a dict per record. `status` only when read whole. The
        partitions are read at once, each page parsed whole (record_columns.page_columns); the pages
        come in no order. `id_ranges`: only the records with ids in these (first, last) ranges."""
        index, partitions = _stream_records(environment, stream_key, adopted)
        projection = record_attributes(with_metadata) + (() if adopted else ("status",))
        key_attributes = ("pk", "sk", index.partition_key, index.sort_key)
        ranges = [None] if id_ranges is None else \
            [(keys.record_sort_key(first), keys.record_sort_key(last)) for first, last in id_ranges]
        for between in ranges:
            yield from self._table.parsed_pages(
                index, partitions, filter=_open_here(reconciliation_id), projection=projection, between=between,
                parse=lambda body: page_columns(body, key_attributes, with_metadata))

    def proposed_records(self, environment: str, reconciliation_id: int) -> list[OpenRecord]:
        """The records the reconciliation's proposed matches hold (claimed, but not reconciled there
        until a person confirms): its exceptions still count them. Read from those matches (a
        queue people work through), not from the open-records index, which does not project
        `proposed_in`."""
        attribute, found = keys.match_attribute(reconciliation_id), []
        cursor: str | None = None
        while True:
            page, cursor = self._matches.list_page(environment, reconciliation_id, 100, cursor,
                                                   status=MatchStatus.PROPOSED)
            for match in page:
                members = self._matches.members(environment, match.id)
                items = self._table.get_many(keys.record(environment, m.record_id) for m in members)
                found += [_open_record(item) for item in items if item.get(attribute) == match.id
                          and reconciliation_id in (item.get("proposed_in") or ()) and not item.get("deleting")]
            if cursor is None:
                return found

    def count_open(self, environment: str, stream_key: str, reconciliation_id: int, adopted: bool,
                   deadline: float | None = None) -> tuple[int, bool]:
        """How many records `open_records` would give, and whether the count finished by `deadline`."""
        index, partitions = _stream_records(environment, stream_key, adopted)
        with ThreadPoolExecutor(PARTITION_THREADS) as pool:
            counts = list(pool.map(lambda partition: self._table.count(
                index, partition, filter=_open_here(reconciliation_id), deadline=deadline), partitions))
        return sum(found for found, _ in counts), all(finished for _, finished in counts)

    def is_adopted(self, environment: str, reconciliation_id: int, stream_key: str) -> bool:
        return self._table.get(keys.stream_adoption(environment, reconciliation_id, stream_key)) is not None

    def adopt(self, environment: str, reconciliation_id: int, stream_key: str) -> None:
        self._table.put({**keys.stream_adoption(environment, reconciliation_id, stream_key),
                         "entity": "stream_adoption"})

    def forget_adoptions(self, environment: str, reconciliation_id: int, stream_keys: Iterable[str]) -> None:
        self._table.batch_write(deletes=[keys.stream_adoption(environment, reconciliation_id, k) for k in stream_keys])

    def reopen_record(self, environment: str, record: ReconciledRecord, users: frozenset[int]) -> None:
        """A record counted `reconciled` before another reconciliation used its stream is open
        again (partially reconciled, back in the open index). Nothing to do if it changed meanwhile:
        whoever changed it computed its status with the new reconciliation counted."""
        matched_in = set(record.matched_in)
        status = record_status(matched_in, users)
        if status is RecordStatus.RECONCILED:
            return
        try:
            self._table.update(keys.record(environment, record.id), _status_update(status, "", ""),
                               condition="#status = :reconciled AND " + _same_matched_in(matched_in),
                               names={"#status": "status"},
                               values={":reconciled": RecordStatus.RECONCILED.value,
                                       **_status_values(environment, record.id, record.data_stream_key, status),
                                       **_matched_in_values(matched_in)})
        except ConditionFailed:
            pass

    def settle_reconciled(self, environment: str, held: HeldRecord, users: frozenset[int]) -> bool:
        """A record left partially reconciled when a reconciliation stopped using its stream is
        reconciled (out of the open index) if `users`, those using it now, all matched it. Nothing
        (False) when they did not, or the stored record changed since `held` was read: whoever
        changed it computed its status with the users of then."""
        matched_in, proposed_in = set(held.matched_in), set(held.proposed_in)
        seen = held.record.status
        if seen is RecordStatus.RECONCILED or \
                record_status(matched_in, users, proposed_in) is not RecordStatus.RECONCILED:
            return False
        record = held.record
        try:
            self._table.update(keys.record(environment, record.id), _status_update(RecordStatus.RECONCILED, "", ""),
                               condition="#status = :seen AND attribute_not_exists(deleting) AND "
                                         + _same_sets(matched_in, proposed_in),
                               names={"#status": "status"},
                               values={":seen": seen.value, **_status_values(environment, record.id,
                                                                              record.data_stream_key,
                                                                              RecordStatus.RECONCILED),
                                       **_sets_values(matched_in, proposed_in)})
        except ConditionFailed:
            return False
        return True

    def held_records(self, environment: str, record_ids: Iterable[int]) -> list[HeldRecord]:
        """The records of these ids that exist (those being deleted too, marked), each with the
        reconciliations and matches holding it; in no particular order."""
        return [_held(item) for item in self._table.get_many(keys.record(environment, rid) for rid in record_ids)]

    def held_records_between(self, environment: str, stream_key: str, low_id: int,
                             high_id: int) -> list[HeldRecord]:
        """The stream's records with ids from `low_id` to `high_id`, as `held_records` (from the
        stream's record index: a dense run of ids costs a tenth of reading each by key, but the
        index is eventually consistent)."""
        items = in_parallel(keys.records_of_stream_shards(environment, stream_key), lambda partition: (
            self._table.query_between(keys.GSI1, partition, keys.record_sort_key(low_id),
                                      keys.record_sort_key(high_id))))
        return [_held(item) for item in items]

    def passing_between(self, environment: str, stream_key: str, low_id: int, high_id: int,
                        reconciliation_ids: Iterable[int]) -> list[Passing]:
        """The stream's records with ids from `low_id` to `high_id`, as `passing` reads them, from the
        stream's record index (as `held_records_between`: eventually consistent)."""
        items = in_parallel(keys.records_of_stream_shards(environment, stream_key), lambda partition: (
            self._table.query_between(keys.GSI1, partition, keys.record_sort_key(low_id), keys.record_sort_key(high_id),
                                      projection=_passing_attributes(reconciliation_ids), typed=True)))
        return _passings(items, reconciliation_ids)

    def passing(self, environment: str, record_ids: Iterable[int], reconciliation_ids: Iterable[int]) -> list[Passing]:
        """The records of these ids that exist (those being deleted too, as `held_records`), only
        their money and what holds them in `reconciliation_ids`: what a story trace needs of the
        many records it passes by without showing them (a projected read costs about half)."""
        items = self._table.get_many((keys.record(environment, rid) for rid in record_ids),
                                     projection=_passing_attributes(reconciliation_ids), typed=True)
        return _passings(items, reconciliation_ids)


def _stream_records(environment: str, stream_key: str, adopted: bool) -> tuple[keys.Index, list[str]]:
    """Where a stream's records open in a reconciliation are read: the sparse open index once the
    stream is adopted (every shard, and the unsharded partition of the records written before the
    shards), every record of the stream before, in each of its shards (index, partitions)."""
    if adopted:
        return keys.GSI5, keys.open_records_of_stream_partitions(environment, stream_key)
    return keys.GSI1, keys.records_of_stream_shards(environment, stream_key)


def _open_here(reconciliation_id: int) -> Filter:
    """`open_records`' test, applied by DynamoDB: not matched in this reconciliation (a record matched
    elsewhere is still open here), not being deleted."""
    return Filter("NOT contains(#fm, :fr) AND attribute_not_exists(#fd)", {"#fm": "matched_in", "#fd": "deleting"},
                  {":fr": reconciliation_id})


_INDEX_PLACEHOLDERS = {keys.GSI4: ":g4", keys.GSI5: ":g5"}  # `_status_update`'s values of each index's entry


def _status_update(status: RecordStatus, set_clause: str, set_change: str) -> str:
    """The status, and the indexes that follow it (`keys.status_indexes`): each entry set where the
    record sits in the index, removed where it does not."""
    sets, removes = ["#status = :status"], []
    if set_clause.startswith("REMOVE "):
        removes.append(set_clause.removeprefix("REMOVE "))
    elif set_clause:
        sets.insert(0, set_clause.removeprefix("SET "))
    for index, held in keys.status_indexes(status.value):
        if held:
            sets.append(index.assignment(_INDEX_PLACEHOLDERS[index]))
        else:
            removes.append(index.attributes)
    expression = "SET " + ", ".join(sets)
    if removes:
        expression += " REMOVE " + ", ".join(removes)
    return f"{expression} {set_change}".rstrip()


def _claim_update(match: Match, member: MatchMember, users: frozenset[int]) -> ConditionalUpdate:
    """`claim_write`'s update and condition as expressions (a transaction takes no other form),
    for the record as the member saw it: matched in `member.matched_in`, proposed nowhere."""
    reconciliation_id, proposed = match.reconciliation_id, match.status is MatchStatus.PROPOSED
    matched_in, proposed_in = set(member.matched_in), set[int]()
    status = record_status(matched_in | {reconciliation_id}, users | {reconciliation_id},
                           {reconciliation_id} if proposed else set())
    return ConditionalUpdate(
        keys.record(match.environment, member.record_id),
        _status_update(status, "SET #m = :match", "ADD matched_in :r" + (", proposed_in :r" if proposed else "")),
        "attribute_exists(pk) AND attribute_not_exists(deleting) AND attribute_not_exists(#m) "
        "AND attribute_not_exists(#a) AND " + _same_sets(matched_in, proposed_in),
        {":match": match.id, ":r": {reconciliation_id},
         **_status_values(match.environment, member.record_id, member.data_stream_key, status),
         **_sets_values(matched_in, proposed_in)},
        {"#m": keys.match_attribute(reconciliation_id), "#a": allocated_attribute(reconciliation_id),
         "#status": "status"})


_Claimed = tuple[Match, Sequence[MatchMember]]


def claimable_together(batch: Sequence[_Claimed]) -> list[_Claimed]:
    """The matches of the batch a transaction may claim, in order: none taking shares, none larger
    than a transaction, none naming a record twice or a record an earlier one names."""
    chosen: list[_Claimed] = []
    seen_records: set[tuple[str, int]] = set()
    for match, members in batch:
        records = {(match.environment, member.record_id) for member in members}
        if members and len(members) <= TRANSACTION_LIMIT and len(records) == len(members) \
                and not records & seen_records and all(member.share is None for member in members):
            chosen.append((match, members))
            seen_records |= records
    return chosen


def claim_write(table: DynamoTable, environment: str, record_id: int, stream_key: str, reconciliation_id: int,
                match_id: int, status: RecordStatus, matched_in: set[int], proposed_in: set[int],
                proposed: bool) -> None:
    """A claim's one write: `_status_update(status, "SET #m = :match", "ADD matched_in :r[, proposed_in
    :r]")` on the condition that the record exists, is not being deleted, is held by no match and no
    share there, and still has the `matched_in`/`proposed_in` the status was computed from; in plain
    parameters (`DynamoTable.update_plainly`: sent once per matched record, and dynalite parses
    expressions slowly). Raises ConditionFailed."""
    attribute = keys.match_attribute(reconciliation_id)
    put, remove = _status_fields(environment, record_id, stream_key, status)
    sets = {"matched_in": matched_in, "proposed_in": proposed_in}
    table.update_plainly(
        keys.record(environment, record_id), put={attribute: match_id, **put}, remove=remove,
        add={"matched_in": {reconciliation_id}, **({"proposed_in": {reconciliation_id}} if proposed else {})},
        present=["pk"], absent=["deleting", attribute, allocated_attribute(reconciliation_id),
                                *(name for name, members in sets.items() if not members)],
        equal={name: members for name, members in sets.items() if members})


def _status_fields(environment: str, record_id: int, stream_key: str,
                   status: RecordStatus) -> tuple[dict[str, str], list[str]]:
    """What `_status_update` sets and removes for `status`, as attributes and values."""
    put: dict[str, str] = {"status": status.value}
    remove: list[str] = []
    entries = keys.record_indexes(environment, record_id, stream_key, status.value)
    for index, held in keys.status_indexes(status.value):
        if held:
            put.update({index.partition_key: entries[index.partition_key], index.sort_key: entries[index.sort_key]})
        else:
            remove += [index.partition_key, index.sort_key]
    return put, remove


def _status_values(environment: str, record_id: int, stream_key: str, status: RecordStatus) -> dict[str, str]:
    """The values `_status_update` names for `status`."""
    values = {":status": status.value}
    entries = keys.record_indexes(environment, record_id, stream_key, status.value)
    for index, held in keys.status_indexes(status.value):
        if held:
            values.update(index.assigned_values(entries, _INDEX_PLACEHOLDERS[index]))
    return values


def _same_sets(matched_in: set[int], proposed_in: set[int]) -> str:
    """`_same_matched_in`, and the same reconciliations in `proposed_in` (the status follows both)."""
    if not proposed_in:
        return _same_matched_in(matched_in) + " AND attribute_not_exists(proposed_in)"
    return _same_matched_in(matched_in) + " AND " + " AND ".join(
        ["size(proposed_in) = :pn"] + [f"contains(proposed_in, :pin{n})" for n in range(len(proposed_in))])


def _sets_values(matched_in: set[int], proposed_in: set[int]) -> dict[str, int]:
    """The values `_same_sets` names."""
    values = _matched_in_values(matched_in)
    if proposed_in:
        values.update({":pn": len(proposed_in), **{f":pin{n}": rid for n, rid in enumerate(sorted(proposed_in))}})
    return values


def _same_matched_in(matched_in: set[int]) -> str:
    """The record's reconciliations are still exactly those the new status was computed from: as
    many, and each of them (the size alone would pass a record released in one reconciliation and
    claimed in another meanwhile, and the status would be computed from the wrong set)."""
    if not matched_in:
        return "attribute_not_exists(matched_in)"
    return " AND ".join(["size(matched_in) = :n"] + [f"contains(matched_in, :in{n})" for n in range(len(matched_in))])


def _matched_in_values(matched_in: set[int]) -> dict[str, int]:
    """The values `_same_matched_in` names."""
    if not matched_in:
        return {}
    return {":n": len(matched_in), **{f":in{n}": rid for n, rid in enumerate(sorted(matched_in))}}


_MEMBER_KEY = (keys.BASE_TABLE.partition_key, keys.BASE_TABLE.sort_key)


def _members_plain(members: Iterable[MatchMember]) -> list[list[Any]]:
    """Members as a journal or a match item keeps them: [side, record id, stream] and the share, if any."""
    return [[m.side, m.record_id, m.data_stream_key, *(() if m.share is None else (m.share,))] for m in members]


def _pages(entries: Sequence[str], limit: int) -> Iterator[list[str]]:
    """The entries in order, cut in pages whose texts joined by commas stay within `limit` characters
    (an entry longer than that alone makes a page)."""
    page: list[str] = []
    size = 0
    for entry in entries:
        if page and size + 1 + len(entry) > limit:
            yield page
            page, size = [], 0
        size += len(entry) + (1 if page else 0)
        page.append(entry)
    if page:
        yield page


def _members_of_plain(plain: Iterable[Sequence[Any]]) -> list[MatchMember]:
    return [MatchMember(side, int(record_id), stream, share=int(rest[0]) if rest else None)
            for side, record_id, stream, *rest in plain]


def _open_record(item: dict[str, Any]) -> OpenRecord:
    """A record item as the open-records index projects it."""
    return OpenRecord(
        id=item["id"], data_stream_key=item["data_stream_key"], date=item["date"], amount=item["amount"],
        direction=Direction(item["direction"]), currency=item["currency"], decimal_places=item["decimal_places"],
        description=item.get("description"), external_id=item.get("external_id"),
        metadata=json.loads(item["metadata"]) if item.get("metadata") else {},
        file_import_id=item.get("file_import_id"), matched_in=frozenset(item.get("matched_in") or ()),
        exception_holds=keys.holders(item.get(keys.EXCEPTION_HOLDS)))


MATCH_STATE_ATTRIBUTES = ("id", "reconciliation_id", "status", "reconciliation_rule_id", "record_count", "unmatching",
                          "pending_since")


def _match_state(item: dict[str, Any]) -> MatchState:
    """A match item read with MATCH_STATE_ATTRIBUTES, typed (as `_from_item` reads those)."""
    rule, unmatching, pending = item.get("reconciliation_rule_id"), item.get("unmatching"), item.get("pending_since")
    return MatchState(id=_number(item["id"]), reconciliation_id=_number(item["reconciliation_id"]),
                      status=_MATCH_STATUSES[item["status"]["S"]],
                      reconciliation_rule_id=_number(rule) if rule else None,
                      record_count=_number(item["record_count"]) if "record_count" in item else 0,
                      unmatching=bool(_plain(unmatching)) if unmatching else False,
                      pending_since=parse_optional_iso(_plain(pending)) if pending else None)


PASSING_ATTRIBUTES = ("id", "data_stream_key", "date", "amount", "direction", "currency", "decimal_places",
                      keys.EXCEPTION_HOLDS)


def _passing_attributes(reconciliation_ids: Iterable[int]) -> tuple[str, ...]:
    return PASSING_ATTRIBUTES + tuple(keys.match_attribute(r) for r in sorted(set(reconciliation_ids)))


def _passings(items: Iterable[dict[str, Any]], reconciliation_ids: Iterable[int]) -> list[Passing]:
    """Record items read with `_passing_attributes`, typed: 10,000 of them in a few milliseconds
    (deserialize would take a third of a second)."""
    holders = [(r, keys.match_attribute(r)) for r in sorted(set(reconciliation_ids))]
    found = []
    for item in items:
        holds = item.get(keys.EXCEPTION_HOLDS)
        found.append(Passing(
            id=_number(item["id"]), data_stream_key=item["data_stream_key"]["S"], date=item["date"]["S"],
            amount=_number(item["amount"]), direction=_DIRECTIONS[item["direction"]["S"]],
            currency=item["currency"]["S"], decimal_places=_number(item["decimal_places"]),
            match_ids={r: _number(item[attribute]) for r, attribute in holders if attribute in item},
            exception_ids=keys.holders(_plain(holds)) if holds else {}))
    return found


_DIRECTIONS = {d.value: d for d in Direction}
_MATCH_STATUSES = {s.value: s for s in MatchStatus}


def _number(value: dict[str, str]) -> int:
    """A typed number that is an integer ({"N": "12"}), as deserialize reads it."""
    text = value["N"]
    return int(text) if text.isdigit() or (text[:1] == "-" and text[1:].isdigit()) else _plain(value)


def _plain(value: dict[str, Any]) -> Any:
    """One typed value as deserialize reads it."""
    return deserialize({"v": value})["v"]


def _held(item: dict[str, Any]) -> HeldRecord:
    """A record item with the reconciliations, matches and exceptions holding it."""
    return HeldRecord(record=RecordRepository.from_item(item), matched_in=frozenset(item.get("matched_in") or ()),
                      match_ids=keys.match_ids_of(item), deleting=bool(item.get("deleting")),
                      exception_ids=keys.holders(item.get(keys.EXCEPTION_HOLDS)),
                      proposed_in=frozenset(item.get("proposed_in") or ()))
