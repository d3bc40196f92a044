"""Matches and the record side of matching, as `adapters/dynamodb/matches.py` keeps them. FakeMatchRepository:
members, the commit markers, a person's begun matches, the unmatch marks. FakeClaimRepository: claims
and releases on the records of a FakeRecordStore (the store a FakeRecordRepository writes), a
stream's open records for a reconciliation (adopted or not), adoptions and reopened records.

A record's status after a claim, a release or a reopen is the domain's `record_status` of the
reconciliations that matched it, given those using its stream."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from copy import deepcopy
from dataclasses import replace
from datetime import datetime
from typing import Any

from chalicelib.adapters.dynamodb.matches import CLAIM_ATTEMPTS, carries_members, claimable_together
from chalicelib.adapters.dynamodb.record_columns import record_attributes, record_columns
from chalicelib.adapters.dynamodb.records import RecordRepository
from chalicelib.adapters.dynamodb.table import serialize
from chalicelib.domain.allocation import AllocationRefused, Coverage
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.matches import Match, MatchMember, MatchStatus, record_status
from chalicelib.domain.records import HeldRecord, OpenRecord, ReconciledRecord, RecordColumns, RecordStatus
from chalicelib.domain.story_trace import MatchState, Passing
from chalicelib.domain.tallies import CurrencyAmounts, Money
from tests.fakes._support import ConditionFailed, newest_first_page, padded, stored_time
from tests.fakes.records import FakeRecordStore, RecordRow, filtered_query_page, rows_of_stream


def stored_match(match: Match, pending_since: datetime | None = None) -> Match:
    """A match as its item reads back: the marks of a begun or unmatched match are not part of it."""
    return Match(environment=match.environment, id=match.id, reconciliation_id=match.reconciliation_id,
                 status=match.status, group_key=match.group_key, record_count=match.record_count,
                 created_at=stored_time(match.created_at), reconciliation_rule_id=match.reconciliation_rule_id,
                 run_id=match.run_id, differences=deepcopy(match.differences) or {}, reason=match.reason,
                 pending_since=stored_time(pending_since), allocations=dict(match.allocations))


def _kept(member: MatchMember) -> MatchMember:
    """A member as storage keeps it: without the `matched_in` its claim needed."""
    return MatchMember(member.side, member.record_id, member.data_stream_key, share=member.share)


def _open_record(row: RecordRow) -> OpenRecord:
    record = row.record
    return OpenRecord(id=record.id, data_stream_key=record.data_stream_key, date=record.date, amount=record.amount,
                      direction=record.direction, currency=record.currency, decimal_places=record.decimal_places,
                      description=record.description, external_id=record.external_id, metadata=deepcopy(record.metadata),
                      file_import_id=record.file_import_id, matched_in=frozenset(row.matched_in),
                      exception_holds=dict(row.exception_holds))


def _typed_item(row: RecordRow, attributes: tuple[str, ...]) -> dict[str, Any]:
    """The record item as a query returns it with this projection (DynamoDB's typed values)."""
    item = {**RecordRepository.to_item(row.record), "matched_in": set(row.matched_in) or None}
    return serialize({name: item.get(name) for name in attributes})


class FakeMatchRepository:
    """Matches and their members (the `Matches` port), as MatchRepository keeps them; the events their
    commits owe are marked on `store` (the record items' store)."""

    def __init__(self, store: FakeRecordStore | None = None) -> None:
        self.store = store or FakeRecordStore()
        self.matches: dict[tuple[str, int], Match] = {}
        self.members_of: dict[tuple[str, int], dict[int, MatchMember]] = {}  # (environment, match id): by record
        self.money: dict[tuple[str, int], dict[str, CurrencyAmounts]] = {}  # kept by traces, (environment, match id)
        self.journals: dict[tuple[str, int, int], dict[int, list[MatchMember]]] = {}  # (environment, run, chunk)

    # Writing a match ----------------------------------------------------------------------------

    def journal_members(self, environment: str, run_id: int, chunk: int,
                        batch: Sequence[tuple[Match, Sequence[MatchMember]]]) -> None:
        self.journals[(environment, run_id, chunk)] = {
            match.id: [_kept(m) for m in members] for match, members in batch if carries_members(members)}

    def journaled_members(self, environment: str, run_id: int, chunk: int) -> dict[int, list[MatchMember]]:
        return deepcopy(self.journals.get((environment, run_id, chunk), {}))

    def forget_journal(self, environment: str, run_id: int, chunk: int) -> None:
        self.journals.pop((environment, run_id, chunk), None)

    def put_members_of(self, batch: Iterable[tuple[Match, Sequence[MatchMember]]], journaled: bool = False) -> None:
        """A journaled batch's small matches get their members with their commit, as the adapter's do."""
        for match, members in batch:
            if not (journaled and carries_members(members)):
                self._keep_members(match, members)

    def commit_many(self, matches: list[Match], pending_events: Mapping[int, str] | None = None,
                    journaled: Mapping[int, Sequence[MatchMember]] | None = None) -> None:
        """Write the commit markers: whole items, so a begun match's mark goes with it."""
        for match in matches:
            self.matches[(match.environment, match.id)] = stored_match(match)
            self.store.owe(match.environment, "match", (match.id,), (pending_events or {}).get(match.id))
            if journaled and match.id in journaled and carries_members(journaled[match.id]):
                self._keep_members(match, journaled[match.id])

    def _keep_members(self, match: Match, members: Iterable[MatchMember]) -> None:
        stored = self.members_of.setdefault((match.environment, match.id), {})
        for m in members:
            stored[m.record_id] = _kept(m)

    def delete_members(self, environment: str, match_id: int) -> None:
        self.members_of.pop((environment, match_id), None)
        self.money.pop((environment, match_id), None)

    # Reading ---------------------------------------------------------------------------------

    def get(self, environment: str, match_id: int) -> Match:
        match = self.find(environment, match_id)
        if match is None or not match.shown:
            raise NotFound(f"reconciliation match {match_id} not found")
        return match

    def find(self, environment: str, match_id: int) -> Match | None:
        return self.matches.get((environment, match_id))

    def matches_between(self, environment: str, reconciliation_id: int, low_id: int,
                        high_id: int) -> dict[int, MatchState]:
        return {i: MatchState.of(m) for i, m in self.find_many(environment, range(low_id, high_id + 1)).items()
                if m.reconciliation_id == reconciliation_id}

    def find_many(self, environment: str, match_ids: Iterable[int]) -> dict[int, Match]:
        return {i: self.matches[(environment, i)] for i in match_ids if (environment, i) in self.matches}

    def members(self, environment: str, match_id: int) -> list[MatchMember]:
        """By record id."""
        stored = self.members_of.get((environment, match_id), {})
        return [stored[i] for i in sorted(stored)]

    def members_and_money(self, environment: str, match_id: int) -> tuple[list[MatchMember], Money | None]:
        money = self.money.get((environment, match_id))
        return self.members(environment, match_id), dict(money) if money is not None else None

    def keep_money(self, environment: str, match_id: int, money: Money) -> None:
        self.money[(environment, match_id)] = dict(money)

    def member_page(self, environment: str, match_id: int, limit: int,
                    cursor: str | None) -> tuple[list[int], str | None]:
        """A page of the match's record ids, highest first (the adapter's query reads its partition
        backwards), and the cursor of the next."""
        stored = self.members_of.get((environment, match_id), {})
        return newest_first_page(f"members/{environment}/{match_id}", ((padded(i), i) for i in stored), limit, cursor)

    def list_page(self, environment: str, reconciliation_id: int, limit: int, cursor: str | None,
                  include_unmatching: bool = False, status: MatchStatus | None = None) -> tuple[list[Match], str | None]:
        """Newest first, of one status when given; begun matches are left out, and so are matches
        being unmatched (or unmatched) unless `include_unmatching`."""
        def admits(match: Match) -> bool:
            return match.pending_since is None and (include_unmatching or not match.unmatching) and \
                (status is None or match.status is status)
        entries = ((m.id, m) for (env, _), m in self.matches.items()
                   if env == environment and m.reconciliation_id == reconciliation_id)
        return filtered_query_page(f"matches/{environment}/{reconciliation_id}", entries, limit, cursor, admits)

    # Changing a committed match ---------------------------------------------------------------

    def confirm(self, match: Match, pending_event: str | None = None) -> Match:
        stored = self.matches.get((match.environment, match.id))
        if stored is None or not stored.shown:
            raise NotFound(f"reconciliation match {match.id} not found")
        confirmed = replace(stored, status=MatchStatus.CONFIRMED)
        self.matches[(match.environment, match.id)] = confirmed
        self.store.owe(match.environment, "match", (match.id,), pending_event)
        return confirmed

    def mark_unmatching(self, match: Match) -> bool:
        """Hide the match as `match` saw it; False when marked already, Conflict when it changed."""
        stored = self.matches.get((match.environment, match.id))
        if stored is None:
            raise NotFound(f"reconciliation match {match.id} not found")
        if stored.unmatching:
            return False
        if stored.status is not match.status or stored.pending_since is not None:
            raise Conflict(f"reconciliation match {match.id} changed while it was being unmatched "
                           f"(it is {stored.status.value} now): try again")
        self.matches[(match.environment, match.id)] = replace(stored, unmatching=True)
        return True

    def begin(self, match: Match) -> None:
        """Write a person's match hidden (pending since now); ConditionFailed when the id is written."""
        if (match.environment, match.id) in self.matches:
            raise ConditionFailed()
        self.matches[(match.environment, match.id)] = stored_match(match, pending_since=utc_now())

    def pending(self) -> list[Match]:
        """Begun matches of every environment, in the order of "<environment>#<id>"."""
        entries = [(f"{env}#{padded(i)}", m) for (env, i), m in self.matches.items() if m.pending_since is not None]
        return [m for _, m in sorted(entries, key=lambda e: e[0])]

    def remove(self, match: Match) -> None:
        """Drop a begun match; ConditionFailed for one committed (or none)."""
        stored = self.matches.get((match.environment, match.id))
        if stored is None or stored.pending_since is None:
            raise ConditionFailed()
        del self.matches[(match.environment, match.id)]
        self.store.pending_events.pop((match.environment, "match", (match.id,)), None)

    def mark_unmatched(self, match: Match, pending_event: str | None = None) -> None:
        stored = self._stored(match)
        self.matches[(match.environment, match.id)] = replace(stored, unmatched_at=stored_time(utc_now()))
        self.store.owe(match.environment, "match", (match.id,), pending_event)

    def existing_ids(self, environment: str, match_ids: Iterable[int]) -> set[int]:
        """Which of these matches were written (begun, committed, or unmatched since)."""
        return {i for i in match_ids if (environment, i) in self.matches}

    def _stored(self, match: Match) -> Match:
        stored = self.matches.get((match.environment, match.id))
        if stored is None:
            raise ConditionFailed()
        return stored


class FakeClaimRepository:
    """The record side of matching (the `Claims` port), as ClaimRepository keeps it: claims and releases
    on the rows of `store` (those a FakeRecordRepository writes), the records open in a reconciliation,
    its adoptions; `matches` tells which proposed matches are committed."""
    # Items a query reads per page (the table's 1 MB per read, in records of about 250 bytes).
    column_page_items = 4000

    def __init__(self, store: FakeRecordStore, matches: FakeMatchRepository, in_transactions: bool = True) -> None:
        self.store, self._matches, self.in_transactions = store, matches, in_transactions
        self.adoptions: set[tuple[str, int, str]] = set()  # (environment, reconciliation id, stream key)

    # Claiming a record --------------------------------------------------------------------------

    def claim_together(self, batch: Sequence[tuple[Match, Sequence[MatchMember]]],
                       users: Mapping[str, frozenset[int]]) -> set[int]:
        """As the adapter's transactions: a match whose every record is as its member saw it (matched
        in `matched_in`, proposed nowhere, held by no match and no share here, not being deleted)
        holds them all; the others hold none (left to `claim_record`), and so do matches taking
        shares, of more records than a transaction takes, or sharing a record with an earlier one of
        the batch; none where claims are not made
        in transactions."""
        held: set[int] = set()
        if not self.in_transactions:
            return held
        for match, members in claimable_together(batch):
            rid = match.reconciliation_id
            rows = [self.store.row(match.environment, member.record_id) for member in members]
            if not all(row is not None and not row.deleting and rid not in row.match_ids and not row.proposed_in
                       and not row.record.allocations.get(rid) and row.matched_in == set(member.matched_in)
                       for row, member in zip(rows, members)):
                continue
            for row, member in zip(rows, members):
                assert row is not None
                if match.status is MatchStatus.PROPOSED:
                    row.proposed_in.add(rid)
                row.match_ids[rid] = match.id
                row.matched_in.add(rid)
                row.record = replace(row.record, status=record_status(
                    row.matched_in, users[member.data_stream_key] | {rid}, row.proposed_in))
            held.add(match.id)
        return held

    def claim_record(self, environment: str, record_id: int, reconciliation_id: int, match_id: int,
                     users: frozenset[int], seen: MatchMember | None = None, proposed: bool = False,
                     share: int | None = None) -> bool:
        """Mark the record matched by `match_id` in the reconciliation; False when another match of
        it holds the record, or the record is gone or being deleted, or holds shares there. As in
        the adapter, `seen` stands for the record until the write's condition (the same
        reconciliations in `matched_in`, no match here, not being deleted) tells it is stale. With a
        `share`, the match takes that much of the record (adapters/dynamodb/allocations.py)."""
        if share is not None:
            return self._claim_share(environment, record_id, reconciliation_id, match_id, users, proposed, share)
        stored = self.store.row(environment, record_id)
        if stored is not None and reconciliation_id not in stored.match_ids \
                and stored.record.allocations.get(reconciliation_id):
            return False  # paid in part: only a share of what is left may take it
        matched_in: set[int] | None = None if seen is None else set(seen.matched_in)
        for _ in range(CLAIM_ATTEMPTS):
            row = self.store.row(environment, record_id)
            if matched_in is None:
                if row is None or row.deleting:
                    return False
                if reconciliation_id in row.match_ids:
                    return row.match_ids[reconciliation_id] == match_id
                matched_in = set(row.matched_in)
            if row is not None and not row.deleting and reconciliation_id not in row.match_ids \
                    and row.matched_in == matched_in:
                if proposed:
                    row.proposed_in.add(reconciliation_id)
                status = record_status(matched_in | {reconciliation_id}, users | {reconciliation_id}, row.proposed_in)
                row.match_ids[reconciliation_id] = match_id
                row.matched_in.add(reconciliation_id)
                row.record = replace(row.record, status=status)
                return True
            matched_in = None  # changed meanwhile: read it again
        raise RuntimeError(f"record {record_id} kept changing while being matched")

    def _claim_share(self, environment: str, record_id: int, reconciliation_id: int, match_id: int,
                     users: frozenset[int], proposed: bool, share: int) -> bool:
        row = self.store.row(environment, record_id)
        if row is None or row.deleting:
            return False
        shares = dict(row.record.allocations.get(reconciliation_id) or {})
        if match_id in shares or row.match_ids.get(reconciliation_id) == match_id:
            return True
        if reconciliation_id in row.match_ids:
            return False
        try:
            coverage = Coverage(row.record.amount, shares).allocate(match_id, share)
        except AllocationRefused:
            return False
        row.record = replace(row.record, allocations={**row.record.allocations,
                                                      reconciliation_id: dict(coverage.shares)})
        if not coverage.remaining:  # covered: claimed as a whole match claims it
            if proposed:
                row.proposed_in.add(reconciliation_id)
            row.match_ids[reconciliation_id] = match_id
            row.matched_in.add(reconciliation_id)
            row.record = replace(row.record, status=record_status(row.matched_in, users | {reconciliation_id},
                                                                  row.proposed_in))
        return True

    def partly_paid(self, environment: str, reconciliation_id: int) -> dict[int, dict[int, int]]:
        """The records paid in part in the reconciliation, with their shares there."""
        return {row.record.id: dict(row.record.allocations[reconciliation_id])
                for (env, _), row in self.store.rows.items()
                if env == environment and row.record.allocations.get(reconciliation_id)}

    def release_record(self, environment: str, record_id: int, reconciliation_id: int, match_id: int,
                       users: frozenset[int]) -> None:
        """Undo `claim_record` (only if `match_id` holds the record, whole or a share of it): it is
        open again there, with what other shares leave."""
        row = self.store.row(environment, record_id)
        shares = dict(row.record.allocations.get(reconciliation_id) or {}) if row is not None else {}
        if row is not None and match_id in shares:
            rest, _ = Coverage(row.record.amount, shares).release(match_id)
            allocations = {r: s for r, s in row.record.allocations.items() if r != reconciliation_id}
            row.record = replace(row.record, allocations={**allocations, **({reconciliation_id: dict(rest.shares)}
                                                                            if rest.shares else {})})
            if reconciliation_id not in row.match_ids:
                return
            match_id = row.match_ids[reconciliation_id]  # the share covered it: open it again
        if row is None or row.match_ids.get(reconciliation_id) != match_id:
            return
        status = record_status(row.matched_in - {reconciliation_id}, users, row.proposed_in - {reconciliation_id})
        del row.match_ids[reconciliation_id]
        row.matched_in.discard(reconciliation_id)
        row.proposed_in.discard(reconciliation_id)
        row.record = replace(row.record, status=status)

    def confirm_record(self, environment: str, record_id: int, reconciliation_id: int, match_id: int,
                      users: frozenset[int]) -> None:
        """A proposed match confirmed: the record `match_id` holds is matched there for good."""
        row = self.store.row(environment, record_id)
        if row is None or row.match_ids.get(reconciliation_id) != match_id or reconciliation_id not in row.proposed_in:
            return
        row.proposed_in.discard(reconciliation_id)
        row.record = replace(row.record, status=record_status(row.matched_in, users, row.proposed_in))

    # Reading ---------------------------------------------------------------------------------

    def open_records(self, environment: str, stream_key: str, reconciliation_id: int,
                     adopted: bool) -> Iterator[OpenRecord]:
        """The stream's records not matched in the reconciliation (nor being deleted), by id: from its
        open index once adopted, from all its records before."""
        return (_open_record(row) for row in rows_of_stream(self.store, environment, stream_key, adopted)
                if reconciliation_id not in row.matched_in and not row.deleting)

    def open_record_columns(self, environment: str, stream_key: str, reconciliation_id: int, adopted: bool,
                            with_metadata: bool = False,
                            id_ranges: Sequence[tuple[int, int]] | None = None) -> Iterator[RecordColumns]:
        """The records of `open_records` as the adapter's columns (`status` only when read whole,
        before adoption), a page per `column_page_items` records read; at least one page (a range)."""
        ranges = [None] if id_ranges is None else [range(first, last + 1) for first, last in id_ranges]
        for ids in ranges:
            yield from self._column_pages(environment, stream_key, reconciliation_id, adopted, with_metadata, ids)

    def _column_pages(self, environment: str, stream_key: str, reconciliation_id: int, adopted: bool,
                      with_metadata: bool, ids: range | None) -> Iterator[RecordColumns]:
        projection = record_attributes(with_metadata) + (() if adopted else ("status",))
        rows = [row for row in rows_of_stream(self.store, environment, stream_key, adopted)
                if ids is None or row.record.id in ids]
        for start in range(0, max(len(rows), 1), self.column_page_items):
            page = [_typed_item(row, projection) for row in rows[start:start + self.column_page_items]
                    if reconciliation_id not in row.matched_in and not row.deleting]
            yield record_columns(page, with_metadata)

    def proposed_records(self, environment: str, reconciliation_id: int) -> list[OpenRecord]:
        """The records the reconciliation's committed proposed matches hold (as the adapter lists them)."""
        def proposed_match(row: RecordRow) -> bool:
            match = self._matches.matches.get((environment, row.match_ids.get(reconciliation_id, 0)))
            return match is not None and match.status is MatchStatus.PROPOSED and match.pending_since is None \
                and not match.unmatching
        return [_open_record(row) for (env, _), row in sorted(self.store.rows.items())
                if env == environment and reconciliation_id in row.proposed_in and not row.deleting
                and proposed_match(row)]

    def count_open(self, environment: str, stream_key: str, reconciliation_id: int, adopted: bool,
                   deadline: float | None = None) -> tuple[int, bool]:
        """How many records `open_records` would give; the count always finishes."""
        return sum(1 for _ in self.open_records(environment, stream_key, reconciliation_id, adopted)), True

    def is_adopted(self, environment: str, reconciliation_id: int, stream_key: str) -> bool:
        return (environment, reconciliation_id, stream_key) in self.adoptions

    def adopt(self, environment: str, reconciliation_id: int, stream_key: str) -> None:
        self.adoptions.add((environment, reconciliation_id, stream_key))

    def forget_adoptions(self, environment: str, reconciliation_id: int, stream_keys: Iterable[str]) -> None:
        self.adoptions -= {(environment, reconciliation_id, k) for k in stream_keys}

    def reopen_record(self, environment: str, record: ReconciledRecord, users: frozenset[int]) -> None:
        """Open a reconciled record again when `users` leave it partially reconciled; nothing when
        the stored record is not reconciled, or its reconciliations changed meanwhile."""
        matched_in = set(record.matched_in)
        status = record_status(matched_in, users)
        if status is RecordStatus.RECONCILED:
            return
        row = self.store.row(environment, record.id)
        if row is None or row.record.status is not RecordStatus.RECONCILED or row.matched_in != matched_in:
            return
        row.record = replace(row.record, status=status)

    def settle_reconciled(self, environment: str, held: HeldRecord, users: frozenset[int]) -> bool:
        """Reconcile a record left partially reconciled once `users` all matched it; nothing when the
        stored record changed since `held` was read (as the adapter's conditional write)."""
        seen = held.record.status
        if seen is RecordStatus.RECONCILED or \
                record_status(held.matched_in, users, held.proposed_in) is not RecordStatus.RECONCILED:
            return False
        row = self.store.row(environment, held.record.id)
        if row is None or row.deleting or row.record.status is not seen or row.matched_in != set(held.matched_in) \
                or row.proposed_in != set(held.proposed_in):
            return False
        row.record = replace(row.record, status=RecordStatus.RECONCILED)
        return True

    def held_records(self, environment: str, record_ids: Iterable[int]) -> list[HeldRecord]:
        """The records of these ids that exist (those being deleted too, marked), by id."""
        rows = (self.store.row(environment, i) for i in sorted(set(record_ids)))
        return [HeldRecord(record=row.record, matched_in=frozenset(row.matched_in), match_ids=dict(row.match_ids),
                           deleting=row.deleting, exception_ids=dict(row.exception_holds),
                           proposed_in=frozenset(row.proposed_in))
                for row in rows if row is not None]

    def held_records_between(self, environment: str, stream_key: str, low_id: int,
                             high_id: int) -> list[HeldRecord]:
        return [held for held in self.held_records(environment, range(low_id, high_id + 1))
                if held.record.data_stream_key == stream_key]

    def passing_between(self, environment: str, stream_key: str, low_id: int, high_id: int,
                        reconciliation_ids: Iterable[int]) -> list[Passing]:
        return [_passing(held, reconciliation_ids)
                for held in self.held_records_between(environment, stream_key, low_id, high_id)]

    def passing(self, environment: str, record_ids: Iterable[int],
                reconciliation_ids: Iterable[int]) -> list[Passing]:
        return [_passing(held, reconciliation_ids) for held in self.held_records(environment, record_ids)]


def _passing(held: HeldRecord, reconciliation_ids: Iterable[int]) -> Passing:
    """As the adapter projects it: the matches of `reconciliation_ids` only."""
    wanted = set(reconciliation_ids)
    return replace(Passing.of(held), match_ids={r: m for r, m in held.match_ids.items() if r in wanted})
