"""Near misses (domain/matching/near_misses.py): the closest candidate of an unmatched record, the
conditions that pair fails with their numbers, checked against the engine's own evaluation."""
from __future__ import annotations

from datetime import date, timedelta

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.domain.matching import match_records
from chalicelib.domain.matching.near_misses import (
    by_condition,
    described,
    dry_run_near_misses,
    near_misses,
    records_near_misses,
)
from chalicelib.domain.rules import Rule, validate_rule

DAY = date(2026, 3, 2)
SCHEMA = {"id": pl.Int64, "amount": pl.Int64, "direction": pl.Utf8, "date": pl.Date, "currency": pl.Utf8,
          "description": pl.Utf8, "external_id": pl.Utf8, "metadata.k": pl.Utf8}
DEFAULTS = {"amount": 1000, "direction": "credit", "date": DAY, "currency": "USD", "description": None,
            "external_id": None, "metadata.k": None}
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def records(*rows: dict) -> pl.DataFrame:
    return pl.DataFrame([{**DEFAULTS, **row} for row in rows], schema=SCHEMA)


def rule(*conditions: dict, rule_id: int = 1, **body) -> Rule:
    return Rule("test", rule_id, 1, validate_rule({"name": f"rule {rule_id}", "conditions": list(conditions), **body}),
                None)


AMOUNT_50 = {"field": "amount", "operator": "within", "tolerance": 50}
DATE_2 = {"field": "date", "operator": "within", "days": 2}
SIMILAR = {"field": "description", "operator": "similar", "threshold": 0.6, "normalize": ["case"]}


def explain(side_a, side_b, the_rule, side="a", scales=None):
    found = near_misses(side_a, side_b, the_rule, subject_side=side)
    return {entry["record_id"]: entry for entry in described(found, the_rule, side, scales or {"USD": 2})}


# What a near miss says ----------------------------------------------------------------------------

def test_an_amount_off_says_by_how_much_in_minor_units_as_a_decimal_and_beyond_the_tolerance():
    side_a = records({"id": 1, "amount": 10_000})
    side_b = records({"id": 2, "amount": 10_150}, {"id": 3, "amount": 20_000})

    [failed] = explain(side_a, side_b, rule(AMOUNT_50, DATE_2))[1]["failed_conditions"]

    assert explain(side_a, side_b, rule(AMOUNT_50, DATE_2))[1]["candidate_record_id"] == 2
    assert failed == {"condition": 0, "field": "amount", "operator": "within", "expected": 50, "actual": -150,
                      "difference": 100, "unit": "USD", "decimal_places": 2, "difference_decimal": "1.00",
                      "message": "amount off by 1.50 USD, 1.00 USD more than the 0.50 USD allowed"}


def test_a_date_past_the_window_says_how_many_days_and_a_side_b_record_is_explained_from_its_side():
    side_a = records({"id": 1, "date": DAY})
    side_b = records({"id": 2, "date": DAY + timedelta(days=5)})

    [from_a] = explain(side_a, side_b, rule(AMOUNT_50, DATE_2))[1]["failed_conditions"]
    [from_b] = explain(side_a, side_b, rule(AMOUNT_50, DATE_2), side="b")[2]["failed_conditions"]

    assert (from_a["expected"], from_a["actual"], from_a["difference"]) == (2, -5, 3)
    assert from_a["message"] == "date 3 days past the 2-day window (5 days before the candidate's)"
    assert (from_b["actual"], from_b["difference"]) == (5, 3)


def test_a_text_similarity_under_its_threshold_says_the_score_and_the_threshold():
    side_a = records({"id": 1, "description": "acme invoice 7 paid"})
    side_b = records({"id": 2, "description": "ACME corp remittance"})

    [failed] = explain(side_a, side_b, rule(AMOUNT_50, SIMILAR))[1]["failed_conditions"]

    assert failed["field"] == "description" and failed["unit"] == "similarity" and failed["expected"] == 0.6
    assert 0 <= failed["actual"] < 0.6 and failed["difference"] == round(0.6 - failed["actual"], 4)
    assert failed["message"] == f"description similarity {failed['actual']:.2f} under 0.6"


