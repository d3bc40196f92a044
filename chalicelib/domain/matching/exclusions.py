"""What each condition of a rule excludes on its own, for a dry run: the candidate pairs (of the
units the rule compares) that meet every other condition of the rule but fail this one.

Counted, never listed: the pairs meeting all the conditions are a subset of those meeting all
but one, so a condition's count is (pairs without it) - (pairs with all), each found by the
engine's own candidate search and checks. A count that would need more than `limit` pairs is
None. A keyless grouped rule pairs single records of its grouped side with counterparts and
leaves amounts to the subset search, so its amount conditions have no pair count (None)."""
from __future__ import annotations

import polars as pl

from chalicelib.domain.matching.candidates import candidate_pairs, checked_pairs
from chalicelib.domain.matching.outcome import CandidateExplosion
from chalicelib.domain.matching.plan import RulePlan

EXCLUSION_PAIRS = 1_000_000  # pairs built at most to count one condition's exclusions


def condition_exclusions(plan: RulePlan, units_a: pl.DataFrame, units_b: pl.DataFrame, *, subset: bool,
                         limit: int = EXCLUSION_PAIRS) -> list[int | None]:
    """One count a condition, in the rule's order (see the module docstring)."""
    passing_all = _passing(plan, units_a, units_b, subset, None, limit)
    counts: list[int | None] = []
    for index, condition in enumerate(plan.conditions):
        if subset and condition.field == "amount":
            counts.append(None)
            continue
        passing_others = _passing(plan, units_a, units_b, subset, index, limit)
        counts.append(None if passing_all is None or passing_others is None else passing_others - passing_all)
    return counts


def _passing(plan: RulePlan, units_a: pl.DataFrame, units_b: pl.DataFrame, subset: bool, leave_out: int | None,
             limit: int) -> int | None:
    """Pairs meeting every condition but `leave_out` (amounts aside for a subset search)."""
    keys = plan.key_columns(without_amount=subset, leave_out=leave_out) + (["currency"] if subset else [])
    try:
        a_rows, b_rows = candidate_pairs(units_a, units_b, keys=keys,
                                         windows=plan.windows(without_amount=subset, leave_out=leave_out),
                                         rule_id=plan.rule_id, limit=limit)
    except CandidateExplosion:
        return None
    if not len(a_rows):
        return 0
    return checked_pairs(plan, units_a, units_b, a_rows, b_rows, skip_amount=subset, leave_out=leave_out).height
