"""The matching engine, one behaviour a test: operators, cardinalities, tie-breaks, waterfall,
statuses, continuous mode, subset search."""
from __future__ import annotations

import json
from datetime import date, timedelta

import numpy as np
import polars as pl
import pytest

from chalicelib.domain.matching import CandidateExplosion, MatchingInputError, match_records
from chalicelib.domain.matching.assignment import _sequential_greedy, greedy_pairs
from chalicelib.domain.money import MAX_AMOUNT
from chalicelib.domain.rules import Rule, validate_rule

DAY = date(2026, 3, 2)
SCHEMA = {"id": pl.Int64, "amount": pl.Int64, "direction": pl.Utf8, "date": pl.Date, "currency": pl.Utf8,
          "description": pl.Utf8, "external_id": pl.Utf8}


def records(*rows: dict, metadata: tuple[str, ...] = (), with_new: bool = False) -> pl.DataFrame:
    defaults = {"amount": 1, "direction": "credit", "date": DAY, "currency": "USD", "description": None, "external_id": None}
    schema = {**SCHEMA, **{f"metadata.{k}": pl.Utf8 for k in metadata}}
    if with_new:
        schema["is_new"] = pl.Boolean
    full = [{**defaults, **{f"metadata.{k}": None for k in metadata}, **({"is_new": False} if with_new else {}),
             **row} for row in rows]
    return pl.DataFrame(full, schema=schema)


def rule(rule_id: int = 1, *conditions: dict, **body) -> Rule:
    return Rule("test", rule_id, 1, validate_rule({"name": f"rule {rule_id}", "conditions": list(conditions), **body}),
                None)


AMOUNT_EQUALS = {"field": "amount", "operator": "equals"}


def pairs_of(outcome) -> set[tuple[tuple[int, ...], tuple[int, ...]]]:
    grouped = outcome.members.group_by("match_no", "side").agg(pl.col("record_id").sort())
    by_match: dict[int, dict[str, tuple[int, ...]]] = {}
    for match_no, side, ids in grouped.iter_rows():
        by_match.setdefault(match_no, {})[side] = tuple(ids)
    return {(m["a"], m["b"]) for m in by_match.values()}


def one_to_one(outcome) -> set[tuple[int, int]]:
    return {(a[0], b[0]) for a, b in pairs_of(outcome)}


# Operators ----------------------------------------------------------------------------------

def test_amount_equals_matches_records_of_the_same_amount_only():
    side_a = records({"id": 1, "amount": 1000}, {"id": 2, "amount": 2000})
    side_b = records({"id": 11, "amount": 2000}, {"id": 12, "amount": 999})

    outcome = match_records(side_a, side_b, [rule(1, AMOUNT_EQUALS)])

    assert one_to_one(outcome) == {(2, 11)}
    assert outcome.rule_summary == {"1": 2, "unmatched": {"side_a": 1, "side_b": 1}}


def test_amount_within_an_absolute_tolerance_accepts_up_to_the_tolerance():
    side_a = records({"id": 1, "amount": 1000}, {"id": 2, "amount": 5000})
    side_b = records({"id": 11, "amount": 1005}, {"id": 12, "amount": 5006})

    outcome = match_records(side_a, side_b, [rule(1, {"field": "amount", "operator": "within", "tolerance": 5})])

    assert one_to_one(outcome) == {(1, 11)}


def test_a_percent_tolerance_is_taken_of_the_side_a_amount_and_rounded_down():
    # 0.5% of 1999 is 9.995, rounded down to 9 minor units.
    side_a = records({"id": 1, "amount": 1999}, {"id": 2, "amount": 1999})
    side_b = records({"id": 11, "amount": 2008}, {"id": 12, "amount": 2009})
    within = {"field": "amount", "operator": "within", "tolerance_percent": 0.5}

    outcome = match_records(side_a, side_b, [rule(1, within)])

    assert one_to_one(outcome) == {(1, 11)}


