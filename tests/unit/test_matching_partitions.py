"""Partitioned matching (domain/matching/partition.py) against the single engine on generated
records and rules, the partition count forced above one: a hash plan gives the engine's outcome
pair for pair; a range plan gives it whenever the merge dropped nothing, and otherwise matches
no record twice, loses no pair for lack of a partner in its partition, and leaves no two open
records that a rule would pair."""
from __future__ import annotations

from datetime import date, timedelta

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from chalicelib.domain.matching import match_records
from chalicelib.domain.matching.partition import (
    PartitionPlan,
    active_plans,
    assign,
    match_partitioned,
    plan_partitions,
)
from chalicelib.domain.rules import Rule, validate_rule
from tests.support.rule_shapes import SHAPES
from tests.unit.test_matching_properties import satisfies

DAY = date(2026, 5, 1)
SCHEMA = {"id": pl.Int64, "amount": pl.Int64, "direction": pl.Utf8, "date": pl.Date, "currency": pl.Utf8,
          "description": pl.Utf8, "external_id": pl.Utf8, "metadata.k": pl.Utf8, "is_new": pl.Boolean}
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

texts = st.one_of(st.none(), st.sampled_from(["", "INV-001", "inv 001", "inv1", "0012", "12", "ACME Corp",
                                              "acme corp.", "Payment ACME", "x"]))
record = st.fixed_dictionaries({
    "amount": st.sampled_from([0, 100, 100, 200, 250, 300, 1000, 1005, 1010, 2000]),
    "direction": st.sampled_from(["credit", "debit"]),
    "date": st.integers(0, 12).map(lambda d: DAY + timedelta(days=d)),
    "currency": st.sampled_from(["USD", "USD", "EUR"]),
    "description": texts, "external_id": texts,
    "metadata.k": st.sampled_from([None, "K1", "K2", "k2", "K3"]),
    "is_new": st.booleans(),
})
normalizations = st.lists(st.sampled_from(["case", "whitespace", "punctuation", "leading_zeros"]), unique=True)
# Equality conditions a hash plan may share between rules, and conditions of every other kind.
equality = st.one_of(
    st.sampled_from([{"field": "currency", "operator": "equals"}, {"field": "date", "operator": "equals"},
                     {"field": "direction", "operator": "opposite"}, {"field": "amount", "operator": "equals"},
                     {"field": "metadata.k", "operator": "equals"}]),
    st.builds(lambda n: {"field": "metadata.k", "operator": "equals", "normalize": n},
              st.sampled_from([["case"], []])),
    st.builds(lambda n: {"field": "external_id", "operator": "equals", "normalize": n}, normalizations),
)
dated = st.one_of(st.builds(lambda d: {"field": "date", "operator": "within", "days": d}, st.sampled_from([0, 1, 2, 4])),
                  st.just({"field": "date", "operator": "equals"}))
amounted = st.one_of(
    st.builds(lambda t: {"field": "amount", "operator": "within", "tolerance": t}, st.sampled_from([0, 5, 50])),
    st.builds(lambda p: {"field": "amount", "operator": "within", "tolerance_percent": p},
              st.sampled_from([0.5, 1, 10])),
    st.just({"field": "amount", "operator": "equals"}))
window = st.one_of(dated, amounted)
widening = window.filter(lambda c: c["operator"] == "within")
text = st.one_of(
    st.builds(lambda n: {"field": "description", "operator": "contains", "normalize": n}, normalizations),
    st.builds(lambda n, t: {"field": "description", "operator": "similar", "normalize": n, "threshold": t},
              normalizations, st.sampled_from([0.5, 0.8])),
)
any_condition = st.one_of(equality, window, text)
shape = st.sampled_from([
    ("one_to_one", {}), ("one_to_one", {}), ("one_to_one", {}),
    ("many_to_one", {"side_a": ["metadata.k"]}), ("one_to_many", {"side_b": ["metadata.k"]}),
    ("many_to_many", {"side_a": ["metadata.k"], "side_b": ["metadata.k"]}),
    ("many_to_one", {"side_a": ["metadata.k", "currency"]}),
    ("many_to_one", {}), ("one_to_many", {}), ("many_to_many", {"side_a": ["metadata.k"]}), ("many_to_many", {}),
])


