"""Partial payments: how much of a record the matches of one reconciliation took.

A record is matched whole by one match, or in parts by several (an invoice paid in instalments,
a payout netted against refunds): each match takes a share of the record's amount, in the
record's own minor units. The record stays open in the reconciliation, with its remaining
amount, until its shares cover it; unmatching a match gives its share back, exactly.

`Coverage` is the arithmetic the storage applies with a conditional write (see
adapters/dynamodb/allocations.py): no share is zero or negative, a match holds at most one share
of a record, and the shares never add up to more than the record's amount. A record stored
before partial payments has no shares: it reads as not allocated while open, and as allocated
whole to the match holding it once matched.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from chalicelib.domain.errors import Conflict, FieldError, ValidationFailed
from chalicelib.domain.records import Direction, OpenRecord, Record

ALLOCATION_MODES = ("whole", "partial")  # a rule's `allocation` option


class AllocationRefused(ValueError):
    """A share the record cannot give: more than it has left, none at all, or a second one for a match."""


@dataclass(frozen=True)
class Coverage:
    """One record's amount and the shares of it that matches of one reconciliation hold."""
    amount: int
    shares: Mapping[int, int] = field(default_factory=dict)  # match id -> minor units of the record

    def __post_init__(self) -> None:
        if self.amount < 0:
            raise AllocationRefused(f"a record's amount is never negative ({self.amount})")
        if any(share <= 0 for share in self.shares.values()):
            raise AllocationRefused("every share is a positive amount")
        if self.allocated > self.amount:
            raise AllocationRefused(f"shares total {self.allocated}, more than the record's {self.amount}")
        object.__setattr__(self, "shares", MappingProxyType(dict(self.shares)))

    @property
    def allocated(self) -> int:
        return sum(self.shares.values())

    @property
    def remaining(self) -> int:
        return self.amount - self.allocated

    def allocate(self, match_id: int, share: int) -> Coverage:
        """The coverage once `match_id` takes `share`."""
        if match_id in self.shares:
            raise AllocationRefused(f"match {match_id} already holds {self.shares[match_id]} of this record")
        if share <= 0:
            raise AllocationRefused(f"a share must be positive (got {share})")
        if share > self.remaining:
            raise AllocationRefused(f"{share} asked, only {self.remaining} of {self.amount} left")
        return Coverage(self.amount, {**self.shares, match_id: share})

    def release(self, match_id: int) -> tuple[Coverage, int]:
        """The coverage once `match_id` gives its share back, and the share it gave (0: it held none)."""
        if match_id not in self.shares:
            return self, 0
        rest = {m: s for m, s in self.shares.items() if m != match_id}
        return Coverage(self.amount, rest), self.shares[match_id]


def paid_in_part(record_id: int, paid_in: Iterable[int]) -> Conflict:
    """Why a record matches hold shares of is not deleted (it is `unreconciled` all the same)."""
    return Conflict(f"record {record_id} is paid in part in reconciliation {min(paid_in)}; unmatch the matches "
                    "holding its shares first (docs/partial-payments.md)")


def coverage_of(record: Record, reconciliation_id: int, holder: int | None = None) -> Coverage:
    """The record's coverage in the reconciliation: its stored shares, else (a record matched whole,
    or stored before partial payments) all of it for the match holding it, else none."""
    shares = record.allocations.get(reconciliation_id)
    if shares:
        return Coverage(record.amount, shares)
    if holder is not None and record.amount:
        return Coverage(record.amount, {holder: record.amount})
    return Coverage(record.amount)


def remaining_of(amount: int, allocated: int | None) -> int:
    """An open record's amount still to cover (its stored total allocated, absent for none)."""
    return amount - (allocated or 0)


@dataclass(frozen=True)
class Share:
    """What one match takes of one of its records: `amount` of the record's `remaining`; `whole`
    when the record had no earlier share and the match takes all of it (a claim as before)."""
    record_id: int
    amount: int
    remaining: int
    whole: bool


