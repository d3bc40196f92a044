"""After a restart, on the fakes: work in flight resumes at once (services/resumption.py), and the
analytics mirror is rewritten from the table where it lost imports (services/mirror_repair.py)."""
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.clock import utc_now
from chalicelib.domain.executions import ExecutionStopped
from chalicelib.domain.ingestion import (
    BULK_CHUNK_ROWS,
    ChunkOutcome,
    ItemResult,
    ItemStatus,
    JobSource,
    JobStatus,
    OnConflict,
)
from chalicelib.domain.reconciliation_exceptions import RecordFilter
from chalicelib.services import investigations
from chalicelib.services.data_streams import recount_records
from chalicelib.services.ingestion import files
from chalicelib.services.ingestion.bulk import process_job, submit_bulk
from chalicelib.services.mirror_repair import repair_mirror
from chalicelib.services.reconciliation_exceptions import ExceptionQuery, list_exceptions, refresh
from chalicelib.services.reconciliation_runs import start_run
from chalicelib.services.records import delete_record
from chalicelib.services.resumption import resume_interrupted
from tests.fakes import fake_ports
from tests.services.conftest import ENV, days_ago, record, streams

CSV = b"date,amount,external_id\n2026-11-01,12.34,tx-1\n2026-11-02,5.00,tx-2\n"


def file_import(ports, upload=True):
    job, _ = files.create_import(ports, ENV, "bank", filename="nov.csv", source=JobSource.CSV,
                                        on_conflict=OnConflict.SKIP, column_mapping={}, date_format="YYYY-MM-DD",
                                        decimal_places=None)
    if upload:
        ports.payloads.objects[job.import_file_key] = (CSV, datetime.now(UTC))
    return job


def key_of(ports, environment):
    ports.api_keys.add(ApiKey(id=ports.api_keys.next_id(), environment=environment, key_hash=f"h-{environment}",
                              created_at=utc_now(), label=None))


def test_imports_and_runs_in_flight_resume_at_once_without_spending_their_restarts(ports, reconciliation, ingest):
    mid_import = file_import(ports)
    assert files.prepare(ports, ENV, mid_import.id) == "chunk"  # then its execution died
    waiting = file_import(ports, upload=False)
    bulk = submit_bulk(ports, ENV, [record("bank", 1, 500)], OnConflict.SKIP, None)
    run = start_run(ports, ENV, reconciliation.id)
    ingest(record("bank", 2, 700, days_ago(20)))
    refresh(ports, ENV, reconciliation.id)
    [exception] = list_exceptions(ports, ENV, ExceptionQuery(data_stream_key="bank"), 0, 50)[0]
    investigations.start(ports, ENV, exception.id, RecordFilter())
    ports.bulk_queue.messages.clear()
    ports.investigation_queue.messages.clear()
    before = len(ports.file_import_workflows.executions)

    resumed = resume_interrupted(ports)

    assert resumed.file_imports == [(ENV, mid_import.id)] and resumed.runs == [(ENV, run.id)]
    [(import_execution, _)] = ports.file_import_workflows.executions[before:]
    assert import_execution.startswith(f"{ENV}-{mid_import.id}-resumed")
    assert ports.run_workflows.executions[-1][0].startswith(f"{ENV}-run-{run.id}-rresumed")
    assert ports.bulk_queue.messages == [] and ports.investigation_queue.messages == []  # their queue keeps them
    assert ports.ingestion_jobs.get(ENV, waiting.id).last_progress_at is None  # its upload has not come
    assert "1 file import(s), 1 reconciliation run(s)" in resumed.describe()
    # A resume says nothing of the work: the sweeper's restarts are left whole
    assert ports.ingestion_jobs.get(ENV, mid_import.id).restarts == 0 and ports.runs.get(ENV, run.id).restarts == 0
    again = resume_interrupted(ports)  # the next start resumes what is still in flight, named anew
    assert again.file_imports == [(ENV, mid_import.id)]
    assert len({name for name, _ in ports.file_import_workflows.executions[before:]}) == 2
    assert process_job(ports, ENV, bulk.id).status is JobStatus.COMPLETED


def test_imports_the_mirror_lost_are_rewritten_from_the_table_and_counted_again(ports, ingest, clock):
    streams(ports, "bank", "ledger", "cards")
    key_of(ports, ENV)
    first = ingest(record("bank", 1, 500), record("bank", 2, 250, direction="debit"), record("ledger", 1, 40))
    ingest(record("cards", 1, 99))
    delete_record(ports, ENV, first[1])
    recount_records(ports, ENV, "bank")
    jobs = {job.id: job for job in ports.ingestion_jobs.list_of_stream(ENV, "bank", 10, None)[0]}
    [bank_job] = jobs.values()
    kept = ports.ingestion_jobs.get(ENV, bank_job.id).aggregates
    assert kept is not None and kept.total.count == 3
    assert repair_mirror(ports).imports_rewritten == []  # nothing is missing

    ports.mirror.forget_stream(ENV, "bank")  # the mirror lost the bank's objects (not the ledger's)
    ports.mirror.forget_stream(ENV, "ledger")
    clock.advance(seconds=1)
    recount_records(ports, ENV, "bank")
    assert ports.data_streams.get(ENV, "bank").records_count == 0
    clock.advance(seconds=1)  # a count stands against one read in the same millisecond

    repair = repair_mirror(ports)

    assert repair.imports_rewritten == [(ENV, bank_job.id)]
    assert repair.records_written == 2  # the deleted record stays deleted
    assert [ports.data_streams.get(ENV, key).records_count for key in ("bank", "ledger", "cards")] == [1, 1, 1]
    assert ports.ingestion_jobs.get(ENV, bank_job.id).aggregates == kept  # totals that were read whole stay
    assert repair_mirror(ports).imports_rewritten == []  # done once
    assert len(repair_mirror(ports, everything=True).imports_rewritten) == 2


