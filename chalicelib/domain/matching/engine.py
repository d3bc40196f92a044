"""The waterfall: each active rule, in priority order, matches what earlier rules left open."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from chalicelib.domain.matching import conversion
from chalicelib.domain.matching.assignment import greedy_pairs, pair_identical
from chalicelib.domain.matching.candidates import candidate_pairs, checked_pairs
from chalicelib.domain.matching.exclusions import condition_exclusions
from chalicelib.domain.matching.outcome import MATCH_SCHEMA, MEMBER_SCHEMA, MatchingInputError, MatchOutcome
from chalicelib.domain.matching.plan import RulePlan
from chalicelib.domain.matching.subset import subset_date_days, subset_matches
from chalicelib.domain.matching.units import group_units, record_units
from chalicelib.domain.rules import Cardinality, Operator, Rule

MAX_CANDIDATE_PAIRS = 20_000_000
RECORD_SCHEMA = {"id": pl.Int64, "amount": pl.Int64, "direction": pl.Utf8, "date": pl.Date, "currency": pl.Utf8,
                 "description": pl.Utf8, "external_id": pl.Utf8}


@dataclass(frozen=True)
class RuleMatches:
    matches: pl.DataFrame   # m (0..k-1, in order), group_key, differences
    members: pl.DataFrame   # m, side, record_id
    proposed_only: bool = False


def match_records(side_a: pl.DataFrame, side_b: pl.DataFrame, rules: Sequence[Rule], *, only_new: bool = False,
                  max_candidate_pairs: int = MAX_CANDIDATE_PAIRS, explain_rule: int | None = None) -> MatchOutcome:
    """`explain_rule`: also count, on the records left to that rule, the candidate pairs each of
    its conditions excludes on its own (`MatchOutcome.condition_exclusions`, see exclusions.py)."""
    plans = [RulePlan(rule) for rule in sorted((r for r in rules if r.definition.active),
                                               key=lambda r: (r.definition.priority, r.id))]
    pool_a = _prepared(side_a, plans, "a", only_new)
    pool_b = _prepared(side_b, plans, "b", only_new)
    match_parts: list[pl.DataFrame] = []
    member_parts: list[pl.DataFrame] = []
    summary: dict[str, Any] = {}
    matched_so_far = 0
    consumed_a: list[pl.Series] = []
    consumed_b: list[pl.Series] = []
    exclusions: tuple[int | None, ...] | None = None
    for position, plan in enumerate(plans):
        if position and (consumed_a or consumed_b):  # only what a later rule reads is filtered
            pool_a, pool_b = _without(pool_a, consumed_a), _without(pool_b, consumed_b)
            consumed_a, consumed_b = [], []
        rule_a, rule_b = conversion.rule_pools(plan.rule, pool_a, pool_b)  # a converting rule's amounts
        if plan.rule_id == explain_rule:
            units_a, units_b, subset = _compared_units(plan, rule_a, rule_b)
            exclusions = tuple(condition_exclusions(plan, units_a, units_b, subset=subset))
        found = _match_rule(plan, rule_a, rule_b, only_new, max_candidate_pairs)
        summary[str(plan.rule_id)] = found.members.height
        if found.matches.is_empty():
            continue
        status = "confirmed" if plan.rule.definition.auto_confirm and not found.proposed_only else "proposed"
        found_matches = conversion.noted(plan.rule, found.matches, found.members, pool_a, pool_b)
        match_parts.append(found_matches.select(
            match_no=pl.col("m") + matched_so_far, rule_id=pl.lit(plan.rule_id, dtype=pl.Int64),
            status=pl.lit(status), group_key="group_key", differences="differences"))
        member_parts.append(found.members.select(match_no=pl.col("m") + matched_so_far, side="side",
                                                 record_id="record_id"))
        matched_so_far += found.matches.height
        consumed_a.append(found.members.filter(pl.col("side") == "a")["record_id"])
        consumed_b.append(found.members.filter(pl.col("side") == "b")["record_id"])
    open_a, open_b = _without(pool_a.select("id"), consumed_a), _without(pool_b.select("id"), consumed_b)
    summary["unmatched"] = {"side_a": open_a.height, "side_b": open_b.height}
    matches = pl.concat(match_parts) if match_parts else pl.DataFrame(schema=MATCH_SCHEMA)
    members = pl.concat(member_parts) if member_parts else pl.DataFrame(schema=MEMBER_SCHEMA)
    # polars types cast()'s mapping with a union key type, and a Mapping's key is invariant: no dict[str, ...] fits.
    return MatchOutcome(matches=matches.cast(MATCH_SCHEMA),  # type: ignore[arg-type]
                        members=members.cast(MEMBER_SCHEMA),  # type: ignore[arg-type]
                        rule_summary=summary, unmatched_a=open_a["id"], unmatched_b=open_b["id"],
                        condition_exclusions=exclusions)


def _prepared(frame: pl.DataFrame, plans: list[RulePlan], side: str, only_new: bool) -> pl.DataFrame:
    needed = {"id", "amount", "date", "direction", "currency", "is_new"}.union(*(p.record_columns(side) for p in plans))
    if "is_new" not in frame.columns:
        if only_new:
            raise MatchingInputError(f"side {side}: continuous matching needs the is_new column")
        frame = frame.with_columns(is_new=pl.lit(False))
    missing = sorted(needed - set(frame.columns))
    if missing:
        raise MatchingInputError(f"side {side} lacks the columns {', '.join(missing)}")
    return frame.select(sorted(needed)).with_columns(pl.col("is_new").fill_null(False))


def _without(pool: pl.DataFrame, consumed: list[pl.Series]) -> pl.DataFrame:
    ids = pl.concat(consumed) if consumed else None
    return pool.filter(~pl.col("id").is_in(ids.implode())) if ids is not None and len(ids) else pool


def _match_rule(plan: RulePlan, pool_a: pl.DataFrame, pool_b: pl.DataFrame, only_new: bool, limit: int) -> RuleMatches:
    keyed_a, keyed_b = bool(plan.group_fields_a), bool(plan.group_fields_b)
    cardinality = plan.cardinality
    if cardinality is Cardinality.ONE_TO_ONE:
        return _match_units(plan, pool_a, pool_b, False, False, only_new, limit)
    if cardinality is Cardinality.MANY_TO_ONE:
        return (_match_units(plan, pool_a, pool_b, True, False, only_new, limit) if keyed_a
                else _match_subsets(plan, pool_a, pool_b, subset_side="a", group_counterparts=False,
                                    only_new=only_new, limit=limit))
    if cardinality is Cardinality.ONE_TO_MANY:
        return (_match_units(plan, pool_a, pool_b, False, True, only_new, limit) if keyed_b
                else _match_subsets(plan, pool_a, pool_b, subset_side="b", group_counterparts=False,
                                    only_new=only_new, limit=limit))
    if keyed_a and keyed_b:
        return _match_units(plan, pool_a, pool_b, True, True, only_new, limit)
    # many_to_many with a key on one side only: subsets of the keyless side against the groups;
    # with no key at all: treated as many_to_one (subsets of side A against single B records).
    return _match_subsets(plan, pool_a, pool_b, subset_side="b" if keyed_a else "a",
                          group_counterparts=keyed_a or keyed_b, only_new=only_new, limit=limit)


def _compared_units(plan: RulePlan, pool_a: pl.DataFrame, pool_b: pl.DataFrame
                    ) -> tuple[pl.DataFrame, pl.DataFrame, bool]:
    """The units of each side that _match_rule pairs, and whether a subset search sums them (a
    keyless grouped side, paired record by record with its counterparts)."""
    keyed_a, keyed_b = bool(plan.group_fields_a), bool(plan.group_fields_b)
    groups_a, groups_b = plan.cardinality.groups_a, plan.cardinality.groups_b
    subset = (groups_a and not keyed_a) or (groups_b and not keyed_b)
    if subset and not (keyed_a or keyed_b):  # with no key at all, many_to_many runs as many_to_one
        grouped_a, grouped_b = False, False
    else:  # a subset search groups its counterparts by their key; units group by theirs
        grouped_a, grouped_b = keyed_a, keyed_b
    units_a = group_units(pool_a, plan, "a", plan.group_fields_a)[0] if grouped_a else record_units(pool_a, plan, "a")
    units_b = group_units(pool_b, plan, "b", plan.group_fields_b)[0] if grouped_b else record_units(pool_b, plan, "b")
    return units_a, units_b, subset


# Units against units: one_to_one and keyed groups ----------------------------------------------

def _match_units(plan: RulePlan, pool_a: pl.DataFrame, pool_b: pl.DataFrame, group_a: bool, group_b: bool,
                 only_new: bool, limit: int) -> RuleMatches:
    if only_new and not group_a and not group_b:
        pool_a, pool_b = _near_new_records(plan, pool_a, pool_b)
    units_a, members_a = (group_units(pool_a, plan, "a", plan.group_fields_a) if group_a
                          else (record_units(pool_a, plan, "a"), None))
    units_b, members_b = (group_units(pool_b, plan, "b", plan.group_fields_b) if group_b
                          else (record_units(pool_b, plan, "b"), None))
    keys, windows = plan.key_columns(), plan.windows()

    def pairs_of(a: pl.DataFrame, b: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        return candidate_pairs(a, b, keys=keys, windows=windows, rule_id=plan.rule_id, limit=limit)

    chosen: list[pl.DataFrame] = []
    if only_new:
        new_a, new_b = units_a.filter(pl.col("is_new")), units_b.filter(pl.col("is_new"))
        first, second = pairs_of(new_a, units_b), pairs_of(units_a.filter(~pl.col("is_new")), new_b)
        a_rows, b_rows = np.concatenate([first[0], second[0]]), np.concatenate([first[1], second[1]])
    else:
        rest_a, rest_b = units_a, units_b
        if not plan.text_check_indexes:
            identical = pair_identical(units_a, units_b, plan.key_columns_besides_amount_and_date())
            chosen.append(identical)
            rest_a = units_a.filter(~pl.col("row").is_in(identical["a_row"].implode()))
            rest_b = units_b.filter(~pl.col("row").is_in(identical["b_row"].implode()))
        a_rows, b_rows = pairs_of(rest_a, rest_b)
    if len(a_rows):
        chosen.append(greedy_pairs(checked_pairs(plan, units_a, units_b, a_rows, b_rows)
                                   .drop("a_is_new", "b_is_new")))
    chosen = [c for c in chosen if not c.is_empty()]
    if not chosen:
        return _no_matches()
    pairs = pl.concat(chosen, how="diagonal_relaxed").sort("a_uid").with_row_index("m").with_columns(
        pl.col("m").cast(pl.Int64))

    group_key = _group_key(plan, units_a, units_b, pairs, group_a, group_b)
    matches = pairs.select("m", group_key=group_key, differences=_differences(plan, pairs))
    return RuleMatches(matches, _pair_members(pairs, members_a, members_b))


def _near_new_records(plan: RulePlan, pool_a: pl.DataFrame, pool_b: pl.DataFrame
                      ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Continuous mode, one_to_one: the new records plus the open records sharing each plain
    equality key with a new record of the other side. One `is_in` a key (numbers first, they
    are the cheapest to probe) over an ever smaller frame: the big open pool is read once and
    nothing heavy is built over it. A superset of the possible pairs, which is all it needs."""
    keys_a, keys_b = plan.cheap_keys("a"), plan.cheap_keys("b")
    if not keys_a:
        return pool_a, pool_b
    schema = pool_a.lazy().select(keys_a).collect_schema()
    order = sorted(range(len(keys_a)), key=lambda i: schema.dtypes()[i] == pl.Utf8)
    new_a, new_b = pool_a.filter(pl.col("is_new")), pool_b.filter(pl.col("is_new"))
    old_a, old_b = pool_a, pool_b
    for i in order:
        old_a = old_a.filter(keys_a[i].is_in(new_b.select(keys_b[i]).to_series().implode()))
        old_b = old_b.filter(keys_b[i].is_in(new_a.select(keys_a[i]).to_series().implode()))
    return (pl.concat([new_a, old_a.filter(~pl.col("is_new"))]),
            pl.concat([new_b, old_b.filter(~pl.col("is_new"))]))


