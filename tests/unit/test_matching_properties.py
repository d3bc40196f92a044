"""Invariants of the matching engine on generated records and rules: no record in two matches,
matched plus unmatched equals the input, row order never changes the result, and every confirmed
match satisfies its rule as re-checked by a slow, plain-Python reading of the rule."""
from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import date, timedelta

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rapidfuzz import fuzz

from chalicelib.domain.matching import match_records
from chalicelib.domain.matching.assignment import _sequential_greedy, greedy_pairs
from chalicelib.domain.matching.plan import normalized_text
from chalicelib.domain.matching.subset import best_subset
from chalicelib.domain.rules import Normalization, Rule, validate_rule
from tests.support.rule_shapes import SHAPES

DAY = date(2026, 5, 1)
SCHEMA = {"id": pl.Int64, "amount": pl.Int64, "direction": pl.Utf8, "date": pl.Date, "currency": pl.Utf8,
          "description": pl.Utf8, "external_id": pl.Utf8, "metadata.k": pl.Utf8, "is_new": pl.Boolean}
SCALE_UNITS = 20_000
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

texts = st.one_of(st.none(), st.sampled_from(["", " ", "INV-001", "inv 001", "inv1", "0012", "12", "ACME Corp",
                                              "acme corp.", "Payment ACME", "x"]))
record = st.fixed_dictionaries({
    "amount": st.sampled_from([0, 100, 100, 200, 250, 300, 1000, 1005, 1010]),
    "direction": st.sampled_from(["credit", "debit"]),
    "date": st.integers(0, 4).map(lambda d: DAY + timedelta(days=d)),
    "currency": st.sampled_from(["USD", "USD", "EUR"]),
    "description": texts, "external_id": texts,
    "metadata.k": st.sampled_from([None, "K1", "K2"]),
    "is_new": st.booleans(),
})
normalizations = st.lists(st.sampled_from(["case", "whitespace", "punctuation", "leading_zeros"]), unique=True)
condition = st.one_of(
    st.just({"field": "amount", "operator": "equals"}),
    st.builds(lambda t: {"field": "amount", "operator": "within", "tolerance": t}, st.sampled_from([0, 5, 50])),
    st.builds(lambda p: {"field": "amount", "operator": "within", "tolerance_percent": p}, st.sampled_from([0.5, 1, 10])),
    st.just({"field": "date", "operator": "equals"}),
    st.builds(lambda d: {"field": "date", "operator": "within", "days": d}, st.sampled_from([0, 1, 3])),
    st.sampled_from([{"field": "direction", "operator": "equals"}, {"field": "direction", "operator": "opposite"},
                     {"field": "currency", "operator": "equals"}, {"field": "metadata.k", "operator": "equals"}]),
    st.builds(lambda n: {"field": "external_id", "operator": "equals", "normalize": n}, normalizations),
    st.builds(lambda n: {"field": "description", "operator": "contains", "normalize": n}, normalizations),
    st.builds(lambda n, t: {"field": "description", "operator": "similar", "normalize": n, "threshold": t},
              normalizations, st.sampled_from([0.5, 0.8, 1.0])),
    st.just({"field": "external_id", "side_b_field": "description", "operator": "equals", "normalize": ["case"]}),
)
shape = st.sampled_from([
    ("one_to_one", {}), ("one_to_one", {}),
    ("many_to_one", {"side_a": ["metadata.k"]}), ("one_to_many", {"side_b": ["metadata.k"]}),
    ("many_to_many", {"side_a": ["metadata.k"], "side_b": ["metadata.k"]}),
    ("many_to_one", {}), ("one_to_many", {}), ("many_to_many", {"side_a": ["metadata.k"]}),
])


@st.composite
def rules(draw) -> list[Rule]:
    made = []
    for rule_id in range(1, draw(st.integers(1, 3)) + 1):
        cardinality, group_by = draw(shape)
        body = {"name": f"r{rule_id}", "priority": draw(st.integers(1, 3)), "cardinality": cardinality,
                "group_by": group_by, "conditions": draw(st.lists(condition, min_size=1, max_size=2)),
                "auto_confirm": draw(st.sampled_from([True, True, True, False]))}
        made.append(Rule("test", rule_id, 1, validate_rule(body), None))
    return made


