"""A job's end (the sweeper gives up on it, or its last delivery fails it) beside an execution that
still runs: one that reaches a chunk only after the end was marked writes nothing of it, and one
that finishes a chunk while the end reads it has its results counted with its records.

The end notes the blocks of record ids of the chunks begun before it (a run then reads them from the
table, not the analytics mirror) and fails every row it never saw written. A chunk begun after that
would put records nobody notes or counts: open in the table, missing from the mirror and from the
changed blocks, so that every run reading the mirror would miss them for good."""
from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from chalicelib.domain.ingestion import BULK_CHUNK_ROWS, ItemStatus, JobStatus, OnConflict
from chalicelib.domain.record_changes import change_block
from chalicelib.services.ingestion.bulk import process_job, submit_bulk
from chalicelib.services.ingestion.lifecycle import fail
from tests.services.conftest import ENV, record, streams
from tests.services.test_imported_records import _open_ids


def _table_open_ids(ports, reconciliation_id, stream_key="bank"):
    return sorted(r.id for r in ports.claims.open_records(ENV, stream_key, reconciliation_id, True))


class _EndedBeforeItsFirstChunk:
    """The job's repository as an execution sees it when the job is failed (the last delivery's
    `fail`) after the execution read it and before it begins its first chunk."""

    def __init__(self, ports, job_id):
        self._jobs, self._ports, self._job_id, self.ended = ports.ingestion_jobs, ports, job_id, None

    def __getattr__(self, name):
        return getattr(self._jobs, name)

    def begin_chunk(self, job, chunk, through=None):
        if self.ended is None:
            self.ended = fail(self._ports, ENV, self._job_id, RuntimeError("stuck"), 3)
        return self._jobs.begin_chunk(job, chunk, through)


class _NoRecordWrites:
    def __init__(self, records):
        self._records = records

    def __getattr__(self, name):
        return getattr(self._records, name)

    def put_many(self, records):
        raise AssertionError(f"records written after the job's end: {[r.id for r in records]}")

    put_absent = put_many


@pytest.mark.parametrize("noting", [True, False], ids=["changed blocks noted", "a stage that does not note them"])
def test_a_chunk_reached_after_the_jobs_end_writes_nothing_and_runs_miss_no_open_record(
        ports, ingest, reconciliation, noting):
    # Given a stream whose import is in the mirror (a run reads the mirror for it)
    ports.data_streams._note_changed_blocks = noting
    streams(ports, "fees")
    first = ingest(record("fees", 1, 100))
    # and a bulk request whose execution read it running, then saw it failed before its first chunk
    job = submit_bulk(ports, ENV, [record("fees", 2, 200), record("fees", 3, 300)], OnConflict.SKIP, None)
    late = _EndedBeforeItsFirstChunk(ports, job.id)
    left = process_job(replace(ports, ingestion_jobs=late, records=_NoRecordWrites(ports.records)), ENV, job.id)

    # Then the execution wrote nothing and left the job as its end made it
    assert late.ended.status is JobStatus.FAILED and late.ended.counts_rolled_up
    assert left.status is JobStatus.FAILED
    stored = ports.ingestion_jobs.get(ENV, job.id)
    assert stored.chunks_begun is None
    assert (stored.successful_items, stored.failed_items) == (0, 2)
    assert [r.status for r in ports.ingestion_jobs.results(ENV, job.id)] == [ItemStatus.FAILED] * 2
    assert ports.records.find_many(ENV, [stored.record_id(i) for i in range(2)], including_deleting=True) == {}
    # and a run reads the stream's open records as the table holds them
    assert _table_open_ids(ports, reconciliation.id, "fees") == sorted(first)
    assert _open_ids(ports, "fees", reconciliation.id) in (None, sorted(first))
    # The next delivery finds it ended and writes nothing either
    assert process_job(replace(ports, records=_NoRecordWrites(ports.records)), ENV, job.id).status is JobStatus.FAILED


class _Died(Exception):
    pass


def _delegating(inner, **overrides):
    """`inner` with some of its methods replaced (the rest delegated)."""
    class Delegating:
        def __getattr__(self, name):
            return getattr(inner, name)
    wrapped = Delegating()
    for name, method in overrides.items():
        setattr(wrapped, name, method)
    return wrapped


