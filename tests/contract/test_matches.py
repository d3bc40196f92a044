"""Matches and the record side of matching: members, claims and releases (and the record status
they move), commit markers, begun matches, confirm and unmatch marks, a stream's open records for a
reconciliation before and after adoption, and reopened records."""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb.table import ConditionFailed
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.matches import Match, MatchMember, MatchStatus
from chalicelib.domain.records import (
    DELETABLE_STATUSES,
    Direction,
    OpenRecord,
    ReconciledRecord,
    Record,
    RecordQuery,
    RecordStatus,
)
from chalicelib.domain.story_trace import MatchState, Passing
from chalicelib.domain.tallies import CurrencyAmounts
from tests.contract.builders import ENV, OTHER_ENV, T0, T0_MS

STALE = timedelta(minutes=5)
BOTH = frozenset({1, 2})  # reconciliations 1 and 2 both use the stream


def record(record_id: int, stream_key: str = "bank", environment: str = ENV, **kw) -> Record:
    return Record(**{"environment": environment, "id": record_id, "data_stream_key": stream_key, "data_stream_id": 1,
                     "date": "2024-03-01", "amount": 1000 + record_id, "direction": Direction.CREDIT,
                     "currency": "USD", "decimal_places": 2, "status": RecordStatus.UNRECONCILED, "created_at": T0,
                     **kw})


def match(match_id: int, reconciliation_id: int = 1, environment: str = ENV, **kw) -> Match:
    return Match(**{"environment": environment, "id": match_id, "reconciliation_id": reconciliation_id,
                    "status": MatchStatus.PROPOSED, "group_key": f"group-{match_id}", "record_count": 2,
                    "created_at": T0, "reconciliation_rule_id": 3, "run_id": 4, "differences": {"amount": 5}, **kw})


def status_of(records, record_id: int) -> RecordStatus:
    return records.get(ENV, record_id).status


def open_ids(claims, reconciliation_id: int, adopted: bool, stream_key: str = "bank") -> list[int]:
    return [r.id for r in claims.open_records(ENV, stream_key, reconciliation_id, adopted)]



def merged(pages):
    """A stream's pages of columns as one page of lists, in id order: the adapter reads a stream's
    shards at once, a page each at least, in no order (its columns are polars Series)."""
    pages = [{name: values.to_list() if hasattr(values, "to_list") else list(values) for name, values in page.items()}
             for page in pages]
    assert pages, "at least one page"
    columns = {name: [value for page in pages for value in page[name]] for name in pages[0]}
    order = sorted(range(len(columns["id"])), key=columns["id"].__getitem__)
    return {name: [values[i] for i in order] for name, values in columns.items()}