def made(rule_id: int, draw, cardinality: str, group_by: dict, conditions: list[dict]) -> Rule:
    body = {"name": f"r{rule_id}", "priority": draw(st.integers(1, 3)), "cardinality": cardinality,
            "group_by": group_by, "conditions": conditions, "auto_confirm": draw(st.sampled_from([True, True, False])),
            "active": draw(st.sampled_from([True, True, True, True, False]))}
    return Rule("test", rule_id, 1, validate_rule(body), None)


@st.composite
def sharing_rules(draw) -> list[Rule]:
    """Rules of every shape sharing one or two equality conditions, each with conditions of its own."""
    shared = draw(st.lists(equality, min_size=1, max_size=2))
    return [made(rule_id, draw, *draw(shape), shared + draw(st.lists(any_condition, max_size=2)))
            for rule_id in range(1, draw(st.integers(1, 3)) + 1)]


@st.composite
def ranged_rules(draw) -> list[Rule]:
    """one_to_one rules that share no equality condition but each has a date window (or each an
    amount condition), plus conditions of any kind: a range plan."""
    on_axis = draw(st.sampled_from([dated, amounted]))
    return [made(rule_id, draw, "one_to_one", {}, [draw(on_axis), *draw(st.lists(widening | text, max_size=2))])
            for rule_id in range(1, draw(st.integers(1, 3)) + 1)]