def test_keys_say_both_values_and_opposite_says_the_direction_wanted():
    the_rule = rule({"field": "external_id", "operator": "equals", "normalize": ["case"]},
                    {"field": "direction", "operator": "opposite"}, AMOUNT_50)
    side_a = records({"id": 1, "external_id": "INV-7"})
    side_b = records({"id": 2, "external_id": "inv-8", "direction": "credit"})

    entry = explain(side_a, side_b, the_rule)[1]

    assert entry["failed_condition_count"] == 2
    reference, direction = entry["failed_conditions"]
    assert (reference["expected"], reference["actual"]) == ("inv-7", "inv-8")
    assert reference["message"] == "external_id differs: 'inv-7' here, 'inv-8' on the candidate"
    assert (direction["expected"], direction["actual"]) == ("debit", "credit")
    assert direction["message"] == "direction: both records are credits; the rule wants one credit and one debit"


def test_amounts_of_a_currency_without_decimals_show_none():
    side_a = records({"id": 1, "amount": 1000, "currency": "JPY"})
    side_b = records({"id": 2, "amount": 1300, "currency": "JPY"})

    [failed] = explain(side_a, side_b, rule(AMOUNT_50), scales={"JPY": 0})[1]["failed_conditions"]

    assert failed["message"] == "amount off by 300 JPY, 250 JPY more than the 50 JPY allowed"


# Which candidate is the closest -------------------------------------------------------------------

def test_the_closest_fails_the_fewest_conditions_then_by_the_least():
    side_a = records({"id": 1, "amount": 10_000, "date": DAY})
    side_b = records({"id": 2, "amount": 10_060, "date": DAY + timedelta(days=9)},  # fails both
                     {"id": 3, "amount": 10_900, "date": DAY},                       # fails amount, by 8.50
                     {"id": 4, "amount": 10_070, "date": DAY})                       # fails amount, by 0.20

    entry = explain(side_a, side_b, rule(AMOUNT_50, DATE_2))[1]

    assert entry["candidate_record_id"] == 4 and entry["failed_condition_count"] == 1
    assert 0 < entry["distance"] < 1


def test_a_partner_with_a_mistyped_reference_is_found_by_relaxing_that_key():
    the_rule = rule({"field": "external_id", "operator": "equals"}, {"field": "amount", "operator": "equals"})
    side_a = records({"id": 1, "external_id": "INV-1001", "amount": 5000})
    side_b = records({"id": 2, "external_id": "INV-1010", "amount": 5000},   # the mistyped partner
                     *({"id": 10 + n, "external_id": f"X{n}", "amount": 9000 + n} for n in range(20)))

    entry = explain(side_a, side_b, the_rule)[1]

    assert entry["candidate_record_id"] == 2
    assert [f["field"] for f in entry["failed_conditions"]] == ["external_id"]


def test_a_pair_meeting_the_whole_rule_is_reported_as_a_match_never_given_a_failing_candidate():
    side_a = records({"id": 1, "amount": 1000})
    side_b = records({"id": 2, "amount": 1000}, {"id": 3, "amount": 1200})

    entry = explain(side_a, side_b, rule({"field": "amount", "operator": "equals"}))[1]

    assert (entry["candidate_record_id"], entry["would_match"]) == (2, True)
    assert entry["failed_condition_count"] == 0 and entry["failed_conditions"] == []


def test_a_near_miss_is_not_a_match():
    entry = explain(records({"id": 1, "amount": 1000}), records({"id": 3, "amount": 1200}),
                    rule({"field": "amount", "operator": "equals"}))[1]

    assert (entry["candidate_record_id"], entry["would_match"], entry["failed_condition_count"]) == (3, False, 1)


