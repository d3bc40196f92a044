"""Deleting a stream and recounting its records (services/data_streams.py) on the fakes: ordered
writes that a retry or the sweeper finishes after a crash part-way."""
import re
from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.data_streams import PropertyType, StreamType
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.ingestion import IngestionJob, JobSource, JobStatus, OnConflict
from chalicelib.services.data_streams import create_stream, delete_stream, recount_records, sweep_recounts
from chalicelib.services.ingestion.bulk import process_job, submit_bulk
from chalicelib.services.property_definitions import create_definition
from tests.services.conftest import ENV, record


@pytest.fixture
def bank(ports):
    return create_stream(ports.data_streams, ENV, key="bank", name="Bank", type_=StreamType.API)


def _define(ports):
    return create_definition(ports, ENV, key="ref", name="Ref", type_=PropertyType.STRING,
                             data_stream_key="bank", optional=False)


class _SlowMirror:
    """A mirror read that lasts while other writers act: `during` runs mid-count."""

    def __init__(self, mirror, count: int, during) -> None:
        self._mirror, self._count, self._during = mirror, count, during

    def count_records(self, environment, key):
        self._during()
        return self._count


def test_a_stream_an_import_still_writes_into_is_not_deleted_until_the_import_has_finished(ports, bank):
    # Given a bulk request into the stream, queued (pending), and one into another stream
    create_stream(ports.data_streams, ENV, key="ledger", name="Ledger", type_=StreamType.API)
    job = submit_bulk(ports, ENV, [record("bank", 1, 100)], OnConflict.SKIP, None)
    other = submit_bulk(ports, ENV, [record("ledger", 1, 100)], OnConflict.SKIP, None)

    # When the stream is deleted, it is refused naming the request, and the stream stays as it was
    with pytest.raises(Conflict, match=f"data stream 'bank' has bulk request {job.id} still writing into it"):
        delete_stream(ports, ENV, "bank")
    assert ports.data_streams.get(ENV, "bank").key == "bank"

    # Then once the request has written its record, the delete goes, the record with it
    process_job(ports, ENV, job.id)
    [written] = [r.record_id for r in ports.ingestion_jobs.results(ENV, job.id)]
    assert other.status is JobStatus.PENDING  # (another stream's import is no matter)
    delete_stream(ports, ENV, "bank")
    assert ports.data_streams.find_including_deleting(ENV, "bank") is None
    assert ports.records.find_many(ENV, [written]) == {}


@pytest.mark.parametrize("status, chunks_begun, settled, refused", [
    (JobStatus.PENDING, None, False, "(pending: it may be cancelled, POST /v1/file_imports/900/cancel)"),
    (JobStatus.PROCESSING, 2, False, "(processing: it may be cancelled"),
    (JobStatus.REPLICATING, 3, False, "(replicating, being settled)"),  # its mirror parts go on being written
    (JobStatus.CANCELLED, 2, False, "(cancelled, being settled)"),  # what its chunks wrote is settled yet
    (JobStatus.CANCELLED, 2, True, None),
    (JobStatus.FAILED, None, False, None),  # ended before it wrote anything
    (JobStatus.COMPLETED, 3, True, None),
])
def test_a_file_import_keeps_its_stream_from_being_deleted_until_it_is_settled(ports, bank, status, chunks_begun,
                                                                                settled, refused):
    ports.ingestion_jobs.add(IngestionJob(ENV, 900, JobSource.CSV, status, 10, OnConflict.SKIP, utc_now(),
                                          data_stream_key="bank"))
    row = ports.ingestion_jobs.rows[(ENV, 900)]
    row.job = replace(row.job, chunks_begun=chunks_begun, counts_rolled_up=settled)
    if refused is None:
        delete_stream(ports, ENV, "bank")
        assert ports.data_streams.find_including_deleting(ENV, "bank") is None
        return
    with pytest.raises(Conflict, match=re.escape(f"data stream 'bank' has file import 900 still writing into it "
                                                 f"{refused}")):
        delete_stream(ports, ENV, "bank")
    assert ports.data_streams.get(ENV, "bank").key == "bank"


