"""Fitting the calibration table of `chalicelib/domain/investigations/scoring.CALIBRATION` on the
labelled training cases. Only the fitted table ships (committed in scoring.py); the fitting is
test and tooling code: tests/unit/test_investigation_calibration.py re-fits it and compares.

    .venv/bin/python -m tests.support.calibration_fit   # prints the table to commit
"""
from __future__ import annotations

from tests.support.labelled import TRAINING_SEED, Case, cases, judged

MIN_BLOCK = 25   # cases a row of the table stands on at least


def fit_calibration(training: list[Case]) -> tuple[tuple[float, float], ...]:
    """Isotonic regression (pool adjacent violators) of "the best hypothesis is right" on its score,
    blocks of fewer than MIN_BLOCK cases pooled with their lower neighbour, each block's accuracy
    smoothed towards one half by one right and one wrong pseudo-case, (right + 1) / (cases + 2),
    which keeps a small perfect block below 1. Rows: (lowest score of the block, confidence)."""
    found = [(j.best.score, float(j.right)) for j in judged(training) if j.best is not None]
    found.sort()
    blocks = _isotonic([s for s, _ in found], [r for _, r in found])
    table, floor = [], 0.0
    for low, right, count in blocks:
        floor = max(floor, round((right + 1) / (count + 2), 3))
        table.append((0.0 if not table else round(low, 6), floor))
    return tuple(table)


def _isotonic(scores: list[float], right: list[float]) -> list[tuple[float, float, int]]:
    """Blocks (lowest score, right answers, cases), increasing in accuracy, each MIN_BLOCK or more
    cases (the last one may be smaller when there are fewer cases in all). Equal scores stay together."""
    blocks: list[list[float]] = []   # [low score, right, count]
    for score, hit in zip(scores, right):
        if blocks and blocks[-1][0] == score:
            blocks[-1][1] += hit
            blocks[-1][2] += 1
        else:
            blocks.append([score, hit, 1])
        while len(blocks) > 1 and (blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]
                                   or blocks[-2][2] < MIN_BLOCK):
            low, hits, count = blocks.pop()
            blocks[-1][1] += hits
            blocks[-1][2] += count
    while len(blocks) > 1 and blocks[-1][2] < MIN_BLOCK:   # a small top block joins the one below
        _, hits, count = blocks.pop()
        blocks[-1][1] += hits
        blocks[-1][2] += count
    return [(float(low), float(hits), int(count)) for low, hits, count in blocks]


def main() -> None:
    table = fit_calibration(cases(TRAINING_SEED))
    print("CALIBRATION: tuple[tuple[float, float], ...] = (")
    for low, confidence in table:
        print(f"    ({low}, {confidence}),")
    print(")")


if __name__ == "__main__":
    main()
