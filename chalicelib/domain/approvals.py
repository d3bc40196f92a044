"""Four-eyes approvals: a reconciliation's policy says which people's actions above an amount wait
for a second person, and an approval is one such action waiting (services/approvals.py).

    pending -> executing -> approved
       |           |
       |           +--> failed     (approved, but the action no longer holds: the reason says why)
       +--> rejected               (with a reason)
       +--> expired                (nobody decided within the policy's expiry)

Every move is one conditional write from the statuses this table allows, so of two approvals of
the same request (a double click, a redelivery) one moves it to `executing` and runs the action;
the other finds it moved.

The amount of an action, what the policy's threshold is compared with: the larger of the gross
totals (the sum of the records' amounts, whatever their direction) of the sides the action touches.
A manual match, an unmatch and an accepted investigation touch both sides of the reconciliation;
a dismissed exception holds records of one stream (one side): its records' gross total. Amounts of
several decimal places are compared exactly (as fractions of the currency unit); an action needs
an approval when its amount is strictly above the threshold.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from fractions import Fraction
from typing import Any

from chalicelib.domain.clock import iso, optional_iso, utc_now
from chalicelib.domain.errors import DomainError, Forbidden
from chalicelib.domain.events import Event, make_event
from chalicelib.domain.records import Record
from chalicelib.domain.status_machine import StatusMachine
from chalicelib.domain.users import USER_ACTOR_PREFIX

API = "/v1"
DEFAULT_EXPIRY_MINUTES = 3 * 24 * 60
MAX_EXPIRY_MINUTES = 30 * 24 * 60
MAX_DECIMAL_PLACES = 8
MAX_REASON = 1_000


class ApprovalAction(StrEnum):
    MANUAL_MATCH = "manual_match"  # POST /reconciliation_matches
    UNMATCH = "unmatch"  # DELETE /reconciliation_matches/{id} of a confirmed match
    DISMISSAL = "dismissal"  # an exception moved to dismissed (PATCH, or a bulk status action)
    ACCEPT_INVESTIGATION = "accept_investigation"  # POST .../investigations/{id}/accept


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    EXECUTING = "executing"
    APPROVED = "approved"
    FAILED = "failed"
    REJECTED = "rejected"
    EXPIRED = "expired"


APPROVAL_STATUSES = StatusMachine({  # approved, failed, rejected and expired are finished
    ApprovalStatus.PENDING: {ApprovalStatus.EXECUTING, ApprovalStatus.REJECTED, ApprovalStatus.EXPIRED},
    ApprovalStatus.EXECUTING: {ApprovalStatus.APPROVED, ApprovalStatus.FAILED},
})


# An action held by the policy listing any of these: an accepted investigation makes a manual match
# (whose own gate its accept opens), so a policy holding manual matches holds accepts too.
COVERED_BY: dict[ApprovalAction, frozenset[ApprovalAction]] = {
    ApprovalAction.ACCEPT_INVESTIGATION: frozenset({ApprovalAction.ACCEPT_INVESTIGATION, ApprovalAction.MANUAL_MATCH}),
}


@dataclass(frozen=True)
class ApprovalPolicy:
    """A reconciliation's: the actions that need a second person above `threshold` (minor units at
    `threshold_decimal_places`), and how long a request waits before it expires. No policy stored
    is the default: no action needs an approval."""
    environment: str
    reconciliation_id: int
    actions: frozenset[ApprovalAction] = frozenset()
    threshold: int = 0
    threshold_decimal_places: int = 2
    expires_after_minutes: int = DEFAULT_EXPIRY_MINUTES
    updated_at: datetime | None = None
    updated_by: str | None = None

    def covers(self, action: ApprovalAction) -> bool:
        """Whether the policy holds `action` (above its threshold): when it lists the action, or one
        the action makes (an accepted investigation makes a manual match: COVERED_BY)."""
        return bool(COVERED_BY.get(action, frozenset({action})) & self.actions)

    def requires(self, action: ApprovalAction, amount: Fraction) -> bool:
        """Whether `action` of `amount` (in currency units) waits for an approver."""
        return self.covers(action) and amount > Fraction(self.threshold, 10 ** self.threshold_decimal_places)

    @property
    def expiry(self) -> timedelta:
        return timedelta(minutes=self.expires_after_minutes)


def check_policy(threshold: int, threshold_decimal_places: int, expires_after_minutes: int) -> list[tuple[str, str]]:
    """Problems of a policy's numbers, as (field, message); none when it is fine."""
    problems = []
    if threshold < 0:
        problems.append(("threshold", "must be 0 or more (minor units)"))
    if not 0 <= threshold_decimal_places <= MAX_DECIMAL_PLACES:
        problems.append(("threshold_decimal_places", f"must be 0 to {MAX_DECIMAL_PLACES}"))
    if not 1 <= expires_after_minutes <= MAX_EXPIRY_MINUTES:
        problems.append(("expires_after_minutes", f"must be 1 to {MAX_EXPIRY_MINUTES} (30 days)"))
    return problems