def test_two_deletes_beside_an_import_at_work_are_both_refused(ports, bank):
    # The other delete took the mark back first: this one's unmark finds none, and still refuses
    job = submit_bulk(ports, ENV, [record("bank", 1, 100)], OnConflict.SKIP, None)
    ports.data_streams.unmark_deleting = lambda environment, key: False
    with pytest.raises(Conflict, match=f"bulk request {job.id} still writing into it"):
        delete_stream(ports, ENV, "bank")
    assert ports.data_streams.find_including_deleting(ENV, "bank") is not None  # not removed


# Moved from tests/integration/test_crash_recovery.py ---------------------------------------------

def test_a_delete_that_crashed_part_way_is_finished_by_the_retry(ports, bank):
    definition = _define(ports)
    ports.data_streams.mark_deleting(ENV, "bank")  # the crash came right after this write
    with pytest.raises(NotFound):
        ports.data_streams.get(ENV, "bank")
    with pytest.raises(Conflict):
        create_stream(ports.data_streams, ENV, key="bank", name="Too soon", type_=StreamType.API)
    delete_stream(ports, ENV, "bank")
    with pytest.raises(NotFound):
        ports.property_definitions.get(ENV, definition.id)
    assert ports.data_streams.find_including_deleting(ENV, "bank") is None


def test_a_recount_that_began_earlier_never_overwrites_a_later_one(ports, bank):
    later = utc_now() + timedelta(seconds=1)

    def a_later_recount_lands_first():
        assert ports.data_streams.set_records_count(ENV, "bank", 7, later)

    recount_records(replace(ports, mirror=_SlowMirror(ports.mirror, 5, a_later_recount_lands_first)), ENV, "bank")
    assert ports.data_streams.get(ENV, "bank").records_count == 7


def test_a_delete_asking_for_a_recount_while_one_reads_keeps_its_request(ports, bank, clock):
    def a_delete_asks_meanwhile():
        ports.data_streams.request_recount(ENV, "bank", utc_now() + timedelta(seconds=1))

    recount_records(replace(ports, mirror=_SlowMirror(ports.mirror, 5, a_delete_asks_meanwhile)), ENV, "bank")
    clock.advance(minutes=1)  # the sweeper comes by a minute later
    assert ports.data_streams.recount_requests() == [(ENV, "bank")]
    assert sweep_recounts(ports) == 1
    assert ports.data_streams.get(ENV, "bank").records_count == 0
    assert ports.data_streams.recount_requests() == []


def test_a_recount_cut_short_is_finished_by_the_sweeper(ports, bank):
    class Dies(_SlowMirror):
        def count_records(self, environment, key):
            raise RuntimeError("Lambda timed out")

    with pytest.raises(RuntimeError):
        recount_records(replace(ports, mirror=Dies(ports.mirror, 0, None)), ENV, "bank")
    ports.mirror.tombstone(ENV, "bank", 4, 1)  # a tombstone of an import never published counts nothing
    assert sweep_recounts(ports) == 1
    assert ports.data_streams.recount_requests() == []


def test_the_recount_sweeper_goes_on_past_a_stream_whose_recount_fails(ports, bank):
    create_stream(ports.data_streams, ENV, key="ledger", name="Ledger", type_=StreamType.API)
    for key in ("bank", "ledger"):
        ports.data_streams.request_recount(ENV, key, utc_now())

    class FailsForBank(_SlowMirror):
        def count_records(self, environment, key):
            if key == "bank":
                raise RuntimeError("throttled")
            return self._count

    assert sweep_recounts(replace(ports, mirror=FailsForBank(ports.mirror, 3, None))) == 1
    assert ports.data_streams.get(ENV, "ledger").records_count == 3
    assert ports.data_streams.recount_requests() == [(ENV, "bank")]
