"""Property definition use cases: typed metadata keys of a data stream."""
from __future__ import annotations

from dataclasses import replace

from chalicelib.domain.clock import utc_now
from chalicelib.domain.data_streams import PropertyDefinition, PropertyType, check_property_key
from chalicelib.domain.errors import NotFound, ValidationFailed, shown
from chalicelib.services import audit
from chalicelib.services.ports import Ports, PropertyDefinitions


def create_definition(ports: Ports, environment: str, *, key: str, name: str, type_: PropertyType,
                      data_stream_key: str, optional: bool) -> PropertyDefinition:
    check_property_key(key)
    try:
        ports.data_streams.get(environment, data_stream_key)
    except NotFound:
        raise ValidationFailed.on("data_stream_key", f"no data stream with key '{shown(data_stream_key)}'") from None
    definition = PropertyDefinition(
        environment=environment, id=ports.property_definitions.next_id(environment), key=key, name=name,
        type=type_, data_stream_key=data_stream_key, optional=optional, created_at=utc_now(),
    )
    ports.property_definitions.add(definition)
    return definition


def update_definition(definitions: PropertyDefinitions, environment: str, definition_id: int, *,
                      name: str | None, optional: bool | None, requested_key: str | None = None,
                      requested_type: str | None = None) -> PropertyDefinition:
    """Change name and optional; key and type are immutable (accepted only when unchanged), as a stream's are."""
    current = definitions.get(environment, definition_id)
    if requested_key is not None and requested_key != current.key:
        raise ValidationFailed.on("key", "is immutable")
    if requested_type is not None and requested_type != current.type.value:
        raise ValidationFailed.on("type", "is immutable")
    updated = replace(
        current,
        name=current.name if name is None else name,
        optional=current.optional if optional is None else optional,
    )
    definitions.save(updated)
    audit.note_change(current, updated)
    return updated


def delete_definition(definitions: PropertyDefinitions, environment: str, definition_id: int) -> None:
    definitions.remove(definitions.get(environment, definition_id))
