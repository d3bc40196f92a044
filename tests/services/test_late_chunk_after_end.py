"""An execution that read its job while it ran and reaches a chunk only after the job's end was
marked (the sweeper gave up on it, or the last delivery failed it) writes nothing of that chunk.

The end notes the blocks of record ids of the chunks begun before it (a run then reads them from the
table, not the analytics mirror) and fails every row it never saw written. A chunk begun after that
would put records nobody notes or counts: open in the table, missing from the mirror and from the
changed blocks, so that every run reading the mirror would miss them for good."""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.ingestion import ItemStatus, JobStatus, OnConflict
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