def _group_key(plan: RulePlan, units_a: pl.DataFrame, units_b: pl.DataFrame, pairs: pl.DataFrame, group_a: bool,
               group_b: bool) -> pl.Expr | pl.Series:
    a_label = units_a["label"].gather(pairs["a_row"])
    b_label = units_b["label"].gather(pairs["b_row"])
    if group_a and group_b:
        return pl.concat_str([a_label, b_label], separator="|")
    if group_a or group_b:
        return a_label if group_a else b_label
    keys = plan.key_columns()
    if not keys:
        return pairs["a_uid"].cast(pl.Utf8)
    values = units_a.select(pl.col(keys).gather(pairs["a_row"]).cast(pl.Utf8))
    return values.select(pl.concat_str(keys, separator="|")).to_series()


def _differences(plan: RulePlan, pairs: pl.DataFrame, *, similarity: bool = True,
                 extra: dict[str, pl.Expr] | None = None) -> pl.Series:
    """What justified each match, as compact JSON: amount and date differences, similarity scores."""
    fields = {"amount": pl.col("amount_diff"), "date_days": pl.col("date_diff")}
    for i in plan.text_check_indexes if similarity else ():
        condition = plan.conditions[i]
        if condition.operator is Operator.SIMILAR:
            name = f"{condition.field}_similarity"
            fields[name if name not in fields else f"{name}_{i}"] = pl.col(f"s{i}").round(4)
    fields.update(extra or {})
    # mypy checks **fields against struct()'s `schema` and `eager` parameters too, so no overload accepts it.
    return pairs.select(pl.struct(**fields).struct.json_encode()).to_series()  # type: ignore[call-overload]


