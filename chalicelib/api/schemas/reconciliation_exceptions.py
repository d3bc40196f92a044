"""Bodies and answers of /reconciliation_exceptions: the queue, the detail, assignees, comments,
investigations."""
from __future__ import annotations

from datetime import date
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints

from chalicelib.api.schemas.common import (
    Description,
    Id,
    Model,
    Name,
    QueryModel,
    RequestModel,
    Timestamp,
    unchanged_when_absent,
)
from chalicelib.api.schemas.near_misses import ExceptionNearMissesOut
from chalicelib.domain.money import MAX_AMOUNT


class AggregatesOut(Model):
    record_count: int
    total_amount: int = Field(description="Credits minus debits, in minor units")
    debit_count: int
    debit_sum: int
    credit_count: int
    credit_sum: int
    pending_confirmation_count: int = Field(description="Records among these that a proposed match holds, awaiting "
                                                        "a person's confirm or reject")
    avg_age_days: float
    oldest_at: str | None
    newest_at: str | None


class AssigneeOut(Model):
    id: int
    user_id: int | None = Field(default=None, description="The assigned user; null on an assignment made before "
                                "users existed, whose idp_user_id names no user")
    idp_user_id: str


class CommentOut(Model):
    id: int
    body: str
    author_idp_id: str
    mentions: list[int]
    created_at: str


class ExceptionOut(Model):
    id: int
    reconciliation_id: int
    reconciliation_name: str | None
    data_stream_id: int
    data_stream_name: str | None
    data_stream_key: str
    title: str
    description: str
    status: Literal["open", "investigating", "dismissed", "resolved"]
    created_at: Timestamp
    updated_at: Timestamp
    opened_at: Timestamp
    closed_at: Timestamp | None
    assignees: list[AssigneeOut]
    decimal_places: int
    currency: str | None = Field(default=None, description="The currency its records share (amounts are in its "
                                 "minor units at decimal_places); null when they mix currencies")
    aggregates: AggregatesOut
    refresh_pending: bool = Field(default=False, description="A match, unmatch or confirm by a person (or an "
                                  "accepted investigation) changed the reconciliation since its exceptions were last "
                                  "refreshed: records and aggregates are brought up to date within a minute")
    # Service levels (docs/service-levels.md): computed when read from the reconciliation's policy.
    severity: Literal["low", "medium", "high", "critical"] | None = Field(
        default=None, description="From its amount and age, by the reconciliation's service level policy")
    due_at: Timestamp | None = Field(default=None, description="opened_at plus its severity's due time")
    overdue: bool = Field(default=False, description="Open or investigating, and past due_at")
    age_bucket: Literal["0_1d", "1_3d", "3_7d", "7_30d", "30d_plus"] | None = Field(
        default=None, description="Its age (since its oldest record's date) in whole days; null with no record")


class InvestigationOut(Model):
    id: int
    status: Literal["pending", "running", "completed", "failed"]
    recommendation_text: str | None
    confidence_score: float | None = Field(ge=0, le=1, description="0.9 and above is right at least 9 times in 10 "
                                           "on the project's labelled set (bench/RESULTS.md)")
    candidate_records_searched: int
    suggested_record_ids: list[int]
    filter_params: dict[str, Any]
    error_message: str | None
    accepted_match_id: int | None
    completed_at: Timestamp | None
    created_at: Timestamp


class ExceptionDetailOut(ExceptionOut):
    filtered_aggregates: AggregatesOut
    comments: list[CommentOut]
    investigation: InvestigationOut | None = Field(description="The latest investigation")
    investigation_sessions: list[InvestigationOut] = Field(description="The five newest investigations")
    near_misses: ExceptionNearMissesOut | None = Field(default=None, description=(
        "Asked for with ?near_misses=true: the closest candidates of its newest records (docs/near-misses.md)"))


class ExceptionPage(Model):
    data: list[ExceptionOut]
    has_more: bool
    offset: int
    total: int = Field(description="How many exceptions the filters keep in all. With only equality filters "
                                   "and the default order it is counted by a second read after the page's, so an "
                                   "exception opened or closed meanwhile can make it differ from the page by that "
                                   "one; with other filters or orders it comes from the page's own read")