def plan_shares(records: Iterable[tuple[Record, int]], asked: Mapping[int, int]) -> list[Share]:
    """The shares a person's match takes: `asked` for the records it names, each other record's
    remaining amount. `records` are the match's records with what each has left in the
    reconciliation. Refuses (422) a share of a record not in the match, one of zero or less, or one
    above what the record has left."""
    pairs = list(records)
    ids = {record.id for record, _ in pairs}
    errors = [FieldError(f"allocations[{n}].record_id", f"record {rid} is not one of record_ids")
              for n, rid in enumerate(asked) if rid not in ids]
    shares: list[Share] = []
    for record, remaining in pairs:
        if remaining <= 0 and record.amount:
            errors.append(FieldError("record_ids", f"record {record.id} is already covered in full"))
            continue
        amount = asked.get(record.id, remaining)
        position = list(asked).index(record.id) if record.id in asked else None
        if record.id in asked and amount <= 0:
            errors.append(FieldError(f"allocations[{position}].amount", "must be positive"))
        elif amount > remaining:
            errors.append(FieldError(f"allocations[{position}].amount",
                                     f"is {amount}, above the {remaining} (minor units) record {record.id} has left"))
        shares.append(Share(record.id, amount, remaining, whole=remaining == record.amount and amount == remaining))
    if errors:
        raise ValidationFailed(errors)
    return shares


def signed_share(record: Record, share: int, scale: int) -> int:
    """A share at `scale` decimal places, credits positive (as matches.signed does a whole record)."""
    amount: int = share * 10 ** (scale - record.decimal_places)
    return amount if record.direction is Direction.CREDIT else -amount


def share_difference(side_a: Iterable[tuple[Record, int]],
                     side_b: Iterable[tuple[Record, int]]) -> tuple[int, int, int]:
    """Side A's total share, side B's (signed, at the records' largest decimal places) and the
    difference between them (a side booked as the mirror image of the other balances too)."""
    a, b = list(side_a), list(side_b)
    scale = max((r.decimal_places for r, _ in a + b), default=0)
    total_a = sum(signed_share(r, s, scale) for r, s in a)
    total_b = sum(signed_share(r, s, scale) for r, s in b)
    return total_a, total_b, min(abs(total_a - total_b), abs(total_a + total_b))


def allocate_in_order(remaining: int, offers: Iterable[tuple[int, int]]) -> tuple[list[tuple[int, int]], int]:
    """A partial rule's allocation of one record against payments only (no refund among the offers):
    each offer (record id, amount) in order, taken whole while it fits in what is left; stops at the
    first that does not, or has no amount (a negative amount stops it too). Returns the offers taken
    and what is left. Never allocates more than `remaining`. `allocate_netted` with no refund."""
    taken, left = allocate_netted(remaining, ((record_id, amount, False) for record_id, amount in offers))
    return taken, left


def allocate_netted(remaining: int, offers: Iterable[tuple[int, int, bool]]) -> tuple[list[tuple[int, int]], int]:
    """A partial rule's allocation of one record against the many side's records, refunds netted
    (docs/partial-payments.md, "Netting"). `offers` are (record id, amount, refund) in the order the
    rule takes them (date, then id), amounts in the one record's minor units, never negative; a
    payment counts +amount, a refund -amount. The records taken are the longest run from the first
    offer whose net is positive and at most `remaining`, each taken whole; a record of no amount ends
    the run (it and every record after it stay open). With payments alone the net only grows: the
    first payment that would overpay stops it. Returns the records taken, each with its signed
    amount, and what is left: `remaining - net`, with 0 < net <= remaining when anything is taken
    (never a share of zero or less, never more than the record has left)."""
    walked: list[tuple[int, int]] = []
    net, kept, kept_net = 0, 0, 0
    for record_id, amount, refund in offers:
        if amount <= 0:
            break
        signed = -amount if refund else amount
        net += signed
        walked.append((record_id, signed))
        if 0 < net <= remaining:
            kept, kept_net = len(walked), net
    return walked[:kept], remaining - kept_net


def remaining_records(open_records: Mapping[int, OpenRecord],
                      partly_paid: Mapping[int, Mapping[int, int]]) -> dict[int, OpenRecord]:
    """Open records as exceptions and tallies count them: one paid in part by what it has left
    (its amount less its shares), every other one whole."""
    return {record_id: replace(record, amount=Coverage(record.amount, partly_paid[record_id]).remaining)
            if partly_paid.get(record_id) else record for record_id, record in open_records.items()}


def kept_amount_changed(kept: int, record: OpenRecord, scale: int) -> bool:
    """Whether an exception keeps a record (`kept`, at the exception's `scale`) at another amount
    than the record now counts (a share taken or given back since it joined)."""
    now: int = record.amount * 10 ** max(scale - record.decimal_places, 0)
    return kept != now
