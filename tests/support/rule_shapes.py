"""Every shape of matching rule, with two sides of any size built for it: the engine's scale tests
run each past polars' internal chunk size (16,384 rows), and bench/rule_shapes.py at 1,000,000."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

import numpy as np
import polars as pl

from chalicelib.domain.rules import Rule, validate_rule

DAY = date(2026, 5, 1)
SCHEMA = {"id": pl.Int64, "amount": pl.Int64, "direction": pl.Utf8, "date": pl.Date, "currency": pl.Utf8,
          "description": pl.Utf8, "external_id": pl.Utf8, "metadata.k": pl.Utf8, "is_new": pl.Boolean}
Sides = tuple[pl.DataFrame, pl.DataFrame]


@dataclass(frozen=True)
class Shape:
    """A rule and a builder of n units a side that the rule pairs. `complete`: every record
    should match (a subset search is capped at 1,000 counterparts a rule, so it is not)."""
    name: str
    body: dict
    build: Callable[[int, np.random.Generator], Sides]
    only_new: bool = False
    complete: bool = True

    def rule(self) -> Rule:
        return Rule("scale", 1, 1, validate_rule({"name": self.name, "auto_confirm": True, **self.body}), None)

    def sides(self, units: int, seed: int = 7) -> Sides:
        return self.build(units, np.random.default_rng(seed))


def _side(ids: np.ndarray, amounts: np.ndarray, days: np.ndarray, direction: str, keys: np.ndarray,
          texts: Callable[[pl.Expr], list[pl.Expr]], is_new: bool = False) -> pl.DataFrame:
    """Records from numbers: key k gives external_id INV-k, metadata.k K<k>, and the description
    `texts` makes of it."""
    frame = pl.DataFrame({"id": ids.astype(np.int64), "amount": amounts.astype(np.int64), "k": keys.astype(np.int64),
                          "day": days.astype(np.int32) + (DAY - date(1970, 1, 1)).days})
    return frame.select(
        "id", "amount", direction=pl.lit(direction), date=pl.col("day").cast(pl.Date), currency=pl.lit("USD"),
        external_id=pl.concat_str([pl.lit("INV-"), pl.col("k")]), **{"metadata.k": pl.concat_str([pl.lit("K"), pl.col("k")])},
        is_new=pl.lit(is_new), description=pl.concat_str(texts(pl.col("k")))).select(list(SCHEMA)).cast(SCHEMA)


def _bank_text(k: pl.Expr) -> list[pl.Expr]:  # invoice numbers of 5 digits or more, customers of 3
    return [pl.lit("ACH CREDIT CUST"), k % 900 + 100, pl.lit(" INV-"), k + 10_000]


def _ledger_text(k: pl.Expr) -> list[pl.Expr]:  # the same facts, reworded and reordered
    return [pl.lit("Invoice INV-"), k + 10_000, pl.lit(" CUST"), k % 900 + 100]


def _just_reference(k: pl.Expr) -> list[pl.Expr]:
    return [pl.lit("inv-"), k + 10_000]


def _numbers(n: int, rng: np.random.Generator, days: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Distinct amounts 10 apart (a tolerance under 5 finds one counterpart) and dates over `days`."""
    return rng.permutation(n) * 10 + 1_000, rng.integers(0, days, n)


def pairs(*, b_amount_off: int = 0, b_texts=_ledger_text, b_direction: str = "credit",
          b_new: bool = False) -> Callable[[int, np.random.Generator], Sides]:
    """n side-A records, each answered by one side-B record a day or two later."""
    def build(n: int, rng: np.random.Generator) -> Sides:
        amounts, days = _numbers(n, rng)
        keys = np.arange(n)
        order = rng.permutation(n)  # side B in another order
        a = _side(keys + 1, amounts, days, "credit", keys, _bank_text)
        b_amounts = amounts + rng.integers(0, b_amount_off + 1, n)
        b = _side(keys[order] + 10_000_001, b_amounts[order], days[order] + rng.integers(1, 3, n), b_direction,
                  keys[order], b_texts, is_new=b_new)
        return a, b
    return build