def test_amounts_in_two_currencies_give_no_difference_and_each_in_its_own_currency_and_scale():
    # The rule has no currency condition: the engine compares the integers, 1000 JPY and 1200 (12.00) USD
    side_a = records({"id": 1, "amount": 1000, "currency": "JPY"})
    side_b = records({"id": 2, "amount": 1200, "currency": "USD"})
    scales = {"JPY": 0, "USD": 2}

    [from_a] = explain(side_a, side_b, rule(AMOUNT_50), scales=scales)[1]["failed_conditions"]
    [from_b] = explain(side_a, side_b, rule(AMOUNT_50), side="b", scales=scales)[2]["failed_conditions"]

    assert (from_a["actual"], from_a["difference"], from_a["difference_decimal"]) == (None, None, None)
    assert (from_a["unit"], from_a["decimal_places"], from_a["expected"]) == ("JPY", 0, 50)
    assert from_a["message"] == ("amount 1000 JPY here, 12.00 USD on the candidate: different currencies, "
                                 "no difference is given")
    assert (from_b["unit"], from_b["decimal_places"], from_b["difference"]) == ("USD", 2, None)
    assert from_b["message"] == ("amount 12.00 USD here, 1000 JPY on the candidate: different currencies, "
                                 "no difference is given")


def test_a_side_b_records_amount_is_shown_in_its_own_currencys_scale():
    side_a = records({"id": 1, "amount": 1000, "currency": "JPY"})
    side_b = records({"id": 2, "amount": 1500, "currency": "JPY"}, {"id": 3, "amount": 90_000, "currency": "USD"})

    [failed] = explain(side_a, side_b, rule(AMOUNT_50), side="b", scales={"JPY": 0, "USD": 2})[2]["failed_conditions"]

    assert (failed["unit"], failed["actual"], failed["difference_decimal"]) == ("JPY", 500, "450")
    assert failed["message"] == "amount off by 500 JPY, 450 JPY more than the 50 JPY allowed"


def test_no_candidate_when_the_other_side_is_empty():
    entry = explain(records({"id": 1}), records(), rule(AMOUNT_50))[1]

    assert entry["candidate_record_id"] is None and entry["failed_conditions"] == []


def test_a_dry_runs_near_misses_count_the_failed_conditions_and_sample_each_side():
    side_a = records({"id": 1, "amount": 1000}, {"id": 2, "amount": 5000, "date": DAY + timedelta(days=9)})
    side_b = records({"id": 3, "amount": 1200}, {"id": 4, "amount": 5000})
    the_rule = rule(AMOUNT_50, DATE_2)
    outcome = match_records(side_a, side_b, [the_rule])

    answer = dry_run_near_misses(side_a, side_b, outcome.unmatched_a, outcome.unmatched_b, the_rule, {"USD": 2},
                                 every_record=True)

    assert answer["explained"] and answer["records"] == 4 and answer["scope"] == "all"
    assert [(c["field"], c["records"]) for c in answer["by_condition"]] == [("amount", 2), ("date", 2)]
    assert [(e["side"], e["record_id"], e["candidate_record_id"]) for e in answer["sample"]] == [
        ("a", 1, 3), ("a", 2, 4), ("b", 3, 1), ("b", 4, 2)]


def test_a_dry_run_explains_only_its_sample_unless_asked_for_every_record():
    side_a = records(*({"id": n, "amount": 1000 * n} for n in range(1, 6)))
    side_b = records(*({"id": 100 + n, "amount": 1000 * n + 70} for n in range(1, 6)))
    the_rule = rule(AMOUNT_50, DATE_2)
    outcome = match_records(side_a, side_b, [the_rule])

    sample = dry_run_near_misses(side_a, side_b, outcome.unmatched_a, outcome.unmatched_b, the_rule, {"USD": 2}, 2)
    every = dry_run_near_misses(side_a, side_b, outcome.unmatched_a, outcome.unmatched_b, the_rule, {"USD": 2}, 2,
                                every_record=True)

    assert (sample["scope"], sample["left_open"], sample["records"], sample["by_condition"]) == ("sample", 10, 4, None)
    assert (every["scope"], every["left_open"], every["records"]) == ("all", 10, 10)
    assert [(c["field"], c["records"]) for c in every["by_condition"]] == [("amount", 10), ("date", 0)]
    assert sample["sample"] == every["sample"]  # the same records, explained the same way
    assert [(e["side"], e["record_id"], e["candidate_record_id"]) for e in sample["sample"]] == [
        ("a", 1, 101), ("a", 2, 102), ("b", 101, 1), ("b", 102, 2)]