def test_an_end_that_reads_a_chunk_a_late_execution_then_finishes_counts_and_mirrors_what_it_stored(ports):
    # Given a bulk request of two chunks whose execution has written part of its second chunk
    streams(ports, "bank")
    items = [{"data_stream_key": "bank", "external_id": f"x-{n}", "date": "2026-11-02", "direction": "credit",
              "amount": 1000 + n} for n in range(2 * BULK_CHUNK_ROWS)]
    job = submit_bulk(ports, ENV, items, OnConflict.ERROR, None)
    part_written, end_read, saved = threading.Event(), threading.Event(), threading.Event()
    puts = []

    def put_many(records):
        records = list(records)
        puts.append(len(records))
        if len(puts) == 2:
            ports.records.put_many(records[:100])
            part_written.set()
            assert end_read.wait(10)
            return ports.records.put_many(records[100:])
        return ports.records.put_many(records)

    def save_then_die(job_, outcome):
        stored = ports.ingestion_jobs.save_chunk_and_begin_ahead(job_, outcome)
        if outcome.index == 1:
            saved.set()  # its results stored, not counted (the job is ending): then its Lambda times out
            raise _Died()
        return stored

    late = replace(ports, records=_delegating(ports.records, put_many=put_many),
                   ingestion_jobs=_delegating(ports.ingestion_jobs, save_chunk_and_begin_ahead=save_then_die))
    errors = []

    def run_late():
        try:
            process_job(late, ENV, job.id)
        except _Died:
            pass
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    thread = threading.Thread(target=run_late)
    thread.start()
    assert part_written.wait(10)

    # When the job's end reads the chunk's records (100 of 500 there), and the execution then writes
    # the rest and stores the chunk's results before the end stores its own
    reads = []

    def find_many(environment, record_ids, including_deleting=False):
        found = ports.records.find_many(environment, record_ids, including_deleting=including_deleting)
        reads.append(len(found))
        if len(reads) == 1:
            end_read.set()
            assert saved.wait(10)
        return found

    fail(replace(ports, records=_delegating(ports.records, find_many=find_many)), ENV, job.id, RuntimeError("stuck"), 3)
    thread.join(10)
    assert not errors and reads[0] == 100

    # Then what the job counts, mirrors and tells of its stream is what the execution's results say
    ended = ports.ingestion_jobs.get(ENV, job.id)
    successful = [r for r in ports.ingestion_jobs.results(ENV, job.id) if r.status is ItemStatus.SUCCESSFUL]
    stored = ports.records.find_many(ENV, [r.record_id for r in successful])
    assert ended.status is JobStatus.FAILED
    assert len(successful) == len(stored) == ended.successful_items == 2 * BULK_CHUNK_ROWS
    assert ended.created_per_stream == {"bank": 2 * BULK_CHUNK_ROWS}
    assert ended.aggregates.total.count == 2 * BULK_CHUNK_ROWS
    assert ports.data_streams.get(ENV, "bank").records_count == 2 * BULK_CHUNK_ROWS


class _DiesAfterBeginning:
    """The job's repository as an execution sees it that dies right after beginning its first chunk."""

    def __init__(self, jobs):
        self._jobs = jobs

    def __getattr__(self, name):
        return getattr(self._jobs, name)

    def begin_chunk(self, job, chunk, through=None):
        self._jobs.begin_chunk(job, chunk, through)
        raise _Died()


def test_an_end_that_cannot_read_the_payload_notes_the_blocks_of_every_stream_the_request_feeds(ports, ingest):
    # Given a stream whose import is in the mirror, with changes noted
    streams(ports, "fees")
    ingest(record("fees", 1, 100))
    # and a bulk request into it whose execution began its chunk, then died (it may yet write it)
    job = submit_bulk(ports, ENV, [record("fees", 2, 200)], OnConflict.SKIP, None)
    with pytest.raises(_Died):
        process_job(replace(ports, ingestion_jobs=_DiesAfterBeginning(ports.ingestion_jobs)), ENV, job.id)
    begun = ports.ingestion_jobs.get(ENV, job.id)
    assert begun.may_have_written(0)
    changed_before = ports.data_streams.changed_since_import(ENV, "fees")
    # and its payload is gone (the reason its last delivery fails, say)
    del ports.payloads.objects[job.bulk_payload_key]

    fail(ports, ENV, job.id, RuntimeError("payload gone"), 3)

    # Then a run reads the block the late execution may write from the table, not the mirror
    noted = ports.data_streams.changed_since_import(ENV, "fees")
    assert change_block(begun.record_id(0)) in noted - changed_before
