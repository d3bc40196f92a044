"""Answers of reconciliation runs and of a rule's dry run."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from chalicelib.api.schemas.common import Model, QueryModel, ResponseModel, Timestamp
from chalicelib.api.schemas.matches import AllocationOut
from chalicelib.api.schemas.near_misses import DryRunNearMissesOut


class RunOut(ResponseModel):
    id: int
    reconciliation_id: int
    kind: Literal["batch", "continuous"]
    status: Literal["pending", "running", "completed", "failed", "cancelled"]
    trigger: Literal["manual", "schedule", "agent", "records_ingested", "reconciliation_changed"]
    total_records: int
    processed_records: int
    matched_records: int
    rule_summary: dict[str, Any] = Field(description=(
        "{rule_id: matched_record_count, unmatched: {side_a, side_b}}, and, for a run matched in partitions that "
        "could not apply a partial rule's pass, partial_skipped: {rule_id: why} (docs/partial-payments.md)"))
    progress: float = Field(ge=0, le=100)
    error_message: str | None
    created_at: Timestamp
    started_at: Timestamp | None
    completed_at: Timestamp | None
    cancellation_requested_at: Timestamp | None = Field(
        description="When a cancel was last asked for (POST .../cancel); the run ends cancelled at its next step")


class RunPage(Model):
    data: list[RunOut]
    next_cursor: str | None
    limit: int


class DryRunMatchOut(Model):
    status: Literal["confirmed", "proposed"]
    group_key: str
    side_a_record_ids: list[int]
    side_b_record_ids: list[int]
    differences: dict[str, Any]
    allocations: list[AllocationOut] | None = Field(default=None, description=(
        "A partial match (a rule with allocation partial): the record it would take in part, or finish covering, "
        "and its share, as the run would (refunds netted against payments: docs/partial-payments.md); null when "
        "the match would hold every record whole"))


class ConditionExclusionOut(Model):
    condition: int = Field(description="Position of the condition in the rule's `conditions`, from 0")
    field: str
    operator: str
    excluded_pairs: int | None = Field(description=(
        "Candidate pairs (of the records, or groups, the rule compares, among those left to it) that meet "
        "every other condition of the rule but not this one. null when counting them would take more than "
        "1,000,000 pairs, and for the amount conditions of a grouped rule without a group key (a subset "
        "search sums those amounts)"))


class DryRunQuery(QueryModel):
    near_misses: bool = Field(default=False, description=(
        "Also explain every record left open, both sides, and count by condition how many of their closest "
        "candidates fail it (`near_misses.by_condition`). Without it only the sample shown is explained. Costs "
        "several seconds of CPU more near the open-records limit (docs/near-misses.md)"))


class DryRunOut(Model):
    reconciliation_rule_id: int
    open_records: dict[str, int] = Field(description="{side_a, side_b}: open records the rule was tried on")
    taken_by_earlier_rules: int = Field(description="Records the active rules of higher priority would match first")
    matches: int
    proposed: int
    matched_records: int
    partial_matches: int = Field(default=0, description=(
        "Of `matches`, those that would take a record in part (a partial rule's pass, after the whole matches, as a "
        "run makes it: docs/partial-payments.md); their records count in `matched_records`"))
    sample: list[DryRunMatchOut]
    excluded_by_condition: list[ConditionExclusionOut] | None = Field(default=None, description=(
        "One entry a condition, in the rule's order: how many candidate pairs it alone turned away. "
        "null when the rule is inactive (it would match nothing)"))
    near_misses: DryRunNearMissesOut | None = Field(default=None, description=(
        "For the records left open (after the rule), their closest candidates under the rule and the conditions "
        "those fail, with the numbers: the sample's, or every record's with ?near_misses=true "
        "(docs/near-misses.md)"))
