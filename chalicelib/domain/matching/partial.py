"""Partial payments in a run (docs/partial-payments.md): after the waterfall of whole matches, each
active rule with `allocation: partial` (one_to_many or many_to_one) matches the one record to the
records of the many side that meet its other conditions, when they sum to no more than what the one
record has left. The match takes that sum as its share of the one record (domain/allocation.py)
and the many records whole; the rest of the one record stays open for later payments.

The many side's payments are of the direction `payment_direction` decides from the one record and
the rule's direction condition; without one, the records of the other direction are refunds, netted
against the payments (domain/allocation.allocate_netted: in date order, the longest start whose net
is positive and at most what the one record has left). The dry run applies this same pass
(domain/matching/dry_run.py), and so does each partition of a fanned-out run whose plan keeps the
rule's pairs together (`skipped_in_partitions` names the others, with why).

The amount conditions of a partial rule are not applied to the partial pass: its sum is below the
record's amount by design (a whole rule, or the same rule's whole pass, matches exact sums). Records
paid in part already count by what they have left; a whole match of one of them is dropped (its
claim would be refused: see adapters/dynamodb/allocations.py), leaving the record to this pass.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import polars as pl

from chalicelib.domain.allocation import allocate_netted
from chalicelib.domain.matching.candidates import candidate_pairs, checked_pairs
from chalicelib.domain.matching.outcome import MATCH_SCHEMA, MatchOutcome
from chalicelib.domain.matching.partition import BlockingKey, PartitionPlan
from chalicelib.domain.matching.plan import FLIPPED_DIRECTION, RulePlan
from chalicelib.domain.matching.units import record_units
from chalicelib.domain.rules import Cardinality, Operator, Rule

PARTIAL_MEMBER_SCHEMA = {"match_no": pl.Int64, "side": pl.Utf8, "record_id": pl.Int64, "share": pl.Int64}
MAX_PARTIAL_PAIRS = 20_000_000


OWN_AMOUNT = "own_amount"  # a partition's column: the record's amount in its own minor units


def with_own_amounts(engine: pl.DataFrame, side: pl.DataFrame) -> pl.DataFrame:
    """An engine frame (amounts brought to one scale) with each record's own amount and decimal
    places beside, which the partial pass allocates in: a partition's files carry them."""
    return engine.join(side.select("id", "decimal_places", pl.col("amount").alias(OWN_AMOUNT)), on="id", how="left")


def in_own_amounts(frame: pl.DataFrame) -> pl.DataFrame:
    """A partition's frame with each record's own amount back in `amount`, as the partial pass takes it."""
    return frame.with_columns(amount=pl.col(OWN_AMOUNT))


def partial_rules(rules: Sequence[Rule]) -> list[Rule]:
    """The active partial rules, in the order a run applies them."""
    return sorted((r for r in rules if r.definition.active and r.definition.allocation == "partial"),
                  key=lambda r: (r.definition.priority, r.id))


def skipped_in_partitions(rules: Sequence[Rule], plan: PartitionPlan) -> dict[str, str]:
    """The partial rules a run split by `plan` cannot apply inside its partitions, each with why
    (rule id -> reason; the others are applied in each partition, docs/partial-payments.md). The
    pass runs inside a partition only when no record it could pair is in another: a hash plan
    whose every key is an equality condition the pass applies (a condition of the rule, not on
    amount); a range plan copies records into two partitions, where each could take a share."""
    skipped: dict[str, str] = {}
    for rule in partial_rules(rules):
        carried = {BlockingKey.of(c) for c in rule.definition.conditions
                   if c.operator in (Operator.EQUALS, Operator.OPPOSITE) and c.field != "amount"}
        if not plan.exact:
            skipped[str(rule.id)] = (f"partial pass of rule {rule.id} skipped: the run was split in {plan.axis} "
                                     "ranges, which copy records into two partitions (a record could be paid twice)")
        elif missing := [k for k in plan.keys if k not in carried]:
            skipped[str(rule.id)] = (f"partial pass of rule {rule.id} skipped: the run was split in partitions by "
                                     f"{', '.join(k.field for k in missing)}, not an equality condition of its "
                                     "partial pass: a record and the records paying it could sit in two partitions")
    return skipped