def test_the_larger_of_the_absolute_and_the_percent_tolerance_applies():
    side_a = records({"id": 1, "amount": 100})
    side_b = records({"id": 11, "amount": 103})
    within = {"field": "amount", "operator": "within", "tolerance": 3, "tolerance_percent": 1}

    assert one_to_one(match_records(side_a, side_b, [rule(1, within)])) == {(1, 11)}


def test_date_equals_and_date_within_count_whole_days_either_way():
    side_a = records({"id": 1, "amount": 10}, {"id": 2, "amount": 20}, {"id": 3, "amount": 30})
    side_b = records({"id": 11, "amount": 10, "date": DAY}, {"id": 12, "amount": 20, "date": DAY - timedelta(days=2)},
                     {"id": 13, "amount": 30, "date": DAY + timedelta(days=3)})

    exact = match_records(side_a, side_b, [rule(1, AMOUNT_EQUALS, {"field": "date", "operator": "equals"})])
    window = match_records(side_a, side_b, [rule(1, AMOUNT_EQUALS, {"field": "date", "operator": "within", "days": 2})])

    assert one_to_one(exact) == {(1, 11)}
    assert one_to_one(window) == {(1, 11), (2, 12)}


def test_direction_opposite_pairs_a_credit_with_a_debit_and_equals_pairs_alike():
    side_a = records({"id": 1, "amount": 10, "direction": "credit"}, {"id": 2, "amount": 20, "direction": "debit"})
    side_b = records({"id": 11, "amount": 10, "direction": "debit"}, {"id": 12, "amount": 20, "direction": "debit"})

    opposite = match_records(side_a, side_b, [rule(1, AMOUNT_EQUALS, {"field": "direction", "operator": "opposite"})])
    alike = match_records(side_a, side_b, [rule(1, AMOUNT_EQUALS, {"field": "direction", "operator": "equals"})])

    assert one_to_one(opposite) == {(1, 11)}
    assert one_to_one(alike) == {(2, 12)}


def test_currency_equals_keeps_currencies_apart():
    side_a = records({"id": 1, "amount": 10, "currency": "EUR"})
    side_b = records({"id": 11, "amount": 10, "currency": "USD"}, {"id": 12, "amount": 10, "currency": "EUR"})

    outcome = match_records(side_a, side_b, [rule(1, AMOUNT_EQUALS, {"field": "currency", "operator": "equals"})])

    assert one_to_one(outcome) == {(1, 12)}


@pytest.mark.parametrize("normalize, a_value, b_value", [
    (["case"], "INV-001", "inv-001"),
    (["whitespace"], "INV 0 01", "INV001\t"),
    (["punctuation"], "INV-001/", "INV.001"),
    (["case", "punctuation", "leading_zeros"], "00inv-7", "INV7"),
    (["leading_zeros"], "000", "0"),
])
def test_text_equals_compares_normalized_values(normalize, a_value, b_value):
    side_a = records({"id": 1, "amount": 10, "external_id": a_value})
    side_b = records({"id": 11, "amount": 99, "external_id": b_value})
    equals = {"field": "external_id", "operator": "equals", "normalize": normalize}

    assert one_to_one(match_records(side_a, side_b, [rule(1, equals)])) == {(1, 11)}
    assert one_to_one(match_records(side_a, side_b, [rule(1, {"field": "external_id", "operator": "equals"})])) == set()


def test_contains_accepts_either_value_inside_the_other():
    side_a = records({"id": 1, "amount": 10, "description": "Payment INV-7 ACME"},
                     {"id": 2, "amount": 20, "description": "inv-8"})
    side_b = records({"id": 11, "amount": 10, "description": "INV-7"},
                     {"id": 12, "amount": 20, "description": "wire inv-8 received"},
                     {"id": 13, "amount": 30, "description": "unrelated"})
    contains = {"field": "description", "operator": "contains", "normalize": ["case"]}

    outcome = match_records(side_a, side_b, [rule(1, contains)])

    assert one_to_one(outcome) == {(1, 11), (2, 12)}


