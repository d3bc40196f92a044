"""Partial payments on the record side of matching (adapters/dynamodb/allocations.py): shares taken
and given back, the status they move, and whole claims refused once a record is paid in part."""
from __future__ import annotations

from chalicelib.domain.matches import Match, MatchMember, MatchStatus
from chalicelib.domain.records import RecordStatus
from tests.contract.builders import ENV, OTHER_ENV, T0, stream
from tests.contract.test_matches import BOTH, open_ids, record, status_of

ONE = frozenset({1})


def test_shares_keep_the_record_open_until_they_cover_it(records, claims, data_streams):
    data_streams.add(stream(1, "bank"))
    records.put_many([record(1, amount=1000), record(2)])
    assert claims.claim_record(ENV, 1, 1, 10, ONE, share=400)
    assert claims.claim_record(ENV, 1, 1, 10, ONE, share=400)  # a retry: nothing more taken
    assert status_of(records, 1) is RecordStatus.UNRECONCILED and open_ids(claims, 1, True) == [1, 2]
    assert records.get(ENV, 1).allocations == {1: {10: 400}}
    assert not claims.claim_record(ENV, 1, 1, 11, ONE, share=601)  # more than is left
    assert not claims.claim_record(ENV, 1, 1, 11, ONE)  # whole: it is paid in part
    assert claims.claim_record(ENV, 1, 1, 12, ONE, share=600)
    held = claims.held_records(ENV, [1])[0]
    assert held.record.status is RecordStatus.RECONCILED and held.match_in(1) == 12
    assert held.record.allocations == {1: {10: 400, 12: 600}} and open_ids(claims, 1, True) == [2]
    assert not claims.claim_record(ENV, 1, 1, 13, ONE, share=1)  # covered


def test_giving_a_share_back_opens_a_covered_record_and_the_last_share_leaves_nothing(records, claims, data_streams):
    data_streams.add(stream(1, "bank"))
    records.put_many([record(1, amount=1000)])
    assert claims.claim_record(ENV, 1, 1, 10, BOTH, share=300) and claims.claim_record(ENV, 1, 1, 11, BOTH, share=700)
    assert status_of(records, 1) is RecordStatus.PARTIALLY_RECONCILED  # reconciliation 2 has not matched it
    claims.release_record(ENV, 1, 1, 10, BOTH)  # not the match that covered it: it opens again all the same
    held = claims.held_records(ENV, [1])[0]
    assert held.record.status is RecordStatus.UNRECONCILED and held.match_in(1) is None
    assert held.record.allocations == {1: {11: 700}} and open_ids(claims, 1, True) == [1]
    claims.release_record(ENV, 1, 1, 10, BOTH)  # again: nothing
    assert records.get(ENV, 1).allocations == {1: {11: 700}}
    claims.release_record(ENV, 1, 1, 11, BOTH)
    assert records.get(ENV, 1).allocations == {}
    assert claims.claim_record(ENV, 1, 1, 12, BOTH)  # a whole match may take it again
    assert status_of(records, 1) is RecordStatus.PARTIALLY_RECONCILED


def test_the_covering_share_of_a_proposed_match_waits_for_its_confirm(records, claims):
    records.put_many([record(1, amount=1000)])
    assert claims.claim_record(ENV, 1, 1, 10, ONE, share=500)
    assert claims.claim_record(ENV, 1, 1, 11, ONE, share=500, proposed=True)
    assert status_of(records, 1) is RecordStatus.PENDING_CONFIRMATION
    claims.confirm_record(ENV, 1, 1, 11, ONE)
    assert status_of(records, 1) is RecordStatus.RECONCILED


def test_a_share_of_a_record_being_deleted_or_gone_is_refused(records, claims):
    assert not claims.claim_record(ENV, 9, 1, 10, ONE, share=1)


def test_members_and_matches_keep_their_shares(matches):
    partial = Match(environment=ENV, id=1, reconciliation_id=1, status=MatchStatus.CONFIRMED, group_key="manual",
                    record_count=2, created_at=T0, allocations={5: 400})
    matches.put_members_of([(partial, [MatchMember("a", 5, "bank", share=400), MatchMember("b", 6, "ledger")])])
    matches.commit_many([partial])
    assert matches.get(ENV, 1).allocations == {5: 400}
    assert [(m.record_id, m.share) for m in matches.members(ENV, 1)] == [(5, 400), (6, None)]


def test_the_records_paid_in_part_are_listed_with_their_shares_until_the_last_goes(records, claims):
    records.put_many([record(1, amount=1000), record(2, amount=500), record(3)])
    assert claims.claim_record(ENV, 1, 1, 10, ONE, share=400) and claims.claim_record(ENV, 2, 1, 10, ONE, share=500)
    assert claims.claim_record(ENV, 3, 1, 10, ONE)  # whole: not listed
    assert claims.partly_paid(ENV, 1) == {1: {10: 400}, 2: {10: 500}}
    assert claims.partly_paid(ENV, 2) == {} and claims.partly_paid(OTHER_ENV, 1) == {}
    claims.release_record(ENV, 1, 1, 10, ONE)
    claims.release_record(ENV, 2, 1, 10, ONE)
    assert claims.partly_paid(ENV, 1) == {}