def test_lost_totals_are_stored_again_and_other_environments_are_left_alone(ports, clock):
    for environment in (ENV, "globex"):
        key_of(ports, environment)
    streams(ports, "bank")
    job = submit_bulk(ports, ENV, [record("bank", 1, 500), record("bank", 2, 700)], OnConflict.SKIP, None)
    published = ports.mirror.publish
    ports.mirror.publish = lambda *args: 0  # the mirror loses the parts as the job completes
    process_job(ports, ENV, job.id)
    ports.mirror.publish = published
    done = ports.ingestion_jobs.get(ENV, job.id)
    assert done.status is JobStatus.COMPLETED and done.aggregates.total.count == 0
    ports.mirror.forget_import(ENV, job.id, ["bank"])
    clock.advance(seconds=1)

    assert repair_mirror(ports, environment="globex").imports_rewritten == []
    assert repair_mirror(ports, environment=ENV).imports_rewritten == [(ENV, job.id)]
    totals = ports.ingestion_jobs.get(ENV, job.id).aggregates.total
    assert (totals.count, totals.credits) == (2, 1200)
    assert ports.data_streams.get(ENV, "bank").records_count == 2


def test_a_stopping_process_leaves_its_jobs_at_a_checkpoint_and_they_resume_from_it(reconciliation):
    stop = {"now": False}
    ports = replace(fake_ports(), stopping=lambda: stop["now"])
    streams(ports, "bank")
    items = [record("bank", n, 100 + n) for n in range(3 * BULK_CHUNK_ROWS)]
    job = submit_bulk(ports, ENV, items, OnConflict.SKIP, None)
    saved = ports.ingestion_jobs.save_chunk_and_begin_ahead  # the save of a chunk processed in order

    def stop_after_first(job, outcome, **kwargs):
        stop["now"] = True  # Ctrl-C while the first chunk was written
        return saved(job, outcome, **kwargs)
    ports.ingestion_jobs.save_chunk_and_begin_ahead = stop_after_first
    with pytest.raises(ExecutionStopped):
        process_job(ports, ENV, job.id)
    stopped = ports.ingestion_jobs.get(ENV, job.id)
    assert (stopped.status, stopped.done_chunks) == (JobStatus.PROCESSING, frozenset({0}))

    upload = file_import(ports)
    assert files.prepare(ports, ENV, upload.id) == "chunk"
    assert files.write_chunks(ports, ENV, upload.id) == "chunk"  # stopping: not one chunk written
    assert ports.ingestion_jobs.get(ENV, upload.id).done_chunks == frozenset()

    stop["now"] = False
    ports.ingestion_jobs.save_chunk_and_begin_ahead = saved
    assert process_job(ports, ENV, job.id).status is JobStatus.COMPLETED
    assert ports.ingestion_jobs.get(ENV, job.id).successful_items == 3 * BULK_CHUNK_ROWS


def test_an_import_that_ended_early_and_was_never_settled_is_settled(ports, ingest, clock):
    streams(ports, "bank")
    key_of(ports, ENV)
    ingest(record("bank", 1, 500), record("bank", 2, 700))
    # A job moved to failed, its never processed item counted, whose process died before settling
    # it (as `fail` does, cut short)
    other = submit_bulk(ports, ENV, [record("bank", 4, 300)], OnConflict.SKIP, None)
    ending = ports.ingestion_jobs.begin_ending(ports.ingestion_jobs.get(ENV, other.id), JobStatus.FAILED, {})
    never = ItemResult(0, ItemStatus.FAILED, "bank-4", None, "not processed: the bulk request failed", None)
    ports.ingestion_jobs.save_chunk(ending, ChunkOutcome(0, (never,), {}), unprocessed=True)
    ports.ingestion_jobs.move(ports.ingestion_jobs.get(ENV, other.id), JobStatus.FAILED)
    clock.advance(seconds=1)

    repair = repair_mirror(ports)

    assert repair.imports_rewritten == [] and repair.imports_settled == [(ENV, other.id)]
    settled = ports.ingestion_jobs.get(ENV, other.id)
    assert settled.counts_rolled_up and settled.failed_items == 1  # its item, never processed, says why
    assert ports.data_streams.get(ENV, "bank").records_count == 2
    assert "settled 1 import(s) that had ended early" in repair.describe()
    assert repair_mirror(ports).imports_settled == []  # once