def test_similar_accepts_a_rapidfuzz_ratio_at_or_above_the_threshold_and_reports_it():
    side_a = records({"id": 1, "description": "ACME Corporation"}, {"id": 2, "description": "Globex"})
    side_b = records({"id": 11, "description": "ACME Corporatoin"}, {"id": 12, "description": "Initech"})
    similar = {"field": "description", "operator": "similar", "threshold": 0.9, "normalize": ["case"]}

    outcome = match_records(side_a, side_b, [rule(1, similar)])

    assert one_to_one(outcome) == {(1, 11)}
    assert json.loads(outcome.matches["differences"][0])["description_similarity"] == 0.9375


def test_similar_compares_words_so_their_order_and_a_banks_extra_words_cost_little():
    # Given a bank line and a ledger line naming the same customer and invoice in other words and order
    side_a = records({"id": 1, "description": "ACH CREDIT CUST110 INV-10158"},
                     {"id": 2, "description": "ACME Corp INV-7"})
    side_b = records({"id": 11, "description": "Invoice INV-10158 CUST110"},
                     {"id": 12, "description": "inv 7, acme corp."})
    similar = {"field": "description", "operator": "similar", "threshold": 0.8, "normalize": ["case", "punctuation"]}

    # When a similar condition compares them
    outcome = match_records(side_a, side_b, [rule(1, similar)])

    # Then both pairs match: shared words count whatever their order, punctuation only separates words
    assert one_to_one(outcome) == {(1, 11), (2, 12)}
    scores = sorted(json.loads(d)["description_similarity"] for d in outcome.matches["differences"])
    assert scores == [0.8095, 1.0]


def test_side_b_field_compares_a_differently_named_metadata_field():
    side_a = records({"id": 1, "amount": 10, "external_id": "PO-9"}, metadata=("po",))
    side_b = records({"id": 11, "amount": 10, "metadata.po": "PO-9"}, metadata=("po",))
    by_po = {"field": "external_id", "operator": "equals", "side_b_field": "metadata.po"}

    assert one_to_one(match_records(side_a, side_b, [rule(1, by_po)])) == {(1, 11)}


def test_nulls_and_texts_that_normalize_to_nothing_never_match():
    side_a = records({"id": 1, "external_id": None, "description": "  "}, {"id": 2, "external_id": "", "description": None})
    side_b = records({"id": 11, "external_id": None, "description": "  "}, {"id": 12, "external_id": "", "description": "x"})
    rules = [rule(1, {"field": "external_id", "operator": "equals"}),
             rule(2, {"field": "description", "operator": "equals", "normalize": ["whitespace"]}, priority=2),
             rule(3, {"field": "description", "operator": "contains", "normalize": ["whitespace"]}, priority=3),
             rule(4, {"field": "description", "operator": "similar", "threshold": 0.1, "normalize": ["whitespace"]},
                  priority=4)]

    outcome = match_records(side_a, side_b, rules)

    assert outcome.matches.is_empty()
    assert outcome.rule_summary["unmatched"] == {"side_a": 2, "side_b": 2}


def test_a_rule_with_only_a_window_uses_a_range_search_and_finds_every_pair_in_it():
    side_a = records(*({"id": i, "amount": 1000 * i} for i in range(1, 50)))
    side_b = records(*({"id": 100 + i, "amount": 1000 * i + 7} for i in range(1, 50)))

    outcome = match_records(side_a, side_b, [rule(1, {"field": "amount", "operator": "within", "tolerance": 10})])

    assert one_to_one(outcome) == {(i, 100 + i) for i in range(1, 50)}


# Exclusive assignment -------------------------------------------------------------------------

def test_one_to_one_prefers_the_closest_amount_then_the_closest_date_then_the_lowest_ids():
    side_a = records({"id": 1, "amount": 1000}, {"id": 2, "amount": 1000, "date": DAY + timedelta(days=1)})
    side_b = records({"id": 11, "amount": 1003}, {"id": 12, "amount": 1001, "date": DAY + timedelta(days=1)},
                     {"id": 13, "amount": 1001, "date": DAY + timedelta(days=2)})
    within = {"field": "amount", "operator": "within", "tolerance": 5}

    outcome = match_records(side_a, side_b, [rule(1, within)])

    # (2, 12) differs by 1 and 0 days: best of all; then 1 takes 13 (1 unit, 2 days) over 11 (3 units).
    assert one_to_one(outcome) == {(2, 12), (1, 13)}


