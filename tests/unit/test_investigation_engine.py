"""The investigation engine, one behaviour a test: exact, near and split amounts, references,
dates, decoys, nothing to find, currencies, nulls, the recommendation, determinism."""
from __future__ import annotations

from datetime import date, timedelta

import polars as pl
import pytest

from chalicelib.domain.investigations import RECORD_SCHEMA, InvestigationInputError, investigate
from chalicelib.domain.money import MAX_AMOUNT

DAY = date(2026, 11, 1)


def records(*rows: dict) -> pl.DataFrame:
    defaults = {"amount": 100, "direction": "credit", "date": DAY, "currency": "USD", "description": None,
                "external_id": None, "reference": None}
    return pl.DataFrame([{**defaults, **row} for row in rows], schema=RECORD_SCHEMA)


def background(first_id: int = 500, count: int = 30) -> list[dict]:
    """Unrelated open records: other (larger) amounts, dates, payers and references."""
    return [{"id": first_id + n, "amount": 1_000_000 + 7_919 * n, "date": DAY + timedelta(days=n % 20 - 10),
             "description": f"PAYER {n} TRANSFER", "reference": f"PO{n * 7_777:07d}"} for n in range(count)]


def target(**row) -> dict:
    return {"id": 77, "amount": 125_000, "description": "Acme payout", "external_id": "L0001",
            "reference": "ACME-PAYOUT-4411", **row}


def test_an_equal_amount_with_the_same_reference_is_an_exact_match_with_high_confidence():
    candidates = records({"id": 812, "amount": 125_000, "date": DAY + timedelta(days=2), "reference": "acme payout 4411",
                          "description": "ACME PAYOUT 4411"}, *background())

    outcome = investigate(records(target()), candidates)

    best = outcome.hypotheses[0]
    assert (best.kind, best.candidate_ids, best.amount_difference, best.days_apart) == ("exact", (812,), 0, 2)
    assert best.reference_similarity == 1.0
    assert outcome.suggested_record_ids[0] == 812
    assert outcome.confidence_score >= 0.9
    assert outcome.candidate_records_searched == 31


def test_an_amount_less_a_fee_is_a_near_amount_match():
    fee = 125_000 * 3 // 1000 + 30
    candidates = records({"id": 812, "amount": 125_000 - fee, "date": DAY + timedelta(days=1),
                          "reference": "ACME-PAYOUT-4411"}, *background())

    outcome = investigate(records(target()), candidates)

    best = outcome.hypotheses[0]
    assert (best.kind, best.candidate_ids, best.amount_difference) == ("near_amount", (812,), -fee)
    assert outcome.confidence_score >= 0.9


@pytest.mark.parametrize("parts", [[100_000, 25_000], [60_000, 40_000, 25_000]])
def test_records_summing_to_the_target_are_a_split(parts):
    candidates = records(*({"id": 90 + i, "amount": part, "date": DAY + timedelta(days=i),
                            "reference": f"ACME-PAYOUT-4411-{i + 1}"} for i, part in enumerate(parts)), *background())

    outcome = investigate(records(target()), candidates)

    best = outcome.hypotheses[0]
    assert best.kind == "split"
    assert best.candidate_ids == tuple(90 + i for i in range(len(parts)))
    assert best.amount_difference == 0 and best.days_apart == len(parts) - 1
    assert outcome.suggested_record_ids[:len(parts)] == list(best.candidate_ids)


def test_an_amount_at_the_bound_less_a_fee_is_still_a_near_amount():
    candidates = records({"id": 812, "amount": MAX_AMOUNT - 1_000, "date": DAY + timedelta(days=1)})

    outcome = investigate(records(target(amount=MAX_AMOUNT, reference=None, external_id=None)), candidates)

    assert [(h.kind, h.candidate_ids, h.amount_difference) for h in outcome.hypotheses] == [
        ("near_amount", (812,), -1_000)]


