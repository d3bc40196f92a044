"""How much a hypothesis is believed: a hand-weighted logistic model of five features, a share
against the strongest rival, and the calibration table that turns that score into the observed
share of right answers (fitted by `tests/support/calibration_fit.fit_calibration`; see the package
docstring)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    Floats = npt.NDArray[np.float64]
    Numbers = npt.NDArray[np.number[Any]]  # integers or floats

# The model, in logit units: each weight is what one full unit of its feature adds.
BIAS = -3.0
EXACT_AMOUNT = 4.0       # the amount (a split: the sum) equals the target's
NEAR_AMOUNT = 2.5        # times 1 - |difference| / near window (0 outside the window)
SAME_DATE = 1.5          # times exp(-|days apart| / DATE_SCALE_DAYS)
DATE_SCALE_DAYS = 3.0
FAR_DATE = -3.0          # times min(|days apart| / FAR_DAYS, 1): an equal amount two weeks away
FAR_DAYS = 20.0          # is as often the next payment of the same size as this one
REFERENCE = 3.0          # times reference_evidence: 0 .. 1 (alike)
EQUAL_REFERENCE = 0.5    # and more when equal (but for case, spacing and punctuation): the next
                         # invoice's reference is often one character away
EQUAL = 0.999            # a reference similarity counted as equal (the text says it matches)
REFERENCE_CONFLICT = -1.5  # both have a business reference and they are unlike
UNLIKE_REFERENCE = 0.6
DESCRIPTION = 1.0        # times description_evidence: 0 .. 1
SHARE_POWER = 2          # the share counts twice: a rival costs more than weak evidence
EXTRA_RECORD = -0.5      # each record of a split beyond the first

# score at least -> confidence (the observed share of right best suggestions on the training
# seed, isotonic and smoothed). Written by `.venv/bin/python -m tests.support.calibration_fit`, which
# prints `fit_calibration(labelled.cases(TRAINING_SEED))` (both in tests/support/).
CALIBRATION: tuple[tuple[float, float], ...] = (
    (0.0, 0.037),
    (0.056479, 0.103),
    (0.105977, 0.37),
    (0.172247, 0.45),
    (0.228063, 0.593),
    (0.280156, 0.733),
    (0.412813, 0.806),
    (0.551177, 0.914),
    (0.674287, 0.955),
    (0.795026, 0.997),
)


def reference_evidence(similarity: Floats) -> Floats:
    """References at least 90% alike count fully (one typo in ten characters), from 60% in part.
    Unlike ones count nothing here (two systems' own ids never look alike): see REFERENCE_CONFLICT."""
    return np.clip((similarity - UNLIKE_REFERENCE) / 0.3, 0.0, 1.0)


def description_evidence(similarity: Floats) -> Floats:
    """Descriptions are worded differently by each system: only alikeness counts, from 50%."""
    return np.clip((similarity - 0.5) / 0.4, 0.0, 1.0)


def logit(*, difference: Numbers, width: Numbers, days: Numbers, reference: Floats,
          conflict: npt.NDArray[np.bool_], description: Floats, records: Numbers) -> Floats:
    """The model's log-odds that a hypothesis is right, taken alone. Missing texts add nothing."""
    gap = np.abs(difference)
    near = np.where((gap > 0) & (gap <= width), 1.0 - gap / np.maximum(width, 1), 0.0)
    # Annotated: numpy's stubs lose the dtype of abs() on integer-or-float input.
    z: Floats = (BIAS + EXACT_AMOUNT * (gap == 0) + NEAR_AMOUNT * near
                 + SAME_DATE * np.exp(-np.abs(days) / DATE_SCALE_DAYS)
                 + FAR_DATE * np.minimum(np.abs(days) / FAR_DAYS, 1.0)
                 + REFERENCE * np.nan_to_num(reference_evidence(reference), nan=0.0)
                 + EQUAL_REFERENCE * (np.nan_to_num(reference, nan=0.0) >= EQUAL) + REFERENCE_CONFLICT * conflict
                 + DESCRIPTION * np.nan_to_num(description_evidence(description), nan=0.0)
                 + EXTRA_RECORD * (np.asarray(records) - 1))
    return z


def plausibility(logits: Floats) -> Floats:
    return 1.0 / (1.0 + np.exp(-logits))


def share_score(logits: Floats) -> Floats:
    """Logits of one target's hypotheses, highest first -> scores: each one's plausibility
    sigmoid(z) times the square of its share against its strongest rival, sigmoid(z - z_rival)
    (the softmax of the two). Twins quarter each other; a lone hypothesis keeps its plausibility.
    Squared because, on the training seed, a rival of equal weight costs more than weak evidence:
    with the plain share, twins (right half the time) and lone weak matches (right three times in
    four) got the same score."""
    if not len(logits):
        return np.asarray(logits, dtype=float)
    rival = np.full(len(logits), logits[0], dtype=float)
    rival[0] = logits[1] if len(logits) > 1 else -np.inf
    return plausibility(logits) * plausibility(logits - rival) ** SHARE_POWER


def calibrated(scores: Floats, table: tuple[tuple[float, float], ...] | None = None) -> Floats:
    """The confidence of the table's last row whose score is at most the given score."""
    table = table or CALIBRATION
    thresholds = np.array([row[0] for row in table])
    values = np.array([row[1] for row in table])
    return values[np.maximum(np.searchsorted(thresholds, scores, "right") - 1, 0)]