def test_duplicate_amounts_pair_one_to_one_by_lowest_ids():
    side_a = records(*({"id": i, "amount": 500} for i in (5, 3, 9)))
    side_b = records(*({"id": i, "amount": 500} for i in (21, 20, 22, 23)))

    outcome = match_records(side_a, side_b, [rule(1, AMOUNT_EQUALS)])

    assert one_to_one(outcome) == {(3, 20), (5, 21), (9, 22)}
    assert outcome.unmatched_b.to_list() == [23]


def test_the_greedy_in_rounds_equals_the_sequential_greedy():
    rng = np.random.default_rng(3)
    pairs = pl.DataFrame({"a_uid": rng.integers(0, 300, 5000), "b_uid": rng.integers(1000, 1300, 5000),
                          "amount_diff": rng.integers(0, 5, 5000), "date_diff": rng.integers(0, 3, 5000)}
                         ).unique(["a_uid", "b_uid"])
    ordered = pairs.sort("amount_diff", "date_diff", "a_uid", "b_uid")

    rounds = greedy_pairs(pairs).sort("a_uid")

    assert rounds.equals(_sequential_greedy(ordered).sort("a_uid"))


# Waterfall and statuses ---------------------------------------------------------------------

def test_rules_run_by_priority_and_a_later_rule_sees_only_what_is_left():
    side_a = records({"id": 1, "amount": 100, "external_id": "X"})
    side_b = records({"id": 11, "amount": 100}, {"id": 12, "amount": 100, "external_id": "X"})
    by_reference = rule(7, {"field": "external_id", "operator": "equals"}, priority=1)
    by_amount = rule(3, AMOUNT_EQUALS, priority=2)

    outcome = match_records(side_a, side_b, [by_amount, by_reference])

    assert one_to_one(outcome) == {(1, 12)}
    assert outcome.matches["rule_id"].to_list() == [7]
    assert outcome.rule_summary == {"7": 2, "3": 0, "unmatched": {"side_a": 0, "side_b": 1}}


def test_inactive_rules_are_skipped():
    side_a, side_b = records({"id": 1, "amount": 100}), records({"id": 11, "amount": 100})

    outcome = match_records(side_a, side_b, [rule(1, AMOUNT_EQUALS, active=False)])

    assert outcome.matches.is_empty() and "1" not in outcome.rule_summary


def test_a_rule_without_auto_confirm_proposes_and_still_holds_its_records():
    side_a, side_b = records({"id": 1, "amount": 100}), records({"id": 11, "amount": 100})
    rules = [rule(1, AMOUNT_EQUALS, auto_confirm=False), rule(2, AMOUNT_EQUALS, priority=2)]

    outcome = match_records(side_a, side_b, rules)

    assert outcome.matches.select("rule_id", "status").rows() == [(1, "proposed")]
    assert outcome.count_by_status() == {"proposed": 1}


def test_matches_carry_their_rule_key_and_differences():
    side_a = records({"id": 1, "amount": 100, "external_id": "X"})
    side_b = records({"id": 11, "amount": 101, "external_id": "X", "date": DAY + timedelta(days=2)})
    conditions = [{"field": "external_id", "operator": "equals"}, {"field": "amount", "operator": "within", "tolerance": 1},
                  {"field": "date", "operator": "within", "days": 3}]

    outcome = match_records(side_a, side_b, [rule(4, *conditions)])

    assert outcome.matches.row(0) == (0, 4, "confirmed", "X", '{"amount":1,"date_days":2}')
    assert outcome.members.rows() == [(0, "a", 1), (0, "b", 11)]


# Grouped cardinalities ------------------------------------------------------------------------