def test_a_grouped_rule_is_not_explained():
    grouped = rule(AMOUNT_50, cardinality="many_to_one")
    outcome = match_records(records({"id": 1}), records({"id": 2, "amount": 9000}), [grouped])

    answer = dry_run_near_misses(records({"id": 1}), records({"id": 2}), outcome.unmatched_a, outcome.unmatched_b,
                                 grouped, {})

    assert not answer["explained"] and "groups of records" in answer["reason"]


def test_an_exceptions_records_are_explained_under_each_rule_at_one_scale_per_currency():
    # 10.00 kept with 2 decimals against 10.015 kept with 3: compared as 10000 and 10015 (scale 3)
    side_a = records({"id": 1, "amount": 1000}).with_columns(decimal_places=pl.lit(2, dtype=pl.Int32))
    side_b = records({"id": 2, "amount": 10_015}).with_columns(decimal_places=pl.lit(3, dtype=pl.Int32))
    rules = [rule({"field": "amount", "operator": "equals"}, rule_id=7, priority=2),
             rule(AMOUNT_50, DATE_2, rule_id=8, priority=1, cardinality="one_to_many")]

    answer = records_near_misses(side_a, side_b, rules, "a", [1])

    assert [(r["reconciliation_rule_id"], r["explained"]) for r in answer["rules"]] == [(8, False), (7, True)]
    [entry] = answer["data"]
    assert entry["failed_conditions"][0]["message"] == "amount off by 0.015 USD; the rule wants equal amounts"


def test_an_exceptions_newest_records_are_taken_among_those_still_open():
    cents = pl.lit(2, dtype=pl.Int32)
    side_a = records({"id": 1}, {"id": 2}, {"id": 3}).with_columns(decimal_places=cents)  # 4, 5: no longer open
    side_b = records({"id": 10, "amount": 1200}).with_columns(decimal_places=cents)

    answer = records_near_misses(side_a, side_b, [rule(AMOUNT_50)], "a", [5, 4, 3, 2, 1], limit=2)

    assert answer["records"] == 2 and [e["record_id"] for e in answer["data"]] == [3, 2]


# Properties: the engine's own evaluation ----------------------------------------------------------

texts = st.sampled_from([None, "", "INV-001", "inv 001", "acme corp", "ACME Corp.", "payment acme", "x"])
record = st.fixed_dictionaries({
    "amount": st.sampled_from([0, 100, 150, 1000, 1040, 1100, 5000]),
    "direction": st.sampled_from(["credit", "debit"]),
    "date": st.integers(0, 8).map(lambda d: DAY + timedelta(days=d)),
    "currency": st.sampled_from(["USD", "USD", "EUR"]),
    "description": texts, "external_id": texts,
    "metadata.k": st.sampled_from([None, "K1", "K2"]),
})
normalizations = st.lists(st.sampled_from(["case", "whitespace", "punctuation", "leading_zeros"]), unique=True)
condition = st.one_of(
    st.just({"field": "amount", "operator": "equals"}),
    st.builds(lambda t: {"field": "amount", "operator": "within", "tolerance": t}, st.sampled_from([0, 50, 500])),
    st.builds(lambda p: {"field": "amount", "operator": "within", "tolerance_percent": p}, st.sampled_from([1, 10])),
    st.just({"field": "date", "operator": "equals"}),
    st.builds(lambda d: {"field": "date", "operator": "within", "days": d}, st.sampled_from([0, 1, 3, 10])),
    st.sampled_from([{"field": "direction", "operator": "equals"}, {"field": "direction", "operator": "opposite"},
                     {"field": "currency", "operator": "equals"}, {"field": "metadata.k", "operator": "equals"}]),
    st.builds(lambda n: {"field": "external_id", "operator": "equals", "normalize": n}, normalizations),
    st.builds(lambda n: {"field": "description", "operator": "contains", "normalize": n}, normalizations),
    st.builds(lambda n, t: {"field": "description", "operator": "similar", "normalize": n, "threshold": t},
              normalizations, st.sampled_from([0.5, 0.8, 1.0])),
)