def test_parts_near_the_bound_split_a_target_only_when_they_truly_sum_to_it():
    amount = 8 * 10**18
    wrapping = 2**64 + amount  # four parts, each below the target, whose 64-bit sum wraps to it
    parts = [wrapping // 4] * 3 + [wrapping - 3 * (wrapping // 4)]
    candidates = records(*({"id": 90 + i, "amount": part} for i, part in enumerate(parts)),
                         {"id": 95, "amount": amount // 2}, {"id": 96, "amount": amount - amount // 2})

    outcome = investigate(records(target(amount=amount, reference=None, external_id=None)), candidates)

    assert [h.candidate_ids for h in outcome.hypotheses if h.kind == "split"] == [(95, 96)]


def test_a_split_takes_records_of_one_direction_only():
    candidates = records({"id": 90, "amount": 100_000, "direction": "credit"},
                         {"id": 91, "amount": 25_000, "direction": "debit"})

    outcome = investigate(records(target(reference=None)), candidates)

    assert all(h.kind != "split" for h in outcome.hypotheses)


def test_a_reference_with_a_typo_still_points_to_its_record():
    candidates = records({"id": 812, "amount": 125_000, "date": DAY + timedelta(days=3), "reference": "ACME-PAYOUT-4441"},
                         {"id": 813, "amount": 125_000, "date": DAY + timedelta(days=3), "reference": "INV-9935120"},
                         *background())

    outcome = investigate(records(target()), candidates)

    best = outcome.hypotheses[0]
    assert best.candidate_ids == (812,)
    assert 0.85 <= best.reference_similarity < 1
    assert "differs from 'ACME-PAYOUT-4411' by 1 character" in outcome.recommendation_text


def test_an_equal_reference_reaches_a_record_of_another_amount():
    candidates = records({"id": 812, "amount": 62_500, "date": DAY + timedelta(days=1), "reference": "ACME PAYOUT 4411"},
                         *background())

    outcome = investigate(records(target()), candidates)

    best = outcome.hypotheses[0]
    assert (best.kind, best.candidate_ids, best.amount_difference) == ("reference", (812,), -62_500)
    assert "625.00 USD lower (50.00%)" in outcome.recommendation_text


def test_among_equal_amounts_the_nearer_date_ranks_first():
    candidates = records({"id": 812, "amount": 125_000, "date": DAY + timedelta(days=9)},
                         {"id": 813, "amount": 125_000, "date": DAY + timedelta(days=1)},
                         {"id": 814, "amount": 125_000, "date": DAY + timedelta(days=4)})

    outcome = investigate(records(target(reference=None)), candidates)

    assert [h.candidate_ids for h in outcome.hypotheses] == [(813,), (814,), (812,)]
    assert [h.days_apart for h in outcome.hypotheses] == [1, 4, 9]
    assert outcome.suggested_record_ids == [813]  # the best only: what accepting matches


def test_a_same_amount_decoy_with_another_reference_far_in_date_loses_to_the_fee_adjusted_record():
    candidates = records({"id": 812, "amount": 125_000, "date": DAY + timedelta(days=30), "reference": "INV-5550001"},
                         {"id": 813, "amount": 124_595, "date": DAY + timedelta(days=2), "reference": "ACME-PAYOUT-4411"},
                         *background())

    outcome = investigate(records(target()), candidates)

    assert outcome.suggested_record_ids[0] == 813
    assert outcome.confidence_score >= 0.9


def test_a_similar_reference_with_a_wrong_amount_loses_to_the_exact_amount_on_the_day():
    candidates = records({"id": 812, "amount": 80_000, "date": DAY + timedelta(days=2), "reference": "ACME-PAYOUT-4411"},
                         {"id": 813, "amount": 125_000, "date": DAY, "description": "ACME PAYOUT"})

    outcome = investigate(records(target(reference=None, description="Acme payout ACME-PAYOUT-4411")), candidates)

    assert outcome.suggested_record_ids[0] == 813


def test_same_day_same_amount_twins_are_named_together_and_never_with_high_confidence():
    candidates = records({"id": 812, "amount": 125_000, "description": "ACME PAYOUT"},
                         {"id": 813, "amount": 125_000, "description": "ACME PAYOUT"}, *background())

    outcome = investigate(records(target(reference=None)), candidates)

    assert [h.candidate_ids for h in outcome.hypotheses[:2]] == [(812,), (813,)]
    assert outcome.suggested_record_ids == [812]
    assert outcome.confidence_score < 0.9
    assert outcome.hypotheses[0].score == pytest.approx(outcome.hypotheses[1].score)
    assert "Record 813 fits almost as well and is not suggested: check both." in outcome.recommendation_text


def test_when_nothing_matches_the_confidence_is_low():
    candidates = records({"id": 812, "amount": 123_700, "date": DAY + timedelta(days=4), "reference": "INV-0001234",
                          "description": "GLOBEX WIRE IN"}, *background())

    outcome = investigate(records(target()), candidates)

    assert outcome.confidence_score < 0.5


def test_without_any_candidate_the_text_says_nothing_matches():
    outcome = investigate(records(target()), records(*background()))

    assert (outcome.hypotheses, outcome.suggested_record_ids, outcome.confidence_score) == ([], [], 0.0)
    assert outcome.recommendation_text == ("Nothing among the 30 open records of the other side matches record 77 "
                                           "(1,250.00 USD on 2026-11-01) on amount, reference or description.")


def test_currencies_never_mix():
    candidates = records({"id": 812, "amount": 125_000, "currency": "EUR", "reference": "ACME-PAYOUT-4411"},
                         {"id": 813, "amount": 100_000, "currency": "EUR"}, {"id": 814, "amount": 25_000, "currency": "EUR"})

    outcome = investigate(records(target()), candidates)

    assert outcome.hypotheses == [] and outcome.candidate_records_searched == 3


def test_each_currency_finds_its_own_counterpart():
    targets = records(target(), target(id=78, currency="EUR", reference="EU-77"))
    candidates = records({"id": 812, "amount": 125_000, "currency": "EUR", "reference": "EU-77"},
                         {"id": 813, "amount": 125_000, "currency": "USD", "reference": "ACME-PAYOUT-4411"})

    outcome = investigate(targets, candidates)

    assert {h.target_ids: h.candidate_ids for h in outcome.hypotheses} == {(77,): (813,), (78,): (812,)}


def test_null_texts_and_absent_reference_columns_are_no_evidence_and_no_error():
    targets = records(target(description=None, external_id=None, reference=None)).drop("reference")
    candidates = records({"id": 812, "amount": 125_000, "date": DAY + timedelta(days=1)}).drop("reference", "direction")

    outcome = investigate(targets, candidates)

    best = outcome.hypotheses[0]
    assert (best.candidate_ids, best.reference_similarity, best.description_similarity) == ((812,), None, None)


def test_the_recommendation_names_what_matched_and_what_differs_with_amounts_formatted():
    targets = records(target(), {"id": 78, "amount": 300_000, "reference": "BATCH-2026-11"})
    candidates = records(
        {"id": 812, "amount": 125_000, "date": DAY + timedelta(days=2), "description": "ACME PAYOUT 4411",
         "reference": "ACME-PAYOUT-4411"},
        {"id": 90, "amount": 100_000, "reference": "BATCH-2026-11"},
        {"id": 91, "amount": 200_000, "date": DAY + timedelta(days=1), "reference": "BATCH-2026-11"})

    text = investigate(targets, candidates).recommendation_text

    assert ("Record 812 (1,250.00 USD on 2026-11-03, 'ACME PAYOUT 4411') matches record 77 on amount, "
            "reference and description; it was booked 2 days later") in text
    assert ("Records 90 and 91 together sum to 3,000.00 USD, the amount of record 78; their references match and "
            "they were booked 0 to 1 days later") in text


def test_amounts_are_written_with_the_given_decimal_places():
    candidates = records({"id": 812, "amount": 1_249_000, "currency": "KWD", "reference": "ACME-PAYOUT-4411"})

    outcome = investigate(records(target(amount=1_250_000, currency="KWD")), candidates, decimal_places=3)

    assert "Record 812 (1,249.000 KWD on 2026-11-01)" in outcome.recommendation_text
    assert "its amount is 1.000 KWD lower (0.08%), as a fee would be" in outcome.recommendation_text


def test_hypotheses_are_ranked_and_capped_and_only_the_best_is_suggested():
    candidates = records(*({"id": 800 + n, "amount": 125_000 - n * 100, "date": DAY + timedelta(days=n)}
                           for n in range(12)))

    outcome = investigate(records(target(reference=None)), candidates, max_suggestions=3)

    assert [h.candidate_ids for h in outcome.hypotheses] == [(800,), (801,), (802,)]
    assert outcome.suggested_record_ids == [800]
    assert [h.score for h in outcome.hypotheses] == sorted((h.score for h in outcome.hypotheses), reverse=True)


def test_the_outcome_does_not_depend_on_row_order():
    targets = records(target(), {"id": 78, "amount": 300_000}, {"id": 79, "amount": 4_200, "reference": "X-1"})
    candidates = records({"id": 812, "amount": 125_000, "reference": "ACME PAYOUT 4411"},
                         {"id": 90, "amount": 100_000}, {"id": 91, "amount": 200_000},
                         {"id": 92, "amount": 150_000}, {"id": 93, "amount": 150_000}, {"id": 94, "amount": 4_200},
                         {"id": 95, "amount": 4_200}, *background())

    first = investigate(targets, candidates)
    again = investigate(targets.reverse(), candidates.sample(fraction=1.0, shuffle=True, seed=3))

    assert again == first


def test_frames_breaking_the_contract_are_refused():
    with pytest.raises(InvestigationInputError):
        investigate(records(target()).drop("amount"), records())
    with pytest.raises(InvestigationInputError):
        investigate(records(target()), records({"id": 1, "amount": -5}))


# The suggestion: exactly what the recommendation proposes ------------------------------------------

def mentioned(text: str) -> set[int]:
    import re

    return {int(n) for n in re.findall(r"\b(?:[Rr]ecords?|and|,) (\d+)\b", text)}


def test_a_zero_amount_record_with_the_same_reference_is_never_suggested_for_a_non_zero_one():
    """The issue's case: a prenote of another stream carried the payment's reference."""
    candidates = records({"id": 812, "amount": 125_000, "date": DAY + timedelta(days=1), "reference": "PAYROLL-88"},
                         {"id": 990, "amount": 0, "date": DAY, "reference": "ACME-PAYOUT-4411"}, *background())

    outcome = investigate(records(target()), candidates)

    assert all(990 not in h.candidate_ids for h in outcome.hypotheses)
    assert outcome.suggested_record_ids == [812] and "990" not in outcome.recommendation_text


def test_a_zero_amount_target_may_pair_with_a_zero_amount_record():
    candidates = records({"id": 990, "amount": 0, "reference": "ACME-PAYOUT-4411"}, {"id": 991, "amount": 300})

    outcome = investigate(records(target(amount=0)), candidates)

    assert outcome.suggested_record_ids == [990]


def test_the_suggestion_holds_exactly_the_records_the_recommendation_proposes():
    targets = records(target(), {"id": 78, "amount": 300_000, "reference": "BATCH-2026-11"},
                      {"id": 79, "amount": 4_200, "reference": "X-1"})
    candidates = records(
        {"id": 812, "amount": 125_000, "date": DAY + timedelta(days=2), "reference": "ACME-PAYOUT-4411"},
        {"id": 813, "amount": 125_000, "date": DAY + timedelta(days=9)},  # a weaker alternative for 77
        {"id": 90, "amount": 100_000, "reference": "BATCH-2026-11"},
        {"id": 91, "amount": 200_000, "date": DAY + timedelta(days=1), "reference": "BATCH-2026-11"},
        *background())

    outcome = investigate(targets, candidates)

    assert sorted(outcome.suggested_record_ids) == [90, 91, 812]
    assert sorted(outcome.target_record_ids) == [77, 78]
    text = outcome.recommendation_text
    assert mentioned(text) - {77, 78, 79} == {90, 91, 812}
    assert "Nothing among the 34 open records of the other side matches record 79" in text
    assert text.endswith(f"Accepting matches records {outcome.target_record_ids[0]} and "
                         f"{outcome.target_record_ids[1]} with records "
                         f"{', '.join(map(str, outcome.suggested_record_ids[:-1]))} and "
                         f"{outcome.suggested_record_ids[-1]}.")


def test_a_record_is_never_suggested_twice_and_the_target_left_without_one_says_why():
    targets = records(target(), target(id=78, reference=None, external_id=None, description=None))
    candidates = records({"id": 812, "amount": 125_000, "reference": "ACME-PAYOUT-4411"})

    outcome = investigate(targets, candidates)

    assert outcome.suggested_record_ids == [812] and outcome.target_record_ids == [77]
    assert ("Record 78 (1,250.00 USD on 2026-11-01) is not part of this suggestion: the records that fit it best "
            "are suggested for another record") in outcome.recommendation_text


def test_a_suggestion_holds_one_currency():
    targets = records(target(), target(id=78, currency="EUR", reference="EU-77"))
    candidates = records({"id": 812, "amount": 125_000, "currency": "EUR", "reference": "EU-77"},
                         {"id": 813, "amount": 125_000, "currency": "USD", "reference": "ACME-PAYOUT-4411"})

    outcome = investigate(targets, candidates)

    assert len(outcome.proposal) == 1 and len(outcome.suggested_record_ids) == 1
    assert "in another currency than the suggestion" in outcome.recommendation_text