PAYOUT = {"field": "metadata.payout", "operator": "equals"}


def test_many_to_one_nets_a_groups_credits_and_debits_against_one_record():
    side_a = records({"id": 1, "amount": 700, "metadata.payout": "P1"}, {"id": 2, "amount": 500, "metadata.payout": "P1"},
                     {"id": 3, "amount": 200, "direction": "debit", "metadata.payout": "P1"},
                     {"id": 4, "amount": 50, "metadata.payout": "P2"}, metadata=("payout",))
    side_b = records({"id": 11, "amount": 1000, "direction": "debit", "metadata.payout": "P1"},
                     {"id": 12, "amount": 50, "direction": "debit", "metadata.payout": "P2"}, metadata=("payout",))
    grouped = rule(1, PAYOUT, AMOUNT_EQUALS, {"field": "direction", "operator": "opposite"},
                   cardinality="many_to_one", group_by={"side_a": ["metadata.payout"]})

    outcome = match_records(side_a, side_b, [grouped])

    assert pairs_of(outcome) == {((1, 2, 3), (11,)), ((4,), (12,))}
    assert outcome.matches["group_key"].to_list() == ["P1", "P2"]
    assert outcome.count_by_status() == {"confirmed": 2}


def test_one_to_many_is_the_mirror_image():
    side_a = records({"id": 1, "amount": 300, "metadata.batch": "B"}, metadata=("batch",))
    side_b = records({"id": 11, "amount": 100, "metadata.batch": "B"}, {"id": 12, "amount": 200, "metadata.batch": "B"},
                     metadata=("batch",))
    grouped = rule(1, {"field": "metadata.batch", "operator": "equals"}, AMOUNT_EQUALS,
                   cardinality="one_to_many", group_by={"side_b": ["metadata.batch"]})

    assert pairs_of(match_records(side_a, side_b, [grouped])) == {((1,), (11, 12))}


def test_many_to_many_matches_a_group_against_a_group():
    side_a = records({"id": 1, "amount": 100, "metadata.k": "K"}, {"id": 2, "amount": 200, "metadata.k": "K"},
                     metadata=("k",))
    side_b = records({"id": 11, "amount": 250, "metadata.k": "K"}, {"id": 12, "amount": 50, "metadata.k": "K"},
                     metadata=("k",))
    grouped = rule(1, {"field": "metadata.k", "operator": "equals"}, AMOUNT_EQUALS, cardinality="many_to_many",
                   group_by={"side_a": ["metadata.k"], "side_b": ["metadata.k"]})

    outcome = match_records(side_a, side_b, [grouped])

    assert pairs_of(outcome) == {((1, 2), (11, 12))}
    assert outcome.matches["group_key"].to_list() == ["K|K"]


def test_a_group_mixing_currencies_never_matches():
    side_a = records({"id": 1, "amount": 100, "currency": "USD", "metadata.payout": "P"},
                     {"id": 2, "amount": 100, "currency": "EUR", "metadata.payout": "P"}, metadata=("payout",))
    side_b = records({"id": 11, "amount": 200, "metadata.payout": "P"}, metadata=("payout",))
    grouped = rule(1, PAYOUT, AMOUNT_EQUALS, cardinality="many_to_one", group_by={"side_a": ["metadata.payout"]})

    assert match_records(side_a, side_b, [grouped]).matches.is_empty()


def test_a_groups_date_is_its_latest_date():
    side_a = records({"id": 1, "amount": 100, "date": DAY, "metadata.payout": "P"},
                     {"id": 2, "amount": 100, "date": DAY + timedelta(days=5), "metadata.payout": "P"}, metadata=("payout",))
    side_b = records({"id": 11, "amount": 200, "date": DAY + timedelta(days=5), "metadata.payout": "P"},
                     metadata=("payout",))
    same_day = rule(1, PAYOUT, AMOUNT_EQUALS, {"field": "date", "operator": "equals"}, cardinality="many_to_one",
                    group_by={"side_a": ["metadata.payout"]})

    assert pairs_of(match_records(side_a, side_b, [same_day])) == {((1, 2), (11,))}