def groups(*, grouped_a: bool, grouped_b: bool, keyed: bool = True) -> Callable[[int, np.random.Generator], Sides]:
    """n units a side; a grouped side has two records a unit (K<k>) summing to the other side's
    amount. Keyed: members a day apart, side B a day after side A. Keyless (date equals): every
    record of a unit on the same day."""
    def build(n: int, rng: np.random.Generator) -> Sides:
        # Keyless, a subset search pairs each counterpart with the grouped side's records of its
        # day: about 20 of them (past polars' chunk size at 1,000 counterparts, small enough to search).
        amounts, days = _numbers(n, rng, 60 if keyed else max(60, n // 10))
        keys = np.arange(n)

        def side(grouped: bool, first_id: int, direction: str) -> pl.DataFrame:
            if not grouped:
                return _side(keys + first_id, amounts, days, direction, keys, _bank_text)
            part = rng.integers(1, amounts)  # two parts of each amount, both above zero
            first_day = days - (rng.integers(0, 2, n) if keyed else 0)
            return _side(np.r_[keys, keys + n] + first_id, np.r_[part, amounts - part], np.r_[first_day, days],
                         direction, np.r_[keys, keys], _bank_text)
        a = side(grouped_a, 1, "credit")
        if keyed:  # no date condition: side B a day later keeps the pairs off the exact-pair shortcut
            days = days + 1
        return a, side(grouped_b, 10_000_001, "credit")
    return build


AMOUNT_EQUALS = {"field": "amount", "operator": "equals"}
DATE_EQUALS = {"field": "date", "operator": "equals"}
KEY_EQUALS = {"field": "metadata.k", "operator": "equals"}
REFERENCE_EQUALS = {"field": "external_id", "operator": "equals"}

SHAPES = [
    Shape("equalities only", {"conditions": [AMOUNT_EQUALS, REFERENCE_EQUALS]}, pairs()),
    Shape("equality and a date window", {"conditions": [AMOUNT_EQUALS, {"field": "date", "operator": "within",
                                                                        "days": 3}]}, pairs()),
    Shape("text key and an amount tolerance", {"conditions": [
        {**REFERENCE_EQUALS, "normalize": ["case"]}, {"field": "amount", "operator": "within", "tolerance": 3}]},
        pairs(b_amount_off=3)),
    Shape("a window only", {"conditions": [{"field": "amount", "operator": "within", "tolerance": 3}]},
          pairs(b_amount_off=3)),
    Shape("contains", {"conditions": [AMOUNT_EQUALS, {"field": "description", "operator": "contains",
                                                      "normalize": ["case"]}]}, pairs(b_texts=_just_reference)),
    Shape("similar", {"conditions": [AMOUNT_EQUALS, {"field": "description", "operator": "similar",
                                                     "threshold": 0.75, "normalize": ["case", "punctuation"]}]},
          pairs()),
    Shape("direction opposite", {"conditions": [{"field": "direction", "operator": "opposite"}, AMOUNT_EQUALS,
                                                {"field": "date", "operator": "within", "days": 2}]},
          pairs(b_direction="debit")),
    Shape("many_to_one by key", {"cardinality": "many_to_one", "group_by": {"side_a": ["metadata.k"]},
                                 "conditions": [KEY_EQUALS, AMOUNT_EQUALS]}, groups(grouped_a=True, grouped_b=False)),
    Shape("one_to_many by key", {"cardinality": "one_to_many", "group_by": {"side_b": ["metadata.k"]},
                                 "conditions": [KEY_EQUALS, AMOUNT_EQUALS]}, groups(grouped_a=False, grouped_b=True)),
    Shape("many_to_many by key", {"cardinality": "many_to_many",
                                  "group_by": {"side_a": ["metadata.k"], "side_b": ["metadata.k"]},
                                  "conditions": [KEY_EQUALS, AMOUNT_EQUALS]}, groups(grouped_a=True, grouped_b=True)),
    Shape("many_to_one subset search", {"cardinality": "many_to_one", "conditions": [AMOUNT_EQUALS, DATE_EQUALS]},
          groups(grouped_a=True, grouped_b=False, keyed=False), complete=False),
    Shape("many_to_many with a key on one side", {
        "cardinality": "many_to_many", "group_by": {"side_a": ["metadata.k"]},
        "conditions": [AMOUNT_EQUALS, DATE_EQUALS]}, groups(grouped_a=True, grouped_b=True, keyed=False),
        complete=False),
    Shape("continuous, equalities only", {"conditions": [AMOUNT_EQUALS, REFERENCE_EQUALS]}, pairs(b_new=True),
          only_new=True),
]
