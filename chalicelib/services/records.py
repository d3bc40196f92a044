"""Record use cases beyond ingestion: listing and deleting."""
from __future__ import annotations

from datetime import timedelta

from chalicelib.domain.records import DELETABLE_STATUSES
from chalicelib.services.ports import DataStreams


# Longer than any API request lives (the Lambda timeout), so a mark this old belongs to a dead one.
ABANDONED_DELETE_AFTER = timedelta(minutes=2)


def delete_record(records, streams: DataStreams, environment: str, record_id: int) -> None:
    """Hide the record (only while unreconciled), count it out of its stream once, free its
    external_id, then delete it. One delete runs at a time; a retry after a crash part-way
    takes over once the mark is abandoned, and the count token stops a second decrement."""
    record = records.mark_deleting(environment, record_id, DELETABLE_STATUSES, ABANDONED_DELETE_AFTER)
    if record is None:
        return  # being deleted by another request: the outcome is the same
    token = f"delete{record.id}"
    streams.add_to_records_count(environment, record.data_stream_key, -1, token)
    records.remove(record)
    streams.forget_count_token(environment, record.data_stream_key, token)
