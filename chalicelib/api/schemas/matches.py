"""Bodies and answers of /reconciliation_matches."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from chalicelib.api.schemas.common import CursorQuery, Id, Model, RequestModel, Timestamp
from chalicelib.api.schemas.records import RecordOut


class MatchRecordOut(RecordOut):
    side: Literal["a", "b"]


class MatchOut(Model):
    id: int
    status: Literal["confirmed", "proposed"]
    group_key: str
    reconciliation_id: int
    reconciliation_rule_id: int | None = Field(description="null for a match made by hand")
    run_id: int | None
    differences: dict[str, Any] = Field(description="What differs between the sides, per condition of the rule")
    reason: str | None = Field(description="Why a person accepted a difference")
    created_at: Timestamp
    records: list[MatchRecordOut] | None = Field(default=None,
                                                 description="Inline when the match has at most 100 records")
    record_count: int | None = Field(default=None, description="Instead of records when the match has more than 100")


class MatchPage(Model):
    data: list[MatchOut]
    next_cursor: str | None
    limit: int


class MatchesQuery(CursorQuery):
    reconciliation_id: Id
    status: Literal["proposed", "confirmed"] | None = None


class CreateMatch(RequestModel):
    reconciliation_id: Id
    record_ids: list[Id] = Field(min_length=1, max_length=1000, description="Records of both sides")
    allow_difference: bool = False
    reason: str | None = Field(default=None, max_length=500)
