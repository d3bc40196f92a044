"""What one rule asks of the engine: which conditions block (equality keys), which are windows
(amount or date within), which are checked pair by pair (text contains / similar), and the
expressions that turn records, or groups of records, into the comparable values of each side."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import polars as pl

from chalicelib.domain.matching.conversion import record_columns as conversion_columns
from chalicelib.domain.rules import Cardinality, Condition, Normalization, Operator, Rule, is_text_field

BASE_COLUMNS = ("uid", "amount", "date", "direction", "currency", "is_new")
FLIPPED_DIRECTION = {"credit": "debit", "debit": "credit"}


def normalized_text(expr: pl.Expr, steps: tuple[Normalization, ...], *, words: bool = False) -> pl.Expr:
    """A text value as a rule compares it. The steps run in one fixed order whatever order the
    rule lists them (leading zeros last, on the otherwise normalized value); a value that ends
    up empty is null, so empty texts never match. With `words` (for `similar`, which compares
    words) whitespace and punctuation become single spaces instead of vanishing, and leading
    zeros go from each word."""
    gap = " " if words else ""
    if Normalization.CASE in steps:
        expr = expr.str.to_lowercase()
    if Normalization.WHITESPACE in steps:
        expr = expr.str.replace_all(r"\s+", gap)
    if Normalization.PUNCTUATION in steps:
        expr = expr.str.replace_all(r"[^\p{L}\p{N}]+", gap)
    if Normalization.LEADING_ZEROS in steps:  # "000" stays "0", like a number would
        expr = (expr.str.replace_all(r"(^|\s)0+(\S)", "${1}${2}") if words
                else expr.str.replace(r"(?s)^0+(.)", "${1}"))
    if words:
        expr = expr.str.strip_chars()
    return pl.when(expr.str.len_bytes() > 0).then(expr)


def allowed_difference(condition: Condition, amount_a: pl.Expr) -> pl.Expr:
    """Condition.allowed_amount_difference, vectorised, in integers."""
    by_percent = amount_a * (condition.tolerance_basis_points or 0) // 10_000
    return pl.max_horizontal(pl.lit(condition.tolerance or 0, dtype=pl.Int64), by_percent)


def day_number(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.Int32).cast(pl.Int64)


@dataclass(frozen=True)
class RulePlan:
    rule: Rule

    @property
    def rule_id(self) -> int:
        return self.rule.id

    @property
    def conditions(self) -> tuple[Condition, ...]:
        return self.rule.definition.conditions

    @property
    def cardinality(self) -> Cardinality:
        return self.rule.definition.cardinality

    @property
    def group_fields_a(self) -> tuple[str, ...]:
        return self.rule.definition.group_by.side_a if self.cardinality.groups_a else ()

    @property
    def group_fields_b(self) -> tuple[str, ...]:
        return self.rule.definition.group_by.side_b if self.cardinality.groups_b else ()

    # Which condition plays which part ----------------------------------------------------------

    @cached_property
    def key_indexes(self) -> tuple[int, ...]:
        """Equality conditions (direction opposite included: it is equality with B flipped)."""
        return tuple(i for i, c in enumerate(self.conditions)
                     if c.operator in (Operator.EQUALS, Operator.OPPOSITE))

    @cached_property
    def window_indexes(self) -> tuple[int, ...]:
        return tuple(i for i, c in enumerate(self.conditions) if c.operator is Operator.WITHIN)

    @cached_property
    def text_check_indexes(self) -> tuple[int, ...]:
        return tuple(i for i, c in enumerate(self.conditions)
                     if c.operator in (Operator.CONTAINS, Operator.SIMILAR))

    @cached_property
    def text_value_indexes(self) -> tuple[int, ...]:
        """Conditions whose compared value is a record's (normalized) text."""
        return tuple(i for i, c in enumerate(self.conditions) if is_text_field(c.field))

    @property
    def amount_conditions(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.conditions if c.field == "amount")

    @property
    def has_direction_condition(self) -> bool:
        return any(c.field == "direction" for c in self.conditions)

    def key_columns(self, *, without_amount: bool = False, leave_out: int | None = None) -> list[str]:
        return [value_column(i) for i in self.key_indexes
                if not (without_amount and self.conditions[i].field == "amount") and i != leave_out]

    def key_columns_besides_amount_and_date(self) -> list[str]:
        """Keys other than amount or date equals, whose columns merely repeat `amount`/`date`."""
        return [value_column(i) for i in self.key_indexes if self.conditions[i].field not in ("amount", "date")]

    def windows(self, *, without_amount: bool = False, leave_out: int | None = None) -> list[Condition]:
        return [self.conditions[i] for i in self.window_indexes
                if not (without_amount and self.conditions[i].field == "amount") and i != leave_out]

    # Values of each side -----------------------------------------------------------------------

    def text_values(self, side: str) -> list[pl.Expr]:
        """Per record: the normalized text each text condition compares."""
        values = []
        for i in self.text_value_indexes:
            condition = self.conditions[i]
            name = condition.field if side == "a" else condition.b_field
            values.append(normalized_text(pl.col(name), condition.normalize,
                                          words=condition.operator is Operator.SIMILAR).alias(value_column(i)))
        return values

    def unit_values(self, side: str) -> list[pl.Expr]:
        """Per unit (record or group): the compared value of each non-text equality condition,
        from the unit's own amount, date, direction and currency."""
        values = []
        for i in self.key_indexes:
            condition = self.conditions[i]
            if is_text_field(condition.field):
                continue
            expr = pl.col(condition.field)
            if condition.operator is Operator.OPPOSITE and side == "b":
                expr = expr.replace_strict(FLIPPED_DIRECTION, default=None, return_dtype=pl.Utf8)
            values.append(expr.alias(value_column(i)))
        return values

    def cheap_keys(self, side: str) -> list[pl.Expr]:
        """Equality keys readable straight from the record columns (no regex), used to cut the
        big side down to the small side's keys before anything heavier runs."""
        keys = []
        for i in self.key_indexes:
            condition = self.conditions[i]
            if is_text_field(condition.field) and condition.normalize:
                continue
            name = condition.field if side == "a" else condition.b_field
            expr = pl.col(name)
            if condition.operator is Operator.OPPOSITE and side == "b":
                expr = expr.replace_strict(FLIPPED_DIRECTION, default=None, return_dtype=pl.Utf8)
            keys.append(expr.alias(f"k{i}"))
        return keys

    def record_columns(self, side: str) -> set[str]:
        """Every input column this rule reads on one side."""
        names = {"id", "amount", "date", "direction", "currency", "is_new"}
        for c in self.conditions:
            names.add(c.field if side == "a" else c.b_field)
        names.update(self.group_fields_a if side == "a" else self.group_fields_b)
        names.update(conversion_columns(self.rule, side))
        return names


def value_column(index: int) -> str:
    return f"v{index}"