@st.composite
def sides(draw) -> tuple[pl.DataFrame, pl.DataFrame]:
    a_rows = draw(st.lists(record, max_size=12))
    b_rows = draw(st.lists(record, max_size=6))
    # Counterparts made from side-A records, slightly changed, so that rules find matches.
    for i in draw(st.lists(st.integers(0, max(len(a_rows) - 1, 0)), max_size=len(a_rows))) if a_rows else []:
        change = draw(st.sampled_from(["none", "flip", "amount", "date", "case"]))
        copy = dict(a_rows[i], is_new=draw(st.booleans()))
        if change == "flip":
            copy["direction"] = "debit" if copy["direction"] == "credit" else "credit"
        elif change == "amount":
            copy["amount"] += 5
        elif change == "date":
            copy["date"] += timedelta(days=1)
        elif change == "case" and copy["external_id"]:
            copy["external_id"] = copy["external_id"].upper()
        b_rows.append(copy)
    side_a = pl.DataFrame([{**r, "id": i + 1} for i, r in enumerate(a_rows)], schema=SCHEMA)
    side_b = pl.DataFrame([{**r, "id": 1000 + i} for i, r in enumerate(b_rows)], schema=SCHEMA)
    return side_a, side_b


def match_groups(outcome) -> dict[int, dict[str, list[int]]]:
    groups: dict[int, dict[str, list[int]]] = {}
    for match_no, side, record_id in outcome.members.iter_rows():
        groups.setdefault(match_no, {"a": [], "b": []})[side].append(record_id)
    return groups


# Invariants ---------------------------------------------------------------------------------------

@SETTINGS
@given(sides(), rules(), st.booleans())
def test_no_record_is_in_two_matches_and_matched_plus_unmatched_is_the_input(frames, rule_list, only_new):
    side_a, side_b = frames

    outcome = match_records(side_a, side_b, rule_list, only_new=only_new)

    assert outcome.members["record_id"].is_unique().all()
    for side, frame, unmatched in (("a", side_a, outcome.unmatched_a), ("b", side_b, outcome.unmatched_b)):
        matched = set(outcome.matched_ids(side).to_list())
        assert matched.isdisjoint(unmatched.to_list())
        assert matched | set(unmatched.to_list()) == set(frame["id"].to_list())
        assert len(unmatched) == outcome.rule_summary["unmatched"][f"side_{side}"]
    assert sum(v for k, v in outcome.rule_summary.items() if k != "unmatched") == outcome.members.height
    for members in match_groups(outcome).values():
        assert members["a"] and members["b"]


@SETTINGS
@given(sides(), rules(), st.booleans(), st.randoms(use_true_random=False))
def test_the_same_records_in_any_order_give_the_same_matches(frames, rule_list, only_new, random):
    side_a, side_b = frames
    shuffled_a = side_a.sample(fraction=1.0, shuffle=True, seed=random.randint(0, 10_000))
    shuffled_b = side_b.sample(fraction=1.0, shuffle=True, seed=random.randint(0, 10_000))

    first = match_records(side_a, side_b, rule_list, only_new=only_new)
    second = match_records(shuffled_a, shuffled_b, list(reversed(rule_list)), only_new=only_new)

    assert first.matches.equals(second.matches)
    assert first.members.equals(second.members)


@settings(SETTINGS, max_examples=250)
@given(sides(), rules(), st.booleans())
def test_every_confirmed_match_satisfies_its_rule(frames, rule_list, only_new):
    side_a, side_b = frames
    by_id = {r["id"]: r for r in [*side_a.to_dicts(), *side_b.to_dicts()]}
    rules_by_id = {r.id: r for r in rule_list}

    outcome = match_records(side_a, side_b, rule_list, only_new=only_new)

    members = match_groups(outcome)
    event("some match confirmed" if "confirmed" in outcome.matches["status"].to_list() else "none confirmed")
    for match_no, rule_id, status, _, _ in outcome.matches.iter_rows():
        if status != "confirmed":
            continue
        rule = rules_by_id[rule_id]
        a_records = [by_id[i] for i in members[match_no]["a"]]
        b_records = [by_id[i] for i in members[match_no]["b"]]
        assert satisfies(rule, a_records, b_records), (rule, a_records, b_records)
        if only_new:
            assert any(r["is_new"] for r in a_records + b_records)


