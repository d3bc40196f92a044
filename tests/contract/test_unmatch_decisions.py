"""People's unmatch decisions (domain/unmatch_decisions.py), on the fake and on the adapter on
moto: kept once per match however often an unmatch is retried, read newest match first within a
limit, per reconciliation and per environment (never another's), expired ones left out."""
from __future__ import annotations

import inspect
from dataclasses import replace

import pytest

from chalicelib.adapters.dynamodb.table import DynamoTable
from chalicelib.adapters.dynamodb.unmatch_decisions import UnmatchDecisionRepository
from chalicelib.domain.clock import utc_now
from chalicelib.domain.unmatch_decisions import KEPT_FOR, MAX_RECORDS_PER_SIDE, UnmatchDecision, decision_of
from tests.contract.builders import ENV, OTHER_ENV
from tests.fakes.unmatch_decisions import FakeUnmatchDecisions


@pytest.fixture
def store(backend):
    if backend.name == "fake":
        return FakeUnmatchDecisions()
    return UnmatchDecisionRepository(DynamoTable(backend._aws.dynamodb, backend._settings.table_name))


def to_ms(kept: UnmatchDecision) -> UnmatchDecision:
    """As read back: the time to the millisecond."""
    return replace(kept, decided_at=kept.decided_at.replace(microsecond=kept.decided_at.microsecond // 1000 * 1000))


def decision(match_id: int, reconciliation_id: int = 1, environment: str = ENV, by: str = "user:3",
             a=(10,), b=(20,), at=None) -> UnmatchDecision:
    return decision_of(environment, reconciliation_id, match_id, [("a", i) for i in a] + [("b", i) for i in b], by,
                       at or utc_now(), "confirmed", None)


def test_a_decision_reads_back_as_kept(store, clock):
    kept = decision_of(ENV, 1, 7, [("a", 3), ("b", 9), ("b", 8)], "api_key:2", utc_now(), "proposed", 4,
                       approved_by="user:5")

    assert store.keep(kept) is True

    [read] = store.newest_of(ENV, 1, 10)
    assert read == to_ms(kept) and read.side_b_record_ids == (8, 9) and read.pairs() == {(3, 8), (3, 9)}
    assert (read.reconciliation_rule_id, read.approved_by, read.match_status) == (4, "user:5", "proposed")


def test_a_retried_unmatch_keeps_the_first_decision(store, clock):
    first = decision(7, by="user:3")
    assert store.keep(first) is True
    clock.advance(seconds=5)

    assert store.keep(decision(7, by="user:4", b=(21,))) is False

    assert store.newest_of(ENV, 1, 10) == [to_ms(first)]


def test_newest_match_first_within_the_limit_per_reconciliation_and_environment(store, clock):
    for match_id in (3, 12, 7):
        store.keep(decision(match_id))
    store.keep(decision(5, reconciliation_id=2))
    store.keep(decision(9, environment=OTHER_ENV))

    assert [d.match_id for d in store.newest_of(ENV, 1, 10)] == [12, 7, 3]
    assert [d.match_id for d in store.newest_of(ENV, 1, 2)] == [12, 7]
    assert [d.match_id for d in store.newest_of(ENV, 2, 10)] == [5]
    assert [d.match_id for d in store.newest_of(OTHER_ENV, 1, 10)] == [9]
    assert store.newest_of(OTHER_ENV, 2, 10) == []


def test_an_expired_decision_is_left_out_before_ttl_removes_it(store, clock):
    store.keep(decision(1))
    clock.advance(days=10)
    store.keep(decision(2))
    clock.advance(days=KEPT_FOR.days - 5)  # the first is past its expiry, the second is not

    assert [d.match_id for d in store.newest_of(ENV, 1, 10)] == [2]


def test_a_large_match_keeps_its_first_records_and_says_so(store, clock):
    big = decision(4, a=range(1, MAX_RECORDS_PER_SIDE + 51), b=(1_000,))
    store.keep(big)

    [read] = store.newest_of(ENV, 1, 10)
    assert read.truncated and read.side_a_record_ids == tuple(range(1, MAX_RECORDS_PER_SIDE + 1))


def test_the_fake_has_the_adapters_surface():
    for name in ("keep", "newest_of"):
        assert inspect.signature(getattr(FakeUnmatchDecisions, name)) == inspect.signature(
            getattr(UnmatchDecisionRepository, name))


def test_the_newest_are_read_across_pages(store, clock, monkeypatch):
    monkeypatch.setattr("chalicelib.adapters.dynamodb.unmatch_decisions.PAGE", 2)  # the adapter's query size
    for match_id in range(1, 8):
        store.keep(decision(match_id))

    assert [d.match_id for d in store.newest_of(ENV, 1, 100)] == [7, 6, 5, 4, 3, 2, 1]
    assert [d.match_id for d in store.newest_of(ENV, 1, 5)] == [7, 6, 5, 4, 3]
