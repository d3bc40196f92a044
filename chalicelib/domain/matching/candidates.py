"""Candidate pairs of a rule: block on the equality keys, then a sorted range search on one window
(amount or date within), counted before anything is built so that an absurd rule is refused
rather than allowed to eat the memory; then every remaining condition checked on the pairs."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from rapidfuzz import fuzz, process

from chalicelib.domain.matching.outcome import CandidateExplosion
from chalicelib.domain.matching.plan import RulePlan, allowed_difference, day_number, value_column
from chalicelib.domain.rules import Condition, Operator

if TYPE_CHECKING:
    import numpy.typing as npt

PAIR_COLUMNS = ("a_row", "b_row", "a_uid", "b_uid", "amount_diff", "date_diff")


def candidate_pairs(a: pl.DataFrame, b: pl.DataFrame, *, keys: list[str], windows: list[Condition],
                    rule_id: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The `row`s of a and b that agree on every key and fall in one window of the rule (the
    window giving the fewest pairs); the other windows are checked later, on the pairs."""
    a_part = a.select("row", "amount", "date", *keys).drop_nulls(keys)
    b_part = b.select("row", "amount", "date", *keys).drop_nulls(keys)
    if a_part.is_empty() or b_part.is_empty():
        return _no_pairs()
    if keys:
        blocks = a_part.select(keys).unique().with_row_index("block")
        a_part = a_part.join(blocks, on=keys)
        b_part = b_part.join(blocks, on=keys)
        if b_part.is_empty():
            return _no_pairs()
        block_count = blocks.height
    else:
        a_part = a_part.with_columns(block=pl.lit(0, dtype=pl.UInt32))
        b_part = b_part.with_columns(block=pl.lit(0, dtype=pl.UInt32))
        block_count = 1
    a_block = a_part["block"].to_numpy().astype(np.int64)
    b_block = b_part["block"].to_numpy().astype(np.int64)

    searches = [_window_search(a_part, b_part, a_block, b_block, block_count, w) for w in windows] or [
        _window_search(a_part, b_part, a_block, b_block, block_count, None)]
    start, end, b_order = min(searches, key=lambda s: int((s[1] - s[0]).sum()))
    counts = end - start
    total = int(counts.sum())
    if total > limit:
        raise CandidateExplosion(rule_id, total, limit)
    a_rows = np.repeat(a_part["row"].to_numpy(), counts)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    b_rows = b_part["row"].to_numpy()[b_order][np.repeat(start, counts) + offsets]
    return a_rows, b_rows


def _window_search(a_part: pl.DataFrame, b_part: pl.DataFrame, a_block: npt.NDArray[np.int64],
                   b_block: npt.NDArray[np.int64], block_count: int, window: Condition | None
                   ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """For each A row, the slice of B (sorted by block, then the window's value) it may pair with:
    one combined integer key per row, block * span + value, so one searchsorted does it all."""
    if window is None:
        b_value = np.zeros(b_part.height, dtype=np.int64)
        low = high = np.zeros(a_part.height, dtype=np.int64)
    elif window.field == "amount":
        b_value = b_part["amount"].to_numpy()
        bounds = a_part.select(low=pl.col("amount") - allowed_difference(window, pl.col("amount")),
                               high=pl.col("amount") + allowed_difference(window, pl.col("amount")))
        low, high = bounds["low"].to_numpy(), bounds["high"].to_numpy()
    else:
        b_value = b_part.select(day_number(pl.col("date")))["date"].to_numpy()
        a_day = a_part.select(day_number(pl.col("date")))["date"].to_numpy()
        low, high = a_day - window.days, a_day + window.days
    smallest = int(min(b_value.min(), low.min()))
    span = int(max(b_value.max(), high.max())) - smallest + 1
    if block_count * span < 2 ** 62:
        b_key = b_block * span + (b_value - smallest)
        low_key, high_key = a_block * span + (low - smallest), a_block * span + (high - smallest)
    else:  # values too spread to pack beside the block number: pack their ranks instead
        ranks = np.unique(np.concatenate([b_value, low, high]))
        span = len(ranks)
        b_key = b_block * span + np.searchsorted(ranks, b_value)
        low_key = a_block * span + np.searchsorted(ranks, low)
        high_key = a_block * span + np.searchsorted(ranks, high)
    b_order = np.argsort(b_key, kind="stable")
    b_sorted = b_key[b_order]
    return np.searchsorted(b_sorted, low_key, "left"), np.searchsorted(b_sorted, high_key, "right"), b_order


def _no_pairs() -> tuple[np.ndarray, np.ndarray]:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)