def test_group_members_with_a_null_group_value_join_no_group():
    side_a = records({"id": 1, "amount": 100, "metadata.payout": "P"}, {"id": 2, "amount": 100}, metadata=("payout",))
    side_b = records({"id": 11, "amount": 100, "metadata.payout": "P"}, metadata=("payout",))
    grouped = rule(1, PAYOUT, AMOUNT_EQUALS, cardinality="many_to_one", group_by={"side_a": ["metadata.payout"]})

    assert pairs_of(match_records(side_a, side_b, [grouped])) == {((1,), (11,))}


# Subset search ----------------------------------------------------------------------------------

def test_a_keyless_grouped_rule_proposes_a_subset_summing_to_the_counterpart():
    side_a = records({"id": 1, "amount": 120}, {"id": 2, "amount": 300}, {"id": 3, "amount": 80},
                     {"id": 4, "amount": 500}, {"id": 5, "amount": 999, "currency": "EUR"})
    side_b = records({"id": 11, "amount": 500}, {"id": 12, "amount": 1099})
    keyless = rule(1, AMOUNT_EQUALS, {"field": "date", "operator": "within", "days": 3}, cardinality="many_to_one",
                   auto_confirm=True)

    outcome = match_records(side_a, side_b, [keyless])

    # 500 alone is the fewest records for 11; 12 (1099) finds nothing left in its currency.
    assert pairs_of(outcome) == {((4,), (11,))}
    assert outcome.matches.select("status", "group_key").rows() == [("proposed", "11")]
    assert json.loads(outcome.matches["differences"][0])["subset_size"] == 1


def test_subset_search_finds_several_records_within_tolerance():
    side_a = records(*({"id": i, "amount": amount} for i, amount in enumerate([1012, 2990, 7000, 333, 4000], start=1)))
    side_b = records({"id": 11, "amount": 4002})
    keyless = rule(1, {"field": "amount", "operator": "within", "tolerance": 5}, cardinality="many_to_one")

    outcome = match_records(side_a, side_b, [keyless])

    assert pairs_of(outcome) == {((1, 2), (11,))}  # 4000 alone is 2 off; 1012 + 2990 is exact
    assert json.loads(outcome.matches["differences"][0]) == {"amount": 0, "date_days": 0, "subset_size": 2}


def test_subset_search_takes_records_of_one_direction():
    side_a = records({"id": 1, "amount": 300, "direction": "credit"}, {"id": 2, "amount": 100, "direction": "debit"})
    side_b = records({"id": 11, "amount": 200})

    outcome = match_records(side_a, side_b, [rule(1, AMOUNT_EQUALS, cardinality="many_to_one")])

    assert outcome.matches.is_empty()


def test_one_to_many_subset_search_uses_the_side_a_amount_for_a_percent_tolerance():
    side_a = records({"id": 1, "amount": 10_000})
    side_b = records({"id": 11, "amount": 4_000}, {"id": 12, "amount": 5_950})
    keyless = rule(1, {"field": "amount", "operator": "within", "tolerance_percent": 0.5}, cardinality="one_to_many")

    assert pairs_of(match_records(side_a, side_b, [keyless])) == {((1,), (11, 12))}


def test_subset_sums_of_maximum_amounts_do_not_wrap_into_a_match():
    # 2 * (2**63 - 1) + 4 wraps to 2 in 64 bits: the three records must not "sum" to 2.
    side_a = records({"id": 1, "amount": MAX_AMOUNT}, {"id": 2, "amount": MAX_AMOUNT}, {"id": 3, "amount": 4})
    side_b = records({"id": 11, "amount": 2})

    outcome = match_records(side_a, side_b, [rule(1, AMOUNT_EQUALS, cardinality="many_to_one")])

    assert outcome.matches.is_empty()


