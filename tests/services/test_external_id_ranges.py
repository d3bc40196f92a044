"""The ranges of a stream's guarded external_ids (services/ingestion/chunk.py `WriterLeases`): a
chunk reads only the guards that may exist, and what it finds is what it found before."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.domain.ingestion import ItemStatus, OnConflict
from chalicelib.services.ingestion import chunk
from chalicelib.services.ingestion.bulk import process_job, submit_bulk
from chalicelib.services.ingestion.chunk import (
    MAX_EXTERNAL_ID_RANGES,
    WRITER_LEASE,
    WriterLeaseLost,
    WriterLeases,
    widen,
)
from tests.services.conftest import ENV, streams


def item(external_id: str, stream: str = "bank") -> dict:
    return {"date": "2026-11-01", "data_stream_key": stream, "amount": 1000, "direction": "credit",
            "external_id": external_id}


class ReadGuards:
    """The (stream key, external_id) of every guard read, wrapped around the fake's reads."""

    def __init__(self, ports) -> None:
        self.keys: list[tuple[str, str]] = []
        self._read = ports.records.external_id_claims
        ports.records.external_id_claims = self

    def __call__(self, environment, wanted):
        wanted = list(wanted)
        self.keys += wanted
        return self._read(environment, wanted)


def ingest(ports, external_ids, stream="bank", on_conflict=OnConflict.SKIP):
    job = submit_bulk(ports, ENV, [item(e, stream) for e in external_ids], on_conflict, None)
    return process_job(ports, ENV, job.id)


def results(ports, job):
    return [(r.external_id, r.status, r.record_id) for r in ports.ingestion_jobs.results(ENV, job.id)]


@pytest.fixture
def tracked(ports):
    streams(ports, "bank", "ledger")
    ports.records.track_external_ids(ENV, "bank")  # as the DynamoDB adapter does when it creates a stream


def test_a_new_id_above_the_ranges_reads_no_guard_and_a_repeated_one_still_finds_its_record(ports, tracked):
    reads = ReadGuards(ports)
    first = ingest(ports, [f"pay-{n:04d}" for n in range(10)])
    assert reads.keys == []  # a new stream: no guard can exist
    assert ports.records.external_id_ranges(ENV, "bank") == [("pay-0000", "pay-0009")]

    second = ingest(ports, [f"pay-{n:04d}" for n in range(8, 14)])

    # only the two ids inside the ranges were read, and they are skipped with the first records' ids
    assert sorted(reads.keys) == [("bank", "pay-0008"), ("bank", "pay-0009")]
    stored = {e: record_id for e, _, record_id in results(ports, first)}
    assert results(ports, second)[:2] == [("pay-0008", ItemStatus.SKIPPED, stored["pay-0008"]),
                                          ("pay-0009", ItemStatus.SKIPPED, stored["pay-0009"])]
    assert [status for _, status, _ in results(ports, second)[2:]] == [ItemStatus.SUCCESSFUL] * 4
    # (a second range: ids may lie between the two, "pay-0009a" say, and none is guarded there)
    assert ports.records.external_id_ranges(ENV, "bank") == [("pay-0000", "pay-0009"), ("pay-0010", "pay-0013")]


def test_a_duplicate_below_the_ranges_of_a_later_job_still_fails_with_on_conflict_error(ports, tracked):
    ingest(ports, ["b-1", "b-2"])
    ingest(ports, ["z-1"])  # out of order: a second range above
    refused = ingest(ports, ["b-2", "c-1"], on_conflict=OnConflict.ERROR)

    assert [(e, s) for e, s, _ in results(ports, refused)] == [("b-2", ItemStatus.FAILED),
                                                               ("c-1", ItemStatus.SUCCESSFUL)]
    assert ports.records.external_id_ranges(ENV, "bank") == [("b-1", "b-2"), ("c-1", "c-1"), ("z-1", "z-1")]


def test_a_stream_without_ranges_reads_every_guard_as_before(ports, tracked):
    reads = ReadGuards(ports)
    ingest(ports, ["l-1", "l-2"], stream="ledger")  # created before the ranges: none kept
    again = ingest(ports, ["l-2", "l-3"], stream="ledger")

    assert sorted(reads.keys) == [("ledger", "l-1"), ("ledger", "l-2"), ("ledger", "l-2"), ("ledger", "l-3")]
    assert [s for _, s, _ in results(ports, again)] == [ItemStatus.SKIPPED, ItemStatus.SUCCESSFUL]
    assert ports.records.external_id_ranges(ENV, "ledger") is None


