"""Matching by hand and the sweep of begun matches (services/matches.py), on the fakes."""
from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, NotFound, ValidationFailed
from chalicelib.domain.ingestion import JobStatus
from chalicelib.domain.matches import Match, MatchMember, MatchStatus
from chalicelib.services.matches import create_manual_match, sweep_pending, unmatch, used_by, write_matches
from tests.services.conftest import ENV, record, streams


def manual(ports, reconciliation, record_ids, allow_difference=False, reason=None):
    """What POST /reconciliation_matches does."""
    return create_manual_match(ports, ENV, reconciliation.id, record_ids, allow_difference, reason)


def status_of(ports, record_id):
    return ports.records.get(ENV, record_id).status


class ClaimsThenDies:
    """The matches repository, whose commit fails (the request dies after the claims)."""

    def __init__(self, matches) -> None:
        self._matches = matches

    def __getattr__(self, name):
        return getattr(self._matches, name)

    def commit_many(self, matches, pending_events=None, journaled=None):
        raise RuntimeError("throttled")


# Moved from tests/integration/test_manual_matches.py ---------------------------------------------

def test_a_side_booked_as_the_mirror_image_balances(ports, ingest, reconciliation):
    bank = ingest(record("bank", 1, 3000, direction="credit"))
    ledger = ingest(record("ledger", 1, 3000, direction="debit"))
    assert manual(ports, reconciliation, bank + ledger).status == "confirmed"


@pytest.mark.parametrize("case", ["one side only", "unknown record", "stream outside the reconciliation"])
def test_a_manual_match_that_cannot_be_is_refused_naming_the_problem(ports, ingest, reconciliation, case):
    streams(ports, "other")
    bank = ingest(record("bank", 1, 1000), record("bank", 2, 1000))
    outside = ingest(record("other", 1, 1000))
    ids = {"one side only": bank, "unknown record": [bank[0], 99999],
           "stream outside the reconciliation": [bank[0], outside[0]]}[case]
    with pytest.raises(ValidationFailed) as refused:
        manual(ports, reconciliation, ids)
    assert refused.value.errors[0].field.startswith("record_ids")


def test_a_record_already_matched_in_the_reconciliation_is_a_conflict(ports, ingest, reconciliation):
    bank = ingest(record("bank", 1, 1000))
    ledger = ingest(record("ledger", 1, 1000), record("ledger", 2, 1000))
    manual(ports, reconciliation, [bank[0], ledger[0]])

    with pytest.raises(Conflict) as refused:
        manual(ports, reconciliation, [bank[0], ledger[1]])

    assert str(bank[0]) in refused.value.message
    assert status_of(ports, ledger[1]) == "unreconciled"


def test_a_manual_match_that_fails_part_way_leaves_nothing_claimed(ports, ingest, reconciliation):
    bank = ingest(record("bank", 1, 1000))
    ledger = ingest(record("ledger", 1, 1000))
    dying = replace(ports, matches=ClaimsThenDies(ports.matches))

    with pytest.raises(RuntimeError):
        create_manual_match(dying, ENV, reconciliation.id, bank + ledger, False, None)

    assert status_of(ports, bank[0]) == "unreconciled"
    assert ports.matches.pending() == []
    assert manual(ports, reconciliation, bank + ledger).status == "confirmed"  # nothing stands in the way


def test_a_match_left_begun_by_a_dead_request_is_rolled_back_by_the_sweeper(ports, ingest, reconciliation):
    bank = ingest(record("bank", 1, 1000))
    ledger = ingest(record("ledger", 1, 1000))
    match = Match(environment=ENV, id=ports.counters.next_id(ENV, "match"),
                  reconciliation_id=reconciliation.id, status=MatchStatus.CONFIRMED, group_key="manual",
                  record_count=2, created_at=utc_now())
    ports.matches.begin(match)
    members = [MatchMember("a", bank[0], "bank"), MatchMember("b", ledger[0], "ledger")]
    dying = ClaimsThenDies(ports.matches)
    with pytest.raises(RuntimeError):  # the request dies after its claims, before its commit
        write_matches(replace(ports, matches=dying), [(match, members)], used_by(ports.reconciliations, ENV, ["bank", "ledger"]))
    assert status_of(ports, bank[0]) == "reconciled"
    with pytest.raises(NotFound):  # never visible
        ports.matches.get(ENV, match.id)

    assert sweep_pending(ports, now=utc_now() + timedelta(minutes=1)) == 0
    assert sweep_pending(ports, now=utc_now() + timedelta(minutes=6)) == 1

    assert status_of(ports, bank[0]) == "unreconciled"
    assert status_of(ports, ledger[0]) == "unreconciled"
    assert ports.matches.pending() == []
    assert manual(ports, reconciliation, bank + ledger).status == "confirmed"


