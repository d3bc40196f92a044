"""Rule learning (domain/rule_learning.py): what people's decisions agree on, the rules that would
have made them, and their evidence from the engine."""
import random
from datetime import date, timedelta

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.domain.rule_learning import (
    _basis_points_for,
    candidate_rule,
    decided_frame,
    decision_evidence,
    dry_run_evidence,
    learn,
    metadata_keys_of,
    ranking_key,
)
from chalicelib.domain.rules import Cardinality, Condition, Normalization, Operator, RuleDefinition
from tests.support.learned_rules import FEE, MAX_LAG, labelled_pairs

FULL = (Normalization.CASE, Normalization.WHITESPACE, Normalization.PUNCTUATION)


def frames_of(pairs, decided_count, metadata_keys=()):
    """The labelled pairs as decided records (the first `decided_count` real pairs) and open ones."""
    decided, open_rows, next_id, decision = [], [], 1, 0
    for invoice, payment in pairs:
        rows = [("a", invoice), ("b", payment)] if invoice is not None else [("b", payment)]
        real = invoice is not None and decision < decided_count
        for side, row in rows:
            entry = {**row, "id": next_id, "side": side, "decimal_places": 2, "decision": decision if real else None}
            (decided if real else open_rows).append(entry)
            next_id += 1
        decision += real
    opened = decided_frame(open_rows, list(metadata_keys))
    open_a = opened.filter(pl.col("side") == "a").drop("decision", "side")
    open_b = opened.filter(pl.col("side") == "b").drop("decision", "side")
    return decided_frame(decided, list(metadata_keys)), open_a, open_b


def row(n, side, amount, day, direction="credit", decision=None, **fields):
    return {"id": n, "side": side, "decision": n // 2 if decision is None else decision, "amount": amount,
            "decimal_places": 2, "direction": direction, "date": day, "currency": "USD",
            "data_stream_key": "bank" if side == "a" else "ledger", **fields}


def by_field(definition):
    return {(c.field, c.b_field): c for c in definition.conditions}


def test_the_labelled_set_gives_back_its_hidden_rule_first():
    decided, open_a, open_b = frames_of(labelled_pairs(60), 30)

    learned = learn(decided)
    [top, second, alone] = learned.candidates(3)

    assert (learned.decisions, learned.cardinality, learned.decisions_of_cardinality) == (
        30, Cardinality.ONE_TO_ONE, 30)
    assert by_field(top) == {
        ("external_id", "description"): Condition("external_id", Operator.CONTAINS, "description", normalize=FULL),
        ("amount", "amount"): Condition("amount", Operator.WITHIN, tolerance=FEE),
        ("date", "date"): Condition("date", Operator.WITHIN, days=MAX_LAG)}
    assert set(by_field(alone)) == {("amount", "amount"), ("date", "date")}
    assert not top.active and top.name.startswith("Learned: external_id in description")
    assert learned.observed["amount_difference"]["most_common"] == -FEE
    assert learned.observed["shared_tokens"]["fields"] == [  # by decisions, then by name
        {"field": "description", "side_b_field": "description", "decisions": 30},
        {"field": "external_id", "side_b_field": "description", "decisions": 30}]
    evidence = {}
    for definition in (top, second, alone):
        rule = candidate_rule(definition)
        evidence[definition] = {**{f"decisions_{k}": v for k, v in decision_evidence(decided, rule).items()},
                                "dry_run": dry_run_evidence(open_a, open_b, decided, [], rule)}
    assert evidence[top]["decisions_explained"] == 30 and evidence[top]["decisions_contradicted"] == 0
    assert (evidence[top]["dry_run"]["matches"], evidence[top]["dry_run"]["conflicting_matches"]) == (30, 0)
    assert evidence[alone]["dry_run"]["conflicting_matches"] > 0  # the decoys are taken
    ranked = sorted((top, second, alone), key=lambda d: ranking_key(evidence[d], d))
    assert ranked[0] in (top, second) and ranked[-1] == alone


