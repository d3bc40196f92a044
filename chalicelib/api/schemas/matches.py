"""Bodies and answers of /reconciliation_matches."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from chalicelib.api.schemas.common import CursorQuery, Id, Model, RequestModel, Timestamp
from chalicelib.api.schemas.records import RecordOut
from chalicelib.domain.money import MAX_AMOUNT


class MatchRecordOut(RecordOut):
    side: Literal["a", "b"]


class AllocationOut(Model):
    record_id: int
    amount: int = Field(description="Minor units of the record this match holds (in the record's decimal places)")


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
    allocations: list[AllocationOut] | None = Field(
        default=None, description="Partial payments: the records this match takes in part (or finishes covering) "
        "and the share of each; null when it holds every record whole (docs/partial-payments.md)")

    @field_validator("allocations", mode="before")
    @classmethod
    def _shares(cls, value: Any) -> Any:
        """A match's `allocations` (record id -> share) as the list the API shows; null when none."""
        if isinstance(value, Mapping):
            return [{"record_id": r, "amount": s} for r, s in sorted(value.items())] or None
        return value


class MatchPage(Model):
    data: list[MatchOut]
    next_cursor: str | None
    limit: int


class MatchesQuery(CursorQuery):
    reconciliation_id: Id
    status: Literal["proposed", "confirmed"] | None = None


class AllocationIn(RequestModel):
    record_id: Id = Field(description="One of record_ids")
    amount: int = Field(ge=1, le=MAX_AMOUNT, description="Minor units of the record (its decimal places) this match "
                        "takes: at most what the record has left in the reconciliation")


class CreateMatch(RequestModel):
    reconciliation_id: Id
    record_ids: list[Id] = Field(min_length=1, max_length=1000, description="Records of both sides")
    allow_difference: bool = False
    reason: str | None = Field(default=None, max_length=500)
    allocations: list[AllocationIn] | None = Field(
        default=None, max_length=1000, description="Partial payments: the share of some records this match takes; "
        "each record not listed takes what it has left. The sides' shares must balance (docs/partial-payments.md)")
