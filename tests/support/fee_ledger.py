"""A labelled set of multi-record investigations built here, apart from the generator the scoring
was fitted on (tests/support/labelled.py): a ledger whose records each differ from the bank's by a
fee, beside same-amount decoys booked 14 days away. Test and bench data; it does not ship.

Each scenario is one investigation of TARGETS ledger records against the bank's open records:
- a fee counterpart per target (the truth): the amount less (or, where the ledger booked the net,
  plus) a fee, the reference alike (as written, in another case or spacing, with one typo, without
  its prefix, or only in the description), booked 0..3 days later or a day earlier;
- a decoy per target: the target's exact amount, booked 14 days earlier or later, with no reference
  or one of another payer's, the payer's own bank wording;
- a few targets of some scenarios have only their decoy (`lone_decoys`): the truth is nothing;
- background records of other amounts and payers.

    report = measure(scenarios())   # recall, precision, calibration over every proposed pairing
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta

import polars as pl

from chalicelib.domain.investigations.engine import RECORD_SCHEMA, investigate

SEED = 2929
TARGETS = 20
HIGH_CONFIDENCE = 0.9
PAYERS = ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Soylent", "Wonka", "Oscorp", "Monarch"]
FIRST_DAY = date(2026, 2, 2)


@dataclass(frozen=True)
class Shape:
    """What varies between scenarios."""
    name: str
    fees: tuple[str, ...]                 # fee shapes, drawn per target (see _fee)
    references: tuple[str, ...]           # how the bank writes the target's reference (see _their_reference)
    decoy_references: tuple[str, ...]     # "none", "other" (another payer's), "overlap" (same style, other digits)
    ledger_net: bool = False              # the ledger booked the net amount: the bank's is higher by the fee
    lone_decoys: int = 0                  # targets with only their decoy (no counterpart)


SHAPES = (
    Shape("the issue's: a card fee, references as written, decoys without reference",
          ("card",), ("same",), ("none",)),
    Shape("mixed fees (card, small card, flat 1.50, wire 15.00/25.00)",
          ("card", "small", "flat", "wire"), ("same", "case"), ("none", "other")),
    Shape("references with a typo, without prefix or only in the description",
          ("card", "small", "flat"), ("typo", "digits", "in_description"), ("none", "other")),
    Shape("decoys whose references overlap the target's (same style, other digits)",
          ("card", "small", "flat", "wire"), ("same", "case", "typo"), ("overlap",)),
    Shape("the ledger booked the net: the bank's amount is higher by the fee",
          ("card", "small", "flat"), ("same", "case", "typo", "digits"), ("none", "other", "overlap"),
          ledger_net=True),
    Shape("four targets have only their decoy",
          ("card", "small", "flat", "wire"), ("same", "case", "typo"), ("none", "other"), lone_decoys=4),
)


@dataclass(frozen=True)
class Scenario:
    shape: Shape
    targets: pl.DataFrame
    candidates: pl.DataFrame
    truth: dict[int, int]        # target id -> its fee counterpart's id (absent: none)
    decoys: dict[int, int]       # target id -> its decoy's id


def scenarios(seed: int = SEED, rounds: int = 2) -> list[Scenario]:
    return [_scenario(random.Random(seed * 1_009 + n * 31 + r), shape)
            for r in range(rounds) for n, shape in enumerate(SHAPES)]


def _scenario(rng: random.Random, shape: Shape) -> Scenario:
    ids = iter(rng.sample(range(100, 99_999), 6 * TARGETS + 60))
    targets, candidates, truth, decoys = [], [], {}, {}
    lone = set(rng.sample(range(TARGETS), shape.lone_decoys))
    for n in range(TARGETS):
        payer = rng.choice(PAYERS)
        amount = round(10 ** rng.uniform(4.2, 6.3))   # 158.49 .. 19,952.62
        day = FIRST_DAY + timedelta(days=rng.randrange(200))
        digits = rng.randint(10_000, 999_999)
        reference = rng.choice([f"INV-{digits}", f"{payer[:4].upper()}-{digits}", f"SO-{digits}"])
        target_id = next(ids)
        targets.append({"id": target_id, "amount": amount, "direction": "credit", "date": day, "currency": "USD",
                        "description": f"{payer} invoice {reference}" if rng.random() < 0.5 else f"{payer} invoice",
                        "external_id": f"L{next(ids):08d}", "reference": reference})
        if n not in lone:
            fee = _fee(rng, rng.choice(shape.fees), amount)
            paid = amount + fee if shape.ledger_net else amount - fee
            their_reference = _their_reference(rng, rng.choice(shape.references), reference)
            words = f"{payer.upper()} PAYMENT"
            truth[target_id] = next(ids)
            candidates.append(_bank(truth[target_id], paid, day + timedelta(days=rng.choice([-1, 0, 1, 1, 2, 3])),
                                    words + (f" {reference}" if their_reference is None else ""), their_reference))
        decoys[target_id] = next(ids)
        decoy_reference = _decoy_reference(rng, rng.choice(shape.decoy_references), reference)
        candidates.append(_bank(decoys[target_id], amount, day + timedelta(days=rng.choice([-14, 14])),
                                f"{payer.upper()} PAYMENT", decoy_reference))
    for _ in range(40):  # background: other payers, other amounts
        payer = rng.choice(PAYERS)
        candidates.append(_bank(next(ids), round(10 ** rng.uniform(4.2, 6.3)),
                                FIRST_DAY + timedelta(days=rng.randrange(200)), f"{payer.upper()} TRANSFER",
                                f"PO{rng.randint(100_000, 999_999)}"))
    rng.shuffle(candidates)
    return Scenario(shape, pl.DataFrame(targets, schema=RECORD_SCHEMA), pl.DataFrame(candidates, schema=RECORD_SCHEMA),
                    truth, decoys)


def _fee(rng: random.Random, shape: str, amount: int) -> int:
    return {"card": amount * 29 // 1000 + 30, "small": amount * 3 // 1000 + 30, "flat": 150,
            "wire": rng.choice([1_500, 2_500]) if amount >= 100_000 else 150}[shape]


def _their_reference(rng: random.Random, how: str, reference: str) -> str | None:
    prefix, _, digits = reference.partition("-")
    if how == "same":
        return reference
    if how == "case":
        return rng.choice([reference.lower(), reference.replace("-", " "), reference.replace("-", "")])
    if how == "typo":
        at = rng.randrange(len(prefix) + 1, len(reference))
        return reference[:at] + str((int(reference[at]) + 1) % 10) + reference[at + 1:]
    if how == "digits":
        return digits
    return None  # in_description: the bank kept the reference in its description only


def _decoy_reference(rng: random.Random, how: str, reference: str) -> str | None:
    if how == "none":
        return None
    if how == "other":
        return f"PO{rng.randint(100_000, 999_999)}"
    prefix, _, digits = reference.partition("-")   # overlap: the same style and leading digits
    kept = len(digits) // 2
    return f"{prefix}-{digits[:kept]}{''.join(rng.choice('0123456789') for _ in digits[kept:])}"


def _bank(record_id: int, amount: int, day: date, description: str, reference: str | None) -> dict:
    return {"id": record_id, "amount": amount, "direction": "credit", "date": day, "currency": "USD",
            "description": description, "external_id": f"TX{record_id:010d}", "reference": reference}


# Measures -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pairing:
    shape: str
    target: int
    candidates: tuple[int, ...]
    confidence: float
    right: bool
    decoy: bool


def pairings(scenarios_: list[Scenario]) -> list[Pairing]:
    """Every pairing the investigations propose, judged against the truth."""
    found = []
    for s in scenarios_:
        for h in investigate(s.targets, s.candidates).proposal:
            target = h.target_ids[0]
            found.append(Pairing(s.shape.name, target, h.candidate_ids, h.confidence,
                                 h.candidate_ids == (s.truth.get(target),), h.candidate_ids == (s.decoys[target],)))
    return found


def measure(scenarios_: list[Scenario]) -> dict:
    """Recall (fee counterparts proposed / fee counterparts), precision (right / proposed pairings),
    and calibration: how often a pairing at confidence >= 0.9 is right, and the highest confidence
    any decoy got. Also per shape."""
    found = pairings(scenarios_)
    return {"all": _measured(found, sum(len(s.truth) for s in scenarios_)),
            "by_shape": {shape.name: _measured([p for p in found if p.shape == shape.name],
                                               sum(len(s.truth) for s in scenarios_ if s.shape == shape))
                         for shape in SHAPES}}


def _measured(found: list[Pairing], counterparts: int) -> dict:
    right = sum(p.right for p in found)
    sure = [p for p in found if p.confidence >= HIGH_CONFIDENCE]
    return {"counterparts": counterparts, "proposed": len(found), "right": right,
            "recall": right / counterparts if counterparts else 1.0,
            "precision": right / len(found) if found else 1.0,
            "high_confidence": len(sure), "precision_at_high": sum(p.right for p in sure) / len(sure) if sure else 1.0,
            "decoys_proposed": sum(p.decoy for p in found),
            "highest_decoy_confidence": max((p.confidence for p in found if p.decoy), default=0.0)}
