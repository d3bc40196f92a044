"""A labelled set of investigation cases, generated from a seed (test and bench data, not product
code: it lives in tests/support and does not ship), and `evaluate`, which scores the engine
against it.

A case is one exception record (the target, a ledger-style record) and the other side's open pool:
the true counterpart(s), if any, among decoys and background records. Ground truth is the set of
candidate ids that correspond (empty: nothing does). The kinds, in shares of the cases:

    exact 18%               the same amount, booked 0..5 days later (sometimes 1..2 earlier)
    fee 14%                 the amount less a fee: 0.3% + 0.30, 2.9% + 0.30, or a flat 1.50
    split 14%               2..4 records of one direction summing to the target, 0..3 days apart
    typo 14%                the reference with 1..2 character edits or changed case and spacing
    decoy_same_amount 8%    the truth, and a record of the same amount but another reference, 20..40 days off
    decoy_reference 8%      the truth, and a record with the target's (or a near) reference but an
                            amount 8..60% lower (a partial payment, say)
    twins 6%                two records of the same amount on the same day without references:
                            genuinely ambiguous, the truth is one of them at random
    none 18%                no counterpart: near amounts of other payers, an equal amount far away in date

Every pool also holds 20..40 background records of the target's currency (a few of the same payer,
a few within 10% of its amount) and 2..4 records in another currency with the target's exact
amount, date and reference (an engine that mixes currencies is caught). References are missing
on either side a fifth of the time, descriptions a tenth; each system words descriptions its own
way; ids are random, so no order gives the truth away.

    cases(TEST_SEED)         # 600 cases, deterministic for a seed
    evaluate(cases(TEST_SEED))
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta

import polars as pl

from chalicelib.domain.investigations.engine import RECORD_SCHEMA, investigate
from chalicelib.domain.investigations.outcome import Hypothesis

TRAINING_SEED = 1101
TEST_SEED = 2202
CASES = 600
HIGH_CONFIDENCE = 0.9
KINDS = {"exact": 18, "fee": 14, "split": 14, "typo": 14, "decoy_same_amount": 8, "decoy_reference": 8,
         "twins": 6, "none": 18}
PAYERS = ["Acme", "Globex", "Initech", "Umbrella", "Stark Industries", "Wayne Enterprises", "Hooli", "Vandelay",
          "Soylent", "Cyberdyne", "Tyrell", "Wonka", "Pied Piper", "Dunder Mifflin", "Monarch", "Oscorp", "Gekko",
          "Massive Dynamic", "Aperture", "Black Mesa", "Sirius", "Virtucon", "Nakatomi", "Duff", "Krusty"]
LEDGER_WORDS = ["invoice", "payout", "settlement", "subscription", "order", "payment"]
BANK_WORDS = ["PAYMENT", "ACH CREDIT", "WIRE IN", "PAYOUT", "TRANSFER", "DEPOSIT"]
CURRENCIES = ["USD", "USD", "USD", "EUR", "GBP"]
FIRST_DAY = date(2026, 1, 5)


@dataclass(frozen=True)
class Case:
    number: int
    kind: str
    targets: pl.DataFrame
    candidates: pl.DataFrame
    truth: frozenset[int]


def cases(seed: int, count: int = CASES) -> list[Case]:
    """Kinds in a fixed rotation by their shares; everything else from random.Random((seed, number))."""
    rotation = [kind for kind, share in KINDS.items() for _ in range(share)]
    return [_case(random.Random(seed * 1_000_003 + n), n, rotation[(n * 37) % len(rotation)]) for n in range(count)]


def _case(rng: random.Random, number: int, kind: str) -> Case:
    ids = iter(rng.sample(range(100_000, 999_999), 80))
    currency = rng.choice(CURRENCIES)
    payer = rng.choice(PAYERS)
    amount = _amount(rng)
    day = FIRST_DAY + timedelta(days=rng.randrange(300))
    reference = _reference(rng, payer)
    target = _ledger(next(ids), amount, day, currency, payer, reference, rng)
    truth, pool = [], []

    if kind in ("exact", "fee", "typo", "decoy_same_amount", "decoy_reference"):
        paid = amount if kind in ("exact", "decoy_reference") or (kind == "typo" and rng.random() < 0.7) \
            else amount - _fee(rng, amount)
        their_reference = _typo(rng, reference) if kind == "typo" else _as_bank_writes(rng, reference)
        if kind == "decoy_reference" and rng.random() < 0.5:
            their_reference = None
        truth.append(_bank(next(ids), paid, day + timedelta(days=_shift(rng)), currency, payer, their_reference, rng))
    if kind == "split":
        parts = _parts(rng, amount, rng.randint(2, 4))
        suffixed = rng.random() < 0.3
        direction = rng.choice(["credit", "debit"])
        for i, part in enumerate(parts, 1):
            ref = f"{reference}-{i}" if suffixed and reference else _as_bank_writes(rng, reference)
            truth.append(_bank(next(ids), part, day + timedelta(days=rng.randint(0, 3)), currency, payer, ref, rng,
                               direction=direction))
    if kind == "twins":
        twin_day = day + timedelta(days=_shift(rng))
        description = f"{payer.upper()} {rng.choice(BANK_WORDS)}"
        twins = [_bank(next(ids), amount, twin_day, currency, payer, None, rng) for _ in range(2)]
        twins = [{**t, "description": description} for t in twins]
        target = {**target, "reference": None}
        truth.append(twins[0])
        pool.append(twins[1])
    if kind == "decoy_same_amount":
        far = timedelta(days=rng.choice([-1, 1]) * rng.randint(20, 40))
        pool.append(_bank(next(ids), amount, day + far, currency, payer, _reference(rng, payer), rng))
    if kind == "decoy_reference":
        off = rng.uniform(0.08, 0.2) if rng.random() < 0.5 else rng.uniform(0.2, 0.6)
        near_reference = reference if rng.random() < 0.5 else _typo(rng, reference)
        pool.append(_bank(next(ids), max(1, round(amount * (1 - off))), day + timedelta(days=rng.randint(-10, 10)),
                          currency, payer, near_reference, rng))
    if kind == "none":
        for _ in range(rng.randint(1, 3)):
            other = rng.choice([p for p in PAYERS if p != payer])
            near = round(amount * (1 + rng.choice([-1, 1]) * rng.uniform(0.005, 0.03)))
            pool.append(_bank(next(ids), max(1, near), day + timedelta(days=rng.randint(-5, 5)), currency, other,
                              _reference(rng, other), rng))
        far = timedelta(days=rng.choice([-1, 1]) * rng.randint(20, 50))
        pool.append(_bank(next(ids), amount, day + far, currency, rng.choice(PAYERS), _reference(rng, payer), rng))

    pool.extend(_background(rng, ids, amount, day, currency, payer))
    other_currency = rng.choice([c for c in ("USD", "EUR", "GBP", "CHF") if c != currency])
    pool.extend(_bank(next(ids), amount, day, other_currency, payer, reference, rng) for _ in range(rng.randint(2, 4)))
    records = truth + pool
    rng.shuffle(records)
    return Case(number, kind, pl.DataFrame([target], schema=RECORD_SCHEMA), pl.DataFrame(records, schema=RECORD_SCHEMA),
                frozenset(r["id"] for r in truth))


# Records ------------------------------------------------------------------------------------

def _amount(rng: random.Random) -> int:
    """Log-uniform from 5.00 to 50,000.00, in cents."""
    return round(10 ** rng.uniform(2.7, 6.7))


def _fee(rng: random.Random, amount: int) -> int:
    fee = rng.choice([amount * 3 // 1000 + 30, amount * 29 // 1000 + 30, 150])
    return min(fee, amount - 1)


def _shift(rng: random.Random) -> int:
    return rng.randint(0, 5) if rng.random() < 0.85 else -rng.randint(1, 2)


def _parts(rng: random.Random, amount: int, count: int) -> list[int]:
    cuts = sorted(rng.sample(range(1, amount), count - 1)) if amount > count else list(range(1, count))
    parts = [b - a for a, b in zip([0, *cuts], [*cuts, amount])]
    return parts if min(parts) > 0 else [amount // count] * (count - 1) + [amount - amount // count * (count - 1)]


def _reference(rng: random.Random, payer: str) -> str:
    style = rng.randrange(4)
    digits = rng.randint(10_000, 9_999_999)
    return [f"INV-{digits}", f"PO{digits}", f"{payer[:4].upper()}-{digits}", f"SO-{digits % 100_000:05d}-A"][style]


def _as_bank_writes(rng: random.Random, reference: str | None) -> str | None:
    """The same reference, missing a fifth of the time, sometimes in other case or spacing."""
    if reference is None or rng.random() < 0.2:
        return None
    return rng.choice([reference, reference, reference.lower(), reference.replace("-", " "),
                       reference.replace("-", "")])


def _typo(rng: random.Random, reference: str | None) -> str | None:
    if reference is None:
        return None
    if rng.random() < 0.25:
        return reference.lower().replace("-", " ")
    text = list(reference)
    for _ in range(rng.randint(1, 2)):
        at = rng.randrange(len(text))
        edit = rng.randrange(4)
        if edit == 0:
            text[at] = rng.choice("0123456789")
        elif edit == 1 and len(text) > 4:
            del text[at]
        elif edit == 2:
            text.insert(at, rng.choice("0123456789"))
        elif at + 1 < len(text):
            text[at], text[at + 1] = text[at + 1], text[at]
    typo = "".join(text)
    return typo if typo != reference else reference + "0"


def _ledger(record_id: int, amount: int, day: date, currency: str, payer: str, reference: str, rng: random.Random):
    with_reference = rng.random() < 0.5
    description = f"{payer} {rng.choice(LEDGER_WORDS)}" + (f" {reference}" if with_reference else "")
    return {"id": record_id, "amount": amount, "direction": "credit", "date": day, "currency": currency,
            "description": description if rng.random() < 0.9 else None, "external_id": f"L{rng.randint(1, 10**7):08d}",
            "reference": reference if rng.random() < 0.8 else None}


def _bank(record_id: int, amount: int, day: date, currency: str, payer: str, reference: str | None,
          rng: random.Random, *, direction: str = "credit"):
    words = f"{payer.upper()} {rng.choice(BANK_WORDS)}"
    description = f"{words} {reference}" if reference and rng.random() < 0.4 else words
    return {"id": record_id, "amount": amount, "direction": direction, "date": day, "currency": currency,
            "description": description if rng.random() < 0.9 else None,
            "external_id": f"TX{rng.randint(1, 10**9):010d}", "reference": reference}


def _background(rng: random.Random, ids, amount: int, day: date, currency: str, payer: str) -> list[dict]:
    records = []
    for n in range(rng.randint(20, 40)):
        who = payer if n < 3 else rng.choice(PAYERS)
        value = round(amount * rng.uniform(0.9, 1.1)) if n % 8 == 1 else _amount(rng)
        when = day + timedelta(days=rng.randint(-30, 30))
        records.append(_bank(next(ids), max(1, value), when, currency, who,
                             _reference(rng, who) if rng.random() < 0.8 else None, rng,
                             direction="credit" if rng.random() < 0.8 else "debit"))
    return records


# Evaluation ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Judged:
    case: Case
    best: Hypothesis | None

    @property
    def right(self) -> bool:
        return self.best is not None and frozenset(self.best.candidate_ids) == self.case.truth

    @property
    def confidence(self) -> float:
        return self.best.confidence if self.best else 0.0


def judged(cases_: list[Case]) -> list[Judged]:
    """Each case's best hypothesis (none when the engine has none)."""
    return [Judged(case, next(iter(investigate(case.targets, case.candidates).hypotheses), None)) for case in cases_]


