"""SQS delivers at least once and Lambda can die mid-batch: whatever the number of deliveries and
wherever a crash falls, each valid item becomes exactly one record and the counts stay right."""
from dataclasses import replace

import pytest

from chalicelib.adapters.dynamodb.data_streams import DataStreamRepository
from chalicelib.adapters.dynamodb.jobs import IngestionJobRepository
from chalicelib.adapters.dynamodb.records import RecordRepository
from chalicelib.domain.data_streams import StreamType
from chalicelib.domain.ingestion import JobStatus, OnConflict
from chalicelib.domain.records import RecordQuery
from chalicelib.services.data_streams import create_stream
from chalicelib.services.ingestion.bulk import process_job, submit_bulk


class LambdaDied(Exception):
    pass


class DiesOnCall:
    """Wraps one method of a real repository so that its n-th call dies (before or after the write)."""

    def __init__(self, method_name: str, call: int, after_write: bool):
        self.method_name, self.call, self.after_write, self.calls = method_name, call, after_write, 0

    def wrap(self, repository):
        original = getattr(repository, self.method_name)

        def dying(*args, **kwargs):
            self.calls += 1
            if self.calls == self.call and not self.after_write:
                raise LambdaDied(f"{self.method_name} call {self.call}")
            result = original(*args, **kwargs)
            if self.calls == self.call:
                raise LambdaDied(f"after {self.method_name} call {self.call}")
            return result

        setattr(repository, self.method_name, dying)
        return repository


CHUNK_ROWS = 100  # a bulk chunk of these tests' jobs (BULK_CHUNK_ROWS makes no other difference)
ITEMS = 3 * CHUNK_ROWS + 17  # four chunks, the last one short
BAD_EVERY = 50               # every 50th item is invalid


def items():
    result = []
    for n in range(ITEMS):
        entry = {"date": "2026-11-02", "data_stream_key": "bank", "amount": n, "direction": "credit",
                 "external_id": f"ext-{n}"}
        if n % BAD_EVERY == 0:
            entry["amount"] = -1
        if n % 7 == 0:
            del entry["external_id"]  # records without an external_id must not double either
        result.append(entry)
    return result


VALID = ITEMS - len(range(0, ITEMS, BAD_EVERY))


@pytest.fixture
def job(services):
    create_stream(services.data_streams, "acme", key="bank", name="Bank", type_=StreamType.API)
    ports = replace(services.ports, limits=replace(services.ports.limits, bulk_chunk_rows=CHUNK_ROWS))
    return submit_bulk(ports, "acme", items(), OnConflict.SKIP, None)


def all_records(services):
    found, cursor = [], None
    while True:
        page, cursor = services.records.list_page("acme", RecordQuery(data_stream_key="bank"), 200, cursor)
        found += page
        if cursor is None:
            return found


def assert_exactly_once(services, job_id):
    job = services.ingestion_jobs.get("acme", job_id)
    assert job.status is JobStatus.COMPLETED
    assert (job.total_items, job.processed_items, job.successful_items, job.failed_items, job.skipped_items) == (
        ITEMS, ITEMS, VALID, ITEMS - VALID, 0)
    records = all_records(services)
    assert len(records) == VALID
    assert len({r.id for r in records}) == VALID
    assert sorted(r.amount for r in records) == sorted(n for n in range(ITEMS) if n % BAD_EVERY)
    results = services.ingestion_jobs.results("acme", job_id)
    assert [r.index for r in results] == list(range(ITEMS))
    assert services.data_streams.get("acme", "bank").records_count == VALID


def ports_with(services, **dying):
    """The container's ports, with some repositories replaced by ones that die once."""
    table = services.table
    replacements = {
        "records": lambda: RecordRepository(table),
        "ingestion_jobs": lambda: IngestionJobRepository(table),
        "data_streams": lambda: DataStreamRepository(table, services.counters),
    }
    changes = {name: death.wrap(replacements[name]()) for name, death in dying.items()}
    return replace(services.ports, **changes)


def test_processing_the_same_message_twice_changes_nothing(services, job):
    process_job(services.ports, "acme", job.id)
    process_job(services.ports, "acme", job.id)
    assert_exactly_once(services, job.id)


@pytest.mark.parametrize("where", [
    {"records": DiesOnCall("put_many", call=3, after_write=False)},  # before the third chunk's records
    {"records": DiesOnCall("put_many", call=2, after_write=True)},  # records written, results not
    # chunk counted (its save marks the next one begun), next not started
    {"ingestion_jobs": DiesOnCall("save_chunk_and_begin_ahead", call=2, after_write=True)},
    {"records": DiesOnCall("put_external_id_guards", call=2, after_write=True)},  # a chunk's guards, not its records
    {"data_streams": DiesOnCall("set_records_count", call=1, after_write=True)},  # count stored, request not cleared
    {"ingestion_jobs": DiesOnCall("mark_counts_rolled_up", call=1, after_write=True)},  # all done but the move
    {"ingestion_jobs": DiesOnCall("move", call=2, after_write=False)},  # everything written, not completed
], ids=["before-records", "after-records", "after-count", "mid-guards", "after-stream-count",
        "after-rollup-mark", "before-complete"])
def test_a_crash_part_way_is_finished_by_the_redelivery_without_duplicates(services, job, where):
    with pytest.raises(LambdaDied):
        process_job(ports_with(services, **where), "acme", job.id)
    assert services.ingestion_jobs.get("acme", job.id).status is not JobStatus.COMPLETED

    process_job(services.ports, "acme", job.id)

    assert_exactly_once(services, job.id)
