"""Matching engine speed and peak memory, each case beside a plain pandas baseline (a `merge` doing
the naive equivalent) in the same run. Inputs are generated here (fixed seed).

1. exact one_to_one, 1,000,000 x 1,000,000, amount + reference equals, duplicate amounts and
   references on both sides (target: at most 1.5 s and 1 GB peak);
2. amount equals + 3-day date window, exclusive one_to_one, 1M x 1M (target: at most 4 s);
3. many_to_one by key: 100,000 groups of 10 (1M side-A rows vs 100k side-B rows), and one group
   of 1,000,000 (target: at most 0.5 s each);
4. continuous: 1,000 new records against 1,000,000 open on each side (target: at most 50 ms).

Every case runs in a fresh subprocess so that its peak RSS (ru_maxrss, inputs included) is its
own; the engine and its baseline run in separate subprocesses for the same reason. The RSS
after building the inputs is shown beside the peak.

    .venv/bin/python bench/matching.py [--rows 1000000] [--repeat 3] [--case exact ...]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.domain.matching import match_records  # noqa: E402
from chalicelib.domain.rules import Rule, validate_rule  # noqa: E402

EPOCH_DAY = (date(2026, 1, 1) - date(1970, 1, 1)).days


def rule(body: dict) -> Rule:
    return Rule("bench", 1, 1, validate_rule({"name": "bench", **body}), None)


@dataclass(frozen=True)
class Numbered:
    """A text column "<prefix><number>", kept as numbers until a frame is built, so that a child
    process never holds a million Python strings the engine does not need."""
    prefix: str
    numbers: np.ndarray

    def __getitem__(self, index) -> Numbered:
        return Numbered(self.prefix, self.numbers[index])


def columns(ids, amounts, days, direction, references=None, **extra) -> dict:
    return {"id": np.asarray(ids, dtype=np.int64), "amount": np.asarray(amounts, dtype=np.int64),
            "direction": direction, "day": np.asarray(days, dtype=np.int64) + EPOCH_DAY, "currency": "USD",
            "external_id": references, **extra}


def polars_side(cols: dict) -> pl.DataFrame:
    def column(name, value):
        if isinstance(value, Numbered):
            return pl.concat_str([pl.lit(value.prefix), pl.Series(value.numbers).cast(pl.Utf8)]).alias(name)
        if isinstance(value, np.ndarray):
            return pl.Series(name, value)
        return pl.lit(value, dtype=pl.Utf8).alias(name)
    frame = pl.DataFrame({"id": cols["id"]}).with_columns(
        column(name, value) for name, value in cols.items() if name not in ("id", "day"))
    return frame.with_columns(date=pl.Series(cols["day"]).cast(pl.Int32).cast(pl.Date),
                              description=pl.lit(None, dtype=pl.Utf8))


def pandas_side(cols: dict) -> pd.DataFrame:
    frame = pd.DataFrame({"id": cols["id"]})
    for name, value in cols.items():
        if isinstance(value, Numbered):
            frame[name] = value.prefix + pd.Series(value.numbers).astype(str)
        elif name != "id":
            frame[name] = value
    return frame


# Cases: each builds its inputs and returns (engine run, pandas baseline run, description) ---------

def case_exact(rows: int):
    rng = np.random.default_rng(1)
    amounts = rng.integers(100, 100_000, rows)                                    # many duplicate amounts
    references = Numbered("INV", rng.integers(0, rows // 4, rows))  # and duplicate references
    days = rng.integers(0, 90, rows)
    order = rng.permutation(rows)
    a = columns(np.arange(rows), amounts, days, "credit", references)
    b = columns(np.arange(rows) + rows, amounts[order], days[order], "debit", references[order])
    exact = rule({"conditions": [{"field": "amount", "operator": "equals"}, {"field": "external_id", "operator": "equals"}]})

    def baseline(pa, pb):  # duplicate-safe: the k-th of a key on one side with the k-th on the other
        keys = ["amount", "external_id"]
        pa = pa.sort_values("id").assign(k=lambda f: f.groupby(keys).cumcount())
        pb = pb.sort_values("id").assign(k=lambda f: f.groupby(keys).cumcount())
        return pa.merge(pb, on=[*keys, "k"])
    return a, b, [exact], False, baseline


def case_window(rows: int):
    rng = np.random.default_rng(2)
    amounts = rng.integers(100, 5_000_000, rows)
    days = rng.integers(0, 365, rows)
    order = rng.permutation(rows)
    a = columns(np.arange(rows), amounts, days, "credit")
    b = columns(np.arange(rows) + rows, amounts[order], (days + rng.integers(-3, 4, rows))[order], "debit")
    window = rule({"conditions": [{"field": "amount", "operator": "equals"},
                                  {"field": "date", "operator": "within", "days": 3}]})

    def baseline(pa, pb):  # merge on amount, keep the window, then first pair per record (not exclusive)
        pairs = pa.merge(pb, on="amount", suffixes=("_a", "_b"))
        pairs = pairs[(pairs["day_a"] - pairs["day_b"]).abs() <= 3]
        return pairs.drop_duplicates("id_a").drop_duplicates("id_b")
    return a, b, [window], False, baseline


def _grouped(rows: int, group_size: int, seed: int):
    rng = np.random.default_rng(seed)
    amounts = rng.integers(100, 100_000, rows)
    payout = np.arange(rows) // group_size
    days = rng.integers(0, 30, rows)
    a = columns(np.arange(rows), amounts, days, "credit", **{"metadata.payout": Numbered("po_", payout)})
    sums = np.bincount(payout, weights=amounts).astype(np.int64)
    latest = pd.Series(days).groupby(payout).max().to_numpy()
    b = columns(np.arange(len(sums)) + rows, sums, latest, "debit", **{"metadata.payout": Numbered("po_", np.arange(len(sums)))})
    grouped = rule({"cardinality": "many_to_one", "group_by": {"side_a": ["metadata.payout"]},
                    "conditions": [{"field": "metadata.payout", "operator": "equals"},
                                   {"field": "amount", "operator": "equals"},
                                   {"field": "direction", "operator": "opposite"}]})

    def baseline(pa, pb):  # sum each group, merge with side B on key and amount
        sums = pa.groupby("metadata.payout", as_index=False)["amount"].sum()
        return sums.merge(pb, on=["metadata.payout", "amount"])
    return a, b, [grouped], False, baseline


def case_groups_of_10(rows: int):
    return _grouped(rows, 10, 3)


def case_one_group(rows: int):
    return _grouped(rows, rows, 4)


def case_continuous(rows: int, new: int = 1_000):
    rng = np.random.default_rng(5)
    references = Numbered("INV", np.arange(rows))
    amounts = rng.integers(100, 10_000_000, rows)
    days = rng.integers(0, 365, rows)
    a = columns(np.arange(rows), amounts, days, "credit", references)
    picked = rng.permutation(rows)[:new]  # the new side-B records answer open side-A records
    open_b = columns(np.arange(rows) + rows, rng.integers(100, 10_000_000, rows), days, "debit",
                     Numbered("INV", np.arange(rows) + rows))
    new_b = columns(np.arange(new) + 2 * rows, amounts[picked], days[picked] + 1, "debit", references[picked])
    b = {**open_b, **{k: np.concatenate([open_b[k], new_b[k]]) for k in ("id", "amount", "day")},
         "external_id": Numbered("INV", np.concatenate([open_b["external_id"].numbers, new_b["external_id"].numbers]))}
    b["is_new"] = np.r_[np.zeros(rows, dtype=bool), np.ones(new, dtype=bool)]
    a["is_new"] = np.zeros(rows, dtype=bool)
    continuous = rule({"conditions": [{"field": "amount", "operator": "equals"},
                                      {"field": "external_id", "operator": "equals"},
                                      {"field": "date", "operator": "within", "days": 3}]})

    def baseline(pa, pb):  # the new records merged with the open side, then the window
        pairs = pb[pb["is_new"]].merge(pa, on=["amount", "external_id"], suffixes=("_b", "_a"))
        return pairs[(pairs["day_a"] - pairs["day_b"]).abs() <= 3]
    return a, b, [continuous], True, baseline


CASES = {  # name: (builder, target seconds, target peak MB or None, label)
    "exact": (case_exact, 1.5, 1024, "exact one_to_one {n} x {n}, duplicates"),
    "window": (case_window, 4.0, None, "amount equals + 3-day window, {n} x {n}"),
    "groups_of_10": (case_groups_of_10, 0.5, None, "many_to_one, {n} rows in groups of 10 vs one record each"),
    "one_group": (case_one_group, 0.5, None, "many_to_one, one group of {n} vs 1"),
    "continuous": (case_continuous, 0.05, None, "continuous, 1,000 new vs {n} open"),
}


def timed(function, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - started)
        del result
    return times


def child(case: str, which: str, rows: int, repeat: int) -> None:
    """Runs one case with one implementation and prints its timings and peak RSS as JSON."""
    a, b, rules, only_new, baseline = CASES[case][0](rows)
    if which == "engine":
        side_a, side_b = polars_side(a), polars_side(b)
        inputs_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        outcome = match_records(side_a, side_b, rules, only_new=only_new)
        detail = {"matches": outcome.matches.height, "unmatched": outcome.rule_summary["unmatched"]}
        times = timed(lambda: match_records(side_a, side_b, rules, only_new=only_new), repeat)
    else:
        pa, pb = pandas_side(a), pandas_side(b)
        inputs_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        detail = {"pairs": len(baseline(pa, pb))}
        times = timed(lambda: baseline(pa, pb), repeat)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux
    print(json.dumps({"times": times, "peak_mb": peak_mb, "inputs_mb": inputs_mb, **detail}))


def run_child(case: str, which: str, rows: int, repeat: int) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", case, which, "--rows", str(rows),
                           "--repeat", str(repeat)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--child", nargs=2, metavar=("CASE", "WHICH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.rows, args.repeat)
        return
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, polars {pl.__version__}, pandas {pd.__version__}")
    print("| case | engine median (runs) | peak RSS (of which inputs) | pandas baseline (peak RSS) | ratio | target | pass |")
    print("|---|---|---|---|---|---|---|")
    for name in args.case or list(CASES):
        _, target_s, target_mb, label = CASES[name]
        label = label.format(n=f"{args.rows:,}")
        engine = run_child(name, "engine", args.rows, args.repeat)
        base = run_child(name, "pandas", args.rows, args.repeat)
        median, base_median = statistics.median(engine["times"]), statistics.median(base["times"])
        passed = median <= target_s and (target_mb is None or engine["peak_mb"] <= target_mb)
        target = f"<= {target_s:g} s" + (f", <= {target_mb} MB" if target_mb else "")
        print(f"| {label} ({engine['matches']:,} matches) | {median * 1000:,.0f} ms "
              f"({', '.join(f'{t * 1000:,.0f}' for t in engine['times'])}) | {engine['peak_mb']:,.0f} MB "
              f"({engine['inputs_mb']:,.0f} MB) | "
              f"{base_median * 1000:,.0f} ms ({base['peak_mb']:,.0f} MB) | {median / base_median:.2f}x | {target} | "
              f"{'pass' if passed else 'FAIL'} |")


if __name__ == "__main__":
    main()
