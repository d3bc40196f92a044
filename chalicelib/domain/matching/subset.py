"""Bounded subset search for grouped rules with no group key: for one counterpart, find a few
records of the grouped side whose amounts add up to the counterpart's amount (within the rule's
tolerance). Such matches are only ever proposed."""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from chalicelib.domain.matching.candidates import candidate_pairs, checked_pairs
from chalicelib.domain.matching.plan import RulePlan, day_number
from chalicelib.domain.money import MAX_AMOUNT

if TYPE_CHECKING:
    import numpy.typing as npt

    from chalicelib.domain.rules import Condition

    Ints = npt.NDArray[np.int64]
    Subsets = tuple[Ints, Ints, Ints]  # sums, sizes and bit masks of subsets
    Allowed = Callable[[Ints], Ints]  # subset sums -> the amount difference each may have

MAX_CANDIDATES = 20        # records tried for one counterpart: 2 halves of 2**10 subsets each
MAX_COUNTERPARTS = 1_000   # counterparts searched per rule and run


@dataclass(frozen=True)
class SubsetMatch:
    counterpart_row: int
    member_rows: tuple[int, ...]   # rows of the pool units
    amount_diff: int


def subset_matches(plan: RulePlan, counterparts: pl.DataFrame, pool: pl.DataFrame, *, pool_is_a: bool,
                   only_new: bool, limit: int) -> list[SubsetMatch]:
    """Counterparts in uid order (at most MAX_COUNTERPARTS of them). For each, its candidates are
    the free pool records of its currency passing every condition but the amount ones pair by
    pair, all of one direction (the one a direction condition asks for; without one, each
    direction is searched and the counterpart's own wins ties); the MAX_CANDIDATES closest in
    date (then lowest uid) are searched. Best subset: smallest amount difference, then fewest
    records, then the earliest candidates. A found subset is taken at once so that later
    counterparts cannot reuse its records."""
    keys = [*plan.key_columns(without_amount=True), "currency"]
    windows = plan.windows(without_amount=True)
    searched = counterparts.filter(pl.col("amount") > 0).sort("uid")
    candidates = pool.filter(pl.col("amount") > 0)
    if only_new:
        old_with_new_candidates = _pairs(plan, counterparts, pool, searched.filter(~pl.col("is_new")),
                                         candidates.filter(pl.col("is_new")), pool_is_a, keys, windows, limit)["cp_row"]
        searched = searched.filter(pl.col("is_new") | pl.col("row").is_in(old_with_new_candidates.implode()))
    else:
        searched = searched.join(candidates.select(keys).unique(), on=keys, how="semi").sort("uid")
    searched = searched.head(MAX_COUNTERPARTS)
    if searched.is_empty() or candidates.is_empty():
        return []

    pairs = (_pairs(plan, counterparts, pool, searched, candidates, pool_is_a, keys, windows, limit)
             .join(searched.select(cp_row="row", cp_uid="uid", cp_is_new="is_new"), on="cp_row"))
    pairs = pairs.with_columns(pool_amount=pool["amount"].gather(pairs["pool_row"]))
    # A counterpart that is not new needs a new record in its subset: try those first.
    old_needs_new = pl.lit(only_new) & ~pl.col("cp_is_new") & pl.col("pool_is_new")
    pairs = pairs.sort([pl.col("cp_uid"), old_needs_new.not_(), pl.col("date_diff"), pl.col("pool_uid")])

    cp_rows, pool_rows = pairs["cp_row"].to_numpy(), pairs["pool_row"].to_numpy()
    pool_amounts, pool_new = pairs["pool_amount"].to_numpy(), pairs["pool_is_new"].to_numpy()
    pool_credit = pool["direction"].gather(pairs["pool_row"]).eq("credit").to_numpy()
    cp_credit = dict(zip(searched["row"].to_list(), searched["direction"].eq("credit").to_list()))
    cp_amount = dict(zip(searched["row"].to_list(), searched["amount"].to_list()))
    cp_new = dict(zip(searched["row"].to_list(), searched["is_new"].to_list()))
    taken = np.zeros(pool.height, dtype=bool)
    found: list[SubsetMatch] = []
    starts: npt.NDArray[np.intp] | list[int] = (np.flatnonzero(np.r_[True, cp_rows[1:] != cp_rows[:-1]])
                                               if len(cp_rows) else [])
    for start, end in zip(starts, [*starts[1:], len(cp_rows)]):
        row = int(cp_rows[start])
        allowed = _allowed(plan, cp_amount[row], pool_is_a)
        options: list[tuple[int, int, int, npt.NDArray[np.intp]]] = []
        for credit in (cp_credit[row], not cp_credit[row]):  # own direction first: it wins ties
            free = np.flatnonzero(~taken[pool_rows[start:end]] & (pool_credit[start:end] == credit))
            free = free[:MAX_CANDIDATES] + start
            need_new = pool_new[free] if only_new and not cp_new[row] else None
            best = best_subset(pool_amounts[free], cp_amount[row], allowed, need_new) if len(free) else None
            if best is not None:
                options.append((best[1], len(best[0]), len(options), free[best[0]]))
        if options:
            difference, _, _, chosen = min(options, key=lambda o: o[:3])
            members = pool_rows[chosen]
            taken[members] = True
            found.append(SubsetMatch(row, tuple(int(r) for r in members), difference))
    return found


