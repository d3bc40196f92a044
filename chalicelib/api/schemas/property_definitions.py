"""Bodies and answers of /data_stream_property_definitions."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from chalicelib.api.schemas.common import (
    Name,
    QueryModel,
    RequestModel,
    ResponseModel,
    Timestamp,
    read_only,
    unchanged_when_absent,
)
from chalicelib.domain.data_streams import PROPERTY_KEY_PATTERN

PropertyTypeName = Literal["number", "date", "datetime", "string", "boolean"]


class CreatePropertyDefinition(RequestModel):
    key: Annotated[str, StringConstraints(pattern=PROPERTY_KEY_PATTERN.pattern)] = Field(
        description="The metadata key it types; unique in its stream", examples=["invoice_id", "Payer-Ref"]
    )
    name: Name
    type: PropertyTypeName
    data_stream_key: str
    optional: bool = False


class UpdatePropertyDefinition(RequestModel):
    name: Name = unchanged_when_absent()
    optional: bool = unchanged_when_absent()
    key: str | None = read_only("Immutable; accepted only when unchanged")
    type: str | None = read_only("Immutable; accepted only when unchanged")


class PropertyDefinitionQuery(QueryModel):
    data_stream_key: str | None = None


class PropertyDefinitionOut(ResponseModel):
    id: int
    key: str
    name: str
    type: str
    data_stream_key: str
    optional: bool
    created_at: Timestamp