def checked_pairs(plan: RulePlan, a: pl.DataFrame, b: pl.DataFrame, a_rows: np.ndarray, b_rows: np.ndarray,
                  *, skip_amount: bool = False, leave_out: int | None = None) -> pl.DataFrame:
    """The pairs that pass every window and text condition (but the one at index `leave_out`), with
    their differences: `amount_diff`, `date_diff` (absolute days) and `s<i>` for each similar
    condition's score."""
    a_take = pl.Series(a_rows, dtype=pl.UInt32)
    b_take = pl.Series(b_rows, dtype=pl.UInt32)
    text_checks = [i for i in plan.text_check_indexes if i != leave_out]
    texts = [value_column(i) for i in text_checks]
    a_side = a.select(pl.col("row", "uid", "amount", "date", "is_new", *texts).gather(a_take))
    b_side = b.select(pl.col("row", "uid", "amount", "date", "is_new", *texts).gather(b_take))
    pairs = pl.concat([a_side.rename(lambda n: f"a_{n}"), b_side.rename(lambda n: f"b_{n}")], how="horizontal")

    checks = []
    for condition in plan.windows(without_amount=skip_amount, leave_out=leave_out):
        if condition.field == "amount":
            checks.append((pl.col("a_amount") - pl.col("b_amount")).abs()
                          <= allowed_difference(condition, pl.col("a_amount")))
        else:
            checks.append((day_number(pl.col("a_date")) - day_number(pl.col("b_date"))).abs() <= condition.days)
    for i in text_checks:
        if plan.conditions[i].operator is Operator.CONTAINS:
            a_text, b_text = pl.col(f"a_v{i}"), pl.col(f"b_v{i}")
            checks.append(a_text.str.contains(b_text, literal=True) | b_text.str.contains(a_text, literal=True))
    if checks:  # never filter on a literal alone: polars 2.1 breaks such a predicate past 16,384 rows
        pairs = pairs.filter(pl.all_horizontal(checks).fill_null(False))

    for i in text_checks:
        condition = plan.conditions[i]
        if condition.operator is Operator.SIMILAR:
            pairs = pairs.with_columns(pl.Series(f"s{i}", similarity(pairs[f"a_v{i}"], pairs[f"b_v{i}"])))
            pairs = pairs.filter(pl.col(f"s{i}") >= condition.threshold)
    return pairs.select(
        "a_row", "b_row", "a_uid", "b_uid", "a_is_new", "b_is_new",
        amount_diff=(pl.col("a_amount") - pl.col("b_amount")).abs(),
        date_diff=(day_number(pl.col("a_date")) - day_number(pl.col("b_date"))).abs(),
        *[pl.col(f"s{i}") for i in text_checks if plan.conditions[i].operator is Operator.SIMILAR])


def similarity(a_texts: pl.Series, b_texts: pl.Series) -> np.ndarray:
    """What `similar` scores, 0..1, for each pair; -1 where either side is null. rapidfuzz's
    token_set_ratio / 100: the texts as sets of words (split at whitespace), so word order and
    repeated words do not count, and words only one side has (a bank's "ACH CREDIT") cost less
    than in a plain edit ratio; a text whose every word the other has scores 1."""
    if a_texts.is_empty():
        return np.empty(0, dtype=np.float64)
    present = (a_texts.is_not_null() & b_texts.is_not_null()).to_numpy()
    scores = np.full(len(a_texts), -1.0)
    a_list, b_list = a_texts.filter(pl.Series(present)).to_list(), b_texts.filter(pl.Series(present)).to_list()
    if a_list:
        scores[present] = process.cpdist(a_list, b_list, scorer=fuzz.token_set_ratio, dtype=np.float64,
                                         workers=-1) / 100
    return scores