@dataclass(frozen=True)
class Amount:
    """An action's amount: minor units at `decimal_places`, in `currency` (None: several, or none)."""
    minor: int
    decimal_places: int
    currency: str | None = None

    @property
    def value(self) -> Fraction:
        return Fraction(self.minor, 10 ** self.decimal_places)


def gross(records: Iterable[Record], scale: int) -> int:
    """The records' amounts at `scale` decimal places, summed whatever their direction."""
    return sum(r.amount * 10 ** (scale - r.decimal_places) for r in records)


def amount_of_sides(*sides: Iterable[Record]) -> Amount:
    """The larger of the sides' gross totals, at the records' largest decimal places."""
    lists = [list(side) for side in sides]
    everything = [r for side in lists for r in side]
    scale = max((r.decimal_places for r in everything), default=0)
    currencies = {r.currency for r in everything}
    return Amount(max((gross(side, scale) for side in lists), default=0), scale,
                  currencies.pop() if len(currencies) == 1 else None)


def amount_of_exception(totals: dict[str, Any] | None, decimal_places: int, currency: str | None) -> Amount:
    """An exception's records are of one stream: their gross total (credits and debits)."""
    kept = totals or {}
    return Amount(int(kept.get("credit_sum", 0)) + int(kept.get("debit_sum", 0)), decimal_places, currency)


@dataclass(frozen=True)
class Approval:
    environment: str
    id: int
    reconciliation_id: int
    action: ApprovalAction
    params: dict[str, Any]  # what the action is run with once approved (services/approvals.py `execute`)
    description: str  # what it does, in words: "Match 3 records by hand", "Dismiss exception 12"
    amount: int
    amount_decimal_places: int
    currency: str | None
    threshold: int  # the policy's when asked (minor units at threshold_decimal_places)
    threshold_decimal_places: int
    status: ApprovalStatus
    requested_by: str  # the person (user:<id>, also for a request sent with their own key), or api_key:<id>
    requested_at: datetime
    expires_at: datetime
    decided_by: str | None = None
    decided_at: datetime | None = None
    rejection_reason: str | None = None
    failure_reason: str | None = None
    result: dict[str, Any] = field(default_factory=dict)  # what the action made: {"reconciliation_match_id": 7}
    completed_at: datetime | None = None
    target_type: str | None = None  # the resource acted on, when there is one before the action
    target_id: int | None = None
    requested_with: str | None = None  # the credential that sent the request (user:<id> or api_key:<id>)

    @property
    def finished(self) -> bool:
        return self.status in APPROVAL_STATUSES.finished

    def overdue(self, now: datetime) -> bool:
        """Pending past its expiry: it expires (at the next read or sweep) and can no longer be decided."""
        return self.status is ApprovalStatus.PENDING and now >= self.expires_at


class ApprovalRequired(DomainError):
    """The action waits for an approver: nothing changed; the API answers 202 with the approval."""

    def __init__(self, approval: Approval) -> None:
        super().__init__(f"approval {approval.id} requested: {approval.description} waits for an approver "
                         f"({API}/approvals/{approval.id})")
        self.approval = approval


def check_decider(approval: Approval, actor: str, deciding: str) -> None:
    """Four eyes: only a person decides (an API key is no second person: whoever holds it may be the
    requester), and never on their own request (403 with the reason)."""
    if not actor.startswith(USER_ACTOR_PREFIX):
        raise Forbidden(f"{deciding} an approval is a person's decision: sign in as an approver or admin "
                        "(an API key may request approvals, never decide them)")
    if actor == approval.requested_by:
        via = (f" (with {approval.requested_with}, your key)" if approval.requested_with
               and approval.requested_with != approval.requested_by else "")
        raise Forbidden(f"you requested approval {approval.id}{via}: another approver or admin must decide it "
                        "(four eyes)")


# Events ------------------------------------------------------------------------------------------

def approval_data(approval: Approval) -> dict[str, Any]:
    return {"id": approval.id, "url": f"{API}/approvals/{approval.id}", "reconciliation_id": approval.reconciliation_id,
            "action": approval.action.value, "status": approval.status.value, "amount": approval.amount,
            "amount_decimal_places": approval.amount_decimal_places, "currency": approval.currency,
            "requested_by": approval.requested_by, "requested_with": approval.requested_with,
            "decided_by": approval.decided_by,
            "rejection_reason": approval.rejection_reason, "failure_reason": approval.failure_reason,
            "result": dict(approval.result), "expires_at": iso(approval.expires_at),
            "decided_at": optional_iso(approval.decided_at)}


def approval_requested(approval: Approval) -> Event:
    return make_event(approval.environment, "approval.requested", f"approval {approval.id}", approval.requested_at,
                      approval_data(approval))


def approval_decided(approval: Approval) -> Event:
    """`approval.approved` once the action ran (its `status` says approved, or failed with the
    reason), `approval.rejected` or `approval.expired`."""
    kind = {ApprovalStatus.APPROVED: "approved", ApprovalStatus.FAILED: "approved",
            ApprovalStatus.REJECTED: "rejected", ApprovalStatus.EXPIRED: "expired"}[approval.status]
    return make_event(approval.environment, f"approval.{kind}", f"approval {approval.id}",
                      approval.completed_at or utc_now(), approval_data(approval))
