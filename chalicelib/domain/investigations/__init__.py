"""The investigation engine of reconciliation exceptions: pure, columnar (polars, numpy, rapidfuzz
on short lists only), deterministic.

    outcome = investigate(targets, candidates, max_suggestions=5, decimal_places=2)

Input: the exception's records (targets) and the open records of the reconciliation's other side
(candidates), one polars frame each, with the matching engine's columns: `id` Int64, `amount`
Int64 (minor units, never negative), `direction`, `date`, `currency`, `description`,
`external_id`, and `reference` (a metadata reference; like external_id, it may be null or absent).
Amounts stay integers; only similarities, scores and confidences are floats.

Output (`InvestigationOutcome`): `candidate_records_searched`, the ranked `hypotheses`, the
`proposal` (in rank order each target's best hypothesis whose records no earlier one took, in the
best one's currency, at most 1,000: one match when accepted), `suggested_record_ids` (exactly the
proposal's candidates), `confidence_score` (of the proposal's weakest pairing: accepting matches
them all), and a `recommendation_text` that proposes exactly the proposal, describing its first
ten pairings (what matched and what differs, each one's confidence floored to a tenth of a
percent; a close rival is named as not suggested) and counting the rest.

A zero amount never pairs with a non-zero one (a prenote with the payment's reference explains
nothing of its amount); splits take non-zero parts only.

The search, per currency (currencies never mix), before any Python-level text work:

1. Near amounts. Candidates sorted by amount; each target's window, the wider of 3.5% and five
   whole currency units, is two `searchsorted`s. An equal amount counts within 60 days, a near
   one within 15; the best 200 a target by a cheap amount-and-date score go on.
2. Equal references. Targets' normalized references (case, spacing and punctuation dropped; four
   characters or more) joined to the candidates' external_id or reference, within 15 days:
   these reach candidates of any amount (kind "reference" outside the amount window).
3. Splits. Candidates sorted by date; for each target, those within 5 days, of one direction,
   each below the target's amount: the 1,000 nearest in date, then the 20 most alike in text.
   Every subset of 2, 3 or 4 of them (at most 6,175, summed at once in numpy) whose sum equals
   the target's amount exactly; the three smallest and most alike are kept.
4. Similarity, on those short lists only (`rapidfuzz.process.cpdist`, pair by pair): references
   by normalized Levenshtein similarity, the best of external_id and reference on each side (one
   of six characters or more inside the other counts as 95% alike: a bank drops an 'INV' prefix),
   or a reference found inside the other side's description (partial ratio); descriptions by
   token sort ratio.

The model (scoring.py), in log-odds, hand-weighted so each weight reads as evidence: -3, plus 4
for an equal amount (a split: its sum), 2.5 x closeness within the near window, 1.5 x
exp(-days/3) for the date and -3 x min(days/20, 1) for a far one (an equal amount two weeks
away is as often the next payment of that size), 3 x reference alikeness (from 60% similar, full
at 90%) and 0.5 more for an equal reference (the next invoice's is often one character away),
-1.5 when both business references exist and are unlike (external ids are each system's own, so
their difference proves nothing), 1 x description alikeness, -0.5 for each split record beyond
the first. A hypothesis's score is its plausibility sigmoid(z) times
the square of its share against its target's strongest rival, sigmoid(z - z_rival): twins
quarter each other.

Calibration: the score goes through a table (scoring.CALIBRATION) from score to the share of right
best suggestions, fitted by `fit_calibration` (tests/support/calibration_fit.py) on the TRAINING
seed of the labelled cases (tests/support/labelled.py; isotonic regression by pooling adjacent
violators, blocks of at least 25 cases, each block's accuracy smoothed as (right + 1) / (cases + 2));
it is verified on the TEST seed, and a test re-fits it on the training seed and compares. Every
pairing of a suggestion is measured apart from that generator too, on ledgers short by a fee
beside same-amount decoys 14 days away (tests/support/fee_ledger.py). Only the
table ships: the fitting and the labelled cases are test code. The table is committed, not fitted
at import: fitting means running 600 investigations (about 5 s). A monotone map, it never changes
the ranking.

Determinism: the inputs are sorted by id first and every order ends on ids, so row order never
changes the outcome. Not searched: several targets summing to one candidate, and subsets whose
sum is near but not equal to the target's.
"""
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names, for type checkers and readers
    from chalicelib.domain.investigations.engine import RECORD_SCHEMA, investigate
    from chalicelib.domain.investigations.outcome import Hypothesis, InvestigationInputError, InvestigationOutcome

# Loaded on first use (PEP 562): the package also holds the investigation itself (investigation.py),
# which the API imports, and the API's functions ship without the engine's layer (polars, numpy,
# rapidfuzz).
_EXPORTS = {"investigate": "engine", "RECORD_SCHEMA": "engine", "InvestigationOutcome": "outcome",
            "Hypothesis": "outcome", "InvestigationInputError": "outcome"}
__all__ = ["investigate", "RECORD_SCHEMA", "InvestigationOutcome", "Hypothesis", "InvestigationInputError"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
