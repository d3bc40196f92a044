"""Record use cases beyond ingestion: listing and deleting."""
from __future__ import annotations

from datetime import timedelta

from chalicelib.domain.clock import utc_now
from chalicelib.domain.records import DELETABLE_STATUSES
from chalicelib.services.ports import Ports

# Longer than any API request lives (the Lambda timeout), so a mark this old belongs to a dead one.
ABANDONED_DELETE_AFTER = timedelta(minutes=2)


def delete_record(ports: Ports, environment: str, record_id: int) -> None:
    """Hide the record (only while unreconciled), tombstone it in the analytics mirror, ask for
    its stream to be recounted from there (the sweeper does it within a minute, so a DELETE
    never reads a whole stream), then delete it. One delete runs at a time; a retry after a
    crash part-way takes over once the mark is abandoned and repeats the same steps."""
    record = ports.records.mark_deleting(environment, record_id, DELETABLE_STATUSES, ABANDONED_DELETE_AFTER)
    if record is None:
        return  # being deleted by another request: the outcome is the same
    if record.file_import_id is not None:  # written by an import, so it may be in the mirror
        ports.mirror.tombstone(environment, record.data_stream_key, record.file_import_id, record.id)
    ports.data_streams.request_recount(environment, record.data_stream_key, utc_now())
    ports.records.remove(record)
