"""Bodies and answers of four-eyes approvals: /approvals and /reconciliations/{id}/approval_policy."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from chalicelib.api.schemas.common import CursorQuery, Id, RequestModel, ResponseModel, Timestamp
from chalicelib.domain.approvals import DEFAULT_EXPIRY_MINUTES, MAX_DECIMAL_PLACES, MAX_EXPIRY_MINUTES, MAX_REASON

Action = Literal["manual_match", "unmatch", "dismissal", "accept_investigation"]
Status = Literal["pending", "executing", "approved", "failed", "rejected", "expired"]


class ApprovalPolicyOut(ResponseModel):
    """Which actions on the reconciliation wait for a second person above the threshold. No policy
    set reads as the default: no actions, so nothing waits."""
    reconciliation_id: int
    actions: list[Action]
    thresholds: dict[str, int] = Field(description="Per currency (ISO code, or \"*\" for any other): minor units "
                                       "at threshold_decimal_places; an action whose amount in a currency is strictly "
                                       "above that currency's threshold waits for an approver, and so does one in a "
                                       "currency without a threshold")
    threshold: int | None = Field(description="thresholds[\"*\"]: the threshold of any currency not named (null: none)")
    threshold_decimal_places: int
    expires_after_minutes: int = Field(description="A pending approval expires this long after it was requested")
    updated_at: Timestamp | None
    updated_by: str | None = Field(description="The admin's actor (user:<id> or api_key:<id>) who set it last")


class PutApprovalPolicy(RequestModel):
    """The whole policy (absent fields take their defaults: no actions, threshold 0 at 2 decimal
    places, 3 days to expire). The amount of an action is the larger of the gross totals of the
    sides it touches (docs/approvals.md)."""
    actions: list[Action] = Field(default_factory=list, max_length=4, description="The actions that need an "
                                  "approval: manual_match, unmatch (of a confirmed match), dismissal (of an "
                                  "exception), accept_investigation")
    thresholds: dict[Annotated[str, StringConstraints(min_length=1, max_length=3)],
                     Annotated[int, Field(ge=0, le=10**18)]] | None = Field(
        default=None, max_length=50, description="Per currency: an ISO 4217 code (USD) or \"*\" (any currency not "
        "named) -> minor units at threshold_decimal_places. An action in a currency with no threshold (not named, "
        "no \"*\") waits for an approver whatever its amount")
    threshold: int | None = Field(default=None, ge=0, le=10**18, description="Shorthand for thresholds[\"*\"] (with "
                                  "neither given: {\"*\": 0}, every amount above zero waits)")
    threshold_decimal_places: int = Field(default=2, ge=0, le=MAX_DECIMAL_PLACES)
    expires_after_minutes: int = Field(default=DEFAULT_EXPIRY_MINUTES, ge=1, le=MAX_EXPIRY_MINUTES)


class ApprovalOut(ResponseModel):
    """An action waiting for (or decided by) a second person. `params` are what the action runs
    with once approved; `result` what it made (`reconciliation_match_id` of a match)."""
    id: int
    url: str
    reconciliation_id: int
    action: Action
    description: str
    status: Status
    params: dict[str, Any]
    amount: int = Field(description="Minor units at amount_decimal_places: the larger of the gross totals of the "
                        "sides the action touches")
    amount_decimal_places: int
    currency: str | None = Field(description="The currency of `amount`: of the action's amounts per currency, the "
                                 "one that made it wait")
    threshold: int | None = Field(description="The policy's for `currency` when the approval was requested; null: "
                                  "the policy gave that currency none, so the action waits whatever its amount")
    threshold_decimal_places: int
    target_type: str | None = Field(description="The resource acted on (none for a new manual match)")
    target_id: int | None
    requested_by: str = Field(description="Who asked: the person (user:<id>), also when they sent the request "
                              "with a key of their own; api_key:<id> for a machine's key (one no person owns)")
    requested_with: str | None = Field(default=None, description="The credential the request was sent with: "
                                       "user:<id> (signed in) or api_key:<id>")
    requested_at: Timestamp
    expires_at: Timestamp
    decided_by: str | None
    decided_at: Timestamp | None
    rejection_reason: str | None
    failure_reason: str | None = Field(description="failed: why the approved action could not be done (the "
                                       "world changed since the request)")
    result: dict[str, Any]
    completed_at: Timestamp | None


class ApprovalPage(ResponseModel):
    data: list[ApprovalOut]
    next_cursor: str | None
    limit: int


class ApprovalsQuery(CursorQuery):
    status: Status | None = None
    reconciliation_id: Id | None = None
    requested_by: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = Field(
        default=None, description="user:<id> (their requests, signed in or with their keys) or api_key:<id> (the "
        "requests sent with that key)")


class RejectApproval(RequestModel):
    reason: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_REASON)]


__all__ = ["ApprovalOut", "ApprovalPage", "ApprovalPolicyOut", "ApprovalsQuery", "PutApprovalPolicy",
           "RejectApproval"]
