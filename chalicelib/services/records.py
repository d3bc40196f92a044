"""Record use cases beyond ingestion: listing and deleting."""
from __future__ import annotations

from chalicelib.domain.records import DELETABLE_STATUSES
from chalicelib.services.ports import DataStreams


def delete_record(records, streams: DataStreams, environment: str, record_id: int) -> None:
    """Hide the record (only while unreconciled), count it out of its stream once, free its
    external_id, then delete it. A retry after a crash part-way finishes the same steps:
    the record stays hidden, and the count token stops a second decrement."""
    existing = records.find_including_deleting(environment, record_id)
    if existing is not None and existing.get("deleting"):
        record = records.from_item(existing)
    else:
        record = records.mark_deleting(environment, record_id, DELETABLE_STATUSES)
    token = f"delete:{record.id}"
    streams.add_to_records_count(environment, record.data_stream_key, -1, token)
    records.remove(record)
    streams.forget_count_token(environment, record.data_stream_key, token)
