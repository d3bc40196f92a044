"""Matching past one function: split both sides into partitions, match each partition alone with
the engine (`match_records`), merge. Pure: frames in, frames out; where the partitions are
written and which function matches one is the caller's business (issue 32, points 2, 4, 5).

    plan = plan_partitions(rules, 16, side_a)          # or a plan that refuses, with its reason
    result = match_partitioned(side_a, side_b, rules, plan)
    result.outcome                                     # a MatchOutcome, as match_records gives

or, step by step (the fan-out): `split` each side, match every partition where both sides have
records, `PartitionMerge.add` the outcomes; it names the partitions to match again (on their
`open_records`) until it names none; then `PartitionMerge.outcome`.

The blocking key. A plan must put any two records a rule could pair in one partition. It is the
first of these that every active rule respects:

1. Hash (exact). The equality conditions (`equals`, direction `opposite`) that every active rule
   has, the same field on each side and the same normalization: a record goes to the partition
   hash(its values of those conditions, as the rule compares them) mod N. Two records a rule
   pairs agree on every one of them, so they share the partition; nothing is copied, and a record
   lacking one of the values (null, or a text normalized to nothing) pairs with nothing under any
   rule, so it is left open and in no partition (no skew from missing references). A grouped
   side must keep each group whole, so a condition counts there only when its field is one of
   the rule's group-by fields on that side (then a group's members all share its value), and
   only for text, currency and date: a group's amount is a sum and its direction a sign, which
   no member carries. A keyless grouped side (the subset search) compares each member with its
   counterpart, so any condition but amount (a subset's sum) counts there.
2. Range, on date or on amount, when every active rule is one_to_one and has a date condition
   (else: an amount condition). Side A owns: each A record is in exactly one partition, by
   where its value falls between cuts taken at side A's quantiles. Each B record goes to every
   partition holding an A value it could pair with: for dates its day +/- the widest window of
   the rules (`equals` is a window of 0 days; a rule with several date conditions reaches as far
   as its tightest), for amounts the band an `within` tolerance reaches from it (absolute or
   percent of the A amount, bounded from above with a margin, never from below). So the
   partitions overlap by the window, every pair a rule allows lies in the partition of its A
   record, and no pair lies in two partitions.
3. Otherwise the plan refuses (`partitions == 1`, `reason` says which rule stops it and why):
   a rule with no common equality condition that groups records, or has no date and no amount
   condition, could pair records anywhere. A plan that refuses is a run matched in one piece.

Conflicts. On a hash plan none: partitions share no record. On a range plan a B record can be
matched in two partitions. The merge takes the matches in the engine's own order, rule by rule
in (priority, id) order, then the greedy's (amount difference, date difference, side-A id,
side-B id), and keeps a match unless a match ahead of it took its B record (an A record is in
one partition, so it is never contested). The A records of the dropped matches are open again,
and the partitions that held them are matched again on their open records, and merged, until a
round drops nothing; each round keeps at least its first match, so this ends.

The same answer.
- Hash plans give the single engine's outcome, match for match and member for member: the
  engine's work (units, candidate pairs, greedy, subset search, waterfall) only ever relates
  records that share every equality key, so it falls apart along the partitions. The merge
  numbers the matches as the engine does (rule order, then lowest side-A id). Two bounds of the
  engine are per partition rather than per run: `max_candidate_pairs` (a run refused in one
  piece may pass in partitions) and the subset search's MAX_COUNTERPARTS (1,000 counterparts a
  rule and run: a keyless grouped rule with more counterparts than that searches up to 1,000 in
  each partition: the run's first 1,000 are searched as in one piece, and more after them, so
  the single engine's subset matches are all found, and more; `identical` is then not claimed).
- Range plans give the single engine's outcome whenever the merge drops no match
  (`PartitionedOutcome.identical`): each A record and all its pairs are in one partition, the
  greedy keeps a pair exactly when no better pair sharing a record is kept, and a B record left
  unmatched in a partition changes nothing there. When a B record is matched in two partitions
  the answer can differ: the greedy's choice at a boundary is global (the A record that loses
  the B record takes its next best partner, which may be one another A record would have taken
  in one piece, and so on along a chain that can cross the whole axis), and following it would
  mean matching in one piece. What holds then, and is tested: no record is in two matches;
  every pair a rule allows is in some partition (none is lost for lack of a partner); and, as in
  one piece, no two records left open could have been paired by a rule (after the last round,
  every partition's last pass saw both and its greedy leaves no such pair). So a range plan may
  match a few records differently near a cut, and even a few more or fewer of them, but never
  one twice and never leaves a pair a rule allows open. Only one_to_one rules get a range plan:
  a group (its date the latest, its amount a sum) or a subset (members on both sides of a cut)
  has no single place on the axis.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from chalicelib.domain.matching.engine import MAX_CANDIDATE_PAIRS, match_records
from chalicelib.domain.matching.outcome import MATCH_SCHEMA, MEMBER_SCHEMA, MatchOutcome
from chalicelib.domain.matching.plan import FLIPPED_DIRECTION, RulePlan, day_number, normalized_text
from chalicelib.domain.matching.subset import MAX_COUNTERPARTS
from chalicelib.domain.rules import Cardinality, Condition, Normalization, Operator, Rule, is_text_field

HASH_SEED = 32
RECORD, GROUP, SUBSET = "record", "group", "subset"
INT64_MAX = 2 ** 63 - 1


class PartitionConflict(RuntimeError):
    """Partitions of a hash plan matched one record twice: the plan broke its own promise (a bug)."""


@dataclass(frozen=True)
class BlockingKey:
    """An equality condition every active rule has: what a record is hashed on."""
    field: str
    b_field: str
    operator: Operator                      # EQUALS or OPPOSITE (direction)
    normalize: tuple[Normalization, ...]    # sorted: the steps run in one fixed order anyway

    @classmethod
    def of(cls, condition: Condition) -> BlockingKey:
        return cls(condition.field, condition.b_field, condition.operator,
                   tuple(sorted(set(condition.normalize), key=lambda n: n.value)))

    def value(self, side: str) -> pl.Expr:
        """The value the rules compare, as the engine computes it (plan.text_values, unit_values)."""
        name = self.field if side == "a" else self.b_field
        if is_text_field(self.field):
            return normalized_text(pl.col(name), self.normalize)
        expr = pl.col(name)
        if self.operator is Operator.OPPOSITE and side == "b":
            expr = expr.replace_strict(FLIPPED_DIRECTION, default=None, return_dtype=pl.Utf8)
        return expr

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "b_field": self.b_field, "operator": self.operator.value,
                "normalize": [n.value for n in self.normalize]}


@dataclass(frozen=True)
class PartitionPlan:
    """How a run splits. `partitions == 1`: it does not (`reason` says why). `keys`: a hash plan.
    `axis` ("date" or "amount"): a range plan, A value v in partition #{cut <= v}; `days` is the
    widest date window, `reaches` each rule's amount conditions as (tolerance, basis points)."""
    partitions: int
    keys: tuple[BlockingKey, ...] = ()
    axis: str | None = None
    cuts: tuple[int, ...] = ()
    days: int = 0
    reaches: tuple[tuple[tuple[int, int], ...], ...] = ()
    reason: str = ""

    @property
    def exact(self) -> bool:
        """Whether every partition holds its records alone (no record copied, no conflict)."""
        return self.axis is None

    def as_dict(self) -> dict[str, Any]:
        """For a manifest: plain JSON values, read back by `from_dict`."""
        return {"partitions": self.partitions, "keys": [k.as_dict() for k in self.keys], "axis": self.axis,
                "cuts": list(self.cuts), "days": self.days, "reaches": [[list(c) for c in r] for r in self.reaches],
                "reason": self.reason}

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> PartitionPlan:
        keys = tuple(BlockingKey(k["field"], k["b_field"], Operator(k["operator"]),
                                 tuple(Normalization(n) for n in k["normalize"])) for k in body["keys"])
        return cls(body["partitions"], keys, body["axis"], tuple(body["cuts"]), body["days"],
                   tuple(tuple((t, bp) for t, bp in r) for r in body["reaches"]), body["reason"])