def _pairs(plan: RulePlan, counterparts: pl.DataFrame, pool: pl.DataFrame, searched: pl.DataFrame,
           candidates: pl.DataFrame, pool_is_a: bool, keys: list[str], windows: list[Condition],
           limit: int) -> pl.DataFrame:
    """Pairs of searched counterparts and candidate records; rows index the full frames."""
    if pool_is_a:
        a_rows, b_rows = candidate_pairs(candidates, searched, keys=keys, windows=windows,
                                         rule_id=plan.rule_id, limit=limit)
        pairs, pool_side, cp_side = checked_pairs(plan, pool, counterparts, a_rows, b_rows, skip_amount=True), "a", "b"
    else:
        a_rows, b_rows = candidate_pairs(searched, candidates, keys=keys, windows=windows,
                                         rule_id=plan.rule_id, limit=limit)
        pairs, pool_side, cp_side = checked_pairs(plan, counterparts, pool, a_rows, b_rows, skip_amount=True), "b", "a"
    return pairs.select(pool_row=f"{pool_side}_row", pool_uid=f"{pool_side}_uid", pool_is_new=f"{pool_side}_is_new",
                        cp_row=f"{cp_side}_row", date_diff="date_diff")


def _allowed(plan: RulePlan, target: int, pool_is_a: bool) -> Allowed:
    """The amount difference the rule allows for a subset summing to s: tolerances are taken of
    the side-A amount, which is the subset's sum when the subset is side A. Without an amount
    condition the sum must equal the counterpart's amount."""
    conditions = plan.amount_conditions

    def allowed(sums: Ints) -> Ints:
        if not conditions:
            return np.zeros_like(sums)
        amount_a = sums if pool_is_a else np.full_like(sums, target)
        allowances = (np.maximum(condition.tolerance or 0, amount_a * (condition.tolerance_basis_points or 0) // 10_000)
                      for condition in conditions)
        return functools.reduce(np.minimum, allowances)
    return allowed


def best_subset(amounts: Ints, target: int, allowed: Allowed, need_new: npt.NDArray[np.bool_] | None = None
                ) -> tuple[npt.NDArray[np.intp], int] | None:
    """Meet in the middle: every subset sum of each half, then for each left sum the right sums
    nearest to what is missing (just above and just below). The allowed difference never grows
    faster than the sum, so if the nearest sum on one side fails, the farther ones fail too.
    Ties: smallest difference, then fewest records, then the lowest bit mask (earliest
    candidates). `need_new` marks candidates of which at least one must be in the subset."""
    amounts = _exact(amounts, target)
    half = len(amounts) // 2
    left = _all_subsets(amounts[:half], 0)
    right = _all_subsets(amounts[half:], half)
    order = np.lexsort((right[2], right[1], right[0]))
    right = (right[0][order], right[1][order], right[2][order])
    if need_new is None:
        best = _closest(left, right, target, allowed)
    else:
        new_mask = int(np.sum(np.left_shift(1, np.flatnonzero(need_new))))
        left_new = (left[2] & new_mask) != 0
        right_new = (right[2] & new_mask) != 0
        closest = [_closest(_take(left, left_new), right, target, allowed),
                   _closest(_take(left, ~left_new), _take(right, right_new), target, allowed)]
        options = [o for o in closest if o is not None]
        best = min(options) if options else None
    if best is None:
        return None
    difference, _, mask = best
    chosen = np.flatnonzero(np.right_shift(mask, np.arange(len(amounts))) & 1)
    return chosen, int(difference)


def _exact(amounts: Ints, target: int) -> Ints:
    """The amounts as int64 while no subset sum, nor a sum times a tolerance's basis points, can
    pass 64 bits (numpy would wrap it silently); as Python ints, exact and slower, past that: only
    amounts within a few orders of magnitude of money.MAX_AMOUNT get there."""
    reach = (sum(amounts.tolist()) + abs(target)) * 10_000
    return amounts if reach <= MAX_AMOUNT else amounts.astype(object)


def _all_subsets(amounts: Ints, first_bit: int) -> Subsets:
    sums = np.zeros(1, dtype=amounts.dtype)
    sizes, masks = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    for i, amount in enumerate(amounts):
        sums = np.concatenate([sums, sums + amount])
        sizes = np.concatenate([sizes, sizes + 1])
        masks = np.concatenate([masks, masks | (1 << (first_bit + i))])
    return sums, sizes, masks


def _take(subsets: Subsets, keep: npt.NDArray[np.bool_]) -> Subsets:
    return subsets[0][keep], subsets[1][keep], subsets[2][keep]


def _closest(left: Subsets, right: Subsets, target: int, allowed: Allowed) -> tuple[int, int, int] | None:
    left_sums, left_sizes, left_masks = left
    right_sums, right_sizes, right_masks = right
    if not len(left_sums) or not len(right_sums):
        return None
    missing = target - left_sums
    above = np.searchsorted(right_sums, missing, "left")
    has_above, has_below = above < len(right_sums), above > 0
    below = np.searchsorted(right_sums, right_sums[above[has_below] - 1], "left")  # first of that sum
    li = np.concatenate([np.flatnonzero(has_above), np.flatnonzero(has_below)])
    ri = np.concatenate([above[has_above], below])
    sums = left_sums[li] + right_sums[ri]
    differences = np.abs(sums - target)
    sizes = left_sizes[li] + right_sizes[ri]
    masks = left_masks[li] | right_masks[ri]
    valid = (sizes > 0) & (differences <= allowed(sums))
    if not valid.any():
        return None
    differences, sizes, masks = differences[valid], sizes[valid], masks[valid]
    i = np.lexsort((masks, sizes, differences))[0]
    return int(differences[i]), int(sizes[i]), int(masks[i])


def subset_date_days(pool: pl.DataFrame, counterparts: pl.DataFrame, found: list[SubsetMatch]) -> list[int]:
    """The subset's date is its latest record's, as for groups."""
    pool_days = pool.select(day_number(pl.col("date")))["date"].to_numpy()
    cp_days = dict(zip(counterparts["row"].to_list(),
                       counterparts.select(day_number(pl.col("date")))["date"].to_list()))
    return [abs(int(pool_days[list(m.member_rows)].max()) - cp_days[m.counterpart_row]) for m in found]

