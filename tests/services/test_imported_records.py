"""When the analytics mirror may stand for the table in a run's load: the stream's records all as
imported, and every import that may have written into it published whole."""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.ingestion import IngestionJob, JobSource, JobStatus, OnConflict
from chalicelib.services import imported_records
from chalicelib.services.reconciliation_rules import create_rule
from chalicelib.services.records import delete_record
from tests.services.conftest import ENV, matched_by_a_run, record, streams


def _open_ids(ports, stream_key="bank"):
    pages = imported_records.open_pages(ports, ENV, stream_key, with_metadata=False)
    return None if pages is None else sorted(i for page in pages for i in page["id"].to_list())


def _another_import(ports, status: JobStatus, chunks_begun: int | None, settled: bool = False) -> IngestionJob:
    """An import of the bank stream in `status` that created no record, as its job item would say it."""
    job = IngestionJob(ENV, 900, JobSource.CSV, status, 10, OnConflict.SKIP, utc_now(), data_stream_key="bank")
    ports.ingestion_jobs.add(job)
    row = ports.ingestion_jobs.rows[(ENV, job.id)]
    row.job = replace(row.job, chunks_begun=chunks_begun, counts_rolled_up=settled)
    return row.job


def test_every_completed_import_of_an_untouched_stream_comes_from_the_mirror(ports, ingest, reconciliation):
    first = ingest(record("bank", 1, 100), record("bank", 2, 200))
    second = ingest(record("bank", 3, 300), record("ledger", 1, 100))
    assert _open_ids(ports) == sorted(first + second[:1])
    assert _open_ids(ports, "ledger") == second[1:]


@pytest.mark.parametrize("status, chunks_begun, settled, answers", [
    (JobStatus.PENDING, None, False, True),  # left out of a run either way
    (JobStatus.PROCESSING, 0, False, True),
    (JobStatus.REPLICATING, 0, False, True),  # published: its marker decides
    (JobStatus.FAILED, None, False, True),  # ended before it wrote anything
    (JobStatus.CANCELLED, None, False, True),
    (JobStatus.FAILED, 0, True, True),  # ended early, settled: published
    (JobStatus.FAILED, 0, False, False),  # ended early, not settled: what it wrote is not published yet
    (JobStatus.CANCELLED, 3, False, False),
])
def test_an_import_that_may_hold_unpublished_records_sends_the_stream_to_the_table(
        ports, ingest, reconciliation, status, chunks_begun, settled, answers):
    written = ingest(record("bank", 1, 100))
    _another_import(ports, status, chunks_begun, settled)
    assert _open_ids(ports) == (written if answers else None)


def test_a_listed_import_still_writing_is_read_again_before_it_is_left_out(ports, ingest, reconciliation):
    ingest(record("bank", 1, 100))
    listed = _another_import(ports, JobStatus.PROCESSING, 0)
    stored = ports.ingestion_jobs.rows[(ENV, listed.id)]
    stale = ports.ingestion_jobs.list_of_stream

    def listing_of_before(*args):  # as an index's copy lagging behind the job's item
        jobs, cursor = stale(*args)
        return [listed if job.id == listed.id else job for job in jobs], cursor
    ports.ingestion_jobs.list_of_stream = listing_of_before
    stored.job = replace(stored.job, status=JobStatus.FAILED)  # ended early since: not settled
    assert _open_ids(ports) is None


def test_an_import_the_mirror_holds_part_of_sends_the_stream_to_the_table(ports, ingest, reconciliation):
    ingest(record("bank", 1, 100), record("bank", 2, 200))
    job = ports.ingestion_jobs.list_of_stream(ENV, "bank", 10, None)[0][0]
    row = ports.ingestion_jobs.rows[(ENV, job.id)]
    row.job = replace(row.job, created_per_stream={"bank": 3})  # a part the mirror never got
    assert _open_ids(ports) is None


def test_a_stream_without_imports_is_left_to_the_table(ports, reconciliation):
    assert _open_ids(ports) is None


def test_a_claim_or_a_delete_takes_the_stream_off_the_mirror_for_good(ports, ingest, reconciliation):
    # A match claims one record of each stream: neither stream is read from the mirror any more,
    # new imports or not
    streams(ports, "fees")
    bank, ledger, fee, _ = ingest(record("bank", 1, 100), record("ledger", 1, 100), record("fees", 1, 5),
                                  record("fees", 2, 6))
    rule = create_rule(ports, ENV, reconciliation.id, {"name": "Same amount",
                                                       "conditions": [{"field": "amount", "operator": "equals"}]})
    matched_by_a_run(ports, reconciliation, rule, [bank], [ledger])
    ingest(record("bank", 2, 200), record("ledger", 2, 200))
    assert _open_ids(ports) is None and _open_ids(ports, "ledger") is None

    # A delete does the same to its stream alone
    assert _open_ids(ports, "fees") is not None
    delete_record(ports, ENV, fee)
    assert _open_ids(ports, "fees") is None