def with_partial_matches(outcome: MatchOutcome, side_a: pl.DataFrame, side_b: pl.DataFrame, rules: Sequence[Rule],
                         allocated: Mapping[int, int]) -> MatchOutcome:
    """The outcome without whole matches of records paid in part, plus the partial rules' matches,
    numbered after it. `side_a`/`side_b` are the run's frames (amounts in each record's own minor
    units); `allocated` is what each record paid in part has allocated in the reconciliation."""
    outcome = _without_whole_matches_of(outcome, allocated)
    partial = partial_rules(rules)
    if not partial:
        return outcome
    taken = set(outcome.members["record_id"].to_list())
    pool_a = _prepared(side_a).filter(~pl.col("id").is_in(list(taken)))
    pool_b = _prepared(side_b).filter(~pl.col("id").is_in(list(taken)))
    match_rows: list[dict[str, object]] = []
    member_rows: list[dict[str, object]] = []
    summary = dict(outcome.rule_summary)
    next_no = outcome.matches.height
    for rule in partial:
        made = _allocate(rule, pool_a, pool_b, allocated)
        for one, one_side, share, many in made:
            match_rows.append({"match_no": next_no, "rule_id": rule.id,
                               "status": "confirmed" if rule.definition.auto_confirm else "proposed",
                               "group_key": str(one), "differences": None})
            other = "a" if one_side == "b" else "b"
            member_rows.append({"match_no": next_no, "side": one_side, "record_id": one, "share": share})
            member_rows += [{"match_no": next_no, "side": other, "record_id": m, "share": None} for m in many]
            next_no += 1
        used = {one for one, _, _, _ in made} | {m for _, _, _, many in made for m in many}
        pool_a = pool_a.filter(~pl.col("id").is_in(list(used)))
        pool_b = pool_b.filter(~pl.col("id").is_in(list(used)))
        summary[str(rule.id)] = summary.get(str(rule.id), 0) + sum(1 + len(many) for *_, many in made)
    if not match_rows:
        return replace(outcome, rule_summary=summary)
    whole = outcome.members if "share" in outcome.members.columns else outcome.members.with_columns(
        share=pl.lit(None, dtype=pl.Int64))
    # Members by (match, side, record id), as the engine orders them (a partition's merge reads each
    # side's first row of a match as its lowest id).
    members = pl.concat([whole.select(*PARTIAL_MEMBER_SCHEMA),
                         pl.DataFrame(member_rows, schema=PARTIAL_MEMBER_SCHEMA).sort("match_no", "side", "record_id")])
    matched = set(members["record_id"].to_list())
    unmatched_a = outcome.unmatched_a.filter(~outcome.unmatched_a.is_in(list(matched)))
    unmatched_b = outcome.unmatched_b.filter(~outcome.unmatched_b.is_in(list(matched)))
    summary["unmatched"] = {"side_a": len(unmatched_a), "side_b": len(unmatched_b)}
    return replace(outcome, matches=pl.concat([outcome.matches,
                                               pl.DataFrame(match_rows, schema=MATCH_SCHEMA)]),
                   members=members, rule_summary=summary, unmatched_a=unmatched_a, unmatched_b=unmatched_b)


def _without_whole_matches_of(outcome: MatchOutcome, allocated: Mapping[int, int]) -> MatchOutcome:
    """The outcome without the matches holding a record paid in part, renumbered from 0 (a run's
    match numbers are its block of match ids)."""
    if not allocated or outcome.members.is_empty():
        return outcome
    dropped = outcome.members.filter(pl.col("record_id").is_in(list(allocated)))["match_no"].unique()
    if dropped.is_empty():
        return outcome
    kept = outcome.matches.filter(~pl.col("match_no").is_in(dropped.implode()))
    numbers = kept.select(old="match_no").with_row_index("new").with_columns(pl.col("new").cast(pl.Int64))
    freed = outcome.members.filter(pl.col("match_no").is_in(dropped.implode()))
    # The members' order is kept (a partition's merge reads each side's first row of a match by position).
    members = (outcome.members.join(numbers, left_on="match_no", right_on="old", maintain_order="left")
               .with_columns(match_no=pl.col("new")).drop("new"))
    matches = (kept.join(numbers, left_on="match_no", right_on="old", maintain_order="left")
               .with_columns(match_no=pl.col("new")).drop("new"))
    freed_a = freed.filter(pl.col("side") == "a")["record_id"]
    freed_b = freed.filter(pl.col("side") == "b")["record_id"]
    summary = dict(outcome.rule_summary)
    summary["unmatched"] = {"side_a": len(outcome.unmatched_a) + len(freed_a),
                            "side_b": len(outcome.unmatched_b) + len(freed_b)}
    return replace(outcome, matches=matches, members=members, rule_summary=summary,
                   unmatched_a=pl.concat([outcome.unmatched_a, freed_a]),
                   unmatched_b=pl.concat([outcome.unmatched_b, freed_b]))


def _prepared(frame: pl.DataFrame) -> pl.DataFrame:
    return frame if "is_new" in frame.columns else frame.with_columns(is_new=pl.lit(False))


def payment_direction(rule: Rule, one_direction: str) -> str:
    """The direction of the many side's payments against a one record of `one_direction`: what the
    rule's direction condition asks (`equals`: the same, `opposite`: the other), else the other (the
    sides booked as mirror images, as a bank's credit pays a ledger's debit invoice). The many side's
    records of the other direction are refunds, netted against the payments when the rule nets."""
    condition = next((c for c in rule.definition.conditions if c.field == "direction"), None)
    if condition is not None and condition.operator is Operator.EQUALS:
        return one_direction
    return FLIPPED_DIRECTION.get(one_direction, one_direction)


def nets_refunds(rule: Rule) -> bool:
    """Whether the partial pass nets refunds against payments: when the rule has no direction
    condition (a direction condition holds for every record of the many side, as any condition does)."""
    return not any(c.field == "direction" for c in rule.definition.conditions)


