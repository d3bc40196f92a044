"""Record use cases beyond ingestion: listing and deleting."""
from __future__ import annotations

from datetime import timedelta

from chalicelib.domain.allocation import paid_in_part
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.records import DELETABLE_STATUSES
from chalicelib.observability import logger
from chalicelib.services import period_closes
from chalicelib.services.matches import WRITING
from chalicelib.services.ports import Ports

# Longer than any API request lives (the Lambda timeout), so a mark this old belongs to a dead one.
ABANDONED_DELETE_AFTER = timedelta(minutes=2)


def delete_record(ports: Ports, environment: str, record_id: int) -> None:
    """Hide the record (only while unreconciled), tombstone it in the analytics mirror, ask for
    its stream to be recounted from there (the sweeper does it within a minute, so a DELETE
    never reads a whole stream), then delete it. One delete runs at a time; a retry after a
    crash part-way takes over once the mark is abandoned and repeats the same steps.

    A record of an import that is still writing is refused (409): a retry of its chunk writes the
    chunk's records that are missing from the table, so one deleted meanwhile would come back (a
    job never returns to writing, so the check holds once it has passed)."""
    found = ports.records.find_many(environment, [record_id], including_deleting=True).get(record_id)
    if found is None:
        raise NotFound(f"record {record_id} not found")
    period_closes.refuse_record_change(ports, environment, found, f"deleting record {record_id}")
    if paid := [r for r, shares in found.allocations.items() if shares]:
        raise paid_in_part(record_id, paid)
    if found.file_import_id is not None:
        job = ports.ingestion_jobs.find(environment, found.file_import_id)
        if job is not None and job.status in WRITING:
            raise Conflict(f"record {record_id} belongs to import {job.id}, which is still writing; delete it "
                           "once the import has finished")
    ports.data_streams.note_records_changed(environment, {found.data_stream_key: [record_id]})  # (imported_records.py)
    record = ports.records.mark_deleting(environment, record_id, DELETABLE_STATUSES, ABANDONED_DELETE_AFTER)
    if record is None:
        return  # being deleted by another request: the outcome is the same
    if record.file_import_id is not None:  # written by an import, so it may be in the mirror
        ports.mirror.tombstone(environment, record.data_stream_key, record.file_import_id, record.id)
    ports.data_streams.request_recount(environment, record.data_stream_key, utc_now())
    ports.records.remove(record)
    try:  # an exception holding it recounts without it within a minute, not at the hourly refresh
        for user in ports.reconciliations.users_of_stream(environment, record.data_stream_key):
            ports.reconciliations.request_exceptions_refresh(environment, user.reconciliation_id)
    except Exception:  # the record is deleted: the hourly refresh recounts
        logger.exception("requesting an exceptions refresh after a delete failed", extra={"record_id": record_id})
