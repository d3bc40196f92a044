"""Near misses: for each record a rule left unmatched, its closest candidate on the other side and
the conditions of the rule that pair fails, with the numbers ("amount off by 1.50 USD, 1.00 more
than the 0.50 allowed", "date 3 days past the 2-day window", "text similarity 0.42 under 0.6").

Columnar, like the engine, and bounded: no record is compared with every record of the other side.

1. Units. The records of each side as the engine builds them for the rule (units.record_units):
   the normalized texts and the key values (direction flipped on side B for `opposite`) are the
   engine's own columns. Rules that compare groups of records (any cardinality other than
   one_to_one) are not explained: their near miss is a group, or a subset sum (see NOT_EXPLAINED).
2. Candidates (blocking), by sorted searches only, O(n log n): for each *relaxation* of the
   rule's equality keys (all of them, all but one in turn, none; a key holding one same value on
   both sides, such as a single currency, is not relaxed), an as-of join for the nearest amount
   and one for the nearest date in the record's key block; with every key kept, the nearest
   amount on each day of the date window (up to MAX_WINDOW_DAYS either way) and the nearest date
   among the records of about the same amount (amounts cut in buckets as wide as the allowed
   difference: the record's bucket and its neighbours); and the engine's own candidate search
   inside every window when it counts at most INSIDE_WINDOW_PAIRS (pairs only a text condition can
   fail). A record whose only problem is one key (a reference typed wrong) still finds its partner
   through the relaxation leaving that key out, and a record with no partner still gets its nearest
   records by amount and date. A few dozen candidates a record at most.
3. Checks. Every condition of the rule is evaluated on the candidate pairs, vectorised, exactly
   as the engine evaluates it (candidates.checked_pairs and the key join): a key fails when the
   values differ or either is null; a window when the difference passes the allowed one
   (plan.allowed_difference, in integers); `contains` when neither normalized text holds the
   other; `similar` when candidates.similarity scores under the threshold. The similarity scores
   are the costly part: a record's pairs failing more than (its fewest other failures + the
   similar conditions) are dropped (they cannot be closest), and of the rest the TEXT_SCORED
   closest by the other conditions (fewest failed, then most words shared by the texts, then
   distance) are scored.
4. Closest. A pair meeting every condition is not a near miss: the engine would match it (a
   dry run's waterfall took such pairs already, unless a conflict kept them; an exception's record
   may have met its partner after the last run), so it is reported as such (`failed` 0,
   `would_match` in the answer) before any failing pair. Among the others, a record's closest candidate is
   the one with the fewest failed conditions, then the smallest *distance*, then the smallest
   amount difference, then date difference, then the lowest candidate id. The distance is the sum,
   over the failed conditions, of how far each is from passing, each from 0 to 1:
     amount within/equals   excess / (excess + scale), scale = max(allowed, 1% of the amount, 1)
     date within/equals     days past the window / (days past + window + 1)
     similar                (threshold - score) / threshold (a missing text: 1)
     equals, opposite,      0.99: a differing key or text has no measure
     contains
   so a pair failing one condition by a little is closer than one failing it by a lot, and any
   pair failing one condition is closer than every pair failing two.

Money stays integral: differences are minor units (at the scale the engine compared, the
currency's most decimal places on either side), shown as exact decimal strings; only the
similarity score and the distance are ratios (floats, rounded for display).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import polars as pl

from chalicelib.domain.matching import conversion
from chalicelib.domain.matching.candidates import candidate_pairs as engine_candidates
from chalicelib.domain.matching.candidates import similarity
from chalicelib.domain.matching.frames import engine_frames
from chalicelib.domain.matching.outcome import CandidateExplosion
from chalicelib.domain.matching.plan import FLIPPED_DIRECTION, RulePlan, allowed_difference, day_number, value_column
from chalicelib.domain.matching.units import record_units
from chalicelib.domain.money import decimal_string, minor_units
from chalicelib.domain.rules import Cardinality, Operator, Rule, is_text_field

NO_MEASURE = 0.99  # the distance of a failed key, text equals or contains: it has no measure
NOT_EXPLAINED = ("the rule compares groups of records (a sum of several against one), not single records: "
                 "its near misses are not explained")
MAX_WINDOW_DAYS = 7         # a date window searched day by day up to this many days either way
INSIDE_WINDOW_PAIRS = 1_000_000  # pairs inside every window built at most, for near misses
PER_SUBJECT = 8             # pairs inside every window a subject keeps
TEXT_SCORED = 4             # a subject's pairs scored for `similar` (closest by the other conditions)
DISTANCE_DIGITS = 4


def explained(rule: Rule) -> bool:
    """Whether near misses are explained for the rule (single records against single records)."""
    return rule.definition.cardinality is Cardinality.ONE_TO_ONE


def near_misses(side_a: pl.DataFrame, side_b: pl.DataFrame, rule: Rule, *, subject_side: str = "a",
                subject_ids: pl.Series | Sequence[int] | None = None) -> pl.DataFrame:
    """For each record of `subject_side` (those of `subject_ids` only, when given), its closest
    candidate on the other side under the rule (see the module docstring). Input frames have
    the engine's record columns (domain/matching); amounts at one scale per currency.

    One row a subject record, by record id: `record_id`, `candidate_id` (null when the other side
    has no candidate), `failed` (how many conditions: 0 when the pair meets the whole rule, which
    the engine would match),
    `distance`, `f<i>` (condition i fails), and what describing them needs: `a_amount`,
    `b_amount`, `amount_diff` (minor units, absolute), `allowed<i>` (an amount window's allowed
    difference), `a_date`, `b_date`, `date_diff` (days, absolute), `a_currency`, `b_currency`,
    `s<i>` (a similar condition's score) and `a_v<i>`/`b_v<i>` (the values condition i compares)."""
    if subject_side not in ("a", "b"):
        raise ValueError("subject_side is a or b")
    plan = RulePlan(rule)
    given = (side_a, side_b)
    side_a, side_b = conversion.rule_pools(rule, side_a, side_b)  # a converting rule's amounts
    units = {"a": record_units(_prepared(side_a, plan, "a"), plan, "a"),
             "b": record_units(_prepared(side_b, plan, "b"), plan, "b")}
    other_side = "b" if subject_side == "a" else "a"
    subjects = units[subject_side]
    if subject_ids is not None:
        subjects = (subjects.filter(pl.col("uid").is_in(pl.Series(list(subject_ids), dtype=pl.Int64).implode()))
                    .drop("row").with_row_index("row"))  # the candidate search hands back `row`s
    both = {subject_side: subjects, other_side: units[other_side]}
    keys = _splitting_keys(plan, subjects, units[other_side])
    pairs = candidate_pairs(plan, both["a"], both["b"], subject_side, keys)
    checked = evaluate_pairs(plan, units["a"], units["b"], pairs, subject=f"{subject_side}_uid",
                             settled=set(plan.key_columns()) - set(keys))
    subject_uid, candidate_uid = f"{subject_side}_uid", f"{other_side}_uid"
    # A pair failing nothing comes first: the engine would match it (a run applying the rules in
    # sequence may have taken its partner already, or it arrived after the last run), and the
    # record is then reported as `would_match`, never given a made-up failing candidate.
    closest = (checked.sort(subject_uid, "failed", "distance", "amount_diff", "date_diff", candidate_uid)
               .unique(subject_uid, keep="first", maintain_order=True))
    closest = _joined(closest, units["a"], units["b"], ["currency"])  # for the messages: the closest only
    found = (subjects.select(record_id=pl.col("uid"))
             .join(closest.rename({subject_uid: "record_id", candidate_uid: "candidate_id"}), on="record_id",
                   how="left")
             .sort("record_id"))
    return conversion.with_conversions(rule, found, *given, subject_side, subject_ids)


def _prepared(frame: pl.DataFrame, plan: RulePlan, side: str) -> pl.DataFrame:
    """The columns record_units reads (`is_new` is not read by a near miss: false throughout)."""
    return frame.with_columns(is_new=pl.lit(False)).select(sorted(plan.record_columns(side)))


def candidate_pairs(plan: RulePlan, units_a: pl.DataFrame, units_b: pl.DataFrame, subject_side: str,
                    keys: list[str]) -> pl.DataFrame:
    """(a_uid, b_uid) pairs worth evaluating for the subjects (every unit of `subject_side`), each
    once; all found by sorted searches, none by comparing a unit with a whole side (docstring).
    `keys`: the key columns that split blocks (_splitting_keys)."""
    subjects, others = (units_a, units_b) if subject_side == "a" else (units_b, units_a)
    empty = pl.DataFrame(schema={"a_uid": pl.Int64, "b_uid": pl.Int64})
    if subjects.is_empty() or others.is_empty():
        return empty
    found = (_nearest_values(keys, subjects, others) + _nearest_in_date_window(plan, keys, subjects, others)
             + _nearest_dates_in_amount_window(plan, keys, subjects, others))
    found = [f.rename({"subject": f"{subject_side}_uid",
                       "candidate": "b_uid" if subject_side == "a" else "a_uid"}).select("a_uid", "b_uid")
             for f in found]
    found += _inside_windows(plan, units_a, units_b, subject_side)
    return pl.concat(found).unique() if found else empty


def _splitting_keys(plan: RulePlan, subjects: pl.DataFrame, others: pl.DataFrame) -> list[str]:
    """The rule's key columns, less those holding one same value on every unit of both sides
    (one currency, one direction): such a key neither fails nor splits a block, so relaxing it
    would only repeat a search."""
    keys = []
    for column in plan.key_columns():
        values = pl.concat([subjects.select(column), others.select(column)])[column]
        if values.null_count() or values.n_unique() > 1:
            keys.append(column)
    return keys


def _nearest_values(keys: list[str], subjects: pl.DataFrame, others: pl.DataFrame) -> list[pl.DataFrame]:
    """For each relaxation of the equality keys (all, all but one, none): the nearest amount and
    the nearest date in the subject's key block."""
    relaxations = [tuple(keys), *(tuple(k for k in keys if k != left_out) for left_out in keys), ()]
    found = []
    for relaxed in dict.fromkeys(relaxations):
        for on in ("amount", "date"):
            found += _asof(subjects, others, on, list(relaxed), ("nearest",))
    return found


def _nearest_in_date_window(plan: RulePlan, keys: list[str], subjects: pl.DataFrame,
                            others: pl.DataFrame) -> list[pl.DataFrame]:
    """With every key kept, the nearest amount among the records of each day of
    the rule's date window (a partner a little off in amount, dated inside the window, among many
    records of the same days). Windows of at most MAX_WINDOW_DAYS either way are searched whole;
    a wider one, its MAX_WINDOW_DAYS nearest days either way."""
    windows = [c for c in plan.windows() if c.field == "date" and c.days]
    if not windows:
        return []
    days = min(min(c.days or 0 for c in windows), MAX_WINDOW_DAYS)
    others = others.with_columns(window_day=day_number(pl.col("date")))
    found = []
    for shift in range(-days, days + 1):
        shifted = subjects.with_columns(window_day=day_number(pl.col("date")) + shift)
        found += _asof(shifted, others, "amount", [*keys, "window_day"], ("nearest",))
    return found


def _nearest_dates_in_amount_window(plan: RulePlan, keys: list[str], subjects: pl.DataFrame,
                                    others: pl.DataFrame) -> list[pl.DataFrame]:
    """With every key kept, the nearest dates among the records of about the subject's amount
    (a partner a little off in date, its amount inside the window or close): amounts cut in
    buckets as wide as the widest allowed difference, the subject's bucket and its neighbours
    searched by date."""
    windows = [c for c in plan.windows() if c.field == "amount"]
    if not windows or subjects.is_empty():
        return []
    largest = int(subjects.select(pl.col("amount").max().fill_null(0)).item())
    width = max(max(c.allowed_amount_difference(largest) for c in windows), 1)
    others = others.with_columns(amount_bucket=pl.col("amount") // width)
    found = []
    for shift in (-1, 0, 1):
        shifted = subjects.with_columns(amount_bucket=pl.col("amount") // width + shift)
        found += _asof(shifted, others, "date", [*keys, "amount_bucket"], ("nearest",))
    return found


def _asof(subjects: pl.DataFrame, others: pl.DataFrame, on: str, keys: list[str],
          strategies: tuple[str, ...]) -> list[pl.DataFrame]:
    left = subjects.select(subject=pl.col("uid"), on_value=pl.col(on), *keys).drop_nulls(keys).sort("on_value")
    right = (others.select(candidate=pl.col("uid"), on_value=pl.col(on), *keys).drop_nulls(keys)
             .sort("on_value", "candidate"))
    if left.is_empty() or right.is_empty():
        return []
    return [left.join_asof(right, on="on_value", by=keys or None, strategy=strategy,  # type: ignore[arg-type]
                           check_sortedness=False).select("subject", "candidate").drop_nulls()
            for strategy in strategies]


def _inside_windows(plan: RulePlan, units_a: pl.DataFrame, units_b: pl.DataFrame,
                    subject_side: str) -> list[pl.DataFrame]:
    """Pairs only a text condition can fail, by the engine's own candidate search (keys, then a
    range on one window), when it counts at most INSIDE_WINDOW_PAIRS pairs (else the as-of
    searches stand alone): each subject keeps its PER_SUBJECT nearest in amount, then date."""
    if not plan.text_check_indexes or not plan.windows():
        return []
    try:
        a_rows, b_rows = engine_candidates(units_a, units_b, keys=plan.key_columns(), windows=plan.windows(),
                                           rule_id=plan.rule_id, limit=INSIDE_WINDOW_PAIRS)
    except CandidateExplosion:
        return []
    if not len(a_rows):
        return []
    a_take, b_take = pl.Series(a_rows, dtype=pl.UInt32), pl.Series(b_rows, dtype=pl.UInt32)
    a = units_a.select(pl.col("uid", "amount", "date").gather(a_take))
    b = units_b.select(pl.col("uid", "amount", "date").gather(b_take))
    pairs = pl.DataFrame({"a_uid": a["uid"], "b_uid": b["uid"]}).with_columns(
        amount_gap=(a["amount"] - b["amount"]).abs(),
        day_gap=(a["date"].cast(pl.Int32) - b["date"].cast(pl.Int32)).abs())
    subject = f"{subject_side}_uid"
    return [pairs.sort(subject, "amount_gap", "day_gap", "a_uid", "b_uid").group_by(subject, maintain_order=True)
            .head(PER_SUBJECT).select("a_uid", "b_uid")]


def evaluate_pairs(plan: RulePlan, units_a: pl.DataFrame, units_b: pl.DataFrame, pairs: pl.DataFrame,
                   subject: str | None = None, settled: Collection[str] = ()) -> pl.DataFrame:
    """Every condition of the rule on each (a_uid, b_uid) pair, as the engine evaluates it:
    `f<i>` true where condition i fails, `failed` their count, `distance` (module docstring).
    `settled`: key columns holding one same value on every unit of both sides, which no pair fails
    (not read).

    With `subject` ("a_uid" or "b_uid") and a `similar` condition, each subject keeps only its
    TEXT_SCORED pairs closest by the other conditions (fewest failed; then those whose texts share
    the most words; then their distance, the other uid) before the similarity scores, the costly
    part, are computed: the closest is chosen among those."""
    scored = [i for i, c in enumerate(plan.conditions) if c.operator is Operator.SIMILAR]
    texts = [value_column(i) for i in plan.text_value_indexes if i not in scored]
    values = [value_column(i) for i in plan.key_indexes if not is_text_field(plan.conditions[i].field)]
    frame = _joined(pairs, units_a, units_b, ["amount", "date", *[c for c in [*texts, *values] if c not in settled]])
    amount_a, amount_b = pl.col("a_amount"), pl.col("b_amount")
    gap = (amount_a - amount_b).abs()
    days = (day_number(pl.col("a_date")) - day_number(pl.col("b_date"))).abs()
    failures: list[pl.Expr] = []
    distances: list[pl.Expr] = []
    extra: list[pl.Expr] = []
    for i, condition in enumerate(plan.conditions):
        if i in scored:
            continue
        a_value, b_value = pl.col(f"a_v{i}"), pl.col(f"b_v{i}")
        if value_column(i) in settled:
            failed, distance = pl.lit(False), pl.lit(0.0)
        elif condition.operator in (Operator.EQUALS, Operator.OPPOSITE):
            failed = (a_value != b_value).fill_null(True)  # a null key never matches
            distance = (_amount_distance(gap, pl.lit(0, dtype=pl.Int64), amount_a) if condition.field == "amount"
                        else _days_distance(days, 0) if condition.field == "date" else pl.lit(NO_MEASURE))
        elif condition.operator is Operator.WITHIN and condition.field == "amount":
            allowed = allowed_difference(condition, amount_a)
            failed = gap > allowed
            distance = _amount_distance(gap, allowed, amount_a)
            extra.append(allowed.alias(f"allowed{i}"))
        elif condition.operator is Operator.WITHIN:
            failed = days > (condition.days or 0)
            distance = _days_distance(days, condition.days or 0)
        else:  # contains: either normalized text inside the other; a null never matches
            holds = (a_value.str.contains(b_value, literal=True)
                     | b_value.str.contains(a_value, literal=True)).fill_null(False)
            failed = ~holds
            distance = pl.lit(NO_MEASURE)
        failures.append(failed.alias(f"f{i}"))
        distances.append(pl.when(failed).then(distance).otherwise(0.0).cast(pl.Float64).alias(f"d{i}"))
    frame = frame.with_columns(*failures, *distances, *extra, amount_diff=gap, date_diff=days)
    cheap = [f"f{i}" for i in range(len(plan.conditions)) if i not in scored]
    frame = frame.with_columns(cheap_failed=pl.sum_horizontal([pl.col(c).cast(pl.Int32) for c in cheap])
                               if cheap else pl.lit(0, dtype=pl.Int32))
    if scored and subject is not None and not frame.is_empty():
        # Exact prune: a pair failing more than the subject's fewest other failures plus every
        # similar condition can never be closer than the pair with those fewest.
        frame = frame.filter(pl.col("cheap_failed") <= pl.col("cheap_failed").min().over(subject) + len(scored))
        other = "b_uid" if subject == "a_uid" else "a_uid"
        cheap_distances = [pl.col(f"d{i}") for i in range(len(plan.conditions)) if i not in scored]
        # A cheap stand-in for the scores, to rank by: the words the similar conditions' texts share.
        words = {"a": units_a.select("uid", *[pl.col(f"v{i}").str.split(" ").alias(f"w{i}") for i in scored]),
                 "b": units_b.select("uid", *[pl.col(f"v{i}").str.split(" ").alias(f"w{i}") for i in scored])}
        shared = [-pl.col(f"a_w{i}").list.set_intersection(pl.col(f"b_w{i}")).list.len().fill_null(0).cast(pl.Int32)
                  for i in scored]
        frame = (frame.join(words["a"].rename(lambda n: f"a_{n}"), on="a_uid")
                 .join(words["b"].rename(lambda n: f"b_{n}"), on="b_uid")
                 .with_columns(cheap_distance=pl.sum_horizontal(cheap_distances) if cheap_distances
                               else pl.lit(0.0), unshared=pl.sum_horizontal(shared))
                 .sort(subject, "cheap_failed", "unshared", "cheap_distance", other)
                 .group_by(subject, maintain_order=True).head(TEXT_SCORED)
                 .drop("cheap_distance", "unshared", *[f"{side}_w{i}" for side in "ab" for i in scored]))
    similar_texts = [value_column(i) for i in scored if value_column(i) not in texts]
    if similar_texts:
        frame = _joined(frame, units_a, units_b, similar_texts)
    return _scored(plan, frame, scored)


def _joined(pairs: pl.DataFrame, units_a: pl.DataFrame, units_b: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """The pairs with the units' `columns` of each side beside them, as a_<name> and b_<name>."""
    columns = list(dict.fromkeys(columns))
    a_side = units_a.select("uid", *columns).rename(lambda n: f"a_{n}")
    b_side = units_b.select("uid", *columns).rename(lambda n: f"b_{n}")
    return pairs.join(a_side, on="a_uid").join(b_side, on="b_uid")


def _scored(plan: RulePlan, frame: pl.DataFrame, scored: list[int]) -> pl.DataFrame:
    """The similar conditions of the pairs scored (candidates.similarity, the engine's scorer:
    -1 where a text is missing), and `failed` and `distance` summed."""
    for i in scored:
        threshold = plan.conditions[i].threshold or 0.0
        score = pl.Series(f"s{i}", similarity(frame[f"a_v{i}"], frame[f"b_v{i}"]), dtype=pl.Float64)
        failed = score < threshold
        frame = frame.with_columns(score, failed.alias(f"f{i}"),
                                   pl.when(failed).then((threshold - score.clip(0, 1)) / threshold).otherwise(0.0)
                                   .alias(f"d{i}"))
    count = len(plan.conditions)
    return frame.with_columns(failed=pl.sum_horizontal([pl.col(f"f{i}").cast(pl.Int32) for i in range(count)]),
                              distance=pl.sum_horizontal([pl.col(f"d{i}") for i in range(count)])
                              .round(DISTANCE_DIGITS))


def _amount_distance(gap: pl.Expr, allowed: pl.Expr, amount_a: pl.Expr) -> pl.Expr:
    excess = (gap - allowed).clip(0).cast(pl.Float64)
    scale = pl.max_horizontal(allowed, amount_a // 100, pl.lit(1, dtype=pl.Int64)).cast(pl.Float64)
    return excess / (excess + scale)


def _days_distance(days: pl.Expr, window: int) -> pl.Expr:
    past = (days - window).clip(0).cast(pl.Float64)
    return past / (past + window + 1)


# What a person reads ----------------------------------------------------------------------------

def currency_scales(*frames: pl.DataFrame) -> dict[str, int]:
    """The decimal places each currency's amounts are compared at (matching.frames.engine_frames:
    the most either side keeps), from frames with `decimal_places`."""
    parts = [f.select("currency", "decimal_places") for f in frames if "decimal_places" in f.columns]
    if not parts:
        return {}
    scales = pl.concat(parts).drop_nulls().group_by("currency").agg(pl.col("decimal_places").max())
    return dict(zip(scales["currency"].to_list(), scales["decimal_places"].to_list()))


def described(found: pl.DataFrame, rule: Rule, subject_side: str,
              scales: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """Rows of `near_misses` as the API answers them: one object a record, with one object a
    failed condition (field, operator, expected, actual, difference, unit, message)."""
    plan = RulePlan(rule)
    out = []
    for row in found.iter_rows(named=True):
        entry: dict[str, Any] = {"side": subject_side, "record_id": row["record_id"],
                                 "reconciliation_rule_id": rule.id, "candidate_record_id": row["candidate_id"],
                                 "failed_condition_count": row["failed"], "distance": row["distance"],
                                 "would_match": row["candidate_id"] is not None and row["failed"] == 0,
                                 "failed_conditions": []}
        if row["candidate_id"] is not None:
            entry["failed_conditions"] = [failed_condition(plan, i, row, subject_side, scales or {})
                                          for i in range(len(plan.conditions)) if row[f"f{i}"]]
        out.append(conversion.explained(rule, entry, row))
    return out


def failed_condition(plan: RulePlan, i: int, row: Mapping[str, Any], subject_side: str,
                     scales: Mapping[str, int]) -> dict[str, Any]:
    """One failed condition of a pair, with its numbers and a sentence."""
    condition = plan.conditions[i]
    out: dict[str, Any] = {"condition": i, "field": condition.field, "operator": condition.operator.value,
                           "expected": None, "actual": None, "difference": None, "unit": None}
    if condition.side_b_field:
        out["side_b_field"] = condition.side_b_field
    field = condition.field
    if field == "amount":
        other = "b" if subject_side == "a" else "a"
        currency, theirs = row[f"{subject_side}_currency"], row[f"{other}_currency"]
        places = scales.get(currency, minor_units(currency))
        allowed = row.get(f"allowed{i}") or 0
        out.update(expected=allowed, unit=currency, decimal_places=places)
        if currency != theirs:  # amounts of two currencies: no difference to give (a float never enters)
            their_places = scales.get(theirs, minor_units(theirs))
            out.update(difference_decimal=None)
            out["message"] = (f"amount {decimal_string(row[f'{subject_side}_amount'], places)} {currency} here, "
                              f"{decimal_string(row[f'{other}_amount'], their_places)} {theirs} on the candidate: "
                              "different currencies, no difference is given")
            return out
        signed = row[f"{subject_side}_amount"] - row[f"{other}_amount"]
        excess = abs(signed) - allowed
        out.update(actual=signed, difference=excess, difference_decimal=decimal_string(excess, places))
        shown = f"amount off by {decimal_string(abs(signed), places)} {currency}"
        out["message"] = (f"{shown}, {decimal_string(excess, places)} {currency} more than the "
                          f"{decimal_string(allowed, places)} {currency} allowed" if allowed
                          else f"{shown}; the rule wants equal amounts")
    elif field == "date":
        window = condition.days if condition.operator is Operator.WITHIN else 0
        apart = row["date_diff"]
        signed = (row["a_date"] - row["b_date"]).days * (1 if subject_side == "a" else -1)
        out.update(expected=window, actual=signed, difference=apart - window, unit="days")
        later = "after" if signed > 0 else "before"
        out["message"] = (f"date {_days(apart - window)} past the {window}-day window ({_days(apart)} {later} "
                          "the candidate's)" if condition.operator is Operator.WITHIN
                          else f"date {_days(apart)} {later} the candidate's; the rule wants the same day")
    elif condition.operator is Operator.SIMILAR:
        score = row[f"s{i}"]
        threshold = condition.threshold or 0.0
        measured = None if score is None or score < 0 else round(score, DISTANCE_DIGITS)
        out.update(expected=threshold, actual=measured,
                   difference=None if measured is None else round(threshold - measured, DISTANCE_DIGITS),
                   unit="similarity")
        out["message"] = (f"{field} similarity {measured:.2f} under {threshold:g}" if measured is not None
                          else f"{field} is empty on one side (similarity needs both texts)")
    else:
        mine, theirs = _values(row, i, subject_side)
        out.update(expected=mine, actual=theirs)
        if condition.operator is Operator.CONTAINS:
            out["message"] = (f"{field}: neither text contains the other ({_quoted(mine)} and {_quoted(theirs)})"
                              if mine is not None and theirs is not None else f"{field} is empty on one side")
        elif condition.operator is Operator.OPPOSITE:  # side B's value is flipped: a failed `opposite` means alike
            a_raw, b_raw = row.get(f"a_v{i}"), FLIPPED_DIRECTION.get(row.get(f"b_v{i}") or "")
            subject, candidate = (a_raw, b_raw) if subject_side == "a" else (b_raw, a_raw)
            out.update(expected=FLIPPED_DIRECTION.get(subject or ""), actual=candidate)
            out["message"] = (f"direction: both records are {subject}s; the rule wants one credit and one debit"
                              if subject and candidate else "direction is missing on one side")
        elif mine is None or theirs is None:
            out["message"] = f"{field} is empty on one side"
        else:
            out["message"] = f"{field} differs: {_quoted(mine)} here, {_quoted(theirs)} on the candidate"
    return out


def _values(row: Mapping[str, Any], i: int, subject_side: str) -> tuple[Any, Any]:
    """The compared values of condition i, the subject's first (strings: dates as ISO text)."""
    a, b = row.get(f"a_v{i}"), row.get(f"b_v{i}")
    a, b = (None if a is None else str(a)), (None if b is None else str(b))
    return (a, b) if subject_side == "a" else (b, a)


def _days(n: int) -> str:
    return f"{n} day{'' if n == 1 else 's'}"


def _quoted(value: Any) -> str:
    text = str(value)
    return repr(text if len(text) <= 60 else text[:57] + "...")


def by_condition(found: pl.DataFrame, rule: Rule) -> list[dict[str, Any]]:
    """For each condition of the rule, how many of the explained records' closest candidates fail it."""
    plan = RulePlan(rule)
    counts = (found.select(pl.col(f"f{i}").fill_null(False).sum() for i in range(len(plan.conditions))).row(0)
              if not found.is_empty() else (0,) * len(plan.conditions))
    return [{"condition": i, "field": c.field, "operator": c.operator.value, "records": int(counts[i] or 0)}
            for i, c in enumerate(plan.conditions)]


# Answers: a dry run's, an exception's -------------------------------------------------------------

DRY_RUN_SAMPLE = 10      # near misses a dry run shows of each side (the summary counts them all)


def dry_run_near_misses(side_a: pl.DataFrame, side_b: pl.DataFrame, unmatched_a: pl.Series, unmatched_b: pl.Series,
                        rule: Rule, scales: Mapping[str, int], sample_size: int = DRY_RUN_SAMPLE,
                        every_record: bool = False) -> dict[str, Any]:
    """A dry run's near misses: records the waterfall left open (after the rule), explained under
    the rule against the open records of the other side; the first `sample_size` of each side (ids
    ascending) in full. By default only those are explained (`scope` "sample", cheap: a few dozen
    candidate pairs a record) and `by_condition` is null; with `every_record`, every record left open
    on both sides is, and `by_condition` counts, for each condition, how many of their closest
    candidates fail it (scope "all": at 100,000 open records a side several seconds of CPU, see
    bench/RESULTS.md). Frames as the engine took them (engine_frames)."""
    left_open = unmatched_a.len() + unmatched_b.len()
    scope = "all" if every_record else "sample"
    if not explained(rule):
        return {"explained": False, "reason": NOT_EXPLAINED, "scope": scope, "left_open": left_open, "records": 0,
                "by_condition": [] if every_record else None, "sample": []}
    open_a = side_a.filter(pl.col("id").is_in(unmatched_a.implode()))
    open_b = side_b.filter(pl.col("id").is_in(unmatched_b.implode()))
    subjects = {"a": None, "b": None} if every_record else {
        "a": unmatched_a.sort().head(sample_size), "b": unmatched_b.sort().head(sample_size)}
    found_a = near_misses(open_a, open_b, rule, subject_side="a", subject_ids=subjects["a"])
    found_b = near_misses(open_a, open_b, rule, subject_side="b", subject_ids=subjects["b"])
    counted = None
    if every_record:
        counts = [x["records"] + y["records"] for x, y in zip(by_condition(found_a, rule),
                                                              by_condition(found_b, rule), strict=True)]
        counted = [{**entry, "records": count} for entry, count in zip(by_condition(found_a, rule), counts,
                                                                       strict=True)]
    return {"explained": True, "reason": None, "scope": scope, "left_open": left_open,
            "records": found_a.height + found_b.height, "by_condition": counted,
            "sample": described(found_a.head(sample_size), rule, "a", scales)
            + described(found_b.head(sample_size), rule, "b", scales)}


def records_near_misses(side_a: pl.DataFrame, side_b: pl.DataFrame, rules: Sequence[Rule], side: str,
                        record_ids: Sequence[int], limit: int | None = None) -> dict[str, Any]:
    """The near misses of some records of one side (an exception's), under each rule in priority
    order, against every open record of the other side: of `record_ids` those still open, the
    `limit` newest (highest ids) of them. Frames as open_records_frame reads them (with
    `decimal_places`): amounts are brought to one scale here, as a run does. The rules are not
    applied in sequence as in a run: a record a rule would match is reported as `would_match`."""
    scales = currency_scales(side_a, side_b)
    engine_a, engine_b = engine_frames(side_a, side_b)
    present = sorted((side_a if side == "a" else side_b).filter(pl.col("id").is_in(list(record_ids)))["id"].to_list(),
                     reverse=True)[:limit]
    kept = set(present)
    record_ids = [i for i in record_ids if i in kept]
    rule_notes, data = [], []
    for rule in sorted(rules, key=lambda r: (r.definition.priority, r.id)):
        fits = explained(rule)
        rule_notes.append({"reconciliation_rule_id": rule.id, "name": rule.definition.name, "explained": fits,
                           "reason": None if fits else NOT_EXPLAINED})
        if fits and present:
            found = near_misses(engine_a, engine_b, rule, subject_side=side, subject_ids=present)
            data += described(found, rule, side, scales)
    order = {record_id: n for n, record_id in enumerate(record_ids)}
    data.sort(key=lambda entry: order.get(entry["record_id"], len(order)))  # stable: rules stay in order
    return {"side": side, "records": len(present), "rules": rule_notes, "data": data}