def test_a_percent_tolerance_of_a_subset_near_the_amount_bound_is_exact():
    # Two halves of the bound sum to 2**63 - 2, one short of side B; 1% of that sum overflows 64 bits.
    half = MAX_AMOUNT // 2
    side_a = records({"id": 1, "amount": half}, {"id": 2, "amount": half})
    side_b = records({"id": 11, "amount": MAX_AMOUNT})
    keyless = rule(1, {"field": "amount", "operator": "within", "tolerance_percent": 1}, cardinality="many_to_one")

    outcome = match_records(side_a, side_b, [keyless])

    assert pairs_of(outcome) == {((1, 2), (11,))}
    assert json.loads(outcome.matches["differences"][0])["amount"] == 1


# Continuous mode --------------------------------------------------------------------------------

def test_continuous_mode_considers_only_pairs_with_a_new_record():
    side_a = records({"id": 1, "amount": 100}, {"id": 2, "amount": 200, "is_new": True}, with_new=True)
    side_b = records({"id": 11, "amount": 100}, {"id": 12, "amount": 200}, {"id": 13, "amount": 100, "is_new": True},
                     with_new=True)

    outcome = match_records(side_a, side_b, [rule(1, AMOUNT_EQUALS)], only_new=True)

    assert one_to_one(outcome) == {(2, 12), (1, 13)}
    assert sorted(outcome.unmatched_b.to_list()) == [11]


def test_continuous_mode_groups_include_old_members_of_a_group_with_a_new_one():
    side_a = records({"id": 1, "amount": 100, "metadata.payout": "P"},
                     {"id": 2, "amount": 50, "metadata.payout": "P", "is_new": True}, metadata=("payout",), with_new=True)
    side_b = records({"id": 11, "amount": 150, "metadata.payout": "P"}, metadata=("payout",), with_new=True)
    grouped = rule(1, PAYOUT, AMOUNT_EQUALS, cardinality="many_to_one", group_by={"side_a": ["metadata.payout"]})

    assert pairs_of(match_records(side_a, side_b, [grouped], only_new=True)) == {((1, 2), (11,))}


def test_continuous_subset_search_needs_a_new_record_in_the_match():
    side_a = records({"id": 1, "amount": 100}, {"id": 2, "amount": 100}, {"id": 3, "amount": 50, "is_new": True},
                     {"id": 4, "amount": 50}, with_new=True)
    side_b = records({"id": 11, "amount": 100}, with_new=True)
    keyless = rule(1, AMOUNT_EQUALS, cardinality="many_to_one")

    outcome = match_records(side_a, side_b, [keyless], only_new=True)

    assert pairs_of(outcome) == {((3, 4), (11,))}


def test_continuous_mode_needs_the_is_new_column():
    with pytest.raises(MatchingInputError):
        match_records(records({"id": 1, "amount": 1}), records({"id": 2, "amount": 1}), [rule(1, AMOUNT_EQUALS)],
                      only_new=True)


# What each condition excludes (a dry run's answer) -------------------------------------------------

def test_an_explained_rule_counts_the_pairs_each_condition_alone_excludes_among_what_is_left_to_it():
    # Given records, one pair of which an earlier rule takes by its reference
    side_a = records({"id": 1, "amount": 100, "description": "ACH CREDIT CUST110 INV-10158"},
                     {"id": 2, "amount": 200, "description": "Globex"},
                     {"id": 3, "amount": 300, "description": "Initech", "external_id": "R-3"})
    side_b = records({"id": 11, "amount": 100, "description": "Invoice INV-10158 CUST110"},
                     {"id": 12, "amount": 200, "description": "Initech"},
                     {"id": 13, "amount": 205, "description": "Globex"},
                     {"id": 14, "amount": 300, "description": "Initech", "external_id": "R-3"})
    by_reference = rule(1, {"field": "external_id", "operator": "equals"}, priority=1)
    similar = rule(2, AMOUNT_EQUALS, {"field": "description", "operator": "similar", "threshold": 0.9,
                                      "normalize": ["case"]}, priority=2)

    # When the second rule is explained
    outcome = match_records(side_a, side_b, [by_reference, similar], explain_rule=2)

    # Then, of the 2 x 3 pairs left: amount equals alone turns away Globex (200 vs 205), and
    # similar alone turns away both pairs of equal amounts (INV-10158 scores 0.81, Globex vs Initech)
    assert outcome.condition_exclusions == (1, 2)
    assert match_records(side_a, side_b, [by_reference, similar]).condition_exclusions is None


