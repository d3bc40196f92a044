"""People's unmatch decisions (domain/unmatch_decisions.py) and how learned rules weigh them
(domain/rule_learning.py): a suggested match that pairs again records a person took apart is a
conflict, and the pairs are negatives for the text conditions."""
from datetime import UTC, datetime, timedelta

import polars as pl

from chalicelib.domain.rule_learning import candidate_rule, decided_frame, dry_run_evidence, learn
from chalicelib.domain.rules import Cardinality, Condition, Operator, RuleDefinition
from chalicelib.domain.unmatch_decisions import (
    MAX_RECORDS_PER_SIDE,
    counts_as_a_decision,
    decision_of,
    repaired_by,
    unmatched_pairs,
)
from tests.unit.test_rule_learning import row

T0 = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)


def undone(match_id, a, b, at=T0, by="user:3"):
    return decision_of("acme", 1, match_id, [("a", i) for i in a] + [("b", i) for i in b], by, at, "confirmed", None)


def test_a_decision_keeps_each_side_sorted_and_its_pairs():
    decision = decision_of("acme", 1, 7, [("b", 9), ("a", 3), ("b", 8), ("a", 3)], "user:3", T0, "proposed", 2)

    assert (decision.side_a_record_ids, decision.side_b_record_ids) == ((3,), (8, 9))
    assert decision.pairs() == {(3, 8), (3, 9)} and not decision.truncated
    assert decision.expires_at > T0 + timedelta(days=365)
    assert decision.as_body() == {"reconciliation_match_id": 7, "unmatched_by": "user:3",
                                  "unmatched_at": "2026-11-30T05:00:00.000Z", "match_status": "proposed"}


def test_a_side_too_large_keeps_its_first_records_and_says_so():
    decision = undone(1, range(MAX_RECORDS_PER_SIDE + 1, 0, -1), [5])

    assert decision.truncated and decision.side_a_record_ids == tuple(range(1, MAX_RECORDS_PER_SIDE + 1))


def test_only_a_requests_actor_decides():
    assert counts_as_a_decision("user:3") and counts_as_a_decision("api_key:4")
    assert not counts_as_a_decision(None)  # a job, the sweeper: no request
    assert not counts_as_a_decision("system:reconciliation_run:12")


def test_a_match_repairing_a_pair_people_took_apart_names_the_newest_decision():
    older, newer = undone(1, [10], [20, 21], at=T0), undone(2, [11], [20], at=T0 + timedelta(hours=1))
    pairs = unmatched_pairs([newer, older])

    assert repaired_by([10], [21], pairs) == older
    assert repaired_by([10, 11], [20], pairs) == newer
    assert repaired_by([11], [21], pairs) is None  # each was unmatched, never from each other
    assert repaired_by([20], [10], pairs) is None  # sides matter


def test_the_dry_run_counts_a_match_that_pairs_again_what_a_person_unmatched():
    decided = decided_frame([row(1, "a", 700, "2026-10-01", decision=0), row(2, "b", 700, "2026-10-01", decision=0)],
                            [])
    opened = decided_frame([row(4, "a", 900, "2026-10-05"), row(5, "b", 900, "2026-10-05"),
                            row(6, "a", 300, "2026-10-05"), row(7, "b", 300, "2026-10-05")], [])
    open_a = opened.filter(pl.col("side") == "a").drop("decision", "side")
    open_b = opened.filter(pl.col("side") == "b").drop("decision", "side")
    rule = candidate_rule(RuleDefinition("amount", 1, Cardinality.ONE_TO_ONE, (Condition("amount", Operator.EQUALS),)))
    decision = undone(30, [4], [5])

    blind = dry_run_evidence(open_a, open_b, decided, [], rule)
    seen = dry_run_evidence(open_a, open_b, decided, [], rule, unmatched=unmatched_pairs([decision]))

    assert (blind["matches"], blind["conflicting_matches"]) == (2, 0)
    assert (seen["matches"], seen["conflicting_matches"], seen["unmatched_conflicts"], seen["decisions_remade"]) == (
        1, 1, 1, 1)
    assert seen["sample"] == [{"side_a_record_ids": [6], "side_b_record_ids": [7]}]
    assert seen["conflicts_sample"] == [{"side_a_record_ids": [4], "side_b_record_ids": [5], "decided_record_ids": [],
                                         "unmatched": decision.as_body()}]


def test_a_decision_people_remade_since_is_no_conflict():
    # the person unmatched 1-2, then matched it again by hand: their newest word stands
    decided = decided_frame([row(1, "a", 700, "2026-10-01", decision=0), row(2, "b", 700, "2026-10-01", decision=0)],
                            [])
    empty = decided.filter(pl.col("id") < 0).drop("decision", "side")
    rule = candidate_rule(RuleDefinition("amount", 1, Cardinality.ONE_TO_ONE, (Condition("amount", Operator.EQUALS),)))

    found = dry_run_evidence(empty, empty, decided, [], rule, unmatched=unmatched_pairs([undone(3, [1], [2])]))

    assert (found["conflicting_matches"], found["unmatched_conflicts"], found["decisions_remade"]) == (0, 0, 1)


def test_pairs_people_unmatched_are_negatives_for_the_text_conditions():
    # ten decisions whose invoice number is in the payment's text; and ten pairs people took apart,
    # whose texts agree just as well (the same customer reference): the text says nothing there
    rows, taken_apart = [], []
    for n in range(10):
        rows += [row(2 * n, "a", 1000 + n, "2026-10-01", external_id=f"INV-{n}"),
                 row(2 * n + 1, "b", 1000 + n, "2026-10-01", description=f"payment INV-{n}")]
        taken_apart += [row(100 + 2 * n, "a", 5000 + n, "2026-10-01", decision=n, external_id=f"REF-{n}"),
                        row(101 + 2 * n, "b", 7000 + n, "2026-10-01", decision=n, description=f"refund REF-{n}")]
    decided, unmatched = decided_frame(rows, []), decided_frame(taken_apart, [])

    def contains(learned):
        return [t for t in learned.texts if t.condition.operator is Operator.CONTAINS
                and (t.condition.field, t.condition.b_field) == ("external_id", "description")]

    [alone] = contains(learn(decided))
    with_unmatched = learn(decided, unmatched=unmatched)

    assert (alone.false_passes, alone.other_pairs) == (0, 30)
    assert contains(with_unmatched) == []  # 10 of 40 other pairs pass: above MAX_FALSE_PASS
    assert with_unmatched.observed["unmatched_pairs_compared"] == 10
