"""Units of matching: one row per record, or one per group of records, carrying the values a rule
compares (`uid`, `amount`, `date`, `direction`, `currency`, `is_new`, `label`, `v<i>`) and `row`,
the unit's position, which the candidate search hands back."""
from __future__ import annotations

import polars as pl

from chalicelib.domain.matching.frames import amount_sum
from chalicelib.domain.matching.plan import RulePlan, value_column
from chalicelib.domain.money import MAX_AMOUNT


def record_units(records: pl.DataFrame, plan: RulePlan, side: str) -> pl.DataFrame:
    return (records.select(uid=pl.col("id"), amount=pl.col("amount"), date=pl.col("date"),
                           direction=pl.col("direction"), currency=pl.col("currency"),
                           is_new=pl.col("is_new"), *plan.text_values(side))
            .with_columns(*plan.unit_values(side), label=pl.lit(None, dtype=pl.Utf8))
            .with_row_index("row"))


def group_units(records: pl.DataFrame, plan: RulePlan, side: str,
                fields: tuple[str, ...]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Groups of records sharing the group-by values, as units, and their members (uid -> ids).

    A group's amount is the absolute value of its signed sum (credits positive, debits
    negative) and its direction the sign (a zero sum counts as credit); its date is the latest
    date in the group (the group is complete, hence comparable, only once its last record is
    in); a text value is the members' common value, null when they differ. Records with a null
    group-by value belong to no group; a group mixing currencies, or summing past MAX_AMOUNT, is
    dropped (never matches)."""
    group_columns = [f"g{j}" for j in range(len(fields))]
    text_columns = [value_column(i) for i in plan.text_value_indexes]
    rows = records.select(
        "id", "date", "currency", "is_new",
        signed=pl.when(pl.col("direction") == "debit").then(-pl.col("amount")).otherwise(pl.col("amount")),
        *plan.text_values(side),
        *[pl.col(name).alias(column) for name, column in zip(fields, group_columns)],
    ).drop_nulls(group_columns)

    def common(column: str) -> pl.Expr:
        value = pl.col(column)
        return pl.when((value.n_unique() == 1) & (value.null_count() == 0)).then(value.first()).alias(column)

    groups = (rows.group_by(group_columns)
              .agg(uid=pl.col("id").min(), signed=amount_sum("signed"), date=pl.col("date").max(),
                   currency=pl.col("currency").first(), currencies=pl.col("currency").n_unique(),
                   is_new=pl.col("is_new").any(), members=pl.col("id").sort(),
                   *[common(c) for c in text_columns])
              .filter((pl.col("currencies") == 1) & pl.col("currency").is_not_null()
                      & (pl.col("signed").abs() <= MAX_AMOUNT))  # past the bound no record could match it
              .with_columns(pl.col("signed").cast(pl.Int64))
              .sort("uid"))
    units = (groups.select(
        "uid", amount=pl.col("signed").abs(), date=pl.col("date"),
        direction=pl.when(pl.col("signed") >= 0).then(pl.lit("credit")).otherwise(pl.lit("debit")),
        currency=pl.col("currency"), is_new=pl.col("is_new"), *text_columns,
        label=pl.concat_str([pl.col(c).cast(pl.Utf8) for c in group_columns], separator="|"))
        .with_columns(*plan.unit_values(side))
        .with_row_index("row"))
    return units, groups.select("uid", "members")
