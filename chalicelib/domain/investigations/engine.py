"""The investigation: block the candidates by currency, amount and date with sorted searches, score
the short list (rapidfuzz on it only), search small subsets for splits, rank and explain."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import TYPE_CHECKING, cast

import numpy as np
import polars as pl
from rapidfuzz import fuzz, process, utils
from rapidfuzz.distance import Levenshtein

from chalicelib.domain.investigations import scoring
from chalicelib.domain.investigations.outcome import Hypothesis, InvestigationInputError, InvestigationOutcome
from chalicelib.domain.investigations.wording import recommendation
from chalicelib.domain.money import MAX_AMOUNT

if TYPE_CHECKING:
    import numpy.typing as npt

RECORD_SCHEMA = {"id": pl.Int64, "amount": pl.Int64, "direction": pl.Utf8, "date": pl.Date, "currency": pl.Utf8,
                 "description": pl.Utf8, "external_id": pl.Utf8, "reference": pl.Utf8}
REQUIRED = ("id", "amount", "date", "currency")

NEAR_BASIS_POINTS = 350      # a near amount: within 3.5% of the target's ...
NEAR_WHOLE_UNITS = 5         # ... or within 5 whole currency units, whichever is wider
EXACT_DAYS = 60              # an equal amount counts this many days either side
NEAR_DAYS = 15               # a near amount, or an equal reference, this many
WINDOW_CAP = 20_000          # records of the amount window looked at per target (the nearest amounts)
PER_TARGET = 200             # single records scored per target (the best by amount and date)
MIN_REFERENCE = 4            # characters a normalized reference needs to be joined on
MIN_IN_TEXT = 6              # ... and to be looked for in the other side's description or reference
CONTAINED = 0.95             # a reference inside the other one counts as alike (_reference_compared)
SPLIT_DAYS = 5               # split parts: this many days either side of the target
SPLIT_PRESELECT = 1_000      # split parts ranked by text per target (the nearest in date)
SPLIT_POOL = 20              # split parts searched per target and direction
SPLIT_SIZES = (2, 3, 4)
SPLITS_KEPT = 3              # exact-sum subsets kept per target
MAX_PROPOSED = 1_000         # pairings one suggestion (one accepted match) holds; the text
                             # describes the first wording.MAX_SENTENCES of them and counts the rest


@dataclass(frozen=True)
class _Pairs:
    """Target/candidate pairs of one currency, as positions into that currency's frames."""
    t: np.ndarray
    c: np.ndarray
    reached_by_reference: np.ndarray   # not in the amount window: an equal reference brought it


def investigate(targets: pl.DataFrame, candidates: pl.DataFrame, *, max_suggestions: int = 5,
                decimal_places: int = 2) -> InvestigationOutcome:
    targets, candidates_in = _prepared(targets, "targets"), _prepared(candidates, "candidates")
    hypotheses: list[Hypothesis] = []
    for currency in sorted(set(targets["currency"].drop_nulls().to_list())):
        t = targets.filter(pl.col("currency") == currency)
        c = candidates_in.filter(pl.col("currency") == currency)
        if not c.is_empty():
            hypotheses.extend(_currency_hypotheses(t, c, decimal_places))
    ranked = _ranked(hypotheses, max_suggestions)
    currency_of = dict(zip(targets["id"].to_list(), targets["currency"].to_list()))
    proposal, left_out = proposed(ranked, currency_of)
    text = recommendation(targets, candidates_in, proposal, ranked, left_out, searched=candidates.height,
                          decimal_places=decimal_places, limit=MAX_PROPOSED)
    return InvestigationOutcome(candidate_records_searched=candidates.height,
                                suggested_record_ids=[i for h in proposal for i in h.candidate_ids],
                                confidence_score=min((h.confidence for h in proposal), default=0.0),
                                recommendation_text=text, hypotheses=ranked, proposal=proposal)


def proposed(ranked: list[Hypothesis], currency_of: dict[int, str]) -> tuple[list[Hypothesis], dict[int, str]]:
    """What the investigation suggests matching: in rank order, each target's best hypothesis
    whose records no earlier one took (else its next best), in the best one's currency (a match
    holds one), at most MAX_PROPOSED. Also, why each target with hypotheses was left out."""
    proposal: list[Hypothesis] = []
    taken: set[int] = set()
    currency = currency_of.get(ranked[0].target_ids[0]) if ranked else None
    for h in ranked:
        if len(proposal) == MAX_PROPOSED:
            break
        if (any(p.target_ids == h.target_ids for p in proposal) or taken.intersection(h.candidate_ids)
                or currency_of.get(h.target_ids[0]) != currency):
            continue
        proposal.append(h)
        taken.update(h.candidate_ids)
    chosen = {p.target_ids for p in proposal}
    left_out: dict[int, str] = {}
    for h in ranked:
        target = h.target_ids[0]
        if h.target_ids in chosen or target in left_out:
            continue
        left_out[target] = ("currency" if currency_of.get(target) != currency
                            else "taken" if len(proposal) < MAX_PROPOSED else "limit")
    return proposal, left_out