def test_every_guard_lies_in_its_streams_ranges(ports, tracked):
    for batch in (["k-5", "a-1"], [f"x-{n}" for n in range(20)], ["m-0", "k-5", "zz"], [f"q-{n}" for n in range(3)],
                  ["b", "d", "f", "h", "j", "l", "n", "p", "r", "t"]):
        ingest(ports, batch)
    ranges = ports.records.external_id_ranges(ENV, "bank")
    guarded = [e for (env, stream, e) in ports.records.store.guards if (env, stream) == (ENV, "bank")]

    assert len(ranges) <= MAX_EXTERNAL_ID_RANGES
    assert guarded and all(any(low <= e <= high for low, high in ranges) for e in guarded)


ids = st.text(alphabet="abc019-", min_size=1, max_size=4)


@given(st.lists(st.tuples(ids, ids).map(sorted), max_size=20), st.lists(ids, max_size=10))
def test_widening_keeps_every_id_it_covered_within_the_limit(added, probes):
    ranges: list[tuple[str, str]] = []
    covered: list[str] = []
    for low, high in added:
        ranges = widen(ranges, low, high)
        covered += [low, high]
        assert len(ranges) <= MAX_EXTERNAL_ID_RANGES
        assert ranges == sorted(ranges) and all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))
    inside = [p for p in probes if any(low <= p <= high for low, high in added)]
    assert all(any(low <= e <= high for low, high in ranges) for e in covered + inside)


def test_a_duplicate_in_a_later_chunk_of_the_same_job_is_read_and_found(ports, tracked):
    # a job of three chunks of 2 rows
    small = replace(ports, limits=replace(ports.limits, bulk_chunk_rows=2))
    reads = ReadGuards(small)

    job = ingest(small, ["c-1", "c-2", "c-3", "c-1", "c-4", "c-2"])

    # the later chunks' repeats lie in the ranges the first chunk widened: read, and found its own
    assert ("bank", "c-1") in reads.keys and ("bank", "c-2") in reads.keys
    assert [(e, s) for e, s, _ in results(small, job)] == [
        ("c-1", ItemStatus.SUCCESSFUL), ("c-2", ItemStatus.SUCCESSFUL), ("c-3", ItemStatus.SUCCESSFUL),
        ("c-1", ItemStatus.SKIPPED), ("c-4", ItemStatus.SUCCESSFUL), ("c-2", ItemStatus.SKIPPED)]
    assert len([g for g in small.records.store.guards if g[1] == "bank"]) == 4


def test_a_chunk_whose_ranges_another_writer_widened_meanwhile_writes_no_guard_and_is_claimed_again(ports,
                                                                                                    tracked):
    ingest(ports, ["pay-0001"])
    job = submit_bulk(ports, ENV, [item("pay-0005"), item("pay-0007")], OnConflict.SKIP, None)
    read = ports.records.external_id_claims

    def overtaken(environment, wanted):  # after this chunk read the ranges: a writer whose lease lapsed
        current = ports.records.external_id_ranges(ENV, "bank")  # under it claims pay-0007 first
        assert ports.records.put_external_id_ranges(ENV, "bank", widen(current, "pay-0007", "pay-0007"), current)
        ports.records.claim_external_id(ENV, "bank", "pay-0007", "job:other:0", 999)
        ports.records.external_id_claims = read
        return read(environment, wanted)

    ports.records.external_id_claims = overtaken
    with pytest.raises(WriterLeaseLost):
        process_job(ports, ENV, job.id)

    assert ports.records.external_id_ranges(ENV, "bank") == [("pay-0001", "pay-0001"), ("pay-0007", "pay-0007")]
    assert ports.records.external_id_claims(ENV, [("bank", "pay-0005")]) == {}  # nothing of the chunk written
    process_job(ports, ENV, job.id)  # the next delivery reads afresh: pay-0007 is the other's
    assert [(e, s) for e, s, _ in results(ports, job)] == [("pay-0005", ItemStatus.SUCCESSFUL),
                                                           ("pay-0007", ItemStatus.SKIPPED)]


