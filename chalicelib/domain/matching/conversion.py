"""Cross-currency matching, the columnar part (docs/currencies.md; the rule's `conversion` and the
exact arithmetic are domain/fx.py).

Where a rule converts one side, every record of that side gets, when the open records are read
(services/rate_streams.add_conversions calls `add_conversions`), four columns named after the rule:

    fx.<rule>.amount    Int64: the amount in the rule's `to_currency` (null: no rate, or past Int64)
    fx.<rule>.places    Int32: its decimal places (the target's minor units; a record already in
                        the target currency keeps its amount and places: nothing is converted)
    fx.<rule>.currency  Utf8: the target currency (null when there is no amount)
    fx.<rule>.note      Utf8: what was done, as JSON (from_currency, amount, to_currency,
                        converted_amount, rate, pair, inverted, rate_date), null when nothing was

They travel with the frames through a run's files and partitions. `engine_frames` brings the
converted amounts to the engine's scale of the target currency (`scale_rows`, `rescaled`); the
engine then, for that rule only, reads the converted amount and currency in place of the record's
own (`rule_pools`), so every condition of the rule (amount within its tolerance, in the target's
minor units; currency equals) compares converted amounts. A record with no rate takes no part in
the rule. A match made under the rule lists its converted records' notes in `differences`
(`conversions`, `noted`).

The rate: the latest one on or before the record's date, at most `max_days_back` days before it,
of the pair (record currency, target), or else of the reverse pair (target, record currency),
applied as a division; on one day the direct pair wins. The amount: amount * rate (or / rate)
rounded half to even to a whole minor unit of the target, computed in 128-bit integers (a rate's
mantissa is below 10**15, an amount below 2**63, the places differ by at most 6: the product stays
below 2**127), never through a float; property tests hold it to fx.convert for every amount and rate.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import polars as pl

from chalicelib.domain.fx import Conversion, RateRow
from chalicelib.domain.rules import Rule

INT64_MAX = 2 ** 63 - 1
POWERS = {n: 10 ** n for n in range(19)}
RATES_SCHEMA = {"date": pl.Date, "base": pl.Utf8, "quote": pl.Utf8, "mantissa": pl.Int64, "scale": pl.Int32,
                "rate": pl.Utf8}
PREFIX = "fx."


def column(rule_id: int, part: str) -> str:
    return f"{PREFIX}{rule_id}.{part}"


def converting(rules: Sequence[Rule]) -> list[Rule]:
    return [r for r in rules if r.definition.conversion is not None and r.definition.active]


def rates_frame(rows: Sequence[RateRow]) -> pl.DataFrame:
    return pl.DataFrame({"date": [r.day for r in rows], "base": [r.base for r in rows],
                         "quote": [r.quote for r in rows], "mantissa": [r.rate.mantissa for r in rows],
                         "scale": [r.rate.scale for r in rows], "rate": [r.rate.text for r in rows]},
                        schema=RATES_SCHEMA)


def _pow10(exponent: pl.Expr) -> pl.Expr:
    return pl.lit(10, dtype=pl.Int64).pow(exponent.cast(pl.UInt32)).cast(pl.Int128)


def converted_amount(frame: pl.DataFrame, amount: pl.Expr, from_places: pl.Expr, to_places: pl.Expr,
                     mantissa: pl.Expr, scale: pl.Expr, inverted: pl.Expr) -> pl.Series:
    """fx.convert, columnar, over `frame`'s rows: amount * mantissa / 10**scale (or amount * 10**scale /
    mantissa when `inverted`), moved from `from_places` to `to_places` decimals, rounded half to
    even; in Int128, null past Int64 (and where a rate is null). In stages, each column computed once."""
    staged = frame.select(
        _amount=amount.cast(pl.Int128), _mantissa=mantissa.cast(pl.Int128), _power=_pow10(scale),
        _up=_pow10(pl.max_horizontal(to_places - from_places, pl.lit(0))),
        _down=_pow10(pl.max_horizontal(from_places - to_places, pl.lit(0))), _inverted=inverted)
    staged = staged.select(
        _numerator=pl.when("_inverted").then(pl.col("_amount") * pl.col("_power") * pl.col("_up"))
        .otherwise(pl.col("_amount") * pl.col("_mantissa") * pl.col("_up")),
        _denominator=pl.when("_inverted").then(pl.col("_mantissa") * pl.col("_down"))
        .otherwise(pl.col("_power") * pl.col("_down")))
    staged = staged.with_columns(_quotient=pl.col("_numerator") // pl.col("_denominator"))
    staged = staged.with_columns(_twice=2 * (pl.col("_numerator") - pl.col("_quotient") * pl.col("_denominator")))
    up = (pl.col("_twice") > pl.col("_denominator")) | (
        (pl.col("_twice") == pl.col("_denominator")) & (pl.col("_quotient") % 2 == 1))
    rounded = staged.select(_rounded=pl.col("_quotient") + up.cast(pl.Int128))
    return rounded.select(pl.when(pl.col("_rounded") <= INT64_MAX).then(pl.col("_rounded"))
                          .cast(pl.Int64).alias("amount")).to_series()


def decimal_text(minor: pl.Expr, places: pl.Expr) -> pl.Expr:
    """Minor units (>= 0) at `places` decimals as their exact decimal text, "123.45" (money.decimal_string)."""
    power = places.replace_strict(POWERS, return_dtype=pl.Int64)
    whole = (minor // power).cast(pl.Utf8)
    fraction = (minor % power).cast(pl.Utf8).str.zfill(places)
    return pl.when(places == 0).then(whole).otherwise(pl.concat_str([whole, pl.lit("."), fraction]))


def rate_table(rates: pl.DataFrame, to_currency: str) -> pl.DataFrame:
    """For converting into `to_currency`: per (from currency, day) the rate to apply, the direct
    pair before the reverse one on the same day."""
    direct = rates.filter(pl.col("quote") == to_currency).select(
        from_currency="base", rate_date="date", mantissa="mantissa", scale="scale", rate="rate",
        inverted=pl.lit(False), pair=pl.concat_str(["base", pl.lit("/"), "quote"]))
    reverse = rates.filter(pl.col("base") == to_currency).select(
        from_currency="quote", rate_date="date", mantissa="mantissa", scale="scale", rate="rate",
        inverted=pl.lit(True), pair=pl.concat_str(["base", pl.lit("/"), "quote"]))
    return (pl.concat([direct, reverse]).sort("from_currency", "rate_date", "inverted")
            .unique(["from_currency", "rate_date"], keep="first").sort("rate_date"))


def conversion_columns(frame: pl.DataFrame, rule_id: int, conversion: Conversion, rates: pl.DataFrame
                       ) -> pl.DataFrame:
    """`frame` (open records: amount, currency, decimal_places, date) with the rule's fx columns."""
    to, to_places = conversion.to_currency, conversion.to_places
    wanted = frame.filter(pl.col("currency") != to).select("currency", "date").unique().drop_nulls()
    table = rate_table(rates, to)
    found = (wanted.sort("date").join_asof(table, left_on="date", right_on="rate_date", by_left="currency",
                                           by_right="from_currency", strategy="backward",
                                           check_sortedness=False)
             .filter(pl.col("rate_date") >= pl.col("date") - timedelta(days=conversion.max_days_back)))
    joined = frame.select("currency", "date", "amount", "decimal_places").join(
        found, on=["currency", "date"], how="left", maintain_order="left")
    joined = joined.with_columns(_rate_amount=converted_amount(
        joined, pl.col("amount"), pl.col("decimal_places"), pl.lit(to_places), pl.col("mantissa"), pl.col("scale"),
        pl.col("inverted")))
    same = pl.col("currency") == to
    amount = pl.when(same).then(pl.col("amount")).otherwise(pl.col("_rate_amount"))
    note = pl.struct(
        from_currency="currency", amount=decimal_text(pl.col("amount"), pl.col("decimal_places")),
        to_currency=pl.lit(to), converted_amount=decimal_text(pl.col("_converted"), pl.lit(to_places)),
        rate="rate", pair="pair", inverted="inverted", rate_date=pl.col("rate_date").dt.to_string("%Y-%m-%d"),
    ).struct.json_encode()
    work = joined.with_columns(_converted=amount, _same=same)
    columns = work.select(
        pl.col("_converted").alias(column(rule_id, "amount")),
        pl.when(pl.col("_same")).then(pl.col("decimal_places")).otherwise(pl.lit(to_places))
        .cast(pl.Int32).alias(column(rule_id, "places")),
        pl.when(pl.col("_converted").is_not_null()).then(pl.lit(to)).alias(column(rule_id, "currency")),
        pl.when(~pl.col("_same") & pl.col("_converted").is_not_null()).then(note).alias(column(rule_id, "note")))
    return pl.concat([frame, columns], how="horizontal")