@SETTINGS
@given(sides(), st.lists(condition, min_size=1, max_size=3))
def test_each_conditions_exclusions_are_the_pairs_meeting_every_other_condition_but_not_it(frames, conditions):
    side_a, side_b = frames
    rule = Rule("test", 1, 1, validate_rule({"name": "r", "conditions": conditions}), None)

    outcome = match_records(side_a, side_b, [rule], explain_rule=1)

    pairs = [(a, b) for a in side_a.to_dicts() for b in side_b.to_dicts()]
    expected = tuple(
        sum(1 for a, b in pairs if not holds(c, a, b)
            and all(holds(other, a, b) for j, other in enumerate(rule.definition.conditions) if j != i))
        for i, c in enumerate(rule.definition.conditions))
    assert outcome.condition_exclusions == expected


# Every rule shape past polars' chunk size (16,384 rows): small examples never reach it ----------------

@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape.name)
def test_every_rule_shape_keeps_the_invariants_on_more_pairs_than_a_polars_chunk(shape):
    # Given 20,000 units a side that the rule pairs (dates apart, amounts off, texts reworded as it allows)
    side_a, side_b = shape.sides(SCALE_UNITS)
    rule = shape.rule()

    # When the engine matches them
    outcome = match_records(side_a, side_b, [rule], only_new=shape.only_new)

    # Then no record is in two matches, matched plus unmatched is the input, the matches (one in
    # ten, the plain-Python checker is slow) satisfy the rule, and a complete shape leaves nothing open
    assert outcome.members["record_id"].is_unique().all()
    for side, frame, unmatched in (("a", side_a, outcome.unmatched_a), ("b", side_b, outcome.unmatched_b)):
        matched = set(outcome.matched_ids(side).to_list())
        assert matched.isdisjoint(unmatched.to_list())
        assert matched | set(unmatched.to_list()) == set(frame["id"].to_list())
    assert outcome.match_count > 0
    checked = outcome.members.filter(pl.col("match_no") % 10 == 0)
    records = pl.concat([side_a, side_b]).filter(pl.col("id").is_in(checked["record_id"].implode()))
    by_id = {r["id"]: r for r in records.to_dicts()}
    for members in match_groups(replace(outcome, members=checked)).values():
        a_records, b_records = [by_id[i] for i in members["a"]], [by_id[i] for i in members["b"]]
        assert satisfies(rule, a_records, b_records), (a_records, b_records)
    if shape.complete:
        assert outcome.rule_summary["unmatched"] == {"side_a": 0, "side_b": 0}


# The independent checker: plain Python, one record or group at a time ------------------------------

def satisfies(rule: Rule, a_records: list[dict], b_records: list[dict]) -> bool:
    definition = rule.definition
    a = as_unit(a_records, definition.group_by.side_a if definition.cardinality.groups_a else None)
    b = as_unit(b_records, definition.group_by.side_b if definition.cardinality.groups_b else None)
    if a is None or b is None:
        return False
    return all(holds(c, a, b) for c in definition.conditions)