def evaluate(cases_: list[Case], bins: tuple[float, ...] = (0.0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0)) -> dict:
    """Top-1 precision (right / suggested) and recall (right / cases with a truth), where a suggestion
    is right when its candidate set equals the truth; precision at confidence >= 0.9 and the share of
    cases reaching it; the reliability table (confidence bins against observed accuracy); by kind."""
    found = judged(cases_)
    suggested = [j for j in found if j.best is not None]
    right = sum(j.right for j in found)
    sure = [j for j in suggested if j.confidence >= HIGH_CONFIDENCE]
    reliability = []
    for low, high in zip(bins, bins[1:]):
        inside = [j for j in suggested if low <= j.confidence < high or (high == bins[-1] and j.confidence == high)]
        reliability.append({"from": low, "to": high, "cases": len(inside),
                            "mean_confidence": _mean([j.confidence for j in inside]),
                            "accuracy": _mean([float(j.right) for j in inside])})
    by_kind = {}
    for kind in KINDS:
        mine = [j for j in found if j.case.kind == kind]
        by_kind[kind] = {"cases": len(mine), "right": sum(j.right for j in mine),
                         "mean_confidence": _mean([j.confidence for j in mine]),
                         "at_high_confidence": sum(j.confidence >= HIGH_CONFIDENCE for j in mine)}
    return {"cases": len(found), "with_truth": sum(bool(j.case.truth) for j in found), "suggested": len(suggested),
            "right": right, "precision": right / len(suggested) if suggested else 0.0,
            "recall": right / max(1, sum(bool(j.case.truth) for j in found)),
            "high_confidence": len(sure), "precision_at_high": _mean([float(j.right) for j in sure]),
            "coverage_at_high": len(sure) / len(found) if found else 0.0,
            "reliability": reliability, "by_kind": by_kind}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