# Planning -------------------------------------------------------------------------------------------

def active_plans(rules: Iterable[Rule]) -> list[RulePlan]:
    """The rules the engine runs, in its order."""
    return [RulePlan(rule) for rule in sorted((r for r in rules if r.definition.active),
                                              key=lambda r: (r.definition.priority, r.id))]


def unit_kinds(plan: RulePlan) -> tuple[str, str]:
    """What the engine pairs on each side (as engine._match_rule dispatches): single records,
    keyed groups, or subsets of a keyless grouped side (whose counterparts are records, or the
    groups of a keyed side)."""
    keyed_a, keyed_b = bool(plan.group_fields_a), bool(plan.group_fields_b)
    cardinality = plan.cardinality
    if cardinality is Cardinality.ONE_TO_ONE:
        return RECORD, RECORD
    if cardinality is Cardinality.MANY_TO_ONE:
        return GROUP if keyed_a else SUBSET, RECORD
    if cardinality is Cardinality.ONE_TO_MANY:
        return RECORD, GROUP if keyed_b else SUBSET
    if keyed_a or keyed_b:
        return GROUP if keyed_a else SUBSET, GROUP if keyed_b else SUBSET
    return SUBSET, RECORD  # many_to_many with no key runs as a keyless many_to_one


def _respects(plan: RulePlan, key: BlockingKey) -> bool:
    """Whether hashing on `key` keeps every unit of the rule whole."""
    kinds = unit_kinds(plan)
    if plan.rule.definition.conversion is not None and {key.field, key.b_field} & {"amount", "currency"}:
        return False  # the rule compares converted amounts and currencies, not the records' own
    if SUBSET in kinds and key.field == "amount":
        return False  # the subset search compares sums, never a member's amount
    for kind, name, group_fields in ((kinds[0], key.field, plan.group_fields_a),
                                     (kinds[1], key.b_field, plan.group_fields_b)):
        if kind == GROUP and (name not in group_fields or name in ("amount", "direction")):
            return False
    return True