def holds(c, a: dict, b: dict) -> bool:
    """One condition on two units (records, or groups from as_unit)."""
    a_value, b_value = a.get(c.field), b.get(c.b_field)
    if c.field == "amount":
        allowed = 0 if c.operator.value == "equals" else max(c.tolerance or 0,
                                                             a_value * (c.tolerance_basis_points or 0) // 10_000)
        ok = abs(a_value - b_value) <= allowed
    elif c.field == "date":
        ok = abs((a_value - b_value).days) <= (c.days if c.operator.value == "within" else 0)
    elif c.operator.value == "opposite":
        ok = {a_value, b_value} == {"credit", "debit"}
    elif c.field in ("direction", "currency"):
        ok = a_value is not None and a_value == b_value
    else:
        words = c.operator.value == "similar"
        x, y = text_of(a, c.field, c.normalize, words), text_of(b, c.b_field, c.normalize, words)
        if x is None or y is None:
            ok = False
        elif c.operator.value == "equals":
            ok = x == y
        elif c.operator.value == "contains":
            ok = x in y or y in x
        else:
            ok = fuzz.token_set_ratio(x, y) / 100 >= c.threshold
    return ok


def as_unit(records: list[dict], group_fields) -> dict | None:
    if group_fields is None:
        assert len(records) == 1
        return records[0]
    for name in group_fields:
        values = {r[name] for r in records}
        assert len(values) == 1 and None not in values, "a group shares its key"
    if len({r["currency"] for r in records}) != 1:
        return None
    signed = sum(r["amount"] if r["direction"] == "credit" else -r["amount"] for r in records)
    unit = {"amount": abs(signed), "direction": "credit" if signed >= 0 else "debit",
            "date": max(r["date"] for r in records), "currency": records[0]["currency"]}
    unit["members"] = records
    return unit


def text_of(unit: dict, field: str, steps, words: bool = False) -> str | None:
    """A record's normalized text; a group's is its members' common normalized text."""
    if "members" not in unit:
        return normalize(unit[field], steps, words)
    values = {normalize(r[field], steps, words) for r in unit["members"]}
    return values.pop() if len(values) == 1 else None


def normalize(value: str | None, steps, words: bool = False) -> str | None:
    """As a rule reads a text; `words` (similar): whitespace and punctuation separate words."""
    if value is None:
        return None
    steps = {s.value for s in steps}
    if "case" in steps:
        value = value.lower()
    if "whitespace" in steps:
        value = (" " if words else "").join(value.split())
    if "punctuation" in steps:
        value = "".join(ch if ch.isalnum() else " " for ch in value) if words else "".join(
            ch for ch in value if ch.isalnum())
        value = " ".join(value.split()) if words else value
    if "leading_zeros" in steps and value:
        # "000" stays "0", like a number would; the empty "words" around a lone space stay empty
        strip = lambda word: (word.lstrip("0") or "0") if word else word  # noqa: E731
        value = " ".join(strip(w) for w in value.split(" ")) if words else strip(value)
    if words and value:
        value = value.strip()
    return value or None


# Building blocks against brute force --------------------------------------------------------------

@pytest.mark.parametrize("words", [False, True], ids=["equals", "similar"])
def test_the_checker_reads_texts_as_the_engine_normalizes_them(words):
    # Every subset of the steps, on the property tests' texts and on lone spaces and zero words, which
    # once read "0 0" in the checker where the engine reads nothing
    values = ["", " ", "  0", " 0 ", "0 0", " 00 a", "0  0x", "INV-001", "inv 001", "inv1", "0012", "12",
              "ACME Corp", "acme corp.", "Payment ACME", "x"]
    steps_sets = [steps for size in range(len(Normalization) + 1)
                  for steps in itertools.combinations(list(Normalization), size)]
    for steps in steps_sets:
        engine = pl.DataFrame({"v": values}).select(normalized_text(pl.col("v"), steps, words=words))["v"]
        assert engine.to_list() == [normalize(v, steps, words) for v in values], steps

@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 60), max_size=9), st.integers(1, 200), st.integers(0, 6))
def test_the_subset_search_finds_what_trying_every_subset_finds(amounts, target, tolerance):
    values = np.array(amounts, dtype=np.int64)

    found = best_subset(values, target, lambda sums: np.full_like(sums, tolerance))

    best = None
    for size in range(1, len(amounts) + 1):
        for chosen in itertools.combinations(range(len(amounts)), size):
            difference = abs(sum(amounts[i] for i in chosen) - target)
            mask = sum(1 << i for i in chosen)
            if difference <= tolerance and (best is None or (difference, size, mask) < best):
                best = (difference, size, mask)
    if best is None:
        assert found is None
    else:
        chosen, difference = found
        assert (difference, len(chosen), sum(1 << int(i) for i in chosen)) == best


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 15), st.integers(100, 115), st.integers(0, 3), st.integers(0, 2)),
                max_size=80, unique_by=lambda p: (p[0], p[1])))
def test_the_greedy_in_rounds_takes_what_the_sequential_greedy_takes(pairs):
    frame = pl.DataFrame(pairs, schema=["a_uid", "b_uid", "amount_diff", "date_diff"], orient="row",
                         schema_overrides={c: pl.Int64 for c in ["a_uid", "b_uid", "amount_diff", "date_diff"]})

    rounds = greedy_pairs(frame)

    expected = _sequential_greedy(frame.sort("amount_diff", "date_diff", "a_uid", "b_uid"))
    assert sorted(rounds.rows()) == sorted(expected.rows())