@st.composite
def cases(draw):
    a_rows = draw(st.lists(record, min_size=1, max_size=8))
    b_rows = draw(st.lists(record, max_size=8))
    side_a = pl.DataFrame([{**r, "id": i + 1} for i, r in enumerate(a_rows)], schema=SCHEMA)
    side_b = pl.DataFrame([{**r, "id": 100 + i} for i, r in enumerate(b_rows)], schema=SCHEMA)
    conditions = draw(st.lists(condition, min_size=1, max_size=4))
    return side_a, side_b, rule(*conditions), draw(st.sampled_from(["a", "b"]))


def matches_alone(side_a: pl.DataFrame, side_b: pl.DataFrame, a_id: int, b_id: int, the_rule: Rule) -> bool:
    """Whether the engine matches the pair, the two records alone."""
    outcome = match_records(side_a.filter(pl.col("id") == a_id), side_b.filter(pl.col("id") == b_id), [the_rule])
    return outcome.match_count == 1


def failed_by_the_engine(side_a, side_b, a_id, b_id, the_rule: Rule) -> set[int]:
    """The conditions the engine fails for the pair: each tried as a rule of its own."""
    return {i for i, c in enumerate(the_rule.definition.conditions)
            if not matches_alone(side_a, side_b, a_id, b_id, rule(c.as_body()))}


@SETTINGS
@given(cases())
def test_a_near_miss_fails_exactly_the_conditions_the_engine_fails_for_that_pair(case):
    side_a, side_b, the_rule, side = case

    found = near_misses(side_a, side_b, the_rule, subject_side=side)

    assert found["record_id"].to_list() == sorted((side_a if side == "a" else side_b)["id"].to_list())
    for entry in described(found, the_rule, side):
        if entry["candidate_record_id"] is None:
            continue
        a_id, b_id = ((entry["record_id"], entry["candidate_record_id"]) if side == "a"
                      else (entry["candidate_record_id"], entry["record_id"]))
        reported = {f["condition"] for f in entry["failed_conditions"]}
        assert reported == failed_by_the_engine(side_a, side_b, a_id, b_id, the_rule)
        assert entry["failed_condition_count"] == len(reported)
        assert entry["would_match"] == (not reported)


@SETTINGS
@given(cases())
def test_a_record_the_engine_would_match_says_so_with_that_partner_and_only_then(case):
    side_a, side_b, the_rule, side = case
    others = side_b if side == "a" else side_a

    found = near_misses(side_a, side_b, the_rule, subject_side=side)

    for record_id, candidate, failed in found.select("record_id", "candidate_id", "failed").iter_rows():
        pairs = [(record_id, other) if side == "a" else (other, record_id) for other in others["id"].to_list()]
        if candidate is None:  # nothing found: the other side is empty
            assert not pairs
            continue
        a_id, b_id = (record_id, candidate) if side == "a" else (candidate, record_id)
        assert matches_alone(side_a, side_b, a_id, b_id, the_rule) == (failed == 0)


@SETTINGS
@given(cases())
def test_the_summary_counts_each_failed_condition_of_the_closest_candidates(case):
    side_a, side_b, the_rule, side = case

    found = near_misses(side_a, side_b, the_rule, subject_side=side)
    entries = described(found, the_rule, side)

    counted = {c["condition"]: c["records"] for c in by_condition(found, the_rule)}
    assert counted == {i: sum(any(f["condition"] == i for f in e["failed_conditions"]) for e in entries)
                       for i in range(len(the_rule.definition.conditions))}


@SETTINGS
@given(cases(), st.randoms(use_true_random=False))
def test_the_order_records_come_in_never_changes_the_closest(case, random):
    side_a, side_b, the_rule, side = case
    shuffled_a = side_a.sample(fraction=1.0, shuffle=True, seed=random.randint(0, 10_000))
    shuffled_b = side_b.sample(fraction=1.0, shuffle=True, seed=random.randint(0, 10_000))

    first = near_misses(side_a, side_b, the_rule, subject_side=side)
    second = near_misses(shuffled_a, shuffled_b, the_rule, subject_side=side)

    columns = ["record_id", "candidate_id", "failed", "distance"]
    assert first.select(columns).equals(second.select(columns))
