"""Data stream use cases."""
from __future__ import annotations

from chalicelib.domain.clock import utc_now
from chalicelib.domain.data_streams import DataStream, StreamType, check_new_stream
from chalicelib.domain.errors import ValidationFailed
from chalicelib.services.ports import DataStreams, PropertyDefinitions

RECORD_DELETE_BATCH = 500


def create_stream(streams: DataStreams, environment: str, *, key: str, name: str, type_: StreamType,
                  description: str | None = None, bank_account_id: str | None = None) -> DataStream:
    check_new_stream(key, type_, bank_account_id)
    stream = DataStream(
        environment=environment, id=streams.next_id(environment), key=key, name=name, type=type_,
        description=description, bank_account_id=bank_account_id, created_at=utc_now(),
    )
    streams.add(stream)
    return stream


def update_stream(streams: DataStreams, environment: str, key: str, *, name: str | None,
                  description: str | None, description_given: bool, requested_key: str | None = None,
                  requested_type: str | None = None) -> DataStream:
    """Change name and description; key and type are immutable (accepted only when unchanged)."""
    current = streams.get(environment, key)
    if requested_key is not None and requested_key != current.key:
        raise ValidationFailed.on("key", "is immutable")
    if requested_type is not None and requested_type != current.type.value:
        raise ValidationFailed.on("type", "is immutable")
    updated = current.renamed(name, description, description_given)
    streams.save(updated)
    return updated


def delete_stream(streams: DataStreams, definitions: PropertyDefinitions, records, environment: str,
                  key: str) -> None:
    """Hide the stream at once, remove what belongs to it (records, property definitions),
    then the stream itself.

    A crash part-way leaves the stream marked `deleting` (invisible, its key still taken);
    repeating the DELETE finishes the work.
    """
    if streams.find_including_deleting(environment, key) is None:
        streams.get(environment, key)  # raises NotFound
    streams.mark_deleting(environment, key)
    batch: list = []
    for item in records.ids_of_stream(environment, key):
        batch.append(item)
        if len(batch) == RECORD_DELETE_BATCH:
            records.remove_many(batch)
            batch = []
    records.remove_many(batch)
    definitions.remove_all_of_stream(environment, key)
    streams.remove(environment, key)