def add_conversions(frame: pl.DataFrame, side: str, rules: Sequence[Rule],
                    rates_by_stream: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """The open records of one side ("a" or "b") with the fx columns of every rule converting it."""
    for rule in converting(rules):
        conversion = rule.definition.conversion
        assert conversion is not None
        if conversion.engine_side == side:
            rates = rates_by_stream.get(conversion.rate_stream_key, pl.DataFrame(schema=RATES_SCHEMA))
            frame = conversion_columns(frame, rule.id, conversion, rates)
    return frame


# engine_frames: the converted amounts at the engine's scale -------------------------------------

def _rule_ids(frame: pl.DataFrame) -> list[str]:
    return [c[len(PREFIX):-len(".amount")] for c in frame.columns if c.startswith(PREFIX) and c.endswith(".amount")]


def scale_rows(frame: pl.DataFrame) -> list[pl.DataFrame]:
    """(currency, decimal_places) of every converted amount: the engine's scale of a currency is the
    most places any amount of it has, converted ones included."""
    return [frame.select(currency=pl.col(f"{PREFIX}{r}.currency"), decimal_places=pl.col(f"{PREFIX}{r}.places"))
            .drop_nulls() for r in _rule_ids(frame)]


def engine_columns(frame: pl.DataFrame) -> list[str]:
    return [f"{PREFIX}{r}.{part}" for r in _rule_ids(frame) for part in ("amount", "note")]


def rescaled(frame: pl.DataFrame, scales: pl.DataFrame) -> pl.DataFrame:
    """The converted amounts multiplied up to the engine's scale of their currency (exact)."""
    for r in _rule_ids(frame):
        amount, places, currency = (f"{PREFIX}{r}.{p}" for p in ("amount", "places", "currency"))
        scale = frame.select(currency).join(scales, left_on=currency, right_on="currency", how="left",
                                            maintain_order="left")["scale"]
        factor = (scale - frame[places]).fill_null(0)
        frame = frame.with_columns(
            pl.col(amount) * factor.replace_strict(POWERS, return_dtype=pl.Int64))
    return frame


# The engine: a rule compares converted amounts ---------------------------------------------------

def rule_pools(rule: Rule, pool_a: pl.DataFrame, pool_b: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The pools as the rule sees them: on the side it converts, each record's amount and currency
    are the converted ones, and a record with no rate is left out."""
    conversion = rule.definition.conversion
    if conversion is None:
        return pool_a, pool_b
    amount = column(rule.id, "amount")
    pool = pool_a if conversion.engine_side == "a" else pool_b
    # The notes (long texts) are left behind, and read after the match by `noted`: carried through the
    # units and pairs they cost as much as the match itself.
    pool = pool.filter(pl.col(amount).is_not_null()).with_columns(
        pl.col(amount).alias("amount"), pl.lit(conversion.to_currency).alias("currency"),
        pl.lit(None, dtype=pl.Utf8).alias(column(rule.id, "note")))
    return (pool, pool_b) if conversion.engine_side == "a" else (pool_a, pool)


def record_columns(rule: Rule, side: str) -> set[str]:
    conversion = rule.definition.conversion
    if conversion is None or conversion.engine_side != side:
        return set()
    return {column(rule.id, "amount"), column(rule.id, "note")}


def noted(rule: Rule, matches: pl.DataFrame, members: pl.DataFrame, pool_a: pl.DataFrame,
          pool_b: pl.DataFrame) -> pl.DataFrame:
    """`matches` (m, group_key, differences JSON) with `"conversions": [note, ...]` in the
    differences of each match holding a converted record (its members' notes, by record id)."""
    conversion = rule.definition.conversion
    if conversion is None or matches.is_empty():
        return matches
    side = conversion.engine_side
    pool = pool_a if side == "a" else pool_b
    note = column(rule.id, "note")
    notes = (members.filter(pl.col("side") == side)
             .join(pool.select(pl.col("id").alias("record_id"), pl.col(note).alias("note")), on="record_id")
             .drop_nulls("note").sort("m", "record_id")
             .with_columns(note=pl.concat_str([pl.lit('{"record_id":'), pl.col("record_id").cast(pl.Utf8),
                                               pl.lit(","), pl.col("note").str.strip_prefix("{")])))
    if not notes["m"].is_unique().all():  # several converted members in a match: one list each
        notes = notes.group_by("m", maintain_order=True).agg(pl.col("note").str.join(","))
    return (matches.join(notes, on="m", how="left", maintain_order="left")
            .with_columns(differences=pl.when(pl.col("note").is_null()).then(pl.col("differences")).otherwise(
                pl.concat_str([pl.col("differences").str.strip_suffix("}"), pl.lit(',"conversions":['),
                               pl.col("note"), pl.lit("]}")])))
            .drop("note"))


# Near misses ---------------------------------------------------------------------------------------

def without_rate(rule: Rule, frame: pl.DataFrame, side: str) -> pl.DataFrame:
    """The records of `side` the rule converts and found no rate for: (record_id, currency, date)."""
    conversion = rule.definition.conversion
    if conversion is None or conversion.engine_side != side:
        return pl.DataFrame(schema={"record_id": pl.Int64, "currency": pl.Utf8, "date": pl.Date})
    return frame.filter(pl.col(column(rule.id, "amount")).is_null()).select(
        pl.col("id").alias("record_id"), "currency", "date")


def with_conversions(rule: Rule, found: pl.DataFrame, side_a: pl.DataFrame, side_b: pl.DataFrame,
                     subject_side: str, subject_ids: pl.Series | Sequence[int] | None) -> pl.DataFrame:
    """near_misses' answer for a converting rule: each converted record's note beside it
    (`subject_conversion`, `candidate_conversion`), and a row for each subject the rule could not
    convert (`no_rate`: the sentence saying which rate is missing; no candidate)."""
    conversion = rule.definition.conversion
    if conversion is None:
        return found
    side = conversion.engine_side
    note = column(rule.id, "note")
    notes = (side_a if side == "a" else side_b).select(pl.col("id"), pl.col(note).alias("_note"))
    for role, ids in (("subject", "record_id"), ("candidate", "candidate_id")):
        if (role == "subject") == (subject_side == side):
            found = (found.join(notes, left_on=ids, right_on="id", how="left", maintain_order="left")
                     .rename({"_note": f"{role}_conversion"}))
    if subject_side != side:
        return found
    missing = without_rate(rule, side_a if side == "a" else side_b, side)
    if subject_ids is not None:
        missing = missing.filter(pl.col("record_id").is_in(pl.Series(list(subject_ids), dtype=pl.Int64).implode()))
    back = conversion.max_days_back
    window = (pl.concat_str([pl.lit("on "), pl.col("date").dt.to_string("%Y-%m-%d")]) if not back else
              pl.concat_str([pl.lit("on "), pl.col("date").dt.to_string("%Y-%m-%d"),
                             pl.lit(f" nor in the {back} days before")]))
    to = conversion.to_currency
    missing = missing.select("record_id", no_rate=pl.concat_str([
        pl.lit("no rate for "), pl.col("currency"), pl.lit(f"/{to} (nor {to}/"), pl.col("currency"),
        pl.lit(f") in rate stream '{conversion.rate_stream_key}' "), window]))
    return pl.concat([found, missing], how="diagonal_relaxed").sort("record_id")


def explained(rule: Rule, entry: dict[str, Any], row: Mapping[str, Any]) -> dict[str, Any]:
    """A near miss as the API answers it, with the conversion that made its amounts (the rate and
    the converted amount, `conversions`), or, for a record with no rate, that missing rate as its
    failed condition (`operator` "convert")."""
    conversion = rule.definition.conversion
    if conversion is None:
        return entry
    if row.get("no_rate"):
        return {**entry, "failed_condition_count": 1, "failed_conditions": [{
            "condition": None, "field": "amount", "operator": "convert", "expected": None, "actual": None,
            "difference": None, "unit": conversion.to_currency, "message": row["no_rate"]}]}
    notes = {role: json.loads(row[f"{role}_conversion"]) for role in ("subject", "candidate")
             if row.get(f"{role}_conversion")}
    if not notes:
        return entry
    said = "; ".join(f"{'this record' if role == 'subject' else 'the candidate'}: {n['amount']} {n['from_currency']} "
                     f"at {n['pair']} {n['rate']}{' (inverted)' if n['inverted'] else ''} of {n['rate_date']} = "
                     f"{n['converted_amount']} {n['to_currency']}" for role, n in notes.items())
    failed = [{**c, "message": f"{c['message']} (converted: {said})"} if c.get("field") == "amount" else c
              for c in entry.get("failed_conditions", [])]
    return {**entry, "conversions": [{"record": role, **n} for role, n in notes.items()], "failed_conditions": failed}