class TestMatchRepository:
    def test_members_are_kept_per_match_and_paged_highest_record_first(self, matches):
        matches.put_members_of([(match(1), [MatchMember("a", 12, "bank", frozenset({2})), MatchMember("b", 3, "ledger"),
                                            MatchMember("b", 7, "ledger")]),
                                (match(2), [MatchMember("a", 5, "bank")])])
        assert matches.members(ENV, 1) == [MatchMember("b", 3, "ledger"), MatchMember("b", 7, "ledger"),
                                           MatchMember("a", 12, "bank")]  # matched_in is not kept
        first, cursor = matches.member_page(ENV, 1, 2, None)
        assert first == [12, 7]
        assert matches.member_page(ENV, 1, 2, cursor) == ([3], None)
        assert matches.member_page(ENV, 1, 3, None) == ([12, 7, 3], None)
        with pytest.raises(BadRequest):
            matches.member_page(ENV, 2, 2, cursor)
        matches.delete_members(ENV, 1)
        assert (matches.members(ENV, 1), matches.member_page(ENV, 1, 2, None)) == ([], ([], None))
        assert matches.members(ENV, 2) == [MatchMember("a", 5, "bank")]
        assert matches.members(OTHER_ENV, 2) == []

    def test_a_match_is_visible_once_committed(self, matches):
        assert (matches.find(ENV, 1), matches.existing_ids(ENV, [1, 2])) == (None, set())
        with pytest.raises(NotFound):
            matches.get(ENV, 1)
        matches.commit_many([match(1), match(2, reason="rounding", differences={}, reconciliation_rule_id=None,
                                                run_id=None, status=MatchStatus.CONFIRMED)])
        assert matches.get(ENV, 1) == replace(match(1), created_at=T0_MS)
        assert matches.find(ENV, 2) == Match(ENV, 2, 1, MatchStatus.CONFIRMED, "group-2", 2, T0_MS, reason="rounding")
        assert [m.id for m in matches.list_page(ENV, 1, 10, None)[0]] == [2, 1]
        assert matches.existing_ids(ENV, [1, 2, 3]) == {1, 2}
        assert matches.existing_ids(OTHER_ENV, [1, 2]) == set()

    def test_matches_are_listed_newest_first_of_one_status(self, matches):
        matches.commit_many([match(i, status=MatchStatus.CONFIRMED if i % 2 else MatchStatus.PROPOSED)
                             for i in range(1, 6)] + [match(6, reconciliation_id=2)])
        first, cursor = matches.list_page(ENV, 1, 2, None)
        assert [m.id for m in first] == [5, 4]
        rest, last = matches.list_page(ENV, 1, 3, cursor)
        assert ([m.id for m in rest], last) == ([3, 2, 1], None)
        confirmed, cursor = matches.list_page(ENV, 1, 2, None, status=MatchStatus.CONFIRMED)
        assert [m.id for m in confirmed] == [5, 3]
        assert [m.id for m in matches.list_page(ENV, 1, 2, cursor, status=MatchStatus.CONFIRMED)[0]] == [1]
        assert [m.id for m in matches.list_page(ENV, 2, 2, None)[0]] == [6]
        with pytest.raises(BadRequest):
            matches.list_page(ENV, 2, 2, cursor)

    def test_a_claim_then_its_release_restores_the_status_and_the_open_listings(self, records, claims, data_streams):
        from tests.contract.builders import stream
        data_streams.add(stream(1, "bank"))
        records.put_many([record(1), record(2)])
        assert claims.claim_record(ENV, 1, 1, 10, frozenset({1}))
        assert status_of(records, 1) is RecordStatus.RECONCILED
        assert open_ids(claims, 1, False) == [2]
        assert [r.id for r in records.list_page(ENV, RecordQuery(status=RecordStatus.UNRECONCILED), 5, None)[0]] == [2]
        held = claims.held_records(ENV, [1])[0]
        assert (held.matched_in, dict(held.match_ids), held.match_in(1), held.deleting) == (
            frozenset({1}), {1: 10}, 10, False)
        claims.release_record(ENV, 1, 1, 11, frozenset({1}))  # not its match: nothing
        assert status_of(records, 1) is RecordStatus.RECONCILED
        claims.release_record(ENV, 1, 1, 10, frozenset({1}))
        assert status_of(records, 1) is RecordStatus.UNRECONCILED
        assert open_ids(claims, 1, False) == [1, 2]
        assert open_ids(claims, 1, True) == [1, 2]
        assert [r.id for r in records.list_page(ENV, RecordQuery(status=RecordStatus.UNRECONCILED), 5, None)[0]] == [
            2, 1]
        held = claims.held_records(ENV, [1])[0]
        assert (held.matched_in, dict(held.match_ids), held.record.status) == (frozenset(), {}, RecordStatus.UNRECONCILED)

    def test_held_records_name_the_exceptions_holding_them(self, records, claims, exceptions):
        records.put_many([record(1), record(2)])
        assert exceptions.hold_record(ENV, 1, 1, 10) and exceptions.hold_record(ENV, 1, 2, 20)
        held = {h.record.id: h for h in claims.held_records(ENV, [1, 2])}
        assert (dict(held[1].exception_ids), held[1].exception_in(2), held[2].exception_in(1)) == (
            {1: 10, 2: 20}, 20, None)
        assert exceptions.let_go_record(ENV, 1, 1, 10)
        assert dict(claims.held_records(ENV, [1])[0].exception_ids) == {2: 20}

    def test_find_many_reads_the_matches_written_of_these_ids(self, matches):
        matches.commit_many([match(1), match(2, status=MatchStatus.CONFIRMED), match(3, environment=OTHER_ENV)])
        matches.mark_unmatching(match(2, status=MatchStatus.CONFIRMED))
        matches.begin(match(4))
        found = matches.find_many(ENV, [1, 2, 3, 4, 5])
        assert sorted(found) == [1, 2, 4]
        assert found[1] == replace(match(1), created_at=T0_MS)
        assert (found[2].unmatching, found[4].pending_since is not None) == (True, True)  # as `find` reads them
        assert matches.find_many(ENV, []) == {}

    def test_records_and_matches_between_two_ids_are_those_of_the_stream_or_reconciliation(
            self, records, matches, claims):
        records.put_many([record(1), record(2, "ledger"), record(3), record(5), record(4, environment=OTHER_ENV),
                          record(9)])
        assert claims.claim_record(ENV, 3, 1, 10, BOTH)
        held = sorted(claims.held_records_between(ENV, "bank", 2, 5), key=lambda h: h.record.id)
        assert [h.record.id for h in held] == [3, 5]
        assert held == sorted(claims.held_records(ENV, [3, 5]), key=lambda h: h.record.id)  # as read by key
        assert [h.record.id for h in claims.held_records_between(OTHER_ENV, "bank", 1, 9)] == [4]  # its own only
        matches.commit_many([match(1), match(2, reconciliation_id=2), match(3), match(4, environment=OTHER_ENV),
                             match(7)])
        matches.begin(match(5))
        assert sorted(matches.matches_between(ENV, 1, 1, 5)) == [1, 3, 5]
        assert matches.matches_between(ENV, 1, 1, 5) == {  # projected
            i: MatchState.of(m) for i, m in matches.find_many(ENV, [1, 3, 5]).items()}
        matches.mark_unmatching(match(3))
        assert matches.matches_between(ENV, 1, 3, 3)[3].unmatching

    def test_passing_records_are_their_money_and_their_holders_in_the_reconciliations_asked(
            self, records, claims, exceptions):
        records.put_many([record(1), record(2, "ledger"), record(3, direction=Direction.DEBIT, currency="EUR",
                                                                   decimal_places=3, metadata={"a": 1}),
                          record(5), record(4, environment=OTHER_ENV)])
        assert claims.claim_record(ENV, 3, 1, 10, BOTH) and claims.claim_record(ENV, 3, 2, 11, BOTH)
        assert exceptions.hold_record(ENV, 5, 2, 20)
        by_key = sorted(claims.passing(ENV, [1, 3, 5, 4, 99], [1, 2]), key=lambda p: p.id)
        assert [p.id for p in by_key] == [1, 3, 5]
        assert by_key[1] == Passing(id=3, data_stream_key="bank", date="2024-03-01", amount=1003,
                                    direction=Direction.DEBIT, currency="EUR", decimal_places=3,
                                    match_ids={1: 10, 2: 11}, exception_ids={})
        assert (by_key[0].match_ids, by_key[2].exception_in(2)) == ({}, 20)
        assert claims.passing(ENV, [3], [2])[0].match_ids == {2: 11}  # only the reconciliations asked
        assert claims.passing(ENV, [], [1]) == []
        between = sorted(claims.passing_between(ENV, "bank", 2, 5, [1, 2]), key=lambda p: p.id)
        assert between == by_key[1:]  # as read by key, the stream's only
        assert between == [Passing.of(h) for h in sorted(claims.held_records(ENV, [3, 5]), key=lambda h: h.record.id)]
        assert [p.id for p in claims.passing_between(OTHER_ENV, "bank", 1, 9, [1])] == [4]  # its own only

    def test_a_journaled_batch_keeps_small_matches_members_in_the_journal_then_in_their_match(self, matches):
        # Given a run's chunk: a pair, a match of nine records (too many to carry), and one with a share
        pair = [MatchMember("a", 12, "bank", frozenset({2})), MatchMember("b", 3, "ledger")]
        large = [MatchMember("a", 100 + n, "bank") for n in range(8)] + [MatchMember("b", 200, "ledger")]
        shared = [MatchMember("a", 20, "bank", share=400), MatchMember("b", 21, "ledger")]
        batch = [(match(1), pair), (match(2, record_count=9), large), (match(3), shared)]
        matches.journal_members(ENV, 4, 0, batch)
        matches.put_members_of(batch, journaled=True)
        # Then before the commit the journal alone names the small matches' members; the large one has items
        stored = [MatchMember("b", 3, "ledger"), MatchMember("a", 12, "bank")]
        assert {k: sorted(v, key=lambda m: m.record_id) for k, v in matches.journaled_members(ENV, 4, 0).items()} == {
            1: stored, 3: [MatchMember("a", 20, "bank", share=400), MatchMember("b", 21, "ledger")]}
        assert (matches.members(ENV, 1), len(matches.members(ENV, 2))) == ([], 9)
        assert matches.journaled_members(ENV, 4, 1) == {} and matches.journaled_members(OTHER_ENV, 4, 0) == {}
        # When committed with their members
        matches.commit_many([match(1), match(2, record_count=9), match(3)], journaled=dict((m.id, ms) for m, ms in batch))
        # Then each match reads its members, pages them as member items page, and keeps money beside them
        assert matches.members(ENV, 1) == stored
        assert matches.members(ENV, 3) == [MatchMember("a", 20, "bank", share=400), MatchMember("b", 21, "ledger")]
        assert matches.members(ENV, 2) == sorted(large, key=lambda m: m.record_id)  # no member twice
        first, cursor = matches.member_page(ENV, 1, 1, None)
        assert first == [12] and cursor is not None
        assert matches.member_page(ENV, 1, 1, cursor) == ([3], None)
        assert matches.member_page(ENV, 1, 2, None) == ([12, 3], None)
        with pytest.raises(BadRequest):
            matches.member_page(ENV, 3, 1, cursor)  # another match's cursor
        matches.keep_money(ENV, 1, {"USD": CurrencyAmounts("USD", 2, 100, 1, 1)})
        assert matches.members_and_money(ENV, 1) == (stored, {"USD": CurrencyAmounts("USD", 2, 100, 1, 1)})
        assert matches.members(OTHER_ENV, 1) == []
        # And the journal goes once the chunk is written; an unmatch's deletion of members takes the carried ones
        matches.forget_journal(ENV, 4, 0)
        assert matches.journaled_members(ENV, 4, 0) == {}
        matches.delete_members(ENV, 1)
        assert (matches.members_and_money(ENV, 1), matches.member_page(ENV, 1, 2, None)) == (([], None), ([], None))
        assert matches.find(ENV, 1) is not None  # the match item itself stays
        # A retry that carries them after an attempt that wrote member items (a deploy between): each once
        matches.put_members_of([(match(5), pair)])
        matches.commit_many([match(5)], journaled={5: pair})
        assert matches.members(ENV, 5) == stored

    def test_a_journal_of_large_matches_with_long_stream_keys_fits_dynamodbs_item_size(self, matches):
        # Given a chunk of 1,500 matches of eight records whose streams have the longest keys allowed
        keys_ = ("a" * 64, "b" * 64)
        batch = [(match(n), [MatchMember("ab"[k % 2], 10**9 + n * 8 + k, keys_[k % 2], share=10**12 + k)
                             for k in range(8)]) for n in range(1, 1501)]
        # When journaled (DynamoDB refuses an item over 400 KB: about 1 MB of members to keep here)
        matches.journal_members(ENV, 4, 0, batch)
        # Then every match's members read back, and go with the journal
        found = matches.journaled_members(ENV, 4, 0)
        assert {k: sorted(v, key=lambda m: m.record_id) for k, v in found.items()} == {m.id: ms for m, ms in batch}
        matches.forget_journal(ENV, 4, 0)
        assert matches.journaled_members(ENV, 4, 0) == {}

    def test_the_money_a_trace_keeps_is_read_with_the_members_and_goes_with_them(self, matches):
        matches.put_members_of([(match(1), [MatchMember("a", 12, "bank"), MatchMember("b", 3, "ledger")])])
        matches.commit_many([match(1)])
        assert matches.members_and_money(ENV, 1) == ([MatchMember("b", 3, "ledger"), MatchMember("a", 12, "bank")],
                                                     None)
        money = {"USD": CurrencyAmounts("USD", 2, 10**20, 7, 3), "JPY": CurrencyAmounts("JPY", 1, 0, 5, 0)}
        matches.keep_money(ENV, 1, money)
        assert matches.members_and_money(ENV, 1)[1] == money
        assert matches.members(ENV, 1) == matches.members_and_money(ENV, 1)[0]  # not a member
        assert matches.members_and_money(OTHER_ENV, 1) == ([], None)
        matches.delete_members(ENV, 1)
        assert matches.members_and_money(ENV, 1) == ([], None)

    def test_a_second_match_of_the_same_reconciliation_is_refused(self, records, claims):
        records.put_many([record(1)])
        assert claims.claim_record(ENV, 1, 1, 10, BOTH)
        assert claims.claim_record(ENV, 1, 1, 10, BOTH)  # its own match again: a retry
        assert not claims.claim_record(ENV, 1, 1, 11, BOTH)
        assert not claims.claim_record(ENV, 1, 1, 11, BOTH, seen=MatchMember("a", 1, "bank"))
        assert claims.held_records(ENV, [1])[0].match_ids == {1: 10}
        assert claims.claim_record(ENV, 1, 2, 11, BOTH)  # another reconciliation may
        assert claims.held_records(ENV, [1])[0].match_ids == {1: 10, 2: 11}

    def test_a_proposed_claim_holds_the_record_pending_until_confirmed_or_released(self, records, matches, claims):
        # Given two records claimed by proposed matches, in a stream reconciliations 1 and 2 use
        records.put_many([record(1), record(2)])
        assert claims.claim_record(ENV, 1, 1, 10, BOTH, proposed=True)
        assert claims.claim_record(ENV, 2, 1, 11, BOTH, seen=MatchMember("a", 2, "bank"), proposed=True)
        # Then they are claimed (no longer open there) yet pending, and listed by that status
        assert status_of(records, 1) is RecordStatus.PENDING_CONFIRMATION
        assert open_ids(claims, 1, True) == [] and open_ids(claims, 2, True) == [1, 2]
        pending = records.list_page(ENV, RecordQuery(status=RecordStatus.PENDING_CONFIRMATION), 5, None)[0]
        assert [r.id for r in pending] == [2, 1]
        assert claims.held_records(ENV, [1])[0].proposed_in == frozenset({1})
        # When one is confirmed (its match confirmed) and the other released (rejected)
        claims.confirm_record(ENV, 1, 1, 99, BOTH)  # not its match: nothing
        assert status_of(records, 1) is RecordStatus.PENDING_CONFIRMATION
        claims.confirm_record(ENV, 1, 1, 10, BOTH)
        claims.release_record(ENV, 2, 1, 11, BOTH)
        # Then the first is partially reconciled (reconciliation 2 has not matched it), the second open
        assert status_of(records, 1) is RecordStatus.PARTIALLY_RECONCILED
        assert status_of(records, 2) is RecordStatus.UNRECONCILED
        assert claims.held_records(ENV, [1, 2])[0].proposed_in == frozenset()
        assert claims.claim_record(ENV, 1, 2, 20, BOTH)
        assert status_of(records, 1) is RecordStatus.RECONCILED

    def test_a_record_of_two_reconciliations_is_partially_then_fully_reconciled(self, records, claims):
        records.put_many([record(1), record(2)])
        assert claims.claim_record(ENV, 1, 1, 10, BOTH)
        assert status_of(records, 1) is RecordStatus.PARTIALLY_RECONCILED
        assert (open_ids(claims, 1, True), open_ids(claims, 2, True)) == ([2], [1, 2])
        stale = MatchMember("a", 1, "bank")  # read before the first claim: the write notices, reads again
        assert claims.claim_record(ENV, 1, 2, 20, BOTH, seen=stale)
        assert status_of(records, 1) is RecordStatus.RECONCILED
        assert (open_ids(claims, 2, True), open_ids(claims, 2, False)) == ([2], [2])
        assert open_ids(claims, 3, True) == [2]  # reconciled: out of the open index
        assert open_ids(claims, 3, False) == [1, 2]  # but open in a reconciliation not yet adopting the stream
        claims.release_record(ENV, 1, 1, 10, BOTH)
        assert status_of(records, 1) is RecordStatus.PARTIALLY_RECONCILED
        assert claims.claim_record(ENV, 2, 2, 21, BOTH, seen=MatchMember("b", 2, "bank"))
        assert claims.claim_record(ENV, 2, 1, 22, BOTH, seen=MatchMember("b", 2, "bank", frozenset({2})))
        assert status_of(records, 2) is RecordStatus.RECONCILED
        assert claims.claim_record(ENV, 1, 3, 30, frozenset({3}))  # reconciliation 3 alone uses it now
        assert status_of(records, 1) is RecordStatus.RECONCILED

    def test_matches_claimed_together_hold_all_their_records_or_none(self, records, claims):
        # Given open records, one matched already in reconciliation 1, one being deleted, one matched
        # elsewhere since it was read; and the same ids in another environment
        records.put_many([record(n) for n in range(1, 9)] + [record(1, environment=OTHER_ENV)])
        assert claims.claim_record(ENV, 4, 1, 99, BOTH)
        records.mark_deleting(ENV, 5, DELETABLE_STATUSES, STALE)
        assert claims.claim_record(ENV, 6, 2, 98, BOTH)
        users = {"bank": BOTH}
        pair = [MatchMember("a", 1, "bank"), MatchMember("b", 2, "bank")]
        batch = [(match(10, status=MatchStatus.CONFIRMED), pair),
                 (match(11, status=MatchStatus.CONFIRMED), [MatchMember("a", 3, "bank"), MatchMember("b", 4, "bank")]),
                 (match(12), [MatchMember("a", 5, "bank")]),
                 (match(13), [MatchMember("a", 6, "bank")]),
                 (match(14), [MatchMember("a", 7, "bank")]),
                 (match(15), [MatchMember("a", 8, "bank", share=5)]),
                 (match(16), [MatchMember("a", 7, "bank")])]  # record 7 again: not in one transaction
        # When they are claimed together
        held = claims.claim_together(batch, users)
        # Then the matches whose every record was as seen hold them all, the others none
        assert held == {10, 14}
        assert {h.record.id: h.match_ids for h in claims.held_records(ENV, range(1, 9))} == {
            1: {1: 10}, 2: {1: 10}, 3: {}, 4: {1: 99}, 5: {}, 6: {2: 98}, 7: {1: 14}, 8: {}}
        assert status_of(records, 1) is RecordStatus.PARTIALLY_RECONCILED
        assert status_of(records, 3) is RecordStatus.UNRECONCILED
        assert status_of(records, 7) is RecordStatus.PENDING_CONFIRMATION  # a proposed match
        assert claims.held_records(ENV, [7])[0].proposed_in == frozenset({1})
        assert open_ids(claims, 1, True) == [3, 6, 8] and open_ids(claims, 2, True) == [1, 2, 3, 4, 7, 8]
        assert records.get(OTHER_ENV, 1).status is RecordStatus.UNRECONCILED
        # And the ones left out are for claim_record, as is a retry of those held
        assert claims.claim_together(batch[:1], users) == set()
        assert claims.claim_record(ENV, 1, 1, 10, BOTH, seen=pair[0])
        assert claims.claim_record(ENV, 6, 1, 13, BOTH, seen=MatchMember("a", 6, "bank"))

    def test_claims_together_span_as_many_transactions_as_they_need(self, records, claims):
        records.put_many([record(n, "bank" if n % 2 else "ledger") for n in range(1, 241)])
        users = {"bank": BOTH, "ledger": frozenset({1})}
        batch = [(match(100 + n, status=MatchStatus.CONFIRMED),
                  [MatchMember("a", 2 * n + 1, "bank"), MatchMember("b", 2 * n + 2, "ledger")]) for n in range(120)]
        batch[70] = (batch[70][0], [*batch[70][1], MatchMember("b", 999, "ledger")])  # a record that is not there
        assert claims.claim_together(batch, users) == {100 + n for n in range(120)} - {170}
        held = {h.record.id: h.match_ids.get(1) for h in claims.held_records(ENV, range(1, 241))}
        assert held == {n: None if n in (141, 142) else 100 + (n - 1) // 2 for n in range(1, 241)}
        assert status_of(records, 2) is RecordStatus.RECONCILED  # the ledger's only reconciliation matched it

    def test_a_claim_read_with_as_many_but_other_reconciliations_reads_again(self, records, claims):
        """Released in reconciliation 2 and claimed in 3 since it was read: the count is the same,
        the set is not, and the status must come from the set the record holds now."""
        records.put_many([record(1)])
        assert claims.claim_record(ENV, 1, 3, 30, frozenset({3}))
        stale = MatchMember("a", 1, "bank", frozenset({2}))
        assert claims.claim_record(ENV, 1, 1, 10, BOTH, seen=stale)
        assert status_of(records, 1) is RecordStatus.PARTIALLY_RECONCILED  # held in 1 and 3, not in 2
        assert [h.matched_in for h in claims.held_records(ENV, [1])] == [frozenset({1, 3})]
        claims.reopen_record(ENV, ReconciledRecord(1, "bank", frozenset({2, 3})), BOTH)  # stale as well
        assert status_of(records, 1) is RecordStatus.PARTIALLY_RECONCILED

    def test_claims_are_refused_on_a_record_being_deleted_or_gone(self, records, claims):
        records.put_many([record(1)])
        records.mark_deleting(ENV, 1, DELETABLE_STATUSES, STALE)
        assert not claims.claim_record(ENV, 1, 1, 10, BOTH)
        assert not claims.claim_record(ENV, 1, 1, 10, BOTH, seen=MatchMember("a", 1, "bank"))
        assert not claims.claim_record(ENV, 9, 1, 10, BOTH)
        assert not claims.claim_record(ENV, 9, 1, 10, BOTH, seen=MatchMember("a", 9, "bank"))
        held = claims.held_records(ENV, [1, 9])
        assert [(h.record.id, h.deleting, h.matched_in) for h in held] == [(1, True, frozenset())]
        assert claims.held_records(ENV, []) == []

    def test_open_records_before_and_after_adoption(self, records, claims):
        records.put_many([record(1, description="fee", external_id="e1", file_import_id=7, metadata={"k": 1.5}),
                          record(2), record(3), record(4, "ledger"), record(5, environment=OTHER_ENV)])
        claims.claim_record(ENV, 2, 2, 20, frozenset({2}))  # reconciled before 1 used the stream
        records.mark_deleting(ENV, 3, DELETABLE_STATUSES, STALE)
        assert open_ids(claims, 1, False) == [1, 2]
        assert claims.count_open(ENV, "bank", 1, False) == (2, True)
        assert not claims.is_adopted(ENV, 1, "bank")
        claims.adopt(ENV, 1, "bank")
        assert claims.is_adopted(ENV, 1, "bank") and not claims.is_adopted(ENV, 2, "bank")
        assert open_ids(claims, 1, True) == [1]
        assert claims.count_open(ENV, "bank", 1, True, deadline=0.0) == (1, True)
        assert list(claims.open_records(ENV, "bank", 1, True))[0] == OpenRecord(
            id=1, data_stream_key="bank", date="2024-03-01", amount=1001, direction=Direction.CREDIT, currency="USD",
            decimal_places=2, description="fee", external_id="e1", metadata={"k": 1.5}, file_import_id=7)
        claims.reopen_record(ENV, ReconciledRecord(2, "bank", frozenset({2})), BOTH)
        assert status_of(records, 2) is RecordStatus.PARTIALLY_RECONCILED
        assert open_ids(claims, 1, True) == [1, 2]
        assert list(claims.open_records(ENV, "bank", 1, True))[1].matched_in == frozenset({2})
        claims.forget_adoptions(ENV, 1, ["bank", "ledger"])
        assert not claims.is_adopted(ENV, 1, "bank")
        assert open_ids(claims, 1, False, "ledger") == [4]
        assert claims.count_open(ENV, "cards", 1, False) == (0, True)

    def test_open_record_columns_are_the_open_records_a_page_at_a_time(self, records, claims):
        records.put_many([record(1, description="fee", external_id="e1", file_import_id=7, metadata={"k": 1.5}),
                          record(2, direction=Direction.DEBIT, decimal_places=0, currency="JPY"), record(3)])
        claims.claim_record(ENV, 2, 2, 20, frozenset({2}))
        claims.claim_record(ENV, 3, 1, 30, BOTH)
        whole = [merged(claims.open_record_columns(ENV, "bank", 1, False))]
        assert whole == [{
            "id": [1, 2], "amount": [1001, 1002], "decimal_places": [2, 0], "file_import_id": [7, None],
            "direction": ["credit", "debit"], "date": ["2024-03-01", "2024-03-01"], "currency": ["USD", "JPY"],
            "description": ["fee", None], "external_id": ["e1", None], "data_stream_key": ["bank", "bank"],
            "status": ["unreconciled", "reconciled"], "matched_in": [[], [2]]}]
        adopted = [merged(claims.open_record_columns(ENV, "bank", 2, True, with_metadata=True))]
        assert (adopted[0]["id"], adopted[0]["status"], adopted[0]["matched_in"], adopted[0]["metadata"]) == (
            [1, 3], [None, None], [[], [1]], [json.dumps({"k": 1.5}, separators=(",", ":")), None])
        empty = [merged(claims.open_record_columns(ENV, "cards", 1, True))]
        assert empty[0]["id"] == [] and empty[0]["matched_in"] == []

    def test_a_reopen_leaves_a_record_still_reconciled_or_changed_meanwhile(self, records, claims):
        records.put_many([record(1), record(2), record(3)])
        for record_id in (1, 2):
            claims.claim_record(ENV, record_id, 2, 20 + record_id, frozenset({2}))
        claims.reopen_record(ENV, ReconciledRecord(1, "bank", frozenset({2})), frozenset({2}))  # still reconciled
        claims.reopen_record(ENV, ReconciledRecord(2, "bank", frozenset()), BOTH)  # stale: 2 was matched since
        claims.reopen_record(ENV, ReconciledRecord(3, "bank", frozenset()), BOTH)  # never reconciled
        claims.reopen_record(ENV, ReconciledRecord(9, "bank", frozenset({2})), BOTH)  # gone
        assert [status_of(records, i) for i in (1, 2, 3)] == [RecordStatus.RECONCILED, RecordStatus.RECONCILED,
                                                               RecordStatus.UNRECONCILED]

    def test_a_record_left_partially_reconciled_is_settled_reconciled_only_as_read(self, records, claims):
        records.put_many([record(1), record(2), record(3), record(4), record(5), record(6, environment=OTHER_ENV)])
        for record_id in (1, 2, 3, 5):  # matched in 1, not in 2: partially reconciled
            assert claims.claim_record(ENV, record_id, 1, 10 + record_id, BOTH, proposed=record_id == 5)
        assert claims.claim_record(OTHER_ENV, 6, 1, 16, BOTH)
        held = {h.record.id: h for h in claims.held_records(ENV, [1, 2, 3, 4, 5])}
        assert claims.claim_record(ENV, 2, 2, 22, BOTH)  # matched in 2 as well since it was read
        records.mark_deleting(ENV, 3, DELETABLE_STATUSES + (RecordStatus.PARTIALLY_RECONCILED,), STALE)
        only_one = frozenset({1})

        settled = [claims.settle_reconciled(ENV, held[i], only_one) for i in (1, 2, 3, 4, 5)]

        assert settled == [True, False, False, False, False]  # 4: matched nowhere; 5: only proposed in 1
        assert [status_of(records, i) for i in (1, 2, 4, 5)] == [
            RecordStatus.RECONCILED, RecordStatus.RECONCILED, RecordStatus.UNRECONCILED,
            RecordStatus.PENDING_CONFIRMATION]
        assert open_ids(claims, 2, True) == [4, 5]  # 1 left the open index (3 is being deleted)
        assert not claims.settle_reconciled(ENV, claims.held_records(ENV, [1])[0], only_one)  # once
        assert not claims.settle_reconciled(OTHER_ENV, held[1], only_one)  # another environment's 1: not as read
        assert records.get(OTHER_ENV, 6).status is RecordStatus.PARTIALLY_RECONCILED

    def test_a_begun_match_stays_hidden_until_committed_or_removed(self, matches, clock):
        matches.begin(match(1))
        matches.begin(match(2, environment=OTHER_ENV))
        matches.begin(match(3))
        begun = matches.find(ENV, 1)
        assert begun == replace(match(1), created_at=T0_MS, pending_since=clock.now.replace(microsecond=123000))
        with pytest.raises(NotFound):
            matches.get(ENV, 1)
        assert matches.list_page(ENV, 1, 10, None) == ([], None)
        assert matches.existing_ids(ENV, [1, 2]) == {1}
        assert [(m.environment, m.id) for m in matches.pending()] == [(ENV, 1), (ENV, 3), (OTHER_ENV, 2)]
        with pytest.raises(ConditionFailed):
            matches.begin(match(1))
        matches.commit_many([match(1)])
        assert matches.get(ENV, 1).pending_since is None
        assert [(m.environment, m.id) for m in matches.pending()] == [(ENV, 3), (OTHER_ENV, 2)]
        with pytest.raises(ConditionFailed):
            matches.remove(match(1))  # committed: it stays
        matches.remove(match(3))
        assert matches.find(ENV, 3) is None
        with pytest.raises(ConditionFailed):
            matches.remove(match(3))
        with pytest.raises(ConditionFailed):
            matches.begin(match(1))

    def test_confirm_only_a_committed_match(self, matches):
        matches.commit_many([match(1), match(2)])
        matches.begin(match(3))
        confirmed = matches.confirm(match(1))
        assert confirmed == replace(match(1), created_at=T0_MS, status=MatchStatus.CONFIRMED)
        assert matches.get(ENV, 1) == confirmed
        assert matches.confirm(confirmed) == confirmed
        matches.mark_unmatching(match(2))
        for refused in (match(2), match(3), match(4)):  # being unmatched, begun, missing
            with pytest.raises(NotFound):
                matches.confirm(refused)
        assert matches.find(ENV, 3).status is MatchStatus.PROPOSED

    def test_an_unmatch_hides_the_match_and_keeps_a_tombstone(self, matches, clock):
        matches.commit_many([match(1), match(2)])
        matches.mark_unmatching(match(1))
        with pytest.raises(NotFound):
            matches.get(ENV, 1)
        assert matches.find(ENV, 1).unmatching
        assert [m.id for m in matches.list_page(ENV, 1, 10, None)[0]] == [2]
        assert [m.id for m in matches.list_page(ENV, 1, 10, None, include_unmatching=True)[0]] == [2, 1]
        assert matches.mark_unmatching(match(1)) is False  # a retry
        clock.advance(seconds=2)
        matches.mark_unmatched(match(1))
        tombstone = matches.find(ENV, 1)
        assert (tombstone.unmatching, tombstone.unmatched_at) == (True, clock.now.replace(microsecond=123000))
        assert matches.existing_ids(ENV, [1]) == {1}
        with pytest.raises(NotFound):
            matches.mark_unmatching(match(9))
        with pytest.raises(ConditionFailed):
            matches.mark_unmatched(match(9))

    def test_an_unmatch_marks_the_match_only_as_it_was_read_and_judged(self, matches):
        # A reject judged (and an approval gate passed) on a proposed match must not hide it once a
        # person confirmed it; nor may anything hide a match whose request is still writing it.
        matches.commit_many([match(1)])
        matches.begin(match(2))
        read = matches.get(ENV, 1)
        matches.confirm(read)
        with pytest.raises(Conflict, match="confirmed now"):
            matches.mark_unmatching(read)
        with pytest.raises(Conflict):
            matches.mark_unmatching(match(2))
        assert not matches.find(ENV, 1).unmatching and not matches.find(ENV, 2).unmatching
        assert matches.mark_unmatching(matches.get(ENV, 1)) is True