def _pair_members(pairs: pl.DataFrame, groups_a: pl.DataFrame | None, groups_b: pl.DataFrame | None) -> pl.DataFrame:
    """Members ordered by (m, side, record_id); `pairs` is ordered by m."""
    if groups_a is None and groups_b is None:  # one record a side: interleave, no sort needed
        record_ids = np.column_stack([pairs["a_uid"].to_numpy(), pairs["b_uid"].to_numpy()]).ravel()
        return pl.DataFrame({"m": np.repeat(pairs["m"].to_numpy(), 2), "record_id": record_ids}).select(
            "m", side=pl.when(pl.int_range(pl.len()) % 2 == 0).then(pl.lit("a")).otherwise(pl.lit("b")),
            record_id="record_id")
    # Each side's part is ordered by (m, record_id) already; a stable sort on m alone puts side a first.
    return pl.concat([_side_members(pairs, "a", groups_a), _side_members(pairs, "b", groups_b)]).sort(
        "m", maintain_order=True)


def _side_members(pairs: pl.DataFrame, side: str, groups: pl.DataFrame | None) -> pl.DataFrame:
    uids = pairs.select("m", uid=f"{side}_uid")  # ordered by m
    if groups is None:
        return uids.select("m", side=pl.lit(side), record_id="uid")
    return (uids.join(groups, on="uid", maintain_order="left").explode("members")
            .select("m", side=pl.lit(side), record_id="members"))


