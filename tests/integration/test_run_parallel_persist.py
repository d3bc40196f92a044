"""A persist call writing several chunks at once, on moto: each chunk counted as it ends, and a
call killed with several chunks half-written undone by the fail phase."""
from dataclasses import replace

import pytest

from chalicelib.services.reconciliation_runs import PERSIST_CHUNKS, give_up, load, match, persist, start_run
from tests.integration.conftest import record
from tests.integration.test_run_crash_points import (
    CHUNK_RECORDS,
    ENV,
    RECORDS,
    RULE,
    Crashed,
    NoExecutions,
    assert_each_record_in_exactly_one_match,
    assert_every_claim_is_a_committed_match,
    lose_files,
)
from tests.support.crashes import Dies, Killed, one_by_one

CHUNKS = RECORDS * 2 // CHUNK_RECORDS  # 5, of 10 matches each


@pytest.fixture
def planned(api, services, ingest, reconciliation):
    """A run loaded and matched (5 chunks planned), its persist not begun; phases called by the test."""
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).status_code == 201
    record_ids = ingest(*[record("bank", n, 1000 + n) for n in range(RECORDS)])
    record_ids += ingest(*[record("ledger", n, 1000 + n) for n in range(RECORDS)])
    ports = replace(services.ports, limits=replace(services.ports.limits, chunk_records=CHUNK_RECORDS),
                    run_workflows=NoExecutions())
    run = start_run(ports, ENV, reconciliation["id"])
    load(ports, ENV, run.id)
    match(ports, ENV, run.id)
    return ports, Crashed(run.id, reconciliation["id"], record_ids)


def test_one_persist_call_writes_several_chunks_and_counts_each(services, planned):
    ports, run = planned
    assert 1 < PERSIST_CHUNKS < CHUNKS

    # When a persist call writes PERSIST_CHUNKS chunks, and a second the rest
    assert persist(ports, ENV, run.run_id, chunks=PERSIST_CHUNKS) == "persist"
    first = services.runs.get(ENV, run.run_id)
    assert persist(ports, ENV, run.run_id, chunks=PERSIST_CHUNKS) == "finish"

    # Then the first counted its chunks, and in the end each chunk is counted once and every
    # record is in exactly one match
    assert first.done_chunks == frozenset(range(PERSIST_CHUNKS))
    assert first.matched_records == PERSIST_CHUNKS * CHUNK_RECORDS
    written = services.runs.get(ENV, run.run_id)
    assert written.done_chunks == frozenset(range(CHUNKS)) and written.matched_records == 2 * RECORDS
    assert_each_record_in_exactly_one_match(services, run)


def test_a_persist_call_counts_its_chunks_one_by_one_as_they_end(services, planned):
    ports, run = planned

    # When a call writing every chunk at once dies as it counts its third
    with pytest.raises(Killed):
        persist(replace(ports, runs=Dies(ports.runs, "save_chunk", 3)), ENV, run.run_id, chunks=PERSIST_CHUNKS)

    # Then the two chunks counted before show in the run's matched records and progress
    counted = services.runs.get(ENV, run.run_id)
    assert len(counted.done_chunks) == 2 and counted.matched_records == 2 * CHUNK_RECORDS
    assert counted.progress == 40 + 60 * 2 / CHUNKS


def test_a_call_killed_with_several_chunks_half_written_is_undone_by_the_fail_phase(services, planned):
    ports, run = planned

    # Given a call writing every chunk at once, killed after some claims (several chunks begun)
    with pytest.raises(Killed):
        persist(replace(ports, claims=Dies(one_by_one(ports.claims), "claim_record", 25)), ENV, run.run_id,
                chunks=PERSIST_CHUNKS)
    lose_files(services, run.run_id)

    # When the fail phase runs
    give_up(services.ports, ENV, run.run_id, "stopped")

    # Then no record holds a claim without a committed match
    assert services.runs.get(ENV, run.run_id).status.value == "failed"
    assert_every_claim_is_a_committed_match(services, run)