def test_a_percentage_fee_is_learned_as_a_percent_tolerance():
    rng = random.Random(5)
    rows = []
    for n in range(20):
        amount = rng.randrange(10_000, 1_000_000)
        rows += [row(2 * n, "a", amount, "2026-10-01"), row(2 * n + 1, "b", amount - amount * 2 // 100, "2026-10-01")]

    learned = learn(decided_frame(rows, []))

    [amount, day] = learned.base
    assert amount == Condition("amount", Operator.WITHIN, tolerance_basis_points=200)
    assert day == Condition("date", Operator.EQUALS)
    assert learned.observed["amount_difference"]["explained_by"] == "percent"


def test_equal_amounts_learn_equals_and_an_outlier_does_not_widen_the_window():
    rows = []
    for n in range(20):
        other = 50_000 + n if n else 90_000  # one decision a person matched with a large difference
        rows += [row(2 * n, "a", 50_000 + n, "2026-10-01"), row(2 * n + 1, "b", other, "2026-10-03")]

    learned = learn(decided_frame(rows, []))

    assert learned.base[0] == Condition("amount", Operator.EQUALS)
    assert learned.observed["amount_difference"]["outliers"] == 1
    assert learned.base[1] == Condition("date", Operator.WITHIN, days=2)


def test_directions_and_currencies_are_learned_only_when_they_could_differ():
    rows = []
    for n in range(10):
        rows += [row(2 * n, "a", 1000 + n, "2026-10-01", "credit"), row(2 * n + 1, "b", 1000 + n, "2026-10-01", "debit")]
    decided = decided_frame(rows, [])

    plain = learn(decided, currencies_seen=1, directions_seen=1)
    mixed = learn(decided, currencies_seen=2)

    assert {c.field for c in plain.base} == {"amount", "date"}
    assert Condition("direction", Operator.OPPOSITE) in mixed.base
    assert Condition("currency", Operator.EQUALS) in mixed.base


def test_a_text_everyone_shares_teaches_nothing_and_a_metadata_key_that_agrees_is_found():
    rows = []
    for n in range(12):
        common = {"description": "PAYMENT", "metadata": {"order": f"ord-{n}"}}
        rows += [row(2 * n, "a", 1000 + 37 * n, "2026-10-01", **common),
                 row(2 * n + 1, "b", 1000 + 37 * n, "2026-10-01", **common)]
    keys = metadata_keys_of(r["metadata"] for r in rows)

    learned = learn(decided_frame(rows, keys))

    assert keys == ["metadata.order"]
    fields = {(t.condition.field, t.condition.b_field) for t in learned.texts}
    assert ("metadata.order", "metadata.order") in fields
    assert ("description", "description") not in fields
    [best, *_] = learned.texts
    assert best.condition.operator is Operator.EQUALS and (best.passes, best.false_passes) == (12, 0)


def test_several_records_against_one_learn_a_grouped_rule_with_the_key_they_share():
    rows, n = [], 0
    for decision in range(8):
        parts = [(1000 + decision, "2026-10-01"), (2000, "2026-10-02"), (500, "2026-10-03")]
        for amount, day in parts:
            rows.append(row(n, "a", amount, day, decision=decision, metadata={"payout": f"po-{decision}"}))
            n += 1
        rows.append(row(n, "b", sum(a for a, _ in parts), "2026-10-04", decision=decision,
                        metadata={"payout": f"po-{decision}"}))
        n += 1
    decided = decided_frame(rows, ["metadata.payout"])

    learned = learn(decided)
    [top, *_] = learned.candidates(2)

    assert learned.cardinality is Cardinality.MANY_TO_ONE
    assert top.group_by.side_a == ("metadata.payout",)
    assert learned.base[:2] == (Condition("amount", Operator.EQUALS), Condition("date", Operator.WITHIN, days=1))
    assert decision_evidence(decided, candidate_rule(top))["explained"] == 8


def test_a_rule_that_pairs_decided_records_otherwise_is_contradicted():
    # two decisions of equal amounts on the same day, crossed by the person (the text says which)
    rows = [row(1, "a", 500, "2026-10-01", decision=0, external_id="X1"),
            row(2, "b", 500, "2026-10-01", decision=0, description="pay X1"),
            row(3, "a", 500, "2026-10-01", decision=1, external_id="X2"),
            row(4, "b", 500, "2026-10-01", decision=1, description="pay X2")]
    rows[1]["id"], rows[3]["id"] = 4, 2  # the engine's order would pair 1 with 2 and 3 with 4
    decided = decided_frame(rows, [])
    loose = RuleDefinition("amount", 1, Cardinality.ONE_TO_ONE, (Condition("amount", Operator.EQUALS),))
    tight = RuleDefinition("amount and text", 1, Cardinality.ONE_TO_ONE,
                           (Condition("amount", Operator.EQUALS),
                            Condition("external_id", Operator.CONTAINS, "description", normalize=FULL)))

    assert decision_evidence(decided, candidate_rule(loose)) == {"explained": 0, "contradicted": 2}
    assert decision_evidence(decided, candidate_rule(tight)) == {"explained": 2, "contradicted": 0}


def test_the_dry_run_counts_a_match_that_takes_a_record_people_matched_elsewhere():
    decided = decided_frame([row(1, "a", 700, "2026-10-01", decision=0), row(2, "b", 710, "2026-10-02", decision=0)],
                            [])
    opened = decided_frame([row(3, "b", 700, "2026-10-01"), row(4, "a", 900, "2026-10-05"),
                            row(5, "b", 900, "2026-10-05")], [])
    open_a = opened.filter(pl.col("side") == "a").drop("decision", "side")
    open_b = opened.filter(pl.col("side") == "b").drop("decision", "side")
    rule = candidate_rule(RuleDefinition("amount", 1, Cardinality.ONE_TO_ONE,
                                         (Condition("amount", Operator.WITHIN, tolerance=10),)))

    found = dry_run_evidence(open_a, open_b, decided, [], rule)

    assert (found["matches"], found["conflicting_matches"], found["decisions_remade"]) == (1, 1, 0)
    assert found["sample"] == [{"side_a_record_ids": [4], "side_b_record_ids": [5]}]
    assert found["conflicts_sample"] == [{"side_a_record_ids": [1], "side_b_record_ids": [3],
                                          "decided_record_ids": [1]}]


def test_nothing_decided_learns_nothing():
    learned = learn(decided_frame([], []))
    assert (learned.decisions, learned.candidates(3)) == (0, [])


@given(difference=st.integers(0, 10**9), amount=st.integers(1, 10**12))
def test_the_basis_points_are_the_fewest_that_cover_the_difference_as_within_rounds(difference, amount):
    basis_points = _basis_points_for(difference, amount)
    assert amount * basis_points // 10_000 >= difference
    assert basis_points == 0 or amount * (basis_points - 1) // 10_000 < difference


@pytest.mark.parametrize("lag", [0, 3])
def test_the_date_window_is_the_widest_lag_either_way(lag):
    start = date(2026, 10, 1)
    rows = []
    for n in range(6):
        shift = lag if n % 2 else -lag
        rows += [row(2 * n, "a", 100 + n, start.isoformat()),
                 row(2 * n + 1, "b", 100 + n, (start + timedelta(days=shift)).isoformat())]
    [_, day] = learn(decided_frame(rows, [])).base
    assert day == (Condition("date", Operator.EQUALS) if lag == 0 else Condition("date", Operator.WITHIN, days=lag))
