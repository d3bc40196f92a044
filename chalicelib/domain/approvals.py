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

The amount of an action, what the policy's thresholds are compared with, per currency (an amount of
one currency is never added to another's): in each currency of its records, the larger of the gross
totals (the sum of the records' amounts, whatever their direction; of a partial match, the shares it
takes or gives back: docs/partial-payments.md) of the sides the action touches. A manual match, an
unmatch and an accepted investigation touch both sides of the reconciliation; a dismissed exception
holds records of one stream (one side): its records' gross total. Each currency's amount is compared
with that currency's threshold (or the policy's "*" one for any currency it does not name), exactly
(as fractions of the currency unit); an action needs an approval when one of its amounts is strictly
above its threshold, or is in a currency the policy gives no threshold (the safe default: held).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
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
ANY_CURRENCY = "*"  # a policy's threshold for the currencies it does not name
MAX_THRESHOLDS = 50
CURRENCY_CODE = re.compile(r"^[A-Z]{3}$")


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
    """A reconciliation's: the actions that need a second person above `thresholds` (per currency:
    an ISO code, or "*" for any other; minor units at `threshold_decimal_places`), and how long a
    request waits before it expires. No policy stored is the default: no action needs an approval."""
    environment: str
    reconciliation_id: int
    actions: frozenset[ApprovalAction] = frozenset()
    thresholds: Mapping[str, int] = field(default_factory=lambda: {ANY_CURRENCY: 0})
    threshold_decimal_places: int = 2
    expires_after_minutes: int = DEFAULT_EXPIRY_MINUTES
    updated_at: datetime | None = None
    updated_by: str | None = None

    def covers(self, action: ApprovalAction) -> bool:
        """Whether the policy holds `action` (above its threshold): when it lists the action, or one
        the action makes (an accepted investigation makes a manual match: COVERED_BY)."""
        return bool(COVERED_BY.get(action, frozenset({action})) & self.actions)

    @property
    def threshold(self) -> int | None:
        """The threshold of any currency not named ("*"), None when the policy has none."""
        return self.thresholds.get(ANY_CURRENCY)

    def threshold_of(self, currency: str | None) -> int | None:
        """The currency's threshold (minor units at threshold_decimal_places): its own, else "*";
        None when the policy gives none (an amount of no one currency has none but "*")."""
        if currency is not None and currency in self.thresholds:
            return self.thresholds[currency]
        return self.thresholds.get(ANY_CURRENCY)

    def holding(self, action: ApprovalAction, amounts: Iterable[Amount]) -> tuple[Amount, int | None] | None:
        """The amount that makes `action` wait for an approver, with its threshold (None: its currency
        has none, so it waits whatever its size); None when the action goes through. Of several, the
        one furthest above its threshold (an amount without a threshold first)."""
        if not self.covers(action):
            return None
        above: list[tuple[bool, Fraction, Amount, int | None]] = []
        for amount in amounts:
            threshold = self.threshold_of(amount.currency)
            if threshold is None:
                above.append((True, Fraction(0), amount, None))
                continue
            limit = Fraction(threshold, 10 ** self.threshold_decimal_places)
            if amount.value > limit:
                above.append((False, amount.value / limit if limit else Fraction(10 ** 30), amount, threshold))
        if not above:
            return None
        _, _, amount, threshold = max(above, key=lambda a: (a[0], a[1]))
        return amount, threshold

    @property
    def expiry(self) -> timedelta:
        return timedelta(minutes=self.expires_after_minutes)


def check_policy(thresholds: Mapping[str, int], threshold_decimal_places: int,
                 expires_after_minutes: int) -> list[tuple[str, str]]:
    """Problems of a policy's numbers, as (field, message); none when it is fine."""
    problems = []
    if len(thresholds) > MAX_THRESHOLDS:
        problems.append(("thresholds", f"at most {MAX_THRESHOLDS} currencies"))
    for currency, threshold in thresholds.items():
        if currency != ANY_CURRENCY and not CURRENCY_CODE.match(currency):
            problems.append((f"thresholds.{currency}", "must be an ISO 4217 code in capitals (USD) or \"*\" "
                                                       "(any other currency)"))
        elif threshold < 0:
            problems.append((f"thresholds.{currency}", "must be 0 or more (minor units)"))
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


def amount_of_sides(*sides: Iterable[Record]) -> list[Amount]:
    """Per currency of the records (by code), the larger of the sides' gross totals in it, at
    that currency's records' largest decimal places. Never one currency added to another."""
    lists = [list(side) for side in sides]
    amounts = []
    for currency in sorted({r.currency for side in lists for r in side}):
        of_currency = [[r for r in side if r.currency == currency] for side in lists]
        scale = max(r.decimal_places for side in of_currency for r in side)
        amounts.append(Amount(max(gross(side, scale) for side in of_currency), scale, currency))
    return amounts


def amount_of_exception(totals: dict[str, Any] | None, decimal_places: int, currency: str | None) -> list[Amount]:
    """An exception's records are of one stream: their gross total (credits and debits), in its
    currency (None when its records mix currencies: no threshold but "*" applies)."""
    kept = totals or {}
    return [Amount(int(kept.get("credit_sum", 0)) + int(kept.get("debit_sum", 0)), decimal_places, currency)]


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
    threshold: int | None  # the policy's for `currency` when asked (minor units at threshold_decimal_places);
    # None: the policy gave that currency none, so the action waits whatever its amount
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