class ExceptionsFilter(QueryModel):
    """The queue's filters: the list's query, and a bulk action's `filter`."""
    reconciliation_id: Id | None = None
    status: Literal["open", "investigating", "dismissed", "resolved"] | None = None
    data_stream_key: str | None = Field(default=None, max_length=200)
    assignee: str | None = Field(default=None, max_length=200, description="An assignee's idp_user_id")
    assignee_user_id: Id | None = Field(default=None, description="An assignee's user id")
    unassigned: bool = Field(default=False, description="Only the exceptions nobody is assigned to")
    amount_min: int | None = Field(default=None, ge=0, le=MAX_AMOUNT, description="|total_amount| at least this, "
                                   "in minor units at `amount_decimal_places` (compared exactly with each "
                                   "exception at its own decimal places)")
    amount_max: int | None = Field(default=None, ge=0, le=MAX_AMOUNT, description="|total_amount| at most this")
    amount_decimal_places: int = Field(default=2, ge=0, le=18, description="The scale of amount_min and amount_max")
    older_than_days: int | None = Field(default=None, ge=0, le=36_500, description="Only exceptions whose oldest "
                                        "record is at least this many days old (age counts from a record's date)")
    overdue: bool | None = Field(default=None, description="Only the overdue exceptions (true) or the others (false)")
    severity: Literal["low", "medium", "high", "critical"] | None = Field(
        default=None, description="Only exceptions of this severity (docs/service-levels.md)")
    age_bucket: Literal["0_1d", "1_3d", "3_7d", "7_30d", "30d_plus"] | None = Field(
        default=None, description="Only exceptions of this age (since their oldest record's date)")


class ExceptionsQuery(ExceptionsFilter):
    sort: Literal["newest", "oldest", "amount"] = Field(default="newest", description="newest exception first; "
                                                        "oldest record first; largest |total_amount| first")
    offset: int = Field(default=0, ge=0, le=1_000_000)
    limit: int = Field(default=25, ge=1, le=100)


class ExceptionRecordsFilter(QueryModel):
    amount_min: int | None = Field(default=None, ge=0, le=MAX_AMOUNT)
    amount_max: int | None = Field(default=None, ge=0, le=MAX_AMOUNT)
    date_from: date | None = None
    date_to: date | None = None
    direction: Literal["credit", "debit"] | None = None
    age_bucket: Literal["lt_7d", "7_30d", "30_90d", "gt_90d"] | None = None
    record_status: Literal["unreconciled", "pending_confirmation"] | None = Field(
        default=None, description="`pending_confirmation`: the records a proposed match holds until a person confirms "
                                  "or rejects it; `unreconciled`: the others")


class ExceptionDetailQuery(ExceptionRecordsFilter):
    near_misses: bool = Field(default=False, description=(
        "Also explain the exception's 20 newest records still open: under each active rule, the closest candidate "
        "of the other side and the conditions that fail (reads the reconciliation's open records, as a dry run does)"))


class ExceptionRecordsQuery(ExceptionRecordsFilter):
    cursor: str | None = None
    limit: int = Field(default=50, ge=1, le=200)


class UpdateException(RequestModel):
    title: Name | None = unchanged_when_absent()
    description: Description | None = unchanged_when_absent()
    status: Literal["open", "investigating", "dismissed", "resolved"] | None = unchanged_when_absent()


class CreateAssignee(RequestModel):
    """user_id or idp_user_id (both: the same user), naming an active user of the environment."""
    model_config = ConfigDict(json_schema_extra={"anyOf": [{"required": ["user_id"]}, {"required": ["idp_user_id"]}]})
    user_id: Id | None = Field(default=None, description="The user to assign")
    idp_user_id: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)] | None = \
        Field(default=None, description="Or the user's id with the identity provider")


class CreateComment(RequestModel):
    body: Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
    author_idp_id: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)] | None = \
        Field(default=None, description="With an API key: the idp_user_id of the active user who writes it. "
              "A signed-in person is the author: omit it")
    mentions: list[Id] = Field(default_factory=list, max_length=100, description="Ids of active users")