def _allocate(rule: Rule, pool_a: pl.DataFrame, pool_b: pl.DataFrame,
              allocated: Mapping[int, int]) -> list[tuple[int, str, int | None, list[int]]]:
    """One partial rule's matches: (the one record, its side, its share or None when taken whole,
    the many records), one record of the one side at a time by id, its candidates by date then id,
    allocated as domain/allocation.allocate_netted does (payments in the direction `payment_direction`
    says; refunds, of the other, netted when `nets_refunds`)."""
    plan = RulePlan(rule)
    one_side = "b" if rule.definition.cardinality is Cardinality.MANY_TO_ONE else "a"
    if pool_a.is_empty() or pool_b.is_empty():
        return []
    units_a, units_b = record_units(pool_a, plan, "a"), record_units(pool_b, plan, "b")
    a_rows, b_rows = candidate_pairs(units_a, units_b, keys=plan.key_columns(without_amount=True),
                                     windows=plan.windows(without_amount=True), rule_id=rule.id,
                                     limit=MAX_PARTIAL_PAIRS)
    if not len(a_rows):
        return []
    pairs = checked_pairs(plan, units_a, units_b, a_rows, b_rows, skip_amount=True)
    one_column, many_column = ("b_uid", "a_uid") if one_side == "b" else ("a_uid", "b_uid")
    columns = ("id", "amount", "currency", "decimal_places", "date", "direction")
    both = pl.concat([pool_a.select(columns), pool_b.select(columns)])
    paid = pl.DataFrame({"one": list(allocated), "allocated": list(allocated.values())},
                        schema={"one": pl.Int64, "allocated": pl.Int64})
    flipped = pl.col("one_direction").replace_strict(FLIPPED_DIRECTION, default=pl.col("one_direction"),
                                                     return_dtype=pl.Utf8)
    pays = pl.col("one_direction") if payment_direction(rule, "credit") == "credit" else flipped
    # Each one record's offers: of its currency and decimal places, not paid in part themselves, its
    # payments (+) and, when the rule nets, its refunds (-); records of neither direction are left out.
    offers = (pairs.select(one=pl.col(one_column), many=pl.col(many_column))
              .join(both.select(one="id", one_amount="amount", currency="currency", places="decimal_places",
                                one_direction="direction"), on="one")
              .join(both.select(many="id", amount="amount", m_currency="currency", m_places="decimal_places",
                                day="date", direction="direction"), on="many")
              .filter((pl.col("currency") == pl.col("m_currency")) & (pl.col("places") == pl.col("m_places"))
                      & ~pl.col("many").is_in(paid["one"].implode()))
              .with_columns(refund=pl.col("direction") != pays)
              .filter(~pl.col("refund") | nets_refunds(rule))
              .join(paid, on="one", how="left")
              .select("one", "many", "amount", "day", "refund",
                      signed=pl.when(pl.col("refund")).then(-pl.col("amount")).otherwise(pl.col("amount")),
                      remaining=pl.col("one_amount") - pl.col("allocated").fill_null(0))
              .sort("one", "day", "many"))
    # A record offered to one record only is taken or not by that record alone: those records' offers
    # are allocated at once, in columns, as allocate_netted walks them (the longest start of each
    # one's offers in date order whose net is positive and at most what is left, before any record
    # of no amount); the others one at a time, below.
    contested_many = offers.group_by("many").len().filter(pl.col("len") > 1)["many"]
    contested = offers.filter(pl.col("many").is_in(contested_many.implode()))["one"].unique()
    alone = offers.filter(~pl.col("one").is_in(contested.implode()))
    fits = (pl.col("net") > 0) & (pl.col("net") <= pl.col("remaining"))
    alone = (alone.with_columns(net=pl.col("signed").cum_sum().over("one"),
                                position=pl.int_range(pl.len()).over("one"))
             .filter((pl.col("amount") <= 0).cum_sum().over("one") == 0)
             .filter(pl.col("position") <= pl.when(fits).then(pl.col("position")).max().over("one"))
             .group_by("one", maintain_order=True)
             .agg(pl.col("many"), taken=pl.col("signed").sum(), remaining=pl.col("remaining").first()))
    made: list[tuple[int, str, int | None, list[int]]] = []
    for one, many, taken, remaining in alone.iter_rows():
        whole = taken == remaining and one not in allocated
        made.append((one, one_side, None if whole else taken, list(many)))
    rest = offers.filter(pl.col("one").is_in(contested.implode()))
    candidates: dict[int, list[tuple[int, int, bool, int]]] = {}
    for one, many, amount, refund, remaining in rest.select("one", "many", "amount", "refund",
                                                            "remaining").iter_rows():
        candidates.setdefault(one, []).append((many, amount, refund, remaining))
    used: set[int] = set()
    for one in sorted(candidates):  # in id order, each taking what the ones before it left
        remaining = candidates[one][0][3]
        chosen, left = allocate_netted(remaining, ((m, a, r) for m, a, r, _ in candidates[one] if m not in used))
        if not chosen:
            continue
        whole = left == 0 and one not in allocated
        made.append((one, one_side, None if whole else remaining - left, [m for m, _ in chosen]))
        used.update(m for m, _ in chosen)
    return made
