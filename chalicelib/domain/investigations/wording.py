"""The recommendation in plain English: the proposal (per target, the hypothesis suggested for it,
what matched and what differs), the records it leaves out and why, and what accepting matches.
It names as suggested exactly the records of the suggestion; a close rival is named as not part of it."""
from __future__ import annotations

import math
from typing import Any

import polars as pl
from rapidfuzz.distance import Levenshtein

from chalicelib.domain.investigations import scoring
from chalicelib.domain.investigations.outcome import Hypothesis
from chalicelib.domain.reconciliation_exceptions import format_amount

MAX_SENTENCES = 10        # pairings described, then as many other records
ALIKE_REFERENCE = scoring.EQUAL  # reference similarity counted as equal (after case, spacing, punctuation)
ALIKE_DESCRIPTION = 0.8
RIVAL_SHARE = 0.8         # a runner-up this close to the best one is named as well

Row = dict[str, Any]  # one record, by column name


LEFT_OUT = {
    "taken": "the records that fit it best are suggested for another record",
    "currency": "it is in another currency than the suggestion, and a match holds one",
    "limit": "a suggestion holds at most {limit} pairings",
}


def recommendation(targets: pl.DataFrame, candidates: pl.DataFrame, proposal: list[Hypothesis],
                   ranked: list[Hypothesis], left_out: dict[int, str], *, searched: int, decimal_places: int,
                   limit: int = MAX_SENTENCES) -> str:
    described = proposal[:MAX_SENTENCES]  # the suggestion may hold more: they are counted below
    rows = _rows(targets, candidates, {i for h in described for i in h.candidate_ids})
    sentences = []
    for h in described:
        sentence = _explained(h, rows, decimal_places)
        rival = next((r for r in ranked if r.target_ids == h.target_ids and r is not h), None)
        if rival is not None and rival.score >= RIVAL_SHARE * h.score:
            sentence += (f" {_records(rival.candidate_ids).capitalize()} "
                         f"{'fits' if len(rival.candidate_ids) == 1 else 'fit'} almost as well and "
                         f"{'is' if len(rival.candidate_ids) == 1 else 'are'} not suggested: check both.")
        sentences.append(sentence)
    if len(proposal) > len(described):
        undescribed = proposal[len(described):]
        low, high = (_percent(f(h.confidence for h in undescribed)) for f in (min, max))
        verb = "pairings are" if len(undescribed) != 1 else "pairing is"
        sentences.append(f"{len(undescribed)} more {verb} suggested and not described here "
                         f"(confidence {low if low == high else f'{low} to {high}'}).")
    explained = {h.target_ids for h in proposal}
    others = []
    for target_id in targets["id"].to_list():
        if (target_id,) in explained:
            continue
        label = _label(rows[target_id], decimal_places, with_text=False)
        if target_id in left_out:
            others.append(f"Record {label} is not part of this suggestion: "
                          f"{LEFT_OUT[left_out[target_id]].format(limit=limit)}; investigate it on its own.")
        else:
            others.append(f"Nothing among the {searched:,} open records of the other side matches record "
                          f"{label} on amount, reference or description.")
    room = max(MAX_SENTENCES - len(sentences), 0)
    if len(others) > room:
        rest = len(others) - room
        others = others[:room] + [f"{rest} more record{'s are' if rest != 1 else ' is'} not described here."]
    sentences += others
    target_ids = tuple(i for h in proposal for i in h.target_ids)
    candidate_ids = tuple(i for h in proposal for i in h.candidate_ids)
    if len(proposal) > len(described):  # too many to name: the suggestion's ids list them
        sentences.append(f"Accepting matches {len(target_ids)} records of this exception with the "
                         f"{len(candidate_ids)} suggested records.")
    elif proposal:
        sentences.append(f"Accepting matches {_records(target_ids)} with {_records(candidate_ids)}.")
    return " ".join(sentences)


def _rows(targets: pl.DataFrame, candidates: pl.DataFrame, wanted: set[int]) -> dict[int, Row]:
    found = candidates.filter(pl.col("id").is_in(sorted(wanted))) if wanted else candidates.clear()
    return {row["id"]: row for row in pl.concat([targets, found]).iter_rows(named=True)}


def _label(row: Row, decimal_places: int, *, with_text: bool = True) -> str:
    text = f" '{row['description']}'" if with_text and row["description"] else ""
    return (f"{row['id']} ({format_amount(row['amount'], decimal_places)} {row['currency']} on "
            f"{row['date'].isoformat()}{',' if text else ''}{text})")