def _keys_of(plan: RulePlan) -> set[BlockingKey]:
    return {BlockingKey.of(plan.conditions[i]) for i in plan.key_indexes}


def plan_partitions(rules: Sequence[Rule], partitions: int, side_a: pl.DataFrame | None = None) -> PartitionPlan:
    """The split of a run in (at most) `partitions` partitions: hash if the rules share equality
    conditions that keep their units whole, else a range on date or amount (cut at side A's
    quantiles: `side_a` is needed then), else a refusal with its reason."""
    plans = active_plans(rules)
    if partitions < 2:
        return PartitionPlan(1, reason="one partition was asked for")
    keys, axis, reason = _blocking(plans)
    if keys:
        return PartitionPlan(partitions, keys=keys)
    if axis is None:
        return PartitionPlan(1, reason=reason)
    if side_a is None:
        raise ValueError("a range plan cuts at side A's values: pass side_a")
    return _range_plan(plans, partitions, axis, side_a)


def partition_refusal(rules: Sequence[Rule]) -> str:
    """Why the rules allow no partition plan, whatever the data; "" when they allow one (a range
    plan may still refuse data of one value: `plan_partitions` says so)."""
    return _blocking(active_plans(rules))[2]


def partitions_for(records: int, partition_records: int) -> int:
    """How many partitions a run of `records` open records (both sides) is split in, for each to
    hold about `partition_records`: at least two (a run that fits one needs no split)."""
    return max(2, -(-records // max(partition_records, 1)))


def _blocking(plans: list[RulePlan]) -> tuple[tuple[BlockingKey, ...], str | None, str]:
    """What the rules allow, whatever the data: (hash keys, or a range's axis, or neither and why)."""
    if not plans:
        return (), None, "no active rule: nothing to match"
    common = set.intersection(*(_keys_of(p) for p in plans))
    keys = tuple(sorted((k for k in common if all(_respects(p, k) for p in plans)),
                        key=lambda k: (k.field, k.b_field, k.operator.value, k.normalize)))
    if keys:
        return keys, None, ""
    for plan in plans:
        if plan.cardinality is not Cardinality.ONE_TO_ONE:
            return (), None, (
                f"rule {plan.rule_id} ({plan.rule.definition.name}) is {plan.cardinality.value} and shares no "
                "equality condition on a group-by field with every other rule: a group's date is its latest "
                "record's and its amount a sum, so no date bucket or amount band keeps a group whole")
    converts = any(p.rule.definition.conversion is not None for p in plans)
    for axis in ("date", "amount"):
        if axis == "amount" and converts:
            continue  # converted amounts have no place on the records' own amount axis
        if all(any(c.field == axis for c in p.conditions) for p in plans):
            return (), axis, ""
    lacking = next((p for p in plans if not any(c.field in ("date", "amount") for c in p.conditions)), None)
    if lacking is not None:
        return (), None, (
            f"no equality condition is common to every rule, and rule {lacking.rule_id} "
            f"({lacking.rule.definition.name}) has no date and no amount condition: it may pair any two records")
    return (), None, (
        "no equality condition is common to every rule, and not every rule has a date condition nor every "
        "rule an amount condition: no one range keeps every rule's pairs together")


def _range_plan(plans: list[RulePlan], partitions: int, axis: str, side_a: pl.DataFrame) -> PartitionPlan:
    values = np.sort(_axis_values(side_a, axis))
    cuts = (np.unique(values[[len(values) * i // partitions for i in range(1, partitions)]])
            if len(values) else np.empty(0, dtype=np.int64))
    cuts = cuts[cuts > values[0]] if len(values) else cuts
    if not len(cuts):
        return PartitionPlan(1, reason=f"side A has one {axis} value or none: no range splits it")
    if axis == "date":
        days = max(min(c.days or 0 for c in p.conditions if c.field == "date") for p in plans)
        return PartitionPlan(len(cuts) + 1, axis="date", cuts=tuple(int(c) for c in cuts), days=days)
    reaches = tuple(tuple((c.tolerance or 0, c.tolerance_basis_points or 0) if c.operator is Operator.WITHIN
                          else (0, 0) for c in p.conditions if c.field == "amount") for p in plans)
    return PartitionPlan(len(cuts) + 1, axis="amount", cuts=tuple(int(c) for c in cuts), reaches=reaches)


def _axis_values(frame: pl.DataFrame, axis: str) -> np.ndarray:
    column = day_number(pl.col("date")) if axis == "date" else pl.col("amount")
    return frame.select(column.fill_null(0))[axis].to_numpy().astype(np.int64)


# Splitting ------------------------------------------------------------------------------------------

def assign(frame: pl.DataFrame, plan: PartitionPlan, side: str) -> pl.DataFrame:
    """The frame with a `partition` column (UInt32): one row a record, except side B on a range
    plan, one row for each partition the record reaches; null on a hash plan for a record lacking
    a key value (no rule can pair it: it stays open, and no partition carries it)."""
    if plan.partitions == 1:
        return frame.with_columns(partition=pl.lit(0, dtype=pl.UInt32))
    if plan.keys:
        keys = [k.value(side).alias(f"k{i}") for i, k in enumerate(plan.keys)]
        hashed = (pl.struct(keys).hash(HASH_SEED) % plan.partitions).cast(pl.UInt32)
        # A null key never equals anything: such a record can match under no rule, and is in no partition.
        return frame.with_columns(partition=pl.when(pl.all_horizontal(k.is_not_null() for k in keys)).then(hashed))
    cuts = np.asarray(plan.cuts, dtype=np.int64)
    values = _axis_values(frame, plan.axis or "date")
    if side == "a":
        return frame.with_columns(partition=pl.Series(np.searchsorted(cuts, values, "right"), dtype=pl.UInt32))
    low, high = _reach(values, plan)
    first = np.searchsorted(cuts, low, "right")
    last = np.searchsorted(cuts, high, "right")
    return (frame.with_columns(partition=pl.int_ranges(pl.Series(first, dtype=pl.Int64),
                                                       pl.Series(last + 1, dtype=pl.Int64), dtype=pl.UInt32))
            .explode("partition"))


def _reach(values: np.ndarray, plan: PartitionPlan) -> tuple[np.ndarray, np.ndarray]:
    """The A values a B value may pair with under some rule, as [low, high] (a superset)."""
    if plan.axis == "date":
        return values - plan.days, values + plan.days
    b = values.astype(np.float64)
    low, high = np.full(len(values), INT64_MAX, dtype=np.float64), np.full(len(values), -1.0)
    for conditions in plan.reaches:  # a rule allows what all its amount conditions allow
        rule_low, rule_high = np.full(len(values), -1.0), np.full(len(values), float(INT64_MAX))
        for tolerance, basis_points in conditions:
            # |a - b| <= max(t, a * bp / 10000): a >= min(b - t, b / (1 + p)) >= b - max(t, b * p);
            # a <= max(b + t, b / (1 - p)), unbounded from p = 100 %.
            p = basis_points / 10_000
            c_low = b - np.maximum(tolerance, b * p)
            c_high = b + np.maximum(tolerance, b * p / (1 - p)) if p < 1 else np.full(len(values), float(INT64_MAX))
            rule_low, rule_high = np.maximum(rule_low, c_low), np.minimum(rule_high, c_high)
        low, high = np.minimum(low, rule_low), np.maximum(high, rule_high)
    margin = np.abs(b) * 1e-9 + 2  # floats round; the reach only needs to be wide enough
    return (np.floor(low - margin).clip(-INT64_MAX, INT64_MAX).astype(np.int64),
            np.ceil(high + margin).clip(-INT64_MAX, 2.0 ** 62).astype(np.int64))


def split(frame: pl.DataFrame, plan: PartitionPlan, side: str) -> dict[int, pl.DataFrame]:
    """Each partition's records of one side (only partitions that have some), without `partition`."""
    assigned = assign(frame, plan, side)
    return {int(key[0]): part.drop("partition")
            for key, part in assigned.partition_by("partition", as_dict=True, maintain_order=True).items()
            if key[0] is not None}


# Merging --------------------------------------------------------------------------------------------

def partition_outcome(matches: pl.DataFrame, members: pl.DataFrame) -> MatchOutcome:
    """A partition's outcome as its files keep it (the fan-out writes its matches and members): what
    `PartitionMerge.add` reads of one; the open ids are the merge's to find."""
    empty = pl.Series([], dtype=pl.Int64)
    return MatchOutcome(matches=matches, members=members, rule_summary={}, unmatched_a=empty, unmatched_b=empty)


@dataclass
class PartitionMerge:
    """The kept matches of a partitioned run, round after round (see the module's Conflicts).
    Matches get a run-wide number (`gid`) as they come; members keep the engine's order, by
    (match, side, record id), which the final numbering only has to keep stable."""
    plan: PartitionPlan
    rules: Sequence[Rule]
    rounds: int = 0
    conflicts: int = 0
    _matches: list[pl.DataFrame] = field(default_factory=list)   # gid, rule_id, ..., rule_pos, a_first
    _members: list[pl.DataFrame] = field(default_factory=list)   # gid, side, record_id, share
    _taken: pl.Series | None = None
    _next_gid: int = 0

    def __post_init__(self) -> None:
        self._order = active_plans(self.rules)
        self._position = pl.DataFrame({"rule_id": [p.rule_id for p in self._order],
                                       "rule_pos": list(range(len(self._order)))},
                                      schema={"rule_id": pl.Int64, "rule_pos": pl.Int64})

    def add(self, outcomes: Mapping[int, MatchOutcome]) -> frozenset[int]:
        """One round's outcomes, by partition: keeps what no better match contests; returns the
        partitions to match again on their `open_records` (none: the merge is done)."""
        self.rounds += 1
        matches, members = self._gathered(outcomes)
        if matches.is_empty():
            return frozenset()
        if self.plan.exact:
            if not members["record_id"].is_unique().all():
                raise PartitionConflict("a record was matched in two partitions of a hash plan")
            self._keep(matches, members)
            return frozenset()
        # one_to_one only: an A record is in one partition, so only B records are contested, and the
        # sequential greedy over the matches in the engine's order keeps each B record's first match.
        # Only the matches of a B record matched more than once need that order (and their differences read).
        b_first = matches["b_first"].to_numpy()
        _, inverse, counts = np.unique(b_first, return_inverse=True, return_counts=True)
        contested = matches.filter(pl.Series(counts[inverse] > 1))
        differences = pl.col("differences").str.json_decode(pl.Struct({"amount": pl.Int64, "date_days": pl.Int64}))
        contested = contested.with_columns(amount_diff=differences.struct.field("amount"),
                                           date_diff=differences.struct.field("date_days"))
        # (numpy: a sort of a few int columns, single-threaded, is steady on a busy machine)
        keys = [contested[c].to_numpy() for c in ("b_first", "a_first", "date_diff", "amount_diff", "rule_pos")]
        order = np.lexsort(keys)
        first = np.zeros(contested.height, dtype=bool)
        first[order[np.unique(keys[0][order], return_index=True)[1]]] = True
        dropped = contested.filter(pl.Series(~first))
        kept = matches.filter(~pl.col("gid").is_in(dropped["gid"].implode())) if dropped.height else matches
        self.conflicts += dropped.height
        self._keep(kept, members.join(kept.select("gid"), on="gid", how="semi") if dropped.height else members)
        return frozenset(dropped["partition"].to_list())

    def _keep(self, kept: pl.DataFrame, members: pl.DataFrame) -> None:
        self._matches.append(kept.select("gid", *[c for c in MATCH_SCHEMA if c != "match_no"], "rule_pos", "a_first"))
        self._members.append(members)
        taken = members["record_id"]
        self._taken = taken if self._taken is None else pl.concat([self._taken, taken])

    def _gathered(self, outcomes: Mapping[int, MatchOutcome]) -> tuple[pl.DataFrame, pl.DataFrame]:
        match_parts, member_parts = [], []
        for partition, outcome in sorted(outcomes.items()):
            if outcome.matches.is_empty():
                continue
            offset = self._next_gid
            self._next_gid += outcome.matches.height
            members = outcome.members  # by (match_no, side, record_id): a side's first row is its lowest id
            firsts = {side: members.filter(pl.col("side") == side).filter(
                pl.col("match_no") != pl.col("match_no").shift().fill_null(-1))["record_id"] for side in ("a", "b")}
            # every match has both sides, and match_no runs 0..k-1: the firsts line up with the matches
            match_parts.append(outcome.matches.with_columns(
                gid=pl.col("match_no") + offset, partition=pl.lit(partition, dtype=pl.Int64),
                a_first=firsts["a"], b_first=firsts["b"]))
            # `share`: a partial match's (domain/matching/partial.py, applied inside a partition), else null
            share = pl.col("share") if "share" in members.columns else pl.lit(None, dtype=pl.Int64)
            member_parts.append(members.select(gid=pl.col("match_no") + offset, side="side", record_id="record_id",
                                               share=share.cast(pl.Int64)))
        if not match_parts:
            return pl.DataFrame(), pl.DataFrame()
        return pl.concat(match_parts).join(self._position, on="rule_id", how="left"), pl.concat(member_parts)

    def open_records(self, frame: pl.DataFrame) -> pl.DataFrame:
        """A partition's records that no kept match holds."""
        if self._taken is None:
            return frame
        return frame.filter(~pl.col("id").is_in(self._taken.implode()))

    def next_round(self, side_a: pl.DataFrame, side_b: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame] | None:
        """A partition's sides to match again: its open records; None when a side has none left (a
        record alone can pair with nothing)."""
        part_a, part_b = self.open_records(side_a), self.open_records(side_b)
        return (part_a, part_b) if part_a.height and part_b.height else None

    def outcome(self, side_a_ids: pl.Series, side_b_ids: pl.Series) -> MatchOutcome:
        """The merged outcome, numbered and ordered as match_records orders one: matches by rule
        order then lowest side-A id, members by (match, side, record id); open ids in input order."""
        if self._matches:
            found = pl.concat(self._matches)
            found = found[np.lexsort((found["a_first"].to_numpy(), found["rule_pos"].to_numpy()))]
            number = np.zeros(self._next_gid, dtype=np.int64)
            number[found["gid"].to_numpy()] = np.arange(found.height)
            members = pl.concat(self._members)
            match_no = number[members["gid"].to_numpy()]
            order = np.argsort(match_no, kind="stable")  # stable: each match's rows stay in their order
            members = members.select(match_no=pl.Series(match_no), side="side", record_id="record_id",
                                     share="share")[order]
            if members["share"].null_count() == members.height:  # no partial match: the engine's members
                members = members.drop("share")
            matches = found.with_row_index("match_no").with_columns(pl.col("match_no").cast(pl.Int64))
            rule_of = matches["rule_id"].to_numpy()[members["match_no"].to_numpy()]
            rule_ids, counts = np.unique(rule_of, return_counts=True)
            per_rule = dict(zip(rule_ids.tolist(), counts.tolist()))
            taken = members["record_id"].implode()
        else:
            matches, members = pl.DataFrame(schema=MATCH_SCHEMA), pl.DataFrame(schema=MEMBER_SCHEMA)
            per_rule, taken = {}, None
        summary: dict[str, Any] = {str(p.rule_id): per_rule.get(p.rule_id, 0) for p in self._order}
        open_a = side_a_ids if taken is None else side_a_ids.filter(~side_a_ids.is_in(taken))
        open_b = side_b_ids if taken is None else side_b_ids.filter(~side_b_ids.is_in(taken))
        summary["unmatched"] = {"side_a": len(open_a), "side_b": len(open_b)}
        return MatchOutcome(matches=matches.select(*MATCH_SCHEMA).cast(MATCH_SCHEMA),  # type: ignore[arg-type]
                            members=members.cast(MEMBER_SCHEMA),  # type: ignore[arg-type]
                            rule_summary=summary, unmatched_a=open_a, unmatched_b=open_b)


# In one process -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PartitionedOutcome:
    outcome: MatchOutcome
    plan: PartitionPlan
    rounds: int          # passes over partitions: 1 unless a match was dropped at the merge
    conflicts: int       # matches dropped at the merge: a better one elsewhere took a record
    partitions_matched: int
    subset_cap: bool = False  # a subset search may have met MAX_COUNTERPARTS: it searched more, in partitions

    @property
    def identical(self) -> bool:
        """Proven the single engine's outcome (see the module's The same answer)."""
        return (self.plan.exact or self.conflicts == 0) and not self.subset_cap


def match_partitioned(side_a: pl.DataFrame, side_b: pl.DataFrame, rules: Sequence[Rule], plan: PartitionPlan, *,
                      only_new: bool = False, max_candidate_pairs: int = MAX_CANDIDATE_PAIRS) -> PartitionedOutcome:
    """The run matched partition by partition, one after the other, and merged."""
    def matcher(a: pl.DataFrame, b: pl.DataFrame) -> MatchOutcome:
        return match_records(a, b, rules, only_new=only_new, max_candidate_pairs=max_candidate_pairs)

    parts_a, parts_b = split(side_a, plan, "a"), split(side_b, plan, "b")
    merge = PartitionMerge(plan, rules)
    todo = frozenset(parts_a) & frozenset(parts_b)  # a partition lacking a side matches nothing
    matched = 0
    while todo:
        outcomes = {}
        for partition in sorted(todo):
            if (sides := merge.next_round(parts_a[partition], parts_b[partition])) is not None:
                outcomes[partition] = matcher(*sides)
                matched += 1
        todo = merge.add(outcomes)
    # A side of at most MAX_COUNTERPARTS records has at most that many counterparts: the cap never binds.
    capped = (matched > 1 and max(side_a.height, side_b.height) > MAX_COUNTERPARTS
              and any(SUBSET in unit_kinds(p) for p in active_plans(rules)))
    return PartitionedOutcome(merge.outcome(side_a["id"], side_b["id"]), plan, max(merge.rounds, 1),
                              merge.conflicts, matched, capped)
