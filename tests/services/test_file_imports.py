"""The stuck-job sweeper (services/ingestion/sweeper.py `sweep`) on the fakes: restarts, lost starts,
uploads that never came; the state machine is started, never run."""
import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.ingestion import FILE_CHUNK_ROWS, STUCK_AFTER, JobSource, JobStatus, OnConflict
from chalicelib.observability import logger
from chalicelib.services.ingestion import drops, files, sweeper
from chalicelib.services.ingestion.bulk import submit_bulk
from tests.services.conftest import ENV, streams

CSV = b"date,amount,external_id\n2026-11-01,12.34,tx-1\n2026-11-02,5.00,tx-2\n"


def created(ports):
    job, _ = files.create_import(ports, ENV, "bank", filename="nov.csv", source=JobSource.CSV,
                                        on_conflict=OnConflict.SKIP, column_mapping={}, date_format="YYYY-MM-DD",
                                        decimal_places=None)
    return job


def uploaded(ports, job, data=CSV):
    """The client's PUT to the upload URL, and S3's event for it."""
    ports.payloads.objects[job.import_file_key] = (data, datetime.now(UTC))
    drops.on_object_created(ports, job.import_file_key)


def executions(ports):
    return [name for name, _ in ports.file_import_workflows.executions]


def test_an_import_whose_file_never_came_fails_once_its_upload_url_has_expired(ports):
    streams(ports, "bank")
    job = created(ports)

    assert sweeper.sweep(ports, now=job.created_at + files.UPLOAD_WAIT)["failed"] == 0
    counts = sweeper.sweep(ports, now=job.created_at + files.UPLOAD_WAIT + timedelta(minutes=1))

    assert counts == {"restarted": 0, "failed": 1, "started": 0, "errors": 0}
    failed = ports.ingestion_jobs.get(ENV, job.id)
    assert failed.status is JobStatus.FAILED and failed.error_message == "the file was never uploaded"
    assert executions(ports) == []


def test_a_stuck_import_restarts_under_a_new_execution_name_then_fails_after_max_restarts(ports):
    streams(ports, "bank")
    job = created(ports)
    uploaded(ports, job)
    assert files.prepare(ports, ENV, job.id) == "chunk"  # then the workflow "dies": no more heartbeats
    assert sweeper.sweep(ports, now=utc_now() + STUCK_AFTER - timedelta(seconds=30))["restarted"] == 0

    for _ in range(sweeper.MAX_RESTARTS):
        assert sweeper.sweep(ports, now=utc_now() + STUCK_AFTER + timedelta(minutes=1))["restarted"] == 1
    assert executions(ports) == [f"acme-{job.id}-0", f"acme-{job.id}-1", f"acme-{job.id}-2", f"acme-{job.id}-3"]

    assert sweeper.sweep(ports, now=utc_now() + STUCK_AFTER + timedelta(minutes=1))["failed"] == 1
    failed = ports.ingestion_jobs.get(ENV, job.id)
    assert failed.status is JobStatus.FAILED and "restarts did not help" in failed.error_message
    assert ports.ingestion_jobs.active() == []


def test_a_bulk_request_whose_start_was_lost_is_queued_again(ports):
    streams(ports, "bank")
    job = submit_bulk(ports, ENV, [{"date": "2026-11-01", "data_stream_key": "bank", "amount": 5,
                                    "direction": "credit"}], OnConflict.SKIP, None)
    assert sweeper.sweep(ports, now=job.created_at + sweeper.LOST_START_AFTER)["started"] == 0

    counts = sweeper.sweep(ports, now=job.created_at + sweeper.LOST_START_AFTER + timedelta(minutes=1))

    assert counts["started"] == 1 and ports.ingestion_jobs.get(ENV, job.id).restarts == 1
    assert [m["job_id"] for m in ports.bulk_queue.messages] == [job.id, job.id]
    assert executions(ports) == []  # bulk requests have no state machine


def stalled_execution(ports, job_id):
    """An execution that writes one chunk, then stalls (its next chunk never returns: a hung call,
    a machine under load): no heartbeat after it, no error, no end."""
    assert files.prepare(ports, ENV, job_id) == "chunk"
    return files.write_chunks(ports, ENV, job_id, budget=timedelta(0))