def test_a_keyless_grouped_rule_counts_no_pairs_for_its_amount_conditions():
    side_a = records({"id": 1, "amount": 60, "external_id": "P"}, {"id": 2, "amount": 40, "external_id": "Q"})
    side_b = records({"id": 11, "amount": 100, "external_id": "P"})
    subset = rule(1, AMOUNT_EQUALS, {"field": "external_id", "operator": "equals"}, cardinality="many_to_one")

    outcome = match_records(side_a, side_b, [subset], explain_rule=1)

    assert outcome.condition_exclusions == (None, 1)


# Guards and contract ------------------------------------------------------------------------

def test_a_rule_of_equalities_only_matches_more_pairs_than_a_polars_chunk_whose_dates_differ():
    # Given 20,000 pairs (polars filters by chunks of 16,384) that agree on amount and reference, a day apart
    count = 20_000
    side_a = pl.DataFrame({"n": range(count)}).select(
        id=pl.col("n") + 1, amount=pl.col("n") * 10 + 1, direction=pl.lit("credit"), date=pl.lit(DAY),
        currency=pl.lit("USD"), description=pl.lit(None), external_id=pl.format("INV-{}", "n")).cast(SCHEMA)
    side_b = side_a.with_columns(id=pl.col("id") + count, date=pl.lit(DAY + timedelta(days=1)))

    # When a rule of equalities only matches them
    outcome = match_records(side_a, side_b, [rule(1, AMOUNT_EQUALS, {"field": "external_id", "operator": "equals"})])

    # Then every pair matches
    assert outcome.match_count == count
    assert outcome.rule_summary["unmatched"] == {"side_a": 0, "side_b": 0}


def test_a_rule_that_would_compare_too_many_pairs_is_refused():
    side_a = records(*({"id": i, "amount": i} for i in range(1, 101)))
    side_b = records(*({"id": 1000 + i, "amount": 1000 + i} for i in range(1, 101)))
    currency_only = rule(9, {"field": "currency", "operator": "equals"})

    with pytest.raises(CandidateExplosion) as refused:
        match_records(side_a, side_b, [currency_only], max_candidate_pairs=5_000)

    assert refused.value.rule_id == 9 and refused.value.pairs == 10_000


def test_a_missing_metadata_column_is_an_input_error():
    with pytest.raises(MatchingInputError):
        match_records(records({"id": 1, "amount": 1}), records({"id": 2, "amount": 1}), [rule(1, PAYOUT)])


def test_no_rules_leave_everything_open():
    outcome = match_records(records({"id": 1, "amount": 1}), records({"id": 2, "amount": 1}), [])

    assert outcome.matches.is_empty() and outcome.members.is_empty()
    assert outcome.rule_summary == {"unmatched": {"side_a": 1, "side_b": 1}}


def test_a_group_summing_past_the_largest_amount_matches_no_record_its_wrapped_sum_would_equal():
    # Given a payout of two credits at the largest amount (a 64-bit sum wraps them to a debit of 2)
    largest = 2**63 - 1
    side_a = records({"id": 1, "amount": largest, "metadata.payout": "P1"},
                     {"id": 2, "amount": largest, "metadata.payout": "P1"}, metadata=("payout",))
    side_b = records({"id": 11, "amount": 2, "direction": "debit", "metadata.payout": "P1"}, metadata=("payout",))
    grouped = rule(1, PAYOUT, AMOUNT_EQUALS, {"field": "direction", "operator": "equals"},
                   cardinality="many_to_one", group_by={"side_a": ["metadata.payout"]})

    # When the engine matches them
    outcome = match_records(side_a, side_b, [grouped])

    # Then nothing matches: the group's exact sum is past any record's amount
    assert pairs_of(outcome) == set()
