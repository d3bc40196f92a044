"""Investigation engine: (1) speed, one investigation of 20 target records against 100,000 open
candidates (target: at most 2 s), beside a baseline in the same run (a pandas merge on exact
currency and amount, which is all a naive lookup would do); (2) quality on the labelled test set
(tests/support/labelled.py, TEST_SEED): top-1 precision and recall, precision at
confidence >= 0.9 and its coverage, the reliability table; (3) quality on a set built apart from
the fitted generator (tests/support/fee_ledger.py: ledgers short by a fee beside same-amount
decoys 14 days away): recall and precision over every proposed pairing, precision at confidence
>= 0.9, the highest confidence a decoy got, per shape. Prints markdown tables.

    .venv/bin/python bench/investigations.py [--candidates 100000] [--targets 20] [--repeat 5] [--cases 600]
    .venv/bin/python bench/investigations.py --fee-ledger-only [--rounds 2]
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.domain.investigations import RECORD_SCHEMA, investigate  # noqa: E402
from tests.support.fee_ledger import SEED as FEE_LEDGER_SEED  # noqa: E402
from tests.support.fee_ledger import TARGETS as FEE_LEDGER_TARGETS  # noqa: E402
from tests.support.fee_ledger import measure, scenarios  # noqa: E402
from tests.support.labelled import TEST_SEED, cases, evaluate  # noqa: E402

PAYERS = np.array(["ACME", "GLOBEX", "INITECH", "UMBRELLA", "STARK", "WAYNE", "HOOLI", "VANDELAY", "SOYLENT", "TYRELL"])
WORDS = np.array(["PAYMENT", "ACH CREDIT", "WIRE IN", "PAYOUT", "TRANSFER", "DEPOSIT"])


def candidate_pool(count: int, seed: int = 7) -> pl.DataFrame:
    """A year of open records, 90% USD, amounts log-uniform 1.00 .. 100,000.00, a fifth without reference."""
    rng = np.random.default_rng(seed)
    numbers = rng.integers(1_000_000, 9_999_999, count)
    references = pl.Series(np.char.add("INV-", numbers.astype(str)))
    references = pl.select(pl.when(pl.Series(rng.random(count) >= 0.2)).then(references)).to_series()
    return pl.DataFrame({
        "id": np.arange(1, count + 1, dtype=np.int64),
        "amount": np.round(10 ** rng.uniform(2, 7, count)).astype(np.int64),
        "direction": np.where(rng.random(count) < 0.8, "credit", "debit"),
        "date": pl.Series(rng.integers(0, 365, count) + (date(2026, 1, 1) - date(1970, 1, 1)).days).cast(
            pl.Int32).cast(pl.Date),
        "currency": np.where(rng.random(count) < 0.9, "USD", "EUR"),
        "description": np.char.add(np.char.add(rng.choice(PAYERS, count), " "), rng.choice(WORDS, count)),
        "external_id": np.char.add("TX", rng.integers(10**8, 10**9, count).astype(str)),
        "reference": references,
    }).cast(RECORD_SCHEMA)


def exception_records(pool: pl.DataFrame, count: int, seed: int = 8) -> pl.DataFrame:
    """Half of them counterparts of pool records (exact, less a fee, a reference typo), half made up."""
    rng = np.random.default_rng(seed)
    rows = pool.filter(pl.col("currency") == "USD").sample(count, seed=seed).to_dicts()
    records = []
    for n, row in enumerate(rows):
        kind = n % 4
        amount = row["amount"] - (row["amount"] * 3 // 1000 + 30 if kind == 1 else 0)
        reference = row["reference"]
        if kind == 2 and reference:
            reference = reference[:-2] + reference[-1] + reference[-2]
        if kind == 3:
            amount, reference = int(10 ** rng.uniform(2, 7)), f"PO{rng.integers(10**6, 10**7)}"
        records.append({**row, "id": 10_000_000 + n, "amount": max(1, amount), "reference": reference,
                        "external_id": f"L{n:08d}", "description": f"{row['description'].title()} {reference or ''}"})
    return pl.DataFrame(records, schema=RECORD_SCHEMA)


def timed(function, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=100_000)
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cases", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the fee-ledger scenarios")
    parser.add_argument("--seed", type=int, default=FEE_LEDGER_SEED, help="seed of the fee-ledger scenarios")
    parser.add_argument("--fee-ledger-only", action="store_true")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
          f"python {platform.python_version()}, polars {pl.__version__}\n")
    if not args.fee_ledger_only:
        speed_and_labelled_set(args)
    fee_ledger(args.seed, args.rounds)


def fee_ledger(seed: int, rounds: int) -> None:
    print()
    built = scenarios(seed, rounds)
    started = time.perf_counter()
    report = measure(built)
    elapsed = time.perf_counter() - started
    print(f"## Fee ledger set (seed {seed}, {len(built)} investigations of {FEE_LEDGER_TARGETS} "
          f"ledger records; {elapsed:.1f} s)\n")
    print("| shape | counterparts | proposed | recall | precision | at >= 0.9 | right at >= 0.9 | decoys proposed "
          "| highest decoy confidence |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in [*report["by_shape"].items(), ("**all**", report["all"])]:
        print(f"| {name} | {row['counterparts']} | {row['proposed']} | {row['recall']:.3f} | {row['precision']:.3f} | "
              f"{row['high_confidence']} | {row['precision_at_high']:.3f} | {row['decoys_proposed']} | "
              f"{row['highest_decoy_confidence']:.3f} |")


def speed_and_labelled_set(args: argparse.Namespace) -> None:

    pool = candidate_pool(args.candidates)
    targets = exception_records(pool, args.targets)
    pool_pd, targets_pd = (pd.DataFrame({k: frame[k].to_numpy() for k in frame.columns}) for frame in (pool, targets))
    outcome = investigate(targets, pool)
    full = timed(lambda: investigate(targets, pool), args.repeat)
    base = timed(lambda: targets_pd.merge(pool_pd, on=["currency", "amount"], suffixes=("", "_c")), args.repeat)
    print(f"## One investigation: {args.targets} targets against {args.candidates:,} candidates\n")
    print("| what | median (s) | runs (s) |\n|---|---:|---|")
    print(f"| investigate (blocking, similarity, splits, wording) | {statistics.median(full):.3f} | "
          f"{', '.join(f'{t:.3f}' for t in full)} |")
    print(f"| baseline: pandas merge on currency and exact amount | {statistics.median(base):.3f} | "
          f"{', '.join(f'{t:.3f}' for t in base)} |")
    print(f"\n{len(outcome.hypotheses)} hypotheses, confidence of the best {outcome.confidence_score:.3f}; "
          f"{sum(h.confidence >= 0.9 for h in outcome.hypotheses)} at confidence >= 0.9.\n")

    started = time.perf_counter()
    report = evaluate(cases(TEST_SEED, args.cases))
    elapsed = time.perf_counter() - started
    print(f"## Labelled test set (seed {TEST_SEED}, {report['cases']} cases, "
          f"{report['with_truth']} with a counterpart; {elapsed:.1f} s)\n")
    print("| measure | value |\n|---|---:|")
    print(f"| top-1 precision (right / suggested) | {report['precision']:.3f} ({report['right']}/{report['suggested']}) |")
    print(f"| top-1 recall (right / cases with a counterpart) | {report['recall']:.3f} |")
    print(f"| precision at confidence >= 0.9 | {report['precision_at_high']:.3f} |")
    print(f"| cases at confidence >= 0.9 (coverage) | {report['high_confidence']} ({report['coverage_at_high']:.1%}) |")
    print("\n| confidence | cases | mean confidence | accuracy |\n|---|---:|---:|---:|")
    for row in report["reliability"]:
        if row["cases"]:
            print(f"| {row['from']:.2f} .. {row['to']:.2f} | {row['cases']} | {row['mean_confidence']:.3f} | "
                  f"{row['accuracy']:.3f} |")
    print("\n| kind | cases | right | mean confidence | at >= 0.9 |\n|---|---:|---:|---:|---:|")
    for kind, row in report["by_kind"].items():
        print(f"| {kind} | {row['cases']} | {row['right']} | {row['mean_confidence']:.3f} | {row['at_high_confidence']} |")


if __name__ == "__main__":
    main()