class KeptWarnings(logging.Handler):
    """The service logger's warnings, kept on the logger itself: what other tests did to propagation
    or to the root's handlers cannot hide them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def warnings_logged():
    service = logging.getLogger(logger.name)
    kept, level = KeptWarnings(), service.level
    service.addHandler(kept)
    service.setLevel(logging.WARNING)
    yield kept.messages
    service.removeHandler(kept)
    service.setLevel(level)


def test_an_import_whose_executions_keep_stalling_is_restarted_until_it_ends_every_row_once(ports, warnings_logged):
    # Given a six-chunk import, the stuck threshold a setting (2 minutes), and executions that each
    # write one chunk and stall
    wired = replace(ports, limits=replace(ports.limits, stuck_import_after=timedelta(minutes=2)))
    streams(wired, "bank")
    job = created(wired)
    rows = 6 * FILE_CHUNK_ROWS
    uploaded(wired, job, b"date,amount,external_id\n" + b"".join(
        f"2026-11-01,{n}.00,tx-{n}\n".encode() for n in range(rows)))
    assert stalled_execution(wired, job.id) == "chunk"

    # When the sweeper looks each minute past the threshold, and runs what it restarts
    restarts = 0
    for _ in range(12):
        if wired.ingestion_jobs.get(ENV, job.id).finished:
            break
        counts = sweeper.sweep(wired, now=utc_now() + timedelta(minutes=2, seconds=30))
        assert counts["failed"] == 0, wired.ingestion_jobs.get(ENV, job.id).error_message
        restarts += counts["restarted"]
        if stalled_execution(wired, job.id) == "finish":
            assert files.finish(wired, ENV, job.id) == "stop"

    # Then it ended completed, every row written once, and each restart said so
    ended = wired.ingestion_jobs.get(ENV, job.id)
    assert ended.status is JobStatus.COMPLETED, ended.error_message
    assert (ended.total_items, ended.successful_items, ended.failed_items) == (rows, rows, 0)
    written = [row.record for row in wired.records.store.rows.values() if row.record.file_import_id == job.id]
    assert sorted(r.external_id for r in written) == sorted(f"tx-{n}" for n in range(rows))
    assert restarts == 5 and len(set(executions(wired))) == 6
    assert sum("restarting a stuck import" in message for message in warnings_logged) == 5


def test_a_stuck_import_is_not_restarted_before_the_threshold_set(ports):
    wired = replace(ports, limits=replace(ports.limits, stuck_import_after=timedelta(minutes=10)))
    streams(wired, "bank")
    job = created(wired)
    uploaded(wired, job)
    assert files.prepare(wired, ENV, job.id) == "chunk"
    assert sweeper.sweep(wired, now=utc_now() + timedelta(minutes=9))["restarted"] == 0
    assert sweeper.sweep(wired, now=utc_now() + timedelta(minutes=11))["restarted"] == 1


def test_an_import_stopped_by_a_store_error_fails_with_a_clear_reason_and_none_of_the_stores_words(ports):
    # Given an import whose task failed after its retries on a store error
    streams(ports, "bank")
    job = created(ports)
    cause = ("An error occurred (ValidationException) when calling the BatchWriteItem operation: "
             "Provided list of item keys contains duplicates")

    # When the state machine gives up on it
    files.give_up(ports, ENV, job.id, {"Error": "ClientError", "Cause": cause})

    # Then it failed with a reason a client can read, and nothing of the store's message
    failed = ports.ingestion_jobs.get(ENV, job.id)
    assert failed.status is JobStatus.FAILED
    assert failed.error_message.startswith("the import stopped on an internal error")
    assert failed.error_details == {"reason": "internal_error"}
    shown = f"{failed.error_message} {failed.error_details}"
    assert "BatchWriteItem" not in shown and "ClientError" not in shown and "ValidationException" not in shown


def test_an_import_keeps_the_chunk_size_it_was_made_with_and_one_made_before_cuts_the_old_default(ports):
    # Given an import made now, and one stored before imports kept their chunk size (none on its item)
    streams(ports, "bank")
    made_now, made_before = created(ports), created(ports)
    assert made_now.file_chunk_rows == made_now.chunk_rows == FILE_CHUNK_ROWS
    ports.ingestion_jobs.rows[(ENV, made_before.id)].job = replace(made_before, file_chunk_rows=None)
    # When files of 2.5 chunks of the default are prepared, one after its size was set to 100 rows
    ports.ingestion_jobs.rows[(ENV, made_now.id)].job = replace(made_now, file_chunk_rows=100)
    rows = FILE_CHUNK_ROWS * 5 // 2
    data = b"date,amount,external_id\n" + b"".join(f"2026-11-01,{n}.00,tx-{n}\n".encode() for n in range(rows))
    for job in (made_now, made_before):
        ports.payloads.objects[job.import_file_key] = (data, datetime.now(UTC))
        assert files.prepare(ports, ENV, job.id) == "chunk"
    # Then each is cut in its own chunks
    assert ports.ingestion_jobs.get(ENV, made_now.id).chunk_count == -(-rows // 100)
    assert ports.ingestion_jobs.get(ENV, made_before.id).chunk_count == 3