def _prepared(frame: pl.DataFrame, name: str) -> pl.DataFrame:
    missing = [column for column in REQUIRED if column not in frame.columns]
    if missing:
        raise InvestigationInputError(f"{name} lack the columns {', '.join(missing)}")
    absent = [pl.lit(None, dtype=pl.Utf8).alias(k) for k in RECORD_SCHEMA if k not in frame.columns]
    frame = frame.with_columns(absent).select(pl.col(k).cast(v) for k, v in RECORD_SCHEMA.items())
    if frame.select(pl.any_horizontal(pl.col("id", "amount", "date").is_null().any())).item():
        raise InvestigationInputError(f"{name} have a null id, amount or date")
    # An Int64 column with no null (checked above): its min() is an int.
    if frame.height and cast(int, frame["amount"].min()) < 0:
        raise InvestigationInputError(f"{name} have a negative amount (amounts are magnitudes)")
    if frame["id"].n_unique() != frame.height:
        raise InvestigationInputError(f"{name} repeat an id")
    return frame.with_columns(day=pl.col("date").cast(pl.Int32)).sort("id")


def normalized_reference(column: str) -> pl.Expr:
    """Case, spacing and punctuation never tell references apart; empty is none."""
    text = pl.col(column).str.to_lowercase().str.replace_all(r"[^\p{L}\p{N}]+", "")
    return pl.when(text.str.len_chars() > 0).then(text)


def _currency_hypotheses(t: pl.DataFrame, c: pl.DataFrame, decimal_places: int) -> list[Hypothesis]:
    t = t.with_columns(t_ext=normalized_reference("external_id"), t_ref=normalized_reference("reference"),
                       t_text=normalized_reference("description"))
    c = c.sort("amount", "id").with_columns(c_ext=normalized_reference("external_id"),
                                            c_ref=normalized_reference("reference"))
    c = c.with_columns(c_text=normalized_reference("description"))
    width = np.maximum(_share(t["amount"].to_numpy(), NEAR_BASIS_POINTS), NEAR_WHOLE_UNITS * 10 ** decimal_places)
    pairs = _without_zero_against_nonzero(_single_pairs(t, c, width), t, c)
    found = _single_hypotheses(t, c, pairs, width)
    found.extend(_split_hypotheses(t, c))
    return found


def _share(amounts: npt.NDArray[np.int64], basis_points: int) -> npt.NDArray[np.int64]:
    """amounts * basis_points // 10_000, exact for every amount up to money.MAX_AMOUNT: the product
    itself would pass 64 bits."""
    return amounts // 10_000 * basis_points + amounts % 10_000 * basis_points // 10_000


# Single records -------------------------------------------------------------------------------

