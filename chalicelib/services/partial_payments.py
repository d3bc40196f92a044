"""Partial payments in a person's match (domain/allocation.py): the share the match takes of each
of its records, and the balance of those shares.

A match is partial when the request gives `allocations`, or when one of its records was paid in
part in the reconciliation already (it then takes what that record has left unless told less).
Otherwise the match is whole and services/matches.py checks it as before."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chalicelib.domain.allocation import coverage_of, plan_shares, share_difference
from chalicelib.domain.errors import ValidationFailed
from chalicelib.domain.matches import check_match_sides
from chalicelib.domain.records import Record
from chalicelib.domain.rules import Rule
from chalicelib.domain.runs import Run
from chalicelib.services.ports import Ports

if TYPE_CHECKING:
    from chalicelib.domain.matching.frames import Frame
    from chalicelib.domain.matching.outcome import MatchOutcome
    from chalicelib.domain.matching.partition import PartitionPlan


@dataclass(frozen=True)
class ManualShares:
    shares: dict[int, int]  # record id -> its share, for the records taken in part or finishing a cover
    difference: int  # between the sides' shares, in minor units of the records' largest decimal places


def manual_shares(side_a: Iterable[Record], side_b: Iterable[Record], reconciliation_id: int,
                  asked: Mapping[int, int], allow_difference: bool, reason: str | None) -> ManualShares | None:
    """The shares of a person's match, None for a whole match (no allocation asked, no record paid
    in part). 422 when a share is refused (domain.allocation.plan_shares), the records are in
    several currencies, or the sides' shares do not balance without allow_difference and a reason."""
    side_a, side_b = list(side_a), list(side_b)
    records = side_a + side_b
    if not asked and not any(r.allocations.get(reconciliation_id) for r in records):
        return None
    check_match_sides(side_a, side_b, allow_difference, reason)
    planned = {s.record_id: s for s in plan_shares(
        ((r, coverage_of(r, reconciliation_id).remaining) for r in records), asked)}
    total_a, total_b, difference = share_difference(((r, planned[r.id].amount) for r in side_a),
                                                    ((r, planned[r.id].amount) for r in side_b))
    if difference and not allow_difference:
        raise ValidationFailed.on("allocations", f"side A's shares total {total_a} and side B's {total_b} (minor "
                                  f"units, credits positive): they differ by {difference}; allocate so that they "
                                  "balance, or give allow_difference and a reason")
    return ManualShares({rid: s.amount for rid, s in planned.items() if not s.whole}, difference)


def allocations_asked(allocations: Iterable[Any] | None) -> dict[int, int]:
    """A request's `allocations` ({record_id, amount} items) by record id; 422 for a record named twice."""
    asked: dict[int, int] = {}
    for n, item in enumerate(allocations or ()):
        if item.record_id in asked:
            raise ValidationFailed.on(f"allocations[{n}].record_id", f"record {item.record_id} is allocated twice")
        asked[item.record_id] = item.amount
    return asked


def allocated_in(ports: Ports, environment: str, reconciliation_id: int) -> dict[int, int]:
    """What each record paid in part has allocated in the reconciliation (its shares' total), read now."""
    partly = ports.claims.partly_paid(environment, reconciliation_id)
    return {record_id: sum(shares.values()) for record_id, shares in partly.items()}


def in_run(ports: Ports, run: Run, outcome: MatchOutcome, side_a: Frame, side_b: Frame,
           rules: Sequence[Rule]) -> MatchOutcome:
    """A run's outcome with partial payments (domain/matching/partial.py): whole matches of records
    paid in part dropped, the partial rules' matches added. What the records have allocated is read
    now; a share taken meanwhile only makes a claim refuse (the match is then undone)."""
    from chalicelib.domain.matching.partial import partial_rules, with_partial_matches

    if not partial_rules(rules) and outcome.members.is_empty():
        return outcome
    allocated = allocated_in(ports, run.environment, run.reconciliation_id)
    return with_partial_matches(outcome, side_a, side_b, rules, allocated)


# A run matched in partitions (services/run_partitions.py, docs/partial-payments.md) -----------------


def skipped_in_partitions(rules: Sequence[Rule], plan: PartitionPlan) -> dict[str, str]:
    """The partial rules whose pass cannot run inside the plan's partitions, each with why."""
    from chalicelib.domain.matching.partial import skipped_in_partitions as skipped

    return skipped(rules, plan)


def applied_in_partitions(rules: Sequence[Rule], skipped: Mapping[str, str]) -> list[Rule]:
    from chalicelib.domain.matching.partial import partial_rules

    return [r for r in partial_rules(rules) if str(r.id) not in skipped]


def in_partition(ports: Ports, run: Run, outcome: MatchOutcome, side_a: Frame, side_b: Frame,
                 rules: Sequence[Rule], skipped: Mapping[str, str]) -> MatchOutcome:
    """A partition's outcome with partial payments, as `in_run` does a run in one piece: whole
    matches of records paid in part dropped, and the passes of the partial rules not `skipped`
    (the plan keeps every record they could pair in this partition) added."""
    from chalicelib.domain.matching.partial import OWN_AMOUNT, in_own_amounts, with_partial_matches

    applied = applied_in_partitions(rules, skipped)
    if OWN_AMOUNT not in side_a.columns or OWN_AMOUNT not in side_b.columns:
        applied = []  # files written without the records' own amounts (no partial rule to apply then)
    if not applied and outcome.members.is_empty():
        return outcome
    allocated = allocated_in(ports, run.environment, run.reconciliation_id)
    if applied:
        side_a, side_b = in_own_amounts(side_a), in_own_amounts(side_b)
    return with_partial_matches(outcome, side_a, side_b, applied, allocated)
