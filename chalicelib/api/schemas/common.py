"""What the schema modules share: the base models, common field types, errors, cursor paging, money."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Self, cast

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, StringConstraints, WithJsonSchema
from pydantic.json_schema import JsonDict

from chalicelib.domain.clock import iso

Timestamp = Annotated[
    datetime, PlainSerializer(iso, return_type=str), WithJsonSchema({"type": "string", "format": "date-time"})
]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
# An id in a body or a query: at most 15 digits, like a path id (a longer one could not be a key).
Id = Annotated[int, Field(ge=1, le=10**15 - 1)]
Description = Annotated[str, StringConstraints(max_length=4000)]


def documented(**keywords: Any) -> JsonDict:
    """JSON Schema keywords for json_schema_extra (the rule itself is checked elsewhere)."""
    return cast(JsonDict, keywords)


def when(condition: dict[str, Any], then: dict[str, Any]) -> dict[str, Any]:
    """A rule between fields, for the document (JSON Schema if/then): the validation checks it elsewhere."""
    return {"if": condition, "then": then}


def read_only(description: str) -> Any:
    """A field a PATCH accepts only when it equals the current value: a client should not send it."""
    return Field(default=None, description=description, json_schema_extra={"readOnly": True})


def unchanged_when_absent(description: str | None = None, **documented: Any):
    """A PATCH field: absent leaves the value unchanged, null is refused (so no null default is documented).
    `documented`: JSON Schema keywords of a rule the validation checks elsewhere (an enum, a pattern)."""
    def schema_of(schema: dict[str, Any]) -> None:
        schema.pop("default", None)
        schema.update(documented)
    return Field(default=None, description=description, json_schema_extra=schema_of)


class Model(BaseModel):
    """Every model of the API: built (its validator and serializer) on first use, not at import, so
    that a cold start pays only for the models the request it serves needs."""
    model_config = ConfigDict(defer_build=True)

    @classmethod
    def from_entity(cls, entity: object, **overrides: Any) -> Self:
        """The answer of a domain object: each field its attribute of the same name (nested objects
        too), but for `overrides`, the fields the API computes, renames or formats."""
        absent = object()
        read = {name: value for name in cls.model_fields
                if name not in overrides and (value := getattr(entity, name, absent)) is not absent}
        return cls.model_validate({**read, **overrides}, from_attributes=True)


class RequestModel(Model):
    """Bodies are validated strictly from JSON: no "12" for 12, no 1 for true. Unknown fields are ignored."""
    model_config = ConfigDict(strict=True, extra="ignore")


class QueryModel(Model):
    """Query strings arrive as text, so their values are converted (lax)."""
    model_config = ConfigDict(extra="ignore")


class ResponseModel(Model):
    model_config = ConfigDict(from_attributes=True)


class ErrorOut(Model):
    message: str


class FieldErrorOut(Model):
    field: str = Field(description="Path of the field, e.g. records[3].amount")
    message: str


class ValidationErrorOut(Model):
    message: str
    errors: list[FieldErrorOut]


class CursorQuery(QueryModel):
    cursor: str | None = Field(default=None, description="next_cursor of the previous page; omit for the first")
    limit: int = Field(default=50, ge=1, le=200)


class MoneyOut(Model):
    currency: str
    count: int
    credits: int = Field(description="Minor units at decimal_places, the largest of the currency's records")
    debits: int
    decimal_places: int
