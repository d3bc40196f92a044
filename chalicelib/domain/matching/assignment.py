"""Exclusive one-to-one assignment: the greedy over candidate pairs ordered by closest amount, then
closest date, then lowest side-A uid, then lowest side-B uid, each unit used at most once, done
without a Python loop over the pairs."""
from __future__ import annotations

import numpy as np
import polars as pl

TIE_BREAK = ["amount_diff", "date_diff", "a_uid", "b_uid"]
MAX_ROUNDS = 64


def pair_identical(a: pl.DataFrame, b: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The greedy's first stretch, in one join: pairs with no amount and no date difference come
    first in its order, and the units sharing (keys, amount, date) form a complete bipartite
    block, so the greedy pairs the k-th lowest uid of a block on side A with the k-th on side B.
    Only valid when no pairwise (text) check can veto a pair inside a block."""
    block = list(dict.fromkeys([*keys, "amount", "date"]))
    ranked_a, ranked_b = _rank_in_block(a.lazy(), block), _rank_in_block(b.lazy(), block)
    return (ranked_a.join(ranked_b, on=[*block, "rank"], suffix="_b")
            .select(a_row=pl.col("row"), b_row=pl.col("row_b"), a_uid=pl.col("uid"), b_uid=pl.col("uid_b"),
                    amount_diff=pl.lit(0, dtype=pl.Int64), date_diff=pl.lit(0, dtype=pl.Int64))
            .collect())


def _rank_in_block(units: pl.LazyFrame, block: list[str]) -> pl.LazyFrame:
    # Sorting and marking where each block starts is several times faster than rank().over().
    ordered = units.select("row", "uid", *block).drop_nulls(block).sort([*block, "uid"])
    starts = pl.any_horizontal([pl.col(c) != pl.col(c).shift() for c in block]).fill_null(True)
    position = pl.int_range(pl.len(), dtype=pl.Int64)
    return ordered.with_columns(rank=position - pl.when(starts).then(position).forward_fill())


def greedy_pairs(pairs: pl.DataFrame) -> pl.DataFrame:
    """The greedy's result, in rounds. A pair that is the best remaining pair of both its units
    would be taken by the sequential greedy too (every pair ahead of it touches neither unit), so
    each round takes all such mutual bests at once and drops the pairs of their units. The
    globally best pair is always one, so every round progresses; most inputs settle in a few.
    Should some input need more than MAX_ROUNDS, a plain loop finishes what is left."""
    pairs = pairs.sort(TIE_BREAK)
    taken = []
    for _ in range(MAX_ROUNDS):
        if pairs.is_empty():
            break
        best = pairs.filter(pl.col("a_uid").is_first_distinct() & pl.col("b_uid").is_first_distinct())
        taken.append(best)
        pairs = pairs.filter(~pl.col("a_uid").is_in(best["a_uid"].implode())
                             & ~pl.col("b_uid").is_in(best["b_uid"].implode()))
    if not pairs.is_empty():
        taken.append(_sequential_greedy(pairs))
    return pl.concat(taken) if taken else pairs


def _sequential_greedy(pairs: pl.DataFrame) -> pl.DataFrame:
    used_a, used_b, keep = set(), set(), np.zeros(pairs.height, dtype=bool)
    for i, (a_uid, b_uid) in enumerate(zip(pairs["a_uid"].to_list(), pairs["b_uid"].to_list())):
        if a_uid not in used_a and b_uid not in used_b:
            used_a.add(a_uid)
            used_b.add(b_uid)
            keep[i] = True
    return pairs.filter(pl.Series(keep))
