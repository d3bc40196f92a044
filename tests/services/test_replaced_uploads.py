"""An import reads the file it took, never another put under the same key since: a second upload
to its URL after it started is reported as not imported, and a file dropped again under the same
name has an import of its own. Read in its place, the later file was imported (twice, for a
drop) and the first one's rows vanished without a result."""
import hashlib
from datetime import UTC, datetime, timedelta

from chalicelib.domain.ingestion import JobSource, JobStatus, OnConflict
from chalicelib.services.ingestion import drops, files
from chalicelib.services.ingestion.lifecycle import start
from tests.services.conftest import ENV, streams

FIRST = b"date,amount,external_id\n2026-11-01,12.34,tx-1\n2026-11-02,5.00,tx-2\n"
SECOND = b"date,amount,external_id\n2026-11-03,7.00,tx-9\n"


def put(ports, key, body, later=timedelta(0)):
    """A PUT to S3 (`later` than now) and its event (the ETag of a single PUT: the body's MD5)."""
    ports.payloads.objects[key] = (body, datetime.now(UTC) + later)
    return drops.on_object_created(ports, key, etag=hashlib.md5(body).hexdigest(), size=len(body))


def imported(ports):
    return sorted(row.record.external_id for row in ports.records.store.rows.values())


def run(ports, job):
    if files.prepare(ports, ENV, job.id) == "chunk":
        assert files.write_chunks(ports, ENV, job.id) == "finish"
        files.finish(ports, ENV, job.id)
    return ports.ingestion_jobs.get(ENV, job.id)


def test_an_upload_replaced_after_its_import_started_fails_it_with_the_reason_and_imports_neither(ports):
    streams(ports, "bank")
    job, _ = files.create_import(ports, ENV, "bank", filename="nov.csv", source=JobSource.CSV,
                                 on_conflict=OnConflict.SKIP, column_mapping={}, date_format="YYYY-MM-DD",
                                 decimal_places=None)
    put(ports, job.import_file_key, FIRST)  # the import takes this one (the last put while it is pending)
    start(ports, ports.ingestion_jobs.get(ENV, job.id))  # its state machine's first task begins
    put(ports, job.import_file_key, SECOND, later=timedelta(seconds=2))  # a second PUT, before the file is read

    done = run(ports, job)

    assert done.upload_etag == hashlib.md5(FIRST).hexdigest()
    assert [u.etag for u in done.ignored_uploads] == [hashlib.md5(SECOND).hexdigest()]  # "not imported"
    assert done.status is JobStatus.FAILED and "replaced under the same name" in done.error_message
    assert imported(ports) == []


def test_a_file_dropped_again_before_the_first_was_read_is_imported_once_by_its_own_import(ports):
    streams(ports, "bank")
    key = f"drops/{ENV}/bank/payouts.csv"
    first = put(ports, key, FIRST)
    second = put(ports, key, SECOND)  # the next day's file, same name, before the first import ran
    assert first.id != second.id

    assert run(ports, first).status is JobStatus.FAILED
    assert run(ports, second).status is JobStatus.COMPLETED
    assert imported(ports) == ["tx-9"]
    assert "replaced under the same name" in ports.ingestion_jobs.get(ENV, first.id).error_message


def test_uploads_whose_events_came_out_of_order_before_the_import_started_import_the_last_file(ports):
    # Two PUTs while the import waits; EventBridge delivers their events in any order (the first PUT's
    # last here), so the ETag kept is not the file's: the file in S3 was written before the start.
    streams(ports, "bank")
    job, _ = files.create_import(ports, ENV, "bank", filename="nov.csv", source=JobSource.CSV,
                                 on_conflict=OnConflict.SKIP, column_mapping={}, date_format="YYYY-MM-DD",
                                 decimal_places=None)
    ports.payloads.objects[job.import_file_key] = (SECOND, datetime.now(UTC))  # FIRST, then SECOND over it
    for body in (SECOND, FIRST):
        drops.on_object_created(ports, job.import_file_key, etag=hashlib.md5(body).hexdigest(), size=len(body))
    assert ports.ingestion_jobs.get(ENV, job.id).upload_etag == hashlib.md5(FIRST).hexdigest()

    done = run(ports, job)

    assert done.status is JobStatus.COMPLETED and imported(ports) == ["tx-9"]


def test_an_upload_put_again_in_the_second_its_import_started_is_not_imported_in_its_place(ports):
    # S3's Last-Modified has whole seconds: a PUT in the start's own second reads as before it
    streams(ports, "bank")
    job, _ = files.create_import(ports, ENV, "bank", filename="nov.csv", source=JobSource.CSV,
                                 on_conflict=OnConflict.SKIP, column_mapping={}, date_format="YYYY-MM-DD",
                                 decimal_places=None)
    put(ports, job.import_file_key, FIRST)
    started = start(ports, ports.ingestion_jobs.get(ENV, job.id))
    ports.payloads.objects[job.import_file_key] = (SECOND, started.started_at)  # after it, the same second
    drops.on_object_created(ports, job.import_file_key, etag=hashlib.md5(SECOND).hexdigest(), size=len(SECOND))

    done = run(ports, job)

    assert [u.etag for u in done.ignored_uploads] == [hashlib.md5(SECOND).hexdigest()]  # "not imported"
    assert done.status is JobStatus.FAILED and "replaced under the same name" in done.error_message
    assert imported(ports) == []


def test_an_upload_written_before_the_start_second_is_imported_though_its_late_event_listed_it(ports):
    # Two PUTs while the import waits; the second's event comes only after the start, so it is listed
    # as not imported, but the file in S3 (written seconds before the start) is the one the import took.
    streams(ports, "bank")
    job, _ = files.create_import(ports, ENV, "bank", filename="nov.csv", source=JobSource.CSV,
                                 on_conflict=OnConflict.SKIP, column_mapping={}, date_format="YYYY-MM-DD",
                                 decimal_places=None)
    put(ports, job.import_file_key, FIRST, later=timedelta(seconds=-5))
    ports.payloads.objects[job.import_file_key] = (SECOND, datetime.now(UTC) - timedelta(seconds=3))
    start(ports, ports.ingestion_jobs.get(ENV, job.id))
    drops.on_object_created(ports, job.import_file_key, etag=hashlib.md5(SECOND).hexdigest(), size=len(SECOND))
    assert [u.etag for u in ports.ingestion_jobs.get(ENV, job.id).ignored_uploads] == [
        hashlib.md5(SECOND).hexdigest()]

    done = run(ports, job)

    assert done.status is JobStatus.COMPLETED and imported(ports) == ["tx-9"]
    assert done.upload_etag == hashlib.md5(SECOND).hexdigest() and done.not_imported_uploads == ()
    drops.on_object_created(ports, job.import_file_key, etag=hashlib.md5(SECOND).hexdigest(), size=len(SECOND))
    assert ports.ingestion_jobs.get(ENV, job.id).not_imported_uploads == ()  # its event again, later still