def _records(ids: tuple[int, ...]) -> str:
    if len(ids) == 1:
        return f"record {ids[0]}"
    return f"records {', '.join(str(i) for i in ids[:-1])} and {ids[-1]}"


def _explained(h: Hypothesis, rows: dict[int, Row], decimal_places: int) -> str:
    target = rows[h.target_ids[0]]
    if h.kind == "split":
        head = (f"{_records(h.candidate_ids).capitalize()} together sum to "
                f"{format_amount(target['amount'] + h.amount_difference, decimal_places)} {target['currency']}, "
                f"the amount of record {target['id']}")
        differs = _split_dates(h, rows, target)
        if h.reference_similarity is not None and h.reference_similarity >= ALIKE_REFERENCE:
            differs.insert(0, "their references match")
    else:
        candidate = rows[h.candidate_ids[0]]
        matched = [name for name, same in (
            ("amount", h.amount_difference == 0),
            ("reference", h.reference_similarity is not None and h.reference_similarity >= ALIKE_REFERENCE),
            ("description", h.description_similarity is not None and h.description_similarity >= ALIKE_DESCRIPTION),
            ("date", h.days_apart == 0)) if same]
        head = (f"Record {_label(candidate, decimal_places)} "
                + (f"matches record {target['id']} on {_listed(matched)}" if matched
                   else f"is the closest record to record {target['id']}"))
        differs = [*_amount_difference(h, target, decimal_places), *_days(h.days_apart, "it was"),
                   *_reference_difference(h, target, candidate)]
    return f"{head}; {_listed(differs) if differs else 'nothing differs'}{_confidence(h)}."


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _amount_difference(h: Hypothesis, target: Row, decimal_places: int) -> list[str]:
    if h.amount_difference == 0:
        return []
    size = format_amount(abs(h.amount_difference), decimal_places)
    percent = abs(h.amount_difference) * 100 / target["amount"] if target["amount"] else 0.0
    fee = ", as a fee would be" if h.kind == "near_amount" else ""
    return [f"its amount is {size} {target['currency']} {'lower' if h.amount_difference < 0 else 'higher'} "
            f"({percent:.2f}%){fee}"]


def _days(days: int, subject: str) -> list[str]:
    if days == 0:
        return []
    return [f"{subject} booked {abs(days)} day{'s' if abs(days) != 1 else ''} {'later' if days > 0 else 'earlier'}"]


def _split_dates(h: Hypothesis, rows: dict[int, Row], target: Row) -> list[str]:
    first, last = (f((rows[i]["date"] - target["date"]).days for i in h.candidate_ids) for f in (min, max))
    if first == last:
        return _days(first, "they were")
    if first >= 0 or last <= 0:
        later = "later" if last > 0 else "earlier"
        low, high = sorted((abs(first), abs(last)))
        return [f"they were booked {low} to {high} days {later}"]
    return [f"they were booked between {-first} day{'s' if first != -1 else ''} earlier and {last} "
            f"day{'s' if last != 1 else ''} later"]


def _reference_difference(h: Hypothesis, target: Row, candidate: Row) -> list[str]:
    if h.reference_similarity is None or h.reference_similarity >= ALIKE_REFERENCE:
        if h.reference_similarity is not None and _raw_references(target) & _raw_references(candidate):
            return []
        return ["its reference differs only in case or spacing"] if h.reference_similarity is not None else []
    if h.reference_similarity >= 0.75:
        theirs, ours = _closest_references(target, candidate)
        edits = Levenshtein.distance(theirs.casefold(), ours.casefold())
        return [f"its reference '{ours}' differs from '{theirs}' by {edits} character{'s' if edits != 1 else ''}"]
    if target["reference"] and candidate["reference"]:  # external ids are each system's own: no news
        return [f"its reference '{candidate['reference']}' does not resemble '{target['reference']}'"]
    return []


def _raw_references(row: Row) -> set[str]:
    return {row[k] for k in ("external_id", "reference") if row[k]}


def _closest_references(target: Row, candidate: Row) -> tuple[str, str]:
    pairs = [(a, b) for a in sorted(_raw_references(target)) for b in sorted(_raw_references(candidate))]
    return min(pairs, key=lambda p: (Levenshtein.normalized_distance(p[0].casefold(), p[1].casefold()), p))


def _confidence(h: Hypothesis) -> str:
    return f" (confidence {_percent(h.confidence)})"


def _percent(confidence: float) -> str:
    """Floored to a tenth of a percent: 0.997 is 99.7%, and only a certainty is 100%."""
    return f"{math.floor(round(confidence * 1000, 6)) / 10:.1f}%"
