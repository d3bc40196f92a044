"""Rules learned from people's decisions: from the matches people made by hand (and the
investigations they accepted), the conditions a rule would need to have made them, and the
evidence for each suggestion, measured with the matching engine itself.

    decided = decided_frame(rows, metadata_keys)            # the decided records, one row each
    learned = learn(decided, currencies_elsewhere=...)       # what the decisions agree on
    for definition in learned.candidates(max_suggestions):
        evidence = decision_evidence(decided, rule_of(definition))
        dry = dry_run_evidence(open_a, open_b, decided, before, rule_of(definition))

What a decision is. One match a person made: its side-A records and its side-B records. A grouped
side (several records) becomes one unit as the engine sees a group (domain/matching/units.py): the
absolute value of its signed sum, its latest date, a text only when every member has it.

What is learned, from the decisions of the most common cardinality:
- the amount difference (side B minus side A, at one scale per currency): none (`equals`), a fixed
  amount (`within` `tolerance`, the largest difference) or a percentage of the side-A amount
  (`within` `tolerance_percent`, the largest ratio rounded up to a basis point), whichever admits
  less at the median amount; an outlier difference (over three times the 90th percentile, ten
  decisions or more) is left unexplained rather than widen the window for everyone;
- the date lag (days, either way): `equals` when none, else `within` the largest;
- the direction (`equals` or `opposite`) and the currency (`equals`), when they agree in every
  decision and the records seen hold more than one value (an agreement nothing could break
  teaches nothing);
- the text fields that agree: for each side-A text field (description, external_id, the
  metadata keys the records carry) against each side-B one, how many decisions `equals`,
  `contains` (normalized: case, whitespace, punctuation) or `similar` (its lowest score) would
  pass, and how many pairs of records people did not match together would pass too (each
  side-A unit against the side-B units of the next decisions): a condition is kept when it passes
  at least MIN_SUPPORT of the decisions and at most MAX_FALSE_PASS of the other pairs, the best
  first (fewest false passes, then most decisions, then equals before contains before similar);
- the tokens the two sides' texts share (words with a digit, as an invoice number), shown as
  evidence.

A suggestion is the amount, date, direction and currency conditions with one of the best text
conditions, or with none (`candidates`). Its evidence, from the engine: how many decisions the rule
alone makes exactly, over the decided records as if they were open (`explained`), how many it
would match otherwise (a decided record paired with one its decision did not hold:
`contradicted`), and a dry run over the open records with the decided ones among them, the
active rules first: the matches it would add (open records only) and the matches that take a
record people matched elsewhere (`conflicting_matches`).
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import polars as pl

from chalicelib.domain.matching import CandidateExplosion, match_records
from chalicelib.domain.matching.candidates import similarity
from chalicelib.domain.matching.frames import POWERS_OF_TEN, engine_frames, record_schema
from chalicelib.domain.matching.plan import normalized_text
from chalicelib.domain.rules import (
    MAX_DAYS,
    MAX_NAME,
    Cardinality,
    Condition,
    GroupBy,
    Normalization,
    Operator,
    Rule,
    RuleDefinition,
)
from chalicelib.domain.unmatch_decisions import UnmatchedPairs, repaired_by

MIN_SUPPORT = 0.8          # a text condition must pass at least this share of the decisions
MAX_FALSE_PASS = 0.05      # and at most this share of the pairs people did not match together
NEGATIVE_SHIFTS = 3        # each side-A unit is compared with the side-B units of this many other decisions
OUTLIER_FACTOR = 3         # an amount difference over 3x the 90th percentile is an outlier (10+ decisions)
SIMILAR_STEP = 0.05        # a learned similar threshold is a multiple of this
MAX_METADATA_KEYS = 10     # metadata keys compared, the most common first
MAX_TOKENS_SHOWN = 5
FULL = (Normalization.CASE, Normalization.WHITESPACE, Normalization.PUNCTUATION)
WORDS = (Normalization.CASE, Normalization.PUNCTUATION)
TEXT_OPERATOR_ORDER = {Operator.EQUALS: 0, Operator.CONTAINS: 1, Operator.SIMILAR: 2}
DECIDED_COLUMNS = ("decision", "side")  # besides record_schema's


# The decided records -----------------------------------------------------------------------------

def decided_frame(rows: Iterable[Mapping[str, Any]], metadata_keys: Sequence[str]) -> pl.DataFrame:
    """The decided records as open_records_frame gives open ones (record_schema), plus `decision`
    (the decision's number) and `side` ("a" or "b"). A row: id, decision, side, amount,
    decimal_places, direction, date (ISO text), currency, description, external_id, metadata
    (a mapping), data_stream_key."""
    schema = {**record_schema(list(metadata_keys)), "decision": pl.Int64, "side": pl.Utf8}
    columns: dict[str, list[Any]] = {name: [] for name in schema}
    for row in rows:
        metadata = row.get("metadata") or {}
        for name in schema:
            if name.startswith("metadata."):
                value = metadata.get(name.removeprefix("metadata."))
                columns[name].append(None if value is None else value if isinstance(value, str) else json.dumps(value))
            elif name == "date":
                columns[name].append(date.fromisoformat(row["date"]))
            elif name == "matched_in":
                columns[name].append([])
            elif name == "is_new":
                columns[name].append(False)
            elif name == "status":
                columns[name].append("reconciled")
            else:
                columns[name].append(row.get(name))
    return pl.DataFrame(columns, schema=schema).sort("id")


def metadata_keys_of(metadata: Iterable[Mapping[str, Any]]) -> list[str]:
    """The metadata keys worth comparing, the most common first (at most MAX_METADATA_KEYS), as
    `metadata.<key>` fields a rule may name."""
    from chalicelib.domain.rules import METADATA_KEY

    counts = Counter(key for m in metadata for key, value in m.items() if value is not None)
    return [f"metadata.{k}" for k, _ in counts.most_common()
            if METADATA_KEY.match(f"metadata.{k}")][:MAX_METADATA_KEYS]


# What the decisions agree on ----------------------------------------------------------------------

@dataclass(frozen=True)
class TextAgreement:
    """How one text condition fares on the decisions and on the pairs people did not match."""
    condition: Condition
    passes: int         # decisions it passes
    decisions: int
    false_passes: int   # other pairs it passes
    other_pairs: int

    @property
    def support(self) -> float:
        return self.passes / self.decisions if self.decisions else 0.0

    @property
    def false_pass_rate(self) -> float:
        return self.false_passes / self.other_pairs if self.other_pairs else 0.0

    def as_body(self) -> dict[str, Any]:
        return {"condition": self.condition.as_body(), "decisions_passed": self.passes,
                "other_pairs": self.other_pairs, "other_pairs_passed": self.false_passes}


@dataclass(frozen=True)
class Learned:
    """What the decisions of one cardinality agree on, and the evidence shown with a suggestion."""
    decisions: int                      # read
    cardinality: Cardinality
    decisions_of_cardinality: int
    base: tuple[Condition, ...]         # amount, date, direction, currency
    texts: tuple[TextAgreement, ...]    # the text conditions kept, best first
    group_by: GroupBy = field(default_factory=GroupBy)
    observed: dict[str, Any] = field(default_factory=dict)

    def candidates(self, limit: int) -> list[RuleDefinition]:
        """Up to `limit` rule definitions, best first: the base with each kept text condition
        (at most `limit - 1` of them), then the base alone."""
        if not self.base and not self.texts:
            return []
        shapes = [(t.condition, *self.base) for t in self.texts[:max(limit - 1, 0)]]
        if self.base:
            shapes.append(tuple(self.base))
        return [RuleDefinition(name=_name(conditions), priority=1, cardinality=self.cardinality,
                               conditions=tuple(conditions), group_by=self.group_by, auto_confirm=True,
                               active=False)
                for conditions in shapes[:limit]]


@dataclass(frozen=True)
class _Unit:
    amount: int
    date: date
    direction: str
    currency: str
    decimal_places: int  # of `amount`: the currency's most among the decided records
    texts: dict[str, str | None]


def learn(decided: pl.DataFrame, currencies_seen: int = 1, directions_seen: int | None = None,
          unmatched: pl.DataFrame | None = None) -> Learned:
    """What the decided records (decided_frame) agree on. `currencies_seen`: how many currencies
    the reconciliation's records hold (decided and open), below two no currency condition is
    learned; `directions_seen` likewise (default: from the decided records). `unmatched`: the
    records of matches people took apart (a decided_frame of them, same columns, `decision` the
    unmatched match's number), whose pairs count among the pairs people did not match together."""
    text_fields = [c for c in decided.columns if c in ("description", "external_id") or c.startswith("metadata.")]
    decisions = _decisions(decided, text_fields)
    if not decisions:
        return Learned(0, Cardinality.ONE_TO_ONE, 0, (), ())
    shapes = Counter(_cardinality(len(a), len(b)) for a, b, _ in decisions)
    cardinality = max(shapes, key=lambda c: (shapes[c], c is Cardinality.ONE_TO_ONE))
    kept = [(a, b, units) for a, b, units in decisions if _cardinality(len(a), len(b)) is cardinality]
    pairs = [units for _, _, units in kept]
    if directions_seen is None:
        directions_seen = decided["direction"].n_unique()
    base, observed = _base_conditions(pairs, currencies_seen, directions_seen)
    negatives = ([units for _, _, units in _decisions(unmatched, text_fields)]
                 if unmatched is not None and unmatched.height else [])
    texts, tokens = _text_agreements(pairs, text_fields, negatives)
    observed["unmatched_pairs_compared"] = len(negatives)
    observed["shared_tokens"] = tokens
    observed["cardinalities"] = {c.value: n for c, n in shapes.most_common()}
    return Learned(decisions=len(decisions), cardinality=cardinality, decisions_of_cardinality=len(kept),
                   base=base, texts=texts, group_by=_group_by(kept, cardinality, text_fields), observed=observed)


def _cardinality(a: int, b: int) -> Cardinality:
    if a == 1:
        return Cardinality.ONE_TO_ONE if b == 1 else Cardinality.ONE_TO_MANY
    return Cardinality.MANY_TO_ONE if b == 1 else Cardinality.MANY_TO_MANY


def _decisions(decided: pl.DataFrame, text_fields: list[str]) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                                          tuple[_Unit, _Unit]]]:
    """Each decision's side-A rows, side-B rows and its two units, amounts at one scale per
    currency (the currency's most decimal places among the decided records, as engine_frames)."""
    scales = dict(decided.group_by("currency").agg(pl.col("decimal_places").max()).iter_rows())
    by_decision: dict[int, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for row in decided.sort("decision", "id").iter_rows(named=True):
        sides = by_decision.setdefault(row["decision"], ([], []))
        sides[0 if row["side"] == "a" else 1].append(row)
    found = []
    for a_rows, b_rows in by_decision.values():
        if not a_rows or not b_rows:
            continue
        units = (_unit(a_rows, scales, text_fields), _unit(b_rows, scales, text_fields))
        if units[0] is not None and units[1] is not None:
            found.append((a_rows, b_rows, (units[0], units[1])))
    return found


def _unit(rows: list[dict[str, Any]], scales: Mapping[str, int], text_fields: list[str]) -> _Unit | None:
    currencies = {r["currency"] for r in rows}
    if len(currencies) != 1:
        return None
    currency = currencies.pop()
    scale = scales.get(currency) or 0
    signed = sum((r["amount"] * POWERS_OF_TEN[scale - r["decimal_places"]])
                 * (-1 if r["direction"] == "debit" else 1) for r in rows)
    texts = {}
    for name in text_fields:
        values = {r[name] for r in rows}
        texts[name] = values.pop() if len(values) == 1 else None
    return _Unit(amount=abs(signed), date=max(r["date"] for r in rows),
                 direction="credit" if signed >= 0 else "debit", currency=currency, decimal_places=scale, texts=texts)


def _base_conditions(pairs: list[tuple[_Unit, _Unit]], currencies_seen: int,
                     directions_seen: int) -> tuple[tuple[Condition, ...], dict[str, Any]]:
    conditions: list[Condition] = []
    observed: dict[str, Any] = {}
    amount, observed["amount_difference"] = _amount_condition(pairs)
    if amount is not None:
        conditions.append(amount)
    lags = [(b.date - a.date).days for a, b in pairs]
    observed["date_lag_days"] = {"min": min(lags), "max": max(lags), "most_common": _most_common(lags)}
    widest = max(abs(lag) for lag in lags)
    if widest <= MAX_DAYS:
        conditions.append(Condition("date", Operator.EQUALS) if widest == 0
                          else Condition("date", Operator.WITHIN, days=widest))
    same = sum(a.direction == b.direction for a, b in pairs)
    observed["direction"] = {"same": same, "opposite": len(pairs) - same}
    if directions_seen > 1 and same in (0, len(pairs)):
        conditions.append(Condition("direction", Operator.EQUALS if same else Operator.OPPOSITE))
    if currencies_seen > 1 and all(a.currency == b.currency for a, b in pairs):
        conditions.append(Condition("currency", Operator.EQUALS))
    return tuple(conditions), observed


def _amount_condition(pairs: list[tuple[_Unit, _Unit]]) -> tuple[Condition | None, dict[str, Any]]:
    """Fixed or percent, whichever admits less at the median side-A amount; outliers left out."""
    differences = [b.amount - a.amount for a, b in pairs]
    units = {(u.currency, u.decimal_places) for pair in pairs for u in pair}
    # What the differences are in (a client shows them as money): one currency's minor units, or
    # several currencies' each (None then).
    currency, places = units.pop() if len(units) == 1 else (None, None)
    seen: dict[str, Any] = {"min": min(differences), "max": max(differences), "most_common": _most_common(differences),
                            "currency": currency, "decimal_places": places, "explained_by": None}
    sizes = sorted(abs(d) for d in differences)
    covered = sizes
    if len(sizes) >= 10:
        p90 = sizes[math.ceil(0.9 * len(sizes)) - 1]
        covered = [s for s in sizes if s <= max(p90 * OUTLIER_FACTOR, p90 + 1)]
    seen["outliers"] = len(sizes) - len(covered)
    fixed = max(covered)
    if fixed == 0:
        seen["explained_by"] = "equal"
        return Condition("amount", Operator.EQUALS), seen
    bound = max(covered)
    ratios = [_basis_points_for(abs(b.amount - a.amount), a.amount) for a, b in pairs
              if abs(b.amount - a.amount) <= bound]
    basis_points = max((r for r in ratios if r is not None), default=None)
    median_a = sorted(a.amount for a, _ in pairs)[len(pairs) // 2]
    if basis_points is not None and basis_points <= 10_000 and median_a * basis_points // 10_000 < fixed:
        seen["explained_by"] = "percent"
        seen["basis_points"] = basis_points
        return Condition("amount", Operator.WITHIN, tolerance_basis_points=basis_points), seen
    seen["explained_by"] = "fixed"
    return Condition("amount", Operator.WITHIN, tolerance=fixed), seen


def _basis_points_for(difference: int, amount_a: int) -> int | None:
    """The fewest basis points of `amount_a` that cover `difference` as `within` rounds (down)."""
    if amount_a <= 0:
        return None
    basis_points = -(-difference * 10_000 // amount_a)
    while amount_a * basis_points // 10_000 < difference:
        basis_points += 1
    return basis_points


def _most_common(values: list[int]) -> int:
    return Counter(values).most_common(1)[0][0]


def _text_agreements(pairs: list[tuple[_Unit, _Unit]], text_fields: list[str],
                     negatives: Sequence[tuple[_Unit, _Unit]] = ()) -> tuple[tuple[TextAgreement, ...], dict[str, Any]]:
    """Each (side-A field, side-B field) under equals, contains and similar, on the decisions and
    on the other pairs (side-A unit i against side-B unit i + k, k = 1..NEGATIVE_SHIFTS, and the
    `negatives`: the pairs people unmatched)."""
    n = len(pairs)
    shifts = range(1, min(NEGATIVE_SHIFTS, n - 1) + 1)
    positive = {(f, "a"): [a.texts.get(f) for a, _ in pairs] for f in text_fields}
    positive.update({(f, "b"): [b.texts.get(f) for _, b in pairs] for f in text_fields})
    found: list[TextAgreement] = []
    for field_a in text_fields:
        for field_b in text_fields:
            a_values, b_values = positive[(field_a, "a")], positive[(field_b, "b")]
            if not any(a_values) or not any(b_values):
                continue
            other_a = [a_values[i] for _ in shifts for i in range(n)] + [a.texts.get(field_a) for a, _ in negatives]
            other_b = [b_values[(i + k) % n] for k in shifts for i in range(n)] + [b.texts.get(field_b)
                                                                                 for _, b in negatives]
            found.extend(_field_pair_agreements(field_a, field_b, a_values, b_values, other_a, other_b))
    kept = [t for t in found if t.support >= MIN_SUPPORT and t.false_pass_rate <= MAX_FALSE_PASS]
    kept.sort(key=lambda t: (t.false_passes / max(t.other_pairs, 1), -t.passes,
                             TEXT_OPERATOR_ORDER[t.condition.operator], -(t.condition.threshold or 0),
                             t.condition.field != t.condition.b_field, t.condition.field, t.condition.b_field))
    best: list[TextAgreement] = []
    for agreement in kept:  # one condition per field pair: its best operator
        if not any((b.condition.field, b.condition.b_field) == (agreement.condition.field, agreement.condition.b_field)
                   for b in best):
            best.append(agreement)
    return tuple(best), _shared_tokens(pairs, text_fields)


def _field_pair_agreements(field_a: str, field_b: str, a_values: list[str | None], b_values: list[str | None],
                           other_a: list[str | None], other_b: list[str | None]) -> list[TextAgreement]:
    side_b_field = None if field_b == field_a else field_b
    frame = pl.DataFrame({"a": a_values + other_a, "b": b_values + other_b,
                          "positive": [True] * len(a_values) + [False] * len(other_a)},
                         schema={"a": pl.Utf8, "b": pl.Utf8, "positive": pl.Boolean})
    checks = frame.with_columns(
        fa=normalized_text(pl.col("a"), FULL), fb=normalized_text(pl.col("b"), FULL),
        wa=normalized_text(pl.col("a"), WORDS, words=True), wb=normalized_text(pl.col("b"), WORDS, words=True),
    ).with_columns(
        equals=(pl.col("fa") == pl.col("fb")).fill_null(False),
        contains=(pl.col("fb").str.contains(pl.col("fa"), literal=True)
                  | pl.col("fa").str.contains(pl.col("fb"), literal=True)).fill_null(False),
    )
    scores = similarity(checks["wa"], checks["wb"])
    positives = checks["positive"].to_numpy()
    decisions, others = int(positives.sum()), int((~positives).sum())
    agreements = []
    for operator, column in ((Operator.EQUALS, "equals"), (Operator.CONTAINS, "contains")):
        passed = checks[column].to_numpy()
        agreements.append(TextAgreement(Condition(field_a, operator, side_b_field=side_b_field, normalize=FULL),
                                        int(passed[positives].sum()), decisions,
                                        int(passed[~positives].sum()), others))
    decided_scores = scores[positives]
    other_scores = scores[~positives]
    # the lowest threshold on a SIMILAR_STEP grid that keeps the other pairs out (MAX_FALSE_PASS)
    grid = sorted({round(max(SIMILAR_STEP, math.floor(s / SIMILAR_STEP + 1e-9) * SIMILAR_STEP), 2)
                   for s in decided_scores if s >= 0})
    for threshold in grid:
        false_passes = int((other_scores >= threshold).sum())
        if false_passes <= MAX_FALSE_PASS * others:
            agreements.append(TextAgreement(
                Condition(field_a, Operator.SIMILAR, side_b_field=side_b_field, threshold=threshold, normalize=WORDS),
                int((decided_scores >= threshold).sum()), decisions, false_passes, others))
            break
    return agreements


def _shared_tokens(pairs: list[tuple[_Unit, _Unit]], text_fields: list[str]) -> dict[str, Any]:
    """The words with a digit both sides' texts hold (case and punctuation aside), by decision."""
    with_token = 0
    examples: list[str] = []
    where: Counter[tuple[str, str]] = Counter()
    for a, b in pairs:
        tokens_a = {(f, t) for f in text_fields for t in _tokens(a.texts.get(f))}
        tokens_b = {(f, t) for f in text_fields for t in _tokens(b.texts.get(f))}
        shared = {t for _, t in tokens_a} & {t for _, t in tokens_b}
        if shared:
            with_token += 1
            if len(examples) < MAX_TOKENS_SHOWN:
                examples.append(sorted(shared)[0])
            for fa, ta in tokens_a:
                for fb, tb in tokens_b:
                    if ta == tb:
                        where[(fa, fb)] += 1
    return {"decisions_with_shared_token": with_token, "examples": examples,
            "fields": [{"field": fa, "side_b_field": fb, "decisions": n}
                       for (fa, fb), n in sorted(where.items(), key=lambda item: (-item[1], item[0]))[:3]]}


def _tokens(text: str | None) -> set[str]:
    if not text:
        return set()
    words = re.split(r"\s+", text.lower().strip())
    # "INV-10158" is one token: punctuation inside a word is dropped, not a break
    cleaned = {re.sub(r"[^\w]", "", w) for w in words}
    return {w for w in cleaned if w and any(ch.isdigit() for ch in w) and len(w) >= 3}


def _group_by(kept: list[tuple[list[dict[str, Any]], list[dict[str, Any]], Any]], cardinality: Cardinality,
              text_fields: list[str]) -> GroupBy:
    """For a grouped side: a text field every member of each decision's group shares (and that
    differs between decisions), else none (the engine then searches subsets)."""
    def shared(side: int) -> tuple[str, ...]:
        for name in text_fields:
            values = []
            for decision in kept:
                members = {r[name] for r in decision[side]}
                if len(members) != 1 or None in members:
                    break
                values.append(members.pop())
            else:
                if len(set(values)) == len(values):
                    return (name,)
        return ()
    return GroupBy(side_a=shared(0) if cardinality.groups_a else (), side_b=shared(1) if cardinality.groups_b else ())


def _name(conditions: Sequence[Condition]) -> str:
    parts = []
    for c in conditions:
        if c.operator is Operator.WITHIN and c.field == "amount":
            parts.append(f"amount within {c.tolerance}" if c.tolerance is not None
                         else f"amount within {(c.tolerance_basis_points or 0) / 100:g}%")
        elif c.operator is Operator.WITHIN:
            parts.append(f"date within {c.days} days")
        elif c.operator is Operator.SIMILAR:
            parts.append(f"{c.field}~{c.b_field} {c.threshold:g}")
        else:
            parts.append(f"{c.field} in {c.b_field}" if c.operator is Operator.CONTAINS
                         else f"{c.field} {c.operator.value}" + (f" {c.b_field}" if c.side_b_field else ""))
    return ("Learned: " + ", ".join(parts))[:MAX_NAME]


# Evidence, from the engine ------------------------------------------------------------------------

CANDIDATE_ID = 0  # the id a suggestion is matched under (stored rules have ids from 1)


def candidate_rule(definition: RuleDefinition, rule_id: int = CANDIDATE_ID) -> Rule:
    """The definition as the engine takes it: active, after every other rule."""
    from dataclasses import replace

    return Rule(environment="", id=rule_id, reconciliation_id=0,
                definition=replace(definition, active=True, priority=10**7), created_at=None)


def _sides(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    return frame.filter(pl.col("side") == "a"), frame.filter(pl.col("side") == "b")


def decision_evidence(decided: pl.DataFrame, rule: Rule) -> dict[str, Any]:
    """The rule alone over the decided records as if they were open: the decisions it makes
    exactly (`explained`) and those whose records it would match otherwise (`contradicted`)."""
    side_a, side_b = _sides(decided)
    try:
        engine_a, engine_b = engine_frames(side_a, side_b)
        outcome = match_records(engine_a, engine_b, [rule])
    except CandidateExplosion as error:
        return {"explained": 0, "contradicted": None, "refused": str(error)}
    decision_of = dict(zip(decided["id"].to_list(), decided["decision"].to_list()))
    size_of = Counter(decision_of.values())
    made = outcome.members.group_by("match_no").agg(pl.col("record_id"))
    explained, contradicted = set(), set()
    for record_ids in made["record_id"].to_list():
        decisions = {decision_of[i] for i in record_ids}
        if len(decisions) == 1 and size_of[next(iter(decisions))] == len(record_ids):
            explained.update(decisions)
        else:
            contradicted.update(decisions)
    return {"explained": len(explained), "contradicted": len(contradicted - explained)}


def dry_run_evidence(open_a: pl.DataFrame, open_b: pl.DataFrame, decided: pl.DataFrame, before: Sequence[Rule],
                     rule: Rule, sample_size: int = 5,
                     unmatched: UnmatchedPairs | None = None) -> dict[str, Any]:
    """The rule after the active rules `before`, over the open records with the decided ones among
    them (records a person matched are open to it, so that taking one shows): the matches it would
    add (open records only) and those that go against a decision (`conflicting_matches`): that take
    a decided record other than as its decision did, or pair again a side-A and a side-B record a
    person unmatched (`unmatched`: domain/unmatch_decisions.py `unmatched_pairs`; those counted
    again in `unmatched_conflicts`); a sample of each (record ids by side)."""
    decided_a, decided_b = _sides(decided)
    columns = open_a.columns
    side_a = pl.concat([open_a, decided_a.select(columns)]).unique("id", keep="first").sort("id")
    side_b = pl.concat([open_b, decided_b.select(columns)]).unique("id", keep="first").sort("id")
    try:
        engine_a, engine_b = engine_frames(side_a, side_b)
        outcome = match_records(engine_a, engine_b, [*before, rule])
    except CandidateExplosion as error:
        return {"matches": None, "matched_records": None, "conflicting_matches": None, "refused": str(error)}
    decision_of = dict(zip(decided["id"].to_list(), decided["decision"].to_list()))
    size_of = Counter(decision_of.values())
    mine = outcome.matches.filter(pl.col("rule_id") == rule.id).select("match_no")
    members = outcome.members.join(mine, on="match_no", how="semi")
    grouped = members.group_by("match_no").agg(pl.col("record_id"), pl.col("side")).sort("match_no")
    adds, conflicts, remade, records, undone_conflicts = 0, 0, 0, 0, 0
    add_sample: list[dict[str, Any]] = []
    conflict_sample: list[dict[str, Any]] = []
    for record_ids, sides in zip(grouped["record_id"].to_list(), grouped["side"].to_list(), strict=True):
        decided_ids = [i for i in record_ids if i in decision_of]
        entry = {"side_a_record_ids": sorted(i for i, s in zip(record_ids, sides) if s == "a"),
                 "side_b_record_ids": sorted(i for i, s in zip(record_ids, sides) if s == "b")}
        undone = repaired_by(entry["side_a_record_ids"], entry["side_b_record_ids"], unmatched) if unmatched else None
        if not decided_ids and undone is None:
            adds += 1
            records += len(record_ids)
            if len(add_sample) < sample_size:
                add_sample.append(entry)
            continue
        decisions = {decision_of[i] for i in decided_ids}
        if len(decided_ids) == len(record_ids) and len(decisions) == 1 and size_of[decisions.pop()] == len(record_ids):
            remade += 1  # the records are a person's match now: that decision is the newest word
            continue
        conflicts += 1
        undone_conflicts += undone is not None
        if len(conflict_sample) < sample_size:
            conflict_sample.append({**entry, "decided_record_ids": sorted(decided_ids),
                                    **({"unmatched": undone.as_body()} if undone is not None else {})})
    return {"open_records": {"side_a": open_a.height, "side_b": open_b.height},
            "matches": adds, "matched_records": records, "conflicting_matches": conflicts,
            "unmatched_conflicts": undone_conflicts,
            "decisions_remade": remade, "sample": add_sample, "conflicts_sample": conflict_sample}


def ranking_key(evidence: Mapping[str, Any], definition: RuleDefinition) -> tuple[Any, ...]:
    """Best first: the most decisions explained less those contradicted and the conflicts of the
    dry run, then the fewest conflicts, then more conditions (the narrower rule)."""
    explained = evidence.get("decisions_explained") or 0
    contradicted = evidence.get("decisions_contradicted") or 0
    conflicts = (evidence.get("dry_run") or {}).get("conflicting_matches") or 0
    return (-(explained - contradicted - conflicts), conflicts + contradicted, -len(definition.conditions))