def _no_matches() -> RuleMatches:
    return RuleMatches(pl.DataFrame(schema={"m": pl.Int64, "group_key": pl.Utf8, "differences": pl.Utf8}),
                       pl.DataFrame(schema={"m": pl.Int64, "side": pl.Utf8, "record_id": pl.Int64}))


# Subsets of a keyless grouped side --------------------------------------------------------------

def _match_subsets(plan: RulePlan, pool_a: pl.DataFrame, pool_b: pl.DataFrame, *, subset_side: str,
                   group_counterparts: bool, only_new: bool, limit: int) -> RuleMatches:
    cp_side = "b" if subset_side == "a" else "a"
    cp_pool = pool_b if cp_side == "b" else pool_a
    if group_counterparts:
        fields = plan.group_fields_b if cp_side == "b" else plan.group_fields_a
        counterparts, cp_members = group_units(cp_pool, plan, cp_side, fields)
    else:
        counterparts, cp_members = record_units(cp_pool, plan, cp_side), None
    pool = record_units(pool_a if subset_side == "a" else pool_b, plan, subset_side)
    found = subset_matches(plan, counterparts, pool, pool_is_a=subset_side == "a", only_new=only_new, limit=limit)
    if not found:
        return _no_matches()
    date_days = subset_date_days(pool, counterparts, found)
    cp_rows = pl.Series([f.counterpart_row for f in found], dtype=pl.UInt32)
    results = pl.DataFrame({
        "cp_uid": counterparts["uid"].gather(cp_rows),
        "cp_label": counterparts["label"].gather(cp_rows),
        "first_a": [min(pool["uid"].gather(list(f.member_rows)).to_list()) for f in found] if subset_side == "a"
        else counterparts["uid"].gather(cp_rows),
        "amount_diff": [f.amount_diff for f in found], "date_diff": date_days,
        "size": [len(f.member_rows) for f in found],
        "member_rows": [list(f.member_rows) for f in found],
    }, schema_overrides={"member_rows": pl.List(pl.UInt32)}).sort("first_a").with_row_index("m").with_columns(
        pl.col("m").cast(pl.Int64))
    # A subset match is labelled by its counterpart: its group key, else its record id.
    group_key = pl.col("cp_label") if group_counterparts else pl.col("cp_uid").cast(pl.Utf8)
    matches = results.select("m", group_key=group_key, differences=_differences(
        plan, results, similarity=False, extra={"subset_size": pl.col("size")}))
    subset_rows = results.select("m", "member_rows").explode("member_rows")
    subset_members = subset_rows.select("m", side=pl.lit(subset_side),
                                        record_id=pool["uid"].gather(subset_rows["member_rows"]))
    cp_units = results.select("m", uid="cp_uid")
    if cp_members is None:
        counterpart_members = cp_units.select("m", side=pl.lit(cp_side), record_id="uid")
    else:
        counterpart_members = (cp_units.join(cp_members, on="uid").explode("members")
                               .select("m", side=pl.lit(cp_side), record_id="members"))
    members = pl.concat([subset_members, counterpart_members]).sort("m", "side", "record_id")
    return RuleMatches(matches, members, proposed_only=True)