def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (i, j) with lo[i] <= j < hi[i], grouped by i."""
    counts = np.maximum(hi - lo, 0)
    i = np.repeat(np.arange(len(lo)), counts)
    starts = np.cumsum(counts) - counts
    return i, lo[i] + np.arange(counts.sum()) - starts[i]


def _single_pairs(t: pl.DataFrame, c: pl.DataFrame, width: np.ndarray) -> _Pairs:
    """The amount window by `searchsorted` on the sorted amounts (capped at the WINDOW_CAP nearest),
    cut to its date window, best PER_TARGET by a cheap score; plus the equal references."""
    t_amount, c_amount = t["amount"].to_numpy(), c["amount"].to_numpy()
    t_day, c_day, c_id = t["day"].to_numpy(), c["day"].to_numpy(), c["id"].to_numpy()
    middle = np.searchsorted(c_amount, t_amount)
    lo = np.maximum(np.searchsorted(c_amount, t_amount - width, "left"), middle - WINDOW_CAP // 2)
    top = t_amount + np.minimum(width, MAX_AMOUNT - t_amount)  # no amount is above the bound: stop there, not wrap
    hi = np.minimum(np.searchsorted(c_amount, top, "right"), middle + WINDOW_CAP // 2)
    ti, ci = _ranges(lo, hi)
    difference, days = np.abs(c_amount[ci] - t_amount[ti]), np.abs(c_day[ci] - t_day[ti])
    keep = days <= np.where(difference == 0, EXACT_DAYS, NEAR_DAYS)
    ti, ci, difference, days = ti[keep], ci[keep], difference[keep], days[keep]
    cheap = 2.0 * (difference == 0) - difference / width[ti] - days / EXACT_DAYS
    order = np.lexsort((c_id[ci], -cheap, ti))
    ti, ci = ti[order], ci[order]
    first = np.searchsorted(ti, ti, "left")
    keep = np.arange(len(ti)) - first < PER_TARGET
    ti, ci = ti[keep], ci[keep]

    by_reference = _equal_references(t, c)
    if len(by_reference[0]):
        near = np.abs(c_day[by_reference[1]] - t_day[by_reference[0]]) <= NEAR_DAYS
        by_reference = (by_reference[0][near], by_reference[1][near])
    known = set(zip(ti.tolist(), ci.tolist()))
    extra = [(i, j) for i, j in zip(*(x.tolist() for x in by_reference)) if (i, j) not in known]
    extra_t = np.array([i for i, _ in extra], dtype=np.int64)
    extra_c = np.array([j for _, j in extra], dtype=np.int64)
    return _Pairs(np.concatenate([ti, extra_t]).astype(np.int64), np.concatenate([ci, extra_c]).astype(np.int64),
                  np.r_[np.zeros(len(ti), dtype=bool), np.ones(len(extra), dtype=bool)])


def _without_zero_against_nonzero(pairs: _Pairs, t: pl.DataFrame, c: pl.DataFrame) -> _Pairs:
    """A zero amount (a prenote, a notification of change) never explains a non-zero one, however
    alike their references, nor the other way round."""
    keep = (t["amount"].to_numpy()[pairs.t] == 0) == (c["amount"].to_numpy()[pairs.c] == 0)
    return _Pairs(pairs.t[keep], pairs.c[keep], pairs.reached_by_reference[keep])


def _equal_references(t: pl.DataFrame, c: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    wanted = (t.with_row_index("ti").unpivot(index="ti", on=["t_ext", "t_ref"], value_name="key")
              .filter(pl.col("key").str.len_chars() >= MIN_REFERENCE).select("ti", "key").unique())
    if wanted.is_empty():
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    keys = wanted["key"].implode()
    have = (c.with_row_index("ci").select("ci", "c_ext", "c_ref")
            .filter(pl.col("c_ext").is_in(keys) | pl.col("c_ref").is_in(keys))
            .unpivot(index="ci", on=["c_ext", "c_ref"], value_name="key").drop_nulls("key"))
    joined = wanted.join(have.select("ci", "key"), on="key").select("ti", "ci").unique().sort("ti", "ci")
    return joined["ti"].to_numpy().astype(np.int64), joined["ci"].to_numpy().astype(np.int64)


def _similarities(t: pl.DataFrame, c: pl.DataFrame, ti: np.ndarray, ci: np.ndarray
                  ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.float64]]:
    """Per pair: reference similarity, the best of external_id and reference on each side,
    normalized, Levenshtein similarity, or a reference found in the other side's description
    (partial ratio); whether the two `reference`s (business references, unlike external ids, which
    are each system's own) both exist and are unlike; description similarity, token sort ratio.
    Similarities are 0..1, NaN when a side has no text."""
    left = _texts(t, ["t_ext", "t_ref", "t_text", "description"], ti)
    right = _texts(c, ["c_ext", "c_ref", "c_text", "description"], ci)
    reference = np.full(len(ti), np.nan)
    conflict = np.zeros(len(ti), dtype=bool)
    for a in ("t_ext", "t_ref"):
        for b in ("c_ext", "c_ref"):
            present, ratio = _reference_compared(left[a], right[b])
            reference[present] = np.fmax(reference[present], ratio)
            if (a, b) == ("t_ref", "c_ref"):
                conflict[present] = ratio < scoring.UNLIKE_REFERENCE
    for wanted, text in [(left["t_ext"], right["c_text"]), (left["t_ref"], right["c_text"]),
                         (right["c_ext"], left["t_text"]), (right["c_ref"], left["t_text"])]:
        present, ratio = _compared(wanted, text, fuzz.partial_ratio, 100.0, shortest=MIN_IN_TEXT)
        reference[present] = np.fmax(reference[present], ratio)
    conflict &= ~(reference >= scoring.UNLIKE_REFERENCE)
    description = np.full(len(ti), np.nan)
    present, ratio = _compared(left["description"], right["description"], fuzz.token_sort_ratio, 100.0,
                               alike=(left["t_text"] != None) & (right["c_text"] != None))  # noqa: E711
    description[present] = ratio
    return reference, conflict, description


def _reference_compared(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Normalized references, where both exist: Levenshtein similarity, or at least CONTAINED when
    the shorter one, of MIN_IN_TEXT characters or more, lies inside the other (a bank dropping an
    'INV' prefix): a partial ratio of 100."""
    present, similarity = _compared(left, right, Levenshtein.normalized_similarity, 1.0)
    if not present.any():
        return present, similarity
    _, partial = _compared(left[present], right[present], fuzz.partial_ratio, 100.0)
    inside = np.flatnonzero((partial >= 1.0) & (similarity < CONTAINED))  # few: the lengths in Python
    long_enough = [min(len(a), len(b)) >= MIN_IN_TEXT for a, b in zip(left[present][inside], right[present][inside])]
    similarity[inside[np.array(long_enough, dtype=bool)]] = CONTAINED
    return present, similarity


def _texts(frame: pl.DataFrame, columns: list[str], rows: np.ndarray) -> dict[str, np.ndarray]:
    picked = frame.select(pl.col(columns).gather(pl.Series(rows, dtype=pl.UInt32)))
    return {k: np.array(v, dtype=object) for k, v in picked.to_dict(as_series=False).items()}


def _compared(left: np.ndarray, right: np.ndarray, scorer: Callable[..., float], scale: float, *, shortest: int = 0,
              alike: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Where both texts exist, their similarity 0..1. With `shortest`: only where the left text has
    that many characters and fits inside the right one (it is looked for in it)."""
    present = (left != None) & (right != None) if alike is None else alike  # noqa: E711
    if shortest:
        present &= np.fromiter((p and shortest <= len(a) <= len(b) for p, a, b in zip(present, left, right)), bool,
                               len(left))
    if not present.any():
        return present, np.zeros(0)
    processor = utils.default_process if scorer is fuzz.token_sort_ratio else None
    return present, process.cpdist(left[present], right[present], scorer=scorer, processor=processor,
                                   dtype=np.float64) / scale


def _single_hypotheses(t: pl.DataFrame, c: pl.DataFrame, pairs: _Pairs, width: np.ndarray) -> list[Hypothesis]:
    if not len(pairs.t):
        return []
    difference = c["amount"].to_numpy()[pairs.c] - t["amount"].to_numpy()[pairs.t]
    days = c["day"].to_numpy()[pairs.c] - t["day"].to_numpy()[pairs.t]
    reference, conflict, description = _similarities(t, c, pairs.t, pairs.c)
    in_window = np.abs(difference) <= width[pairs.t]
    logit = scoring.logit(difference=difference, width=width[pairs.t], days=days, reference=reference,
                          conflict=conflict, description=description, records=np.ones(len(difference)))
    kinds = np.where(difference == 0, "exact", np.where(in_window, "near_amount", "reference"))
    t_ids, c_ids = t["id"].to_numpy()[pairs.t], c["id"].to_numpy()[pairs.c]
    return [_draft((int(a),), (int(b),), str(k), int(d), int(n), _rounded(r), _rounded(s), float(z))
            for a, b, k, d, n, r, s, z in zip(t_ids, c_ids, kinds, difference, days, reference, description, logit)]


# Splits -------------------------------------------------------------------------------------

@lru_cache(maxsize=SPLIT_POOL + 1)
def _subsets(n: int) -> np.ndarray:
    """Every subset of SPLIT_SIZES records out of n, as rows of positions padded with n."""
    rows = [combo + (n,) * (max(SPLIT_SIZES) - size) for size in SPLIT_SIZES for combo in combinations(range(n), size)]
    return np.array(rows, dtype=np.int64).reshape(-1, max(SPLIT_SIZES))


def _split_hypotheses(t: pl.DataFrame, c: pl.DataFrame) -> list[Hypothesis]:
    """For each target, the open records of one direction within SPLIT_DAYS whose amounts are below
    the target's: the SPLIT_PRESELECT nearest in date, then the SPLIT_POOL most alike in text (then
    nearest in date, then lowest id); every subset of 2..4 of them whose sum equals the target's."""
    c = c.sort("day", "id")
    t_amount, c_amount = t["amount"].to_numpy(), c["amount"].to_numpy()
    t_day, c_day, c_id = t["day"].to_numpy(), c["day"].to_numpy(), c["id"].to_numpy()
    lo = np.searchsorted(c_day, t_day - SPLIT_DAYS, "left")
    hi = np.searchsorted(c_day, t_day + SPLIT_DAYS, "right")
    ti, ci = _ranges(lo, hi)
    keep = (c_amount[ci] < t_amount[ti]) & (c_amount[ci] > 0) & (t_amount[ti] > 0)
    ti, ci = ti[keep], ci[keep]
    days = np.abs(c_day[ci] - t_day[ti])
    order = np.lexsort((c_id[ci], days, ti))
    ti, ci, days = ti[order], ci[order], days[order]
    keep = np.arange(len(ti)) - np.searchsorted(ti, ti, "left") < SPLIT_PRESELECT
    ti, ci, days = ti[keep], ci[keep], days[keep]
    if not len(ti):
        return []
    reference, conflict, description = _similarities(t, c, ti, ci)
    alike = np.fmax(np.nan_to_num(scoring.reference_evidence(reference), nan=0.0),
                    np.nan_to_num(scoring.description_evidence(description), nan=0.0))
    credit = (c["direction"].to_numpy()[ci] == "credit")
    found: list[Hypothesis] = []
    for target in np.unique(ti):
        options = []
        for direction in (True, False):
            mine = np.flatnonzero((ti == target) & (credit == direction))
            mine = mine[np.lexsort((c_id[ci[mine]], days[mine], -alike[mine]))][:SPLIT_POOL]
            if len(mine) < 2:
                continue
            subsets = _subsets(len(mine))
            amounts = np.r_[c_amount[ci[mine]], 0]
            if int(amounts.max()) > MAX_AMOUNT // max(SPLIT_SIZES):
                amounts = amounts.astype(object)  # a sum of parts near the bound would wrap in 64 bits
            for row in subsets[amounts[subsets].sum(axis=1) == t_amount[target]]:
                members = mine[row[row < len(mine)]]
                options.append((len(members), -float(np.mean(alike[members])), int(days[members].max()),
                                tuple(sorted(int(c_id[ci[m]]) for m in members)), members))
        for size, _, _, ids, members in sorted(options, key=lambda o: o[:4])[:SPLITS_KEPT]:
            latest = members[np.argmax(c_day[ci[members]])]
            r, s = _mean(reference[members]), _mean(description[members])
            logit = scoring.logit(difference=np.zeros(1), width=np.ones(1), days=np.array([days[latest]]),
                                  reference=np.array([r]), conflict=np.array([conflict[members].all()]),
                                  description=np.array([s]), records=np.array([size]))
            found.append(_draft((int(t["id"][int(target)]),), ids, "split", 0,
                                int(c_day[ci[latest]] - t_day[target]), _rounded(r), _rounded(s), float(logit[0])))
    return found


def _mean(values: np.ndarray) -> float:
    present = values[~np.isnan(values)]
    return float(present.mean()) if len(present) else float("nan")


def _rounded(value: float) -> float | None:
    return None if np.isnan(value) else round(float(value), 4)


# Ranking ------------------------------------------------------------------------------------

def _draft(target_ids: tuple[int, ...], candidate_ids: tuple[int, ...], kind: str, difference: int, days: int,
           reference: float | None, description: float | None, logit: float) -> Hypothesis:
    """A hypothesis before ranking: its `score` holds the logit for now."""
    return Hypothesis(target_ids, candidate_ids, kind, difference, days, reference, description, logit, 0.0)


def _ranked(drafts: list[Hypothesis], max_suggestions: int) -> list[Hypothesis]:
    """Per target, the hypotheses by logit; each one's score weighs its plausibility by its share
    against its strongest rival (see scoring.py). Every target's best first (by confidence), then
    every target's second, and so on; ties by ids."""
    by_target: dict[tuple[int, ...], list[Hypothesis]] = {}
    for draft in drafts:
        by_target.setdefault(draft.target_ids, []).append(draft)
    ranked = []
    for mine in by_target.values():
        mine.sort(key=lambda h: (-h.score, len(h.candidate_ids), h.candidate_ids))
        score = scoring.share_score(np.array([h.score for h in mine]))
        confidence = scoring.calibrated(score)
        for place, (h, s, p) in enumerate(zip(mine[:max_suggestions], score, confidence)):
            ranked.append((place, Hypothesis(h.target_ids, h.candidate_ids, h.kind, h.amount_difference, h.days_apart,
                                     h.reference_similarity, h.description_similarity, round(float(s), 6),
                                     round(float(p), 4))))
    ranked.sort(key=lambda h: (h[0], -h[1].confidence, -h[1].score, h[1].target_ids, h[1].candidate_ids))
    return [h for _, h in ranked]
