"""Reconciliation matches: their statuses, what a person may match by hand, and how a record's
status follows from the reconciliations that matched it."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from chalicelib.domain.errors import FieldError, ValidationFailed
from chalicelib.domain.records import Direction, Record, RecordStatus

MAX_INLINE_RECORDS = 100  # a larger match is returned with record_count only
# A match of more records keeps their money beside its members (written by the run that makes it,
# else by the first trace through it), so a story trace never reads them all again.
KEEP_MONEY_FROM = 100
MAX_MANUAL_RECORDS = 1000
MAX_REASON = 500
Side = Literal["a", "b"]  # of a reconciliation: the streams of side A, or of side B


class MatchStatus(StrEnum):
    CONFIRMED = "confirmed"
    PROPOSED = "proposed"


@dataclass(frozen=True)
class Match:
    environment: str
    id: int
    reconciliation_id: int
    status: MatchStatus
    group_key: str
    record_count: int
    created_at: datetime
    reconciliation_rule_id: int | None = None  # None for a manual match
    run_id: int | None = None
    differences: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None  # manual matches: why a difference was accepted
    # An unmatch marks the match first, and when its records are open again keeps it as a
    # tombstone (`unmatched_at`), so that a retried run never writes the same match again.
    unmatching: bool = False
    unmatched_at: datetime | None = None
    pending_since: datetime | None = None  # a person's match being written (hidden until committed)
    # Partial payments (domain/allocation.py): record id -> the share of it this match holds, for
    # the records it takes in part or finishes covering; every other record it holds whole.
    allocations: dict[int, int] = field(default_factory=dict)

    @property
    def shown(self) -> bool:
        """Whether clients see it: written whole and not being undone."""
        return not self.unmatching and self.pending_since is None


@dataclass(frozen=True)
class MatchMember:
    """One record of a match and the side it is on. `matched_in` is what a claim needs: the
    reconciliations that had matched the record when it was read (a stale set only costs the
    claim a retry); a member read back from storage does not keep it."""
    side: Side
    record_id: int
    data_stream_key: str
    matched_in: frozenset[int] = frozenset()
    share: int | None = None  # partial payments: the share of the record the match takes (None: whole)


def record_status(matched_in: Iterable[int], users: frozenset[int],
                  proposed_in: Iterable[int] = ()) -> RecordStatus:
    """The status of a record matched in the reconciliations `matched_in` (by a proposed match in
    those of `proposed_in`), when `users` are the reconciliations using its stream now (a
    reconciliation that stopped using the stream, or was deleted, no longer counts). A proposed
    match claims the record but does not reconcile it: until a person confirms it the record is
    `pending_confirmation` (which says more than `partially_reconciled`)."""
    proposed = set(proposed_in)
    confirmed = (set(matched_in) - proposed) & users
    if confirmed and confirmed >= users:
        return RecordStatus.RECONCILED
    if proposed & set(matched_in) & users:
        return RecordStatus.PENDING_CONFIRMATION
    return RecordStatus.PARTIALLY_RECONCILED if confirmed else RecordStatus.UNRECONCILED


def signed(record: Record, scale: int) -> int:
    """The amount at `scale` decimal places (exact: `scale` is at least the record's), credits positive."""
    amount: int = record.amount * 10 ** (scale - record.decimal_places)  # int ** int is typed Any
    return amount if record.direction is Direction.CREDIT else -amount


def check_match_sides(side_a: list[Record], side_b: list[Record], allow_difference: bool, reason: str | None) -> None:
    """What every person's match needs, whole or in shares: records on both sides, one currency, and a
    reason when a difference is allowed (all problems in one 422)."""
    errors: list[FieldError] = []
    if not side_a or not side_b:
        errors.append(FieldError("record_ids", "must hold records of both sides of the reconciliation"))
    currencies = {r.currency for r in side_a + side_b}
    if len(currencies) > 1:
        errors.append(FieldError("record_ids", f"records are in several currencies ({', '.join(sorted(currencies))})"))
    if allow_difference and not (isinstance(reason, str) and reason.strip()):
        errors.append(FieldError("reason", "is required when allow_difference is true"))
    if errors:
        raise ValidationFailed(errors)


def check_manual_match(side_a: Iterable[Record], side_b: Iterable[Record], allow_difference: bool,
                       reason: str | None) -> int:
    """A person's match: both sides present, one currency, and side A's total (signed by
    direction) equal to side B's unless a difference is allowed with a reason. A side booked
    as the mirror image of the other (a ledger debit for a bank credit) balances too. Returns
    the difference in minor units of the records' largest decimal places (0 when balanced)."""
    side_a, side_b = list(side_a), list(side_b)
    check_match_sides(side_a, side_b, allow_difference, reason)
    scale = max(r.decimal_places for r in side_a + side_b)
    total_a, total_b = sum(signed(r, scale) for r in side_a), sum(signed(r, scale) for r in side_b)
    difference = min(abs(total_a - total_b), abs(total_a + total_b))
    if difference and not allow_difference:
        raise ValidationFailed.on("record_ids", f"side A totals {total_a} and side B {total_b} (minor units, "
                                  f"credits positive): they differ by {difference}; give allow_difference and a "
                                  "reason to match anyway")
    return difference
