"""Queries and answers of /audit_events."""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints
from pydantic_core import PydanticCustomError

from chalicelib.api.schemas.common import CursorQuery, Model, QueryModel, Timestamp

ResourceType = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
Actor = Annotated[str, StringConstraints(pattern=r"^(user|api_key|agent|system):[^\s]{1,120}$")]


def _in_utc(moment: datetime) -> datetime:
    """The moment in UTC (naive: taken as UTC). One whose UTC falls outside years 1 to 9999 is refused."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise PydanticCustomError("utc_range", "is outside years 1 to 9999 once converted to UTC") from None


UtcMoment = Annotated[datetime, AfterValidator(_in_utc)]


class AuditEventsQuery(CursorQuery):
    resource_type: ResourceType | None = Field(default=None, description="e.g. reconciliation_exception",
                                               examples=["reconciliation_exception", "data_stream"])
    resource_id: Annotated[str, StringConstraints(min_length=1, max_length=120)] | None = Field(
        default=None, description="The resource's id as its routes name it (needs resource_type)")
    actor: Actor | None = Field(default=None, description="user:<id>, api_key:<id>, agent:<agent id> or "
                                "system:<kind>[:<id>]", examples=["user:3", "api_key:1", "system:sweeper"])
    at_from: UtcMoment | None = Field(default=None, alias="from", description="Entries at or after (ISO 8601; UTC "
                                      "when no offset is given)")
    at_to: UtcMoment | None = Field(default=None, alias="to", description="Entries at or before (ISO 8601; UTC "
                                    "when no offset is given)")


class AuditEventOut(Model):
    id: int = Field(description="The entry's seq: its place in the environment's chain")
    seq: int = Field(description="1-based and dense per environment")
    at: Timestamp
    actor: str = Field(description="user:<id> (a person), api_key:<id>, agent:<agent id>, or "
                       "system:<kind>[:<run or job id>]")
    action: str = Field(description="resource.verb, e.g. reconciliation_exception.updated")
    resource_type: str
    resource_id: str | None
    summary: dict[str, Any] = Field(description="A short account: before/after of changed fields, counts, ids")
    prev_hash: str = Field(description="The previous entry's hash (64 zeros for the first)")
    hash: str = Field(description="sha256 hex of prev_hash + the entry's canonical JSON (every field but hash)")


class AuditEventPage(Model):
    data: list[AuditEventOut]
    next_cursor: str | None = Field(description="null at the end; a filtered page may be short, so follow "
                                    "next_cursor, not the page's length")
    limit: int


class AuditVerifyQuery(QueryModel):
    from_seq: int = Field(default=1, ge=1, description="Start here: a previous call's next_from_seq")


class ChainBreakOut(Model):
    seq: int = Field(description="Where the chain breaks")
    id: int | None = Field(description="The entry found at that place, if any")
    reason: Literal["hash_mismatch", "prev_hash_mismatch", "missing_entry", "head_mismatch", "head_missing"]
    message: str


class AuditVerifyOut(Model):
    intact: bool = Field(description="No break in the entries checked (all of the chain when complete)")
    checked: int = Field(description="Entries checked intact by this call")
    first_break: ChainBreakOut | None
    from_seq: int
    last_checked_seq: int = Field(description="The last seq checked intact (from_seq - 1 when none)")
    head_seq: int = Field(description="The chain's last seq as its head records it")
    head_hash: str | None
    complete: bool = Field(description="The walk reached the chain's end or a break; false: continue with "
                           "from_seq=next_from_seq")
    next_from_seq: int | None