@st.composite
def sides(draw, most: int = 20) -> tuple[pl.DataFrame, pl.DataFrame]:
    a_rows = draw(st.lists(record, min_size=most // 4, max_size=most))
    b_rows = draw(st.lists(record, max_size=most // 3))
    for i in draw(st.lists(st.integers(0, max(len(a_rows) - 1, 0)), max_size=len(a_rows))) if a_rows else []:
        change = draw(st.sampled_from(["none", "flip", "amount", "date", "case", "group"]))
        copy = dict(a_rows[i], is_new=draw(st.booleans()))
        if change == "flip":
            copy["direction"] = "debit" if copy["direction"] == "credit" else "credit"
        elif change == "amount":
            copy["amount"] += draw(st.sampled_from([5, 10, 100]))
        elif change == "date":
            copy["date"] += timedelta(days=draw(st.integers(-3, 3)))
        elif change == "case" and copy["external_id"]:
            copy["external_id"] = copy["external_id"].upper()
        elif change == "group":  # the sum of a group on side A
            same = [r for r in a_rows if r["metadata.k"] == copy["metadata.k"] and r["currency"] == copy["currency"]]
            copy["amount"] = abs(sum(r["amount"] if r["direction"] == "credit" else -r["amount"] for r in same))
        b_rows.append(copy)
    side_a = pl.DataFrame([{**r, "id": i + 1} for i, r in enumerate(a_rows)], schema=SCHEMA)
    side_b = pl.DataFrame([{**r, "id": 1000 + i} for i, r in enumerate(b_rows)], schema=SCHEMA)
    return side_a, side_b


def assert_same(single, partitioned) -> None:
    assert partitioned.matches.equals(single.matches)
    assert partitioned.members.equals(single.members)
    assert partitioned.rule_summary == single.rule_summary
    assert partitioned.unmatched_a.equals(single.unmatched_a)
    assert partitioned.unmatched_b.equals(single.unmatched_b)


# Hash plans: the engine's outcome, pair for pair ------------------------------------------------------

@SETTINGS
@given(sides(), sharing_rules(), st.integers(2, 5), st.booleans())
def test_a_hash_plan_gives_the_single_engines_outcome_pair_for_pair(frames, rule_list, partitions, only_new):
    side_a, side_b = frames
    plan = plan_partitions(rule_list, partitions, side_a)
    event(f"plan: {'hash' if plan.keys else plan.axis or 'refused'}")

    single = match_records(side_a, side_b, rule_list, only_new=only_new)
    result = match_partitioned(side_a, side_b, rule_list, plan, only_new=only_new)

    if plan.keys:
        assert plan.partitions == partitions and result.rounds == 1 and result.conflicts == 0
        event("several partitions matched" if result.partitions_matched > 1 else "one partition matched")
        event("some match" if single.match_count else "no match")
        assert_same(single, result.outcome)
    else:  # a grouping rule allows none of the shared keys (one_to_one rules allow them all)
        assert plan.partitions == 1 and plan.reason
        assert_same(single, result.outcome)


# Range plans: the same answer unless the merge dropped a match, and never a lost pair ------------------

@SETTINGS
@given(sides(40), ranged_rules(), st.integers(2, 5), st.booleans())
def test_a_range_plan_gives_the_same_answer_or_loses_no_pair(frames, rule_list, partitions, only_new):
    side_a, side_b = frames
    plan = plan_partitions(rule_list, partitions, side_a)

    single = match_records(side_a, side_b, rule_list, only_new=only_new)
    result = match_partitioned(side_a, side_b, rule_list, plan, only_new=only_new)

    event(f"plan: {'hash' if plan.keys else plan.axis or 'refused'}")
    event("conflicts at the merge" if result.conflicts else "no conflict")
    if plan.axis:
        assert_range_invariants(side_a, side_b, rule_list, plan, single, result, only_new)
    else:
        assert_same(single, result.outcome)


def assert_range_invariants(side_a, side_b, rule_list, plan, single, result, only_new) -> None:
    outcome = result.outcome
    if result.identical:
        assert_same(single, outcome)
    # No record in two matches; matched plus open is the input; each match holds for its rule
    assert outcome.members["record_id"].is_unique().all()
    for side, frame, unmatched in (("a", side_a, outcome.unmatched_a), ("b", side_b, outcome.unmatched_b)):
        matched = set(outcome.matched_ids(side).to_list())
        assert matched.isdisjoint(unmatched.to_list())
        assert matched | set(unmatched.to_list()) == set(frame["id"].to_list())
    by_id = {r["id"]: r for r in [*side_a.to_dicts(), *side_b.to_dicts()]}
    rules_by_id = {r.id: r for r in rule_list}
    members = outcome.members.group_by("match_no", "side").agg("record_id")
    sides_of = {(m, s): ids for m, s, ids in members.iter_rows()}
    for match_no, rule_id, *_ in outcome.matches.iter_rows():
        a_records = [by_id[i] for i in sides_of[(match_no, "a")]]
        b_records = [by_id[i] for i in sides_of[(match_no, "b")]]
        assert satisfies(rules_by_id[rule_id], a_records, b_records)
    # Every pair a rule allows lies in its A record's partition
    partition_of_a = dict(assign(side_a, plan, "a").select("id", "partition").iter_rows())
    partitions_of_b: dict[int, set[int]] = {}
    for record_id, partition in assign(side_b, plan, "b").select("id", "partition").iter_rows():
        partitions_of_b.setdefault(record_id, set()).add(partition)
    active = [p.rule for p in active_plans(rule_list)]
    for a in side_a.to_dicts():
        for b in side_b.to_dicts():
            if any(satisfies(rule, [a], [b]) for rule in active):
                assert partition_of_a[a["id"]] in partitions_of_b[b["id"]], (a, b)
    # As in one piece: no two records left open that a rule pairs (only new ones may pair in continuous mode)
    open_a = [by_id[i] for i in outcome.unmatched_a.to_list()]
    open_b = [by_id[i] for i in outcome.unmatched_b.to_list()]
    for a in open_a:
        for b in open_b:
            if only_new and not (a["is_new"] or b["is_new"]):
                continue
            assert not any(satisfies(rule, [a], [b]) for rule in active), (a, b)


# Plans that refuse, and why ------------------------------------------------------------------------------

def rule(rule_id: int, **body) -> Rule:
    return Rule("test", rule_id, 1, validate_rule({"name": f"r{rule_id}", **body}), None)


EMPTY = pl.DataFrame(schema=SCHEMA)


def test_a_group_is_kept_whole_only_by_a_condition_on_its_group_by_field():
    # Given a many_to_one rule grouping side A by metadata.batch and a one_to_one rule, both on currency
    grouped = rule(1, cardinality="many_to_one", group_by={"side_a": ["metadata.batch"]},
                   conditions=[{"field": "currency", "operator": "equals"}, {"field": "amount", "operator": "equals"}])
    single = rule(2, conditions=[{"field": "currency", "operator": "equals"},
                                 {"field": "date", "operator": "within", "days": 2}])

    # Then currency cannot split: a batch mixing currencies never matches, split it would
    refused = plan_partitions([grouped, single], 8, EMPTY)
    assert refused.partitions == 1
    assert "rule 1 (r1) is many_to_one" in refused.reason and "group-by" in refused.reason

    # And grouped by batch and currency, it can
    by_currency = rule(1, cardinality="many_to_one", group_by={"side_a": ["metadata.batch", "currency"]},
                       conditions=[{"field": "currency", "operator": "equals"}])
    plan = plan_partitions([by_currency, single], 8, EMPTY)
    assert plan.partitions == 8 and [k.field for k in plan.keys] == ["currency"]


def test_a_rule_that_may_pair_any_two_records_stops_the_split():
    keyed = rule(1, conditions=[{"field": "external_id", "operator": "equals"},
                                {"field": "date", "operator": "within", "days": 3}])
    loose = rule(2, conditions=[{"field": "description", "operator": "similar", "threshold": 0.9}])

    plan = plan_partitions([keyed, loose], 8, EMPTY)

    assert plan.partitions == 1
    assert plan.reason.startswith("no equality condition is common to every rule, and rule 2 (r2) has no date")


def test_rules_ranging_on_different_axes_stop_the_split_saying_why():
    by_date = rule(1, conditions=[{"field": "date", "operator": "within", "days": 3},
                                  {"field": "description", "operator": "contains"}])
    by_amount = rule(2, conditions=[{"field": "amount", "operator": "within", "tolerance": 50},
                                    {"field": "external_id", "operator": "similar", "threshold": 0.8}])

    plan = plan_partitions([by_date, by_amount], 8, EMPTY)

    assert plan.partitions == 1
    assert plan.reason.endswith("no one range keeps every rule's pairs together")


def test_a_shared_key_hashes_whatever_the_other_conditions_and_inactive_rules_are_ignored():
    first = rule(1, conditions=[{"field": "external_id", "operator": "equals", "normalize": ["case", "whitespace"]},
                                {"field": "amount", "operator": "within", "tolerance": 5}])
    second = rule(2, priority=2, conditions=[{"field": "external_id", "operator": "equals",
                                              "normalize": ["whitespace", "case"]}])
    off = rule(3, active=False, conditions=[{"field": "description", "operator": "contains"}])

    plan = plan_partitions([first, second, off], 4)

    assert plan.partitions == 4 and plan.exact
    assert [(k.field, [n.value for n in k.normalize]) for k in plan.keys] == [("external_id", ["case", "whitespace"])]
    assert PartitionPlan.from_dict(plan.as_dict()) == plan


@pytest.mark.parametrize("conditions, axis", [
    ([{"field": "date", "operator": "within", "days": 3}], "date"),
    ([{"field": "amount", "operator": "within", "tolerance_percent": 2}], "amount"),
])
def test_a_range_plan_copies_side_b_as_far_as_a_rule_reaches(conditions, axis):
    # Given side A on 100 days (or amounts 100..10,000) and one B record at each value
    values = list(range(100))
    side_a = pl.DataFrame({"id": [i + 1 for i in values], "amount": [(v + 1) * 100 for v in values],
                           "date": [DAY + timedelta(days=v) for v in values]})
    plan = plan_partitions([rule(1, conditions=conditions)], 4, side_a)
    side_b = side_a.with_columns(pl.col("id") + 1000)

    # Then A is cut in 4 and each B record reaches every partition of an A value it may pair with
    assert plan.partitions == 4 and plan.axis == axis and not plan.exact
    assert PartitionPlan.from_dict(plan.as_dict()) == plan
    assert assign(side_a, plan, "a")["partition"].value_counts()["count"].to_list() == [25] * 4
    b = assign(side_b, plan, "b").group_by("id").agg("partition")
    reached = {i - 1000: set(p) for i, p in b.iter_rows()}
    a_part = dict(assign(side_a, plan, "a").select("id", "partition").iter_rows())
    check = rule(1, conditions=conditions)
    rows = side_a.to_dicts()
    for x in rows:
        for y in rows:
            if satisfies(check, [x], [y]):
                assert a_part[x["id"]] in reached[y["id"]]
    assert max(len(p) for p in reached.values()) == 2  # copied at a boundary only


def test_a_record_matched_in_two_partitions_is_kept_by_the_better_match_and_the_loser_tries_again():
    # Given side A cut at day 10, a B record on day 10 (in both partitions) that both A records may take,
    # and a second B record on day 7 that only the A record of day 9 may take, by the second rule
    when = {"a1": 9, "a2": 10, "a3": 0, "b1": 10, "b2": 7}
    side_a = pl.DataFrame({"id": [1, 2, 3], "amount": [100, 100, 100], "direction": ["credit"] * 3,
                           "date": [DAY + timedelta(days=when[k]) for k in ("a1", "a2", "a3")],
                           "currency": ["USD"] * 3, "description": [None] * 3, "external_id": [None] * 3})
    side_b = pl.DataFrame({"id": [11, 12], "amount": [100, 100], "direction": ["credit"] * 2,
                           "date": [DAY + timedelta(days=when[k]) for k in ("b1", "b2")],
                           "currency": ["USD"] * 2, "description": [None] * 2, "external_id": [None] * 2})
    near = rule(1, conditions=[{"field": "amount", "operator": "equals"},
                               {"field": "date", "operator": "within", "days": 1}])
    far = rule(2, priority=2, conditions=[{"field": "amount", "operator": "equals"},
                                          {"field": "date", "operator": "within", "days": 2}])
    plan = PartitionPlan(2, axis="date", cuts=(int((DAY - date(1970, 1, 1)).days) + 10,), days=2)

    # When matched in partitions
    result = match_partitioned(side_a, side_b, [near, far], plan)

    # Then both partitions took b1 by the first rule; a2 keeps it (no date difference), a1 is matched
    # again in its partition and takes b2 by the second rule: the engine's answer, found in two rounds
    assert (result.conflicts, result.rounds, result.identical) == (1, 2, False)
    assert_same(match_records(side_a, side_b, [near, far]), result.outcome)
    assert result.outcome.members.rows() == [(0, "a", 2), (0, "b", 11), (1, "a", 1), (1, "b", 12)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape.name)
def test_every_rule_shape_splits_into_the_same_answer_or_says_why_not(shape):
    # Given 4,000 units a side that the rule pairs, and a plan of 8 partitions
    side_a, side_b = shape.sides(4_000)
    rule_list = [shape.rule()]
    plan = plan_partitions(rule_list, 8, side_a)

    # When matched in partitions and in one piece
    result = match_partitioned(side_a, side_b, rule_list, plan, only_new=shape.only_new)
    single = match_records(side_a, side_b, rule_list, only_new=shape.only_new)

    # Then a plan that splits gives the engine's answer (a range plan: unless it settled a conflict,
    # and never a record twice), and one that does not says why
    assert result.outcome.members["record_id"].is_unique().all()
    if plan.partitions == 1:
        assert plan.reason
    else:
        assert result.partitions_matched > 1
    if result.identical:
        assert_same(single, result.outcome)
    elif result.subset_cap:  # 1,000 counterparts searched in each partition, not in the run: the same, and more
        assert not shape.complete and result.outcome.match_count > single.match_count
        assert match_sets(single) <= match_sets(result.outcome)
    else:
        assert plan.axis and result.conflicts


def match_sets(outcome) -> set[tuple[int, frozenset[int]]]:
    rules = dict(outcome.matches.select("match_no", "rule_id").iter_rows())
    groups = outcome.members.group_by("match_no").agg("record_id")
    return {(rules[match_no], frozenset(ids)) for match_no, ids in groups.iter_rows()}