def test_records_of_an_import_still_writing_cannot_be_matched_by_hand(ports, ingest, reconciliation):
    bank = ingest(record("bank", 1, 1000))
    ledger = ingest(record("ledger", 1, 1000))
    job = ports.ingestion_jobs.get(ENV, ports.records.get(ENV, bank[0]).file_import_id)
    row = ports.ingestion_jobs.rows[(ENV, job.id)]  # as if a chunk of it were being retried
    row.job, row.listed_active = replace(job, status=JobStatus.PROCESSING), True

    with pytest.raises(Conflict) as refused:
        manual(ports, reconciliation, bank + ledger)

    assert "still writing" in refused.value.message


def test_a_manual_match_balances_amounts_kept_with_different_decimal_places(ports, ingest, reconciliation):
    bank = ingest(record("bank", 1, 1250, decimal_places=2))
    ledger = ingest(record("ledger", 1, 125, decimal_places=1))
    other = ingest(record("ledger", 2, 1250, decimal_places=1))
    with pytest.raises(ValidationFailed) as refused:
        manual(ports, reconciliation, bank + other)
    assert "differ by 11250" in refused.value.message
    assert manual(ports, reconciliation, bank + ledger).status == "confirmed"


# Added ---------------------------------------------------------------------------------------------

def test_a_manual_match_is_confirmed_reconciles_its_records_and_asks_for_an_exception_refresh(
        ports, ingest, reconciliation):
    bank = ingest(record("bank", 1, 3000))
    ledger = ingest(record("ledger", 1, 1000), record("ledger", 2, 2000))

    match = manual(ports, reconciliation, bank + ledger)

    assert ports.matches.get(ENV, match.id).status is MatchStatus.CONFIRMED
    assert sorted((m.side, m.record_id) for m in ports.matches.members(ENV, match.id)) == [
        ("a", bank[0]), ("b", ledger[0]), ("b", ledger[1])]
    assert {status_of(ports, i) for i in bank + ledger} == {"reconciled"}
    assert ports.reconciliations.get(ENV, reconciliation.id).exceptions_refresh_pending


def test_unmatching_opens_the_records_again_keeps_a_tombstone_and_is_done_once(ports, ingest, reconciliation):
    bank = ingest(record("bank", 1, 1000))
    ledger = ingest(record("ledger", 1, 1000))
    match = manual(ports, reconciliation, bank + ledger)

    unmatch(ports, ENV, match.id)

    assert {status_of(ports, i) for i in bank + ledger} == {"unreconciled"}
    with pytest.raises(NotFound):
        ports.matches.get(ENV, match.id)
    assert ports.matches.find(ENV, match.id).unmatched_at is not None and ports.matches.members(ENV, match.id) == []
    with pytest.raises(NotFound):
        unmatch(ports, ENV, match.id)
    assert manual(ports, reconciliation, bank + ledger).status == "confirmed"


class CountedClaims:
    """The claims port, counting the records claimed one by one."""

    def __init__(self, claims) -> None:
        self._claims, self.one_by_one = claims, []

    def __getattr__(self, name):
        return getattr(self._claims, name)

    def claim_record(self, environment, record_id, *args, **kwargs):
        self.one_by_one.append(record_id)
        return self._claims.claim_record(environment, record_id, *args, **kwargs)


def test_matches_claimed_together_are_not_claimed_again_one_by_one(ports, ingest, reconciliation):
    """A batch of matches: those whose records are as they were read are held by their transactions
    and claimed no further; one whose record another match took meanwhile goes record by record,
    is refused there and gives back what it held."""
    bank = ingest(*(record("bank", n, 1000 + n) for n in range(3)))
    ledger = ingest(*(record("ledger", n, 1000 + n) for n in range(3)))
    uses = used_by(ports.reconciliations, ENV, ["bank", "ledger"])
    taken = manual(ports, reconciliation, [bank[2], ledger[2]])  # meanwhile, by a person

    def made(n: int) -> tuple[Match, list[MatchMember]]:
        match = Match(environment=ENV, id=ports.counters.next_id(ENV, "match"), reconciliation_id=reconciliation.id,
                      status=MatchStatus.CONFIRMED, group_key="run", record_count=2, created_at=utc_now())
        return match, [MatchMember("a", bank[n], "bank"), MatchMember("b", ledger[n], "ledger")]
    batch = [made(0), made(1), made(2)]
    counted = CountedClaims(ports.claims)

    written = write_matches(replace(ports, claims=counted), batch, uses)

    assert [m.id for m in written] == [batch[0][0].id, batch[1][0].id]
    assert counted.one_by_one == [bank[2], ledger[2]]  # only the refused match, record by record
    held = {h.record.id: h.match_ids for h in ports.claims.held_records(ENV, bank + ledger)}
    assert held[bank[0]] == held[ledger[0]] == {reconciliation.id: batch[0][0].id}
    assert held[bank[2]] == held[ledger[2]] == {reconciliation.id: taken.id}
