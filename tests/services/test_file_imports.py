"""The stuck-job sweeper (services/file_imports.py `sweep`) on the fakes: restarts, lost starts,
uploads that never came; the state machine is started, never run."""
from datetime import UTC, datetime, timedelta

from chalicelib.domain.clock import utc_now
from chalicelib.domain.ingestion import STUCK_AFTER, JobSource, JobStatus, OnConflict
from chalicelib.services import file_imports
from chalicelib.services.bulk_requests import submit_bulk
from tests.services.conftest import ENV, streams

CSV = b"date,amount,external_id\n2026-11-01,12.34,tx-1\n2026-11-02,5.00,tx-2\n"


def created(ports):
    job, _ = file_imports.create_import(ports, ENV, "bank", filename="nov.csv", source=JobSource.CSV,
                                        on_conflict=OnConflict.SKIP, column_mapping={}, date_format="YYYY-MM-DD",
                                        decimal_places=None)
    return job


def uploaded(ports, job, data=CSV):
    """The client's PUT to the upload URL, and S3's event for it."""
    ports.payloads.objects[job.import_file_key] = (data, datetime.now(UTC))
    file_imports.on_object_created(ports, job.import_file_key)


def executions(ports):
    return [name for name, _ in ports.file_import_workflows.executions]


def test_an_import_whose_file_never_came_fails_once_its_upload_url_has_expired(ports):
    streams(ports, "bank")
    job = created(ports)

    assert file_imports.sweep(ports, now=job.created_at + file_imports.UPLOAD_WAIT)["failed"] == 0
    counts = file_imports.sweep(ports, now=job.created_at + file_imports.UPLOAD_WAIT + timedelta(minutes=1))

    assert counts == {"restarted": 0, "failed": 1, "started": 0, "errors": 0}
    failed = ports.ingestion_jobs.get(ENV, job.id)
    assert failed.status is JobStatus.FAILED and failed.error_message == "the file was never uploaded"
    assert executions(ports) == []


def test_a_stuck_import_restarts_under_a_new_execution_name_then_fails_after_max_restarts(ports):
    streams(ports, "bank")
    job = created(ports)
    uploaded(ports, job)
    assert file_imports.prepare(ports, ENV, job.id) == "chunk"  # then the workflow "dies": no more heartbeats
    assert file_imports.sweep(ports, now=utc_now() + STUCK_AFTER - timedelta(seconds=30))["restarted"] == 0

    for _ in range(file_imports.MAX_RESTARTS):
        assert file_imports.sweep(ports, now=utc_now() + STUCK_AFTER + timedelta(minutes=1))["restarted"] == 1
    assert executions(ports) == [f"acme-{job.id}-0", f"acme-{job.id}-1", f"acme-{job.id}-2", f"acme-{job.id}-3"]

    assert file_imports.sweep(ports, now=utc_now() + STUCK_AFTER + timedelta(minutes=1))["failed"] == 1
    failed = ports.ingestion_jobs.get(ENV, job.id)
    assert failed.status is JobStatus.FAILED and "restarts did not help" in failed.error_message
    assert ports.ingestion_jobs.active() == []


def test_a_bulk_request_whose_start_was_lost_is_queued_again(ports):
    streams(ports, "bank")
    job = submit_bulk(ports, ENV, [{"date": "2026-11-01", "data_stream_key": "bank", "amount": 5,
                                    "direction": "credit"}], OnConflict.SKIP, None)
    assert file_imports.sweep(ports, now=job.created_at + file_imports.LOST_START_AFTER)["started"] == 0

    counts = file_imports.sweep(ports, now=job.created_at + file_imports.LOST_START_AFTER + timedelta(minutes=1))

    assert counts["started"] == 1 and ports.ingestion_jobs.get(ENV, job.id).restarts == 1
    assert [m["job_id"] for m in ports.bulk_queue.messages] == [job.id, job.id]
    assert executions(ports) == []  # bulk requests have no state machine


def test_an_import_stopped_by_a_store_error_fails_with_a_clear_reason_and_none_of_the_stores_words(ports):
    # Given an import whose task failed after its retries on a store error
    streams(ports, "bank")
    job = created(ports)
    cause = ("An error occurred (ValidationException) when calling the BatchWriteItem operation: "
             "Provided list of item keys contains duplicates")

    # When the state machine gives up on it
    file_imports.give_up(ports, ENV, job.id, {"Error": "ClientError", "Cause": cause})

    # Then it failed with a reason a client can read, and nothing of the store's message
    failed = ports.ingestion_jobs.get(ENV, job.id)
    assert failed.status is JobStatus.FAILED
    assert failed.error_message.startswith("the import stopped on an internal error")
    assert failed.error_details == {"reason": "internal_error"}
    shown = f"{failed.error_message} {failed.error_details}"
    assert "BatchWriteItem" not in shown and "ClientError" not in shown and "ValidationException" not in shown