def test_a_first_lease_that_lapses_while_a_later_one_is_awaited_is_found_gone_before_any_guard(ports, tracked,
                                                                                               clock, monkeypatch):
    job = submit_bulk(ports, ENV, [item("x-1")], OnConflict.SKIP, None)
    assert ports.records.take_writer_lease(ENV, "ledger", "job:other", WRITER_LEASE)
    elapsed = [0.0]

    def sleep(seconds):  # waiting for ledger: bank's lease lapses, and a third job takes it
        elapsed[0] += 40
        clock.advance(seconds=40)
        if elapsed[0] >= 80:
            assert ports.records.take_writer_lease(ENV, "bank", "job:third", WRITER_LEASE)
            ports.records.release_writer_lease(ENV, "ledger", "job:other")

    monkeypatch.setattr(chunk, "time", SimpleNamespace(sleep=sleep, monotonic=lambda: elapsed[0]))
    leases = WriterLeases(ports, job)
    leases.hold({"bank", "ledger"})

    with pytest.raises(WriterLeaseLost):
        leases.renew()  # before its first guard


def test_an_execution_whose_lease_lapsed_releases_a_claim_only_once_it_holds_the_lease_again(ports, tracked, clock,
                                                                                           monkeypatch):
    job = replace(submit_bulk(ports, ENV, [item("x-1")], OnConflict.SKIP, None), first_record_id=5)
    assert ports.records.claim_external_id(ENV, "bank", "x-1", f"job:{job.id}:0", 5).claimed
    elapsed = [0.0]

    def sleep(_):  # waiting for the stream: the other job gives it back
        ports.records.release_writer_lease(ENV, "bank", "job:other")

    monkeypatch.setattr(chunk, "time", SimpleNamespace(sleep=sleep, monotonic=lambda: elapsed[0]))
    leases = WriterLeases(ports, job)
    leases.hold({"bank"})
    elapsed[0] += 90  # the execution stalled: its lease lapsed, and another job holds the stream now
    clock.advance(seconds=90)
    assert ports.records.take_writer_lease(ENV, "bank", "job:other", WRITER_LEASE)
    holders = []
    release = ports.records.release_external_id

    def watched(environment, stream_key, external_id, owner):
        holders.append(ports.records.store.leases[(environment, stream_key)].owner)
        return release(environment, stream_key, external_id, owner=owner)

    ports.records.release_external_id = watched
    chunk.release_orphan_claims(ports, job, [(0, chunk.KnownRow("x-1", None, ("bank", "x-1"), "bank"))], leases)

    assert holders == [f"job:{job.id}"]  # released under the lease taken again, not beside the other's
    assert ports.records.external_id_claims(ENV, [("bank", "x-1")]) == {}


class Throttled(Exception):
    pass


def test_an_execution_leaving_on_an_error_keeps_the_lease_another_execution_of_its_job_writes_under(ports, tracked):
    # Given a job's first execution holding the stream's lease, and a second delivery of the job beside it
    job = submit_bulk(ports, ENV, [item("x-5")], OnConflict.SKIP, None)
    first = WriterLeases(ports, job)
    first.hold({"bank"})
    # When the second holds it too (no wait: the same job) and leaves on an error
    with pytest.raises(Throttled), WriterLeases(ports, job) as second:
        second.hold({"bank"})
        raise Throttled("ProvisionedThroughputExceededException")
    # Then no other job may take it while the first writes guards under it
    assert not ports.records.take_writer_lease(ENV, "bank", "job:other", WRITER_LEASE)
    first.release()
    assert ports.records.take_writer_lease(ENV, "bank", "job:other", WRITER_LEASE)


def test_a_stream_added_to_the_leases_held_takes_them_all_again(ports, tracked):
    job = submit_bulk(ports, ENV, [item("x-5")], OnConflict.SKIP, None)
    with WriterLeases(ports, job) as leases:
        leases.hold({"ledger"})
        leases.hold({"bank"})  # a chunk of another stream: all given back, then taken in key order
        assert not ports.records.take_writer_lease(ENV, "ledger", "job:other", WRITER_LEASE)
        assert not ports.records.take_writer_lease(ENV, "bank", "job:other", WRITER_LEASE)
