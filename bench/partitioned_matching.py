"""Partitioned matching (domain/matching/partition.py) against the single engine: time, peak
memory, and whether the answers are the same. Inputs are generated here (fixed seed).

Cases (N x N records):
1. exact: amount + reference equals, duplicates on both sides (a hash plan on both keys);
2. keyed window: amount equals + 3-day window (a hash plan on the amount);
3. date range: amount within 5 + 3-day window, no equality (a range plan on the date);
4. waterfall: reference + amount equals, then amount within 50 + 3-day window at a lower
   priority (no common key: a range plan on the amount).

Each step runs in a fresh subprocess so that its peak RSS (ru_maxrss) is its own:
- single: match_records on both sides whole (what one function does today);
- partitioned: plan, split into --partitions partitions, write each partition's sides as Parquet
  (as the fan-out would hand them over), match them one after the other and merge, then compare
  with the single engine's outcome (read back from Parquet); its RSS holds everything, so it is
  not a function's;
- partition: the largest partition matched alone from its files: what one function of the
  fan-out would need.

    .venv/bin/python bench/partitioned_matching.py [--records 1000000] [--partitions 16] [--case exact ...]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.domain.matching import match_records  # noqa: E402
from chalicelib.domain.matching.partition import (  # noqa: E402
    PartitionMerge,
    plan_partitions,
    split,
)
from chalicelib.domain.rules import Rule, validate_rule  # noqa: E402

EPOCH_DAY = (date(2026, 1, 1) - date(1970, 1, 1)).days


def rule(rule_id: int, body: dict) -> Rule:
    return Rule("bench", rule_id, 1, validate_rule({"name": f"bench {rule_id}", **body}), None)


def side(ids, amounts, days, direction: str, references) -> pl.DataFrame:
    return pl.DataFrame({"id": np.asarray(ids, dtype=np.int64), "amount": np.asarray(amounts, dtype=np.int64)}).with_columns(
        direction=pl.lit(direction), date=pl.Series(np.asarray(days) + EPOCH_DAY).cast(pl.Int32).cast(pl.Date),
        currency=pl.lit("USD"), description=pl.lit(None, dtype=pl.Utf8),
        external_id=pl.concat_str([pl.lit("INV"), pl.Series(references).cast(pl.Utf8)]))


def case_exact(n: int):
    rng = np.random.default_rng(1)
    amounts, references, days = rng.integers(100, 100_000, n), rng.integers(0, n // 4, n), rng.integers(0, 90, n)
    order = rng.permutation(n)
    rules = [rule(1, {"conditions": [{"field": "amount", "operator": "equals"},
                                     {"field": "external_id", "operator": "equals"}]})]
    return (side(np.arange(n), amounts, days, "credit", references),
            side(np.arange(n) + n, amounts[order], days[order], "debit", references[order]), rules)


def case_keyed_window(n: int):
    rng = np.random.default_rng(2)
    amounts, days = rng.integers(100, 5_000_000, n), rng.integers(0, 365, n)
    order = rng.permutation(n)
    rules = [rule(1, {"conditions": [{"field": "amount", "operator": "equals"},
                                     {"field": "date", "operator": "within", "days": 3}]})]
    return (side(np.arange(n), amounts, days, "credit", np.arange(n)),
            side(np.arange(n) + n, amounts[order], (days + rng.integers(-3, 4, n))[order], "debit", np.arange(n) + n),
            rules)


def case_date_range(n: int):
    rng = np.random.default_rng(3)
    amounts, days = rng.integers(100, 50_000_000, n), rng.integers(0, 365, n)
    order = rng.permutation(n)
    rules = [rule(1, {"conditions": [{"field": "amount", "operator": "within", "tolerance": 5},
                                     {"field": "date", "operator": "within", "days": 3}]})]
    return (side(np.arange(n), amounts, days, "credit", np.arange(n)),
            side(np.arange(n) + n, (amounts + rng.integers(-5, 6, n))[order], (days + rng.integers(-3, 4, n))[order],
                 "debit", np.arange(n) + n), rules)


def case_waterfall(n: int):
    rng = np.random.default_rng(4)
    amounts, days = rng.integers(100, 50_000_000, n), rng.integers(0, 365, n)
    order = rng.permutation(n)
    references = np.where(rng.random(n) < 0.5, np.arange(n), np.arange(n) + 3 * n)  # half lose their reference
    drift = np.where(references >= 3 * n, rng.integers(-50, 51, n), 0)  # and their amount moves by up to 50
    rules = [rule(1, {"conditions": [{"field": "external_id", "operator": "equals"},
                                     {"field": "amount", "operator": "equals"}]}),
             rule(2, {"priority": 2, "conditions": [{"field": "amount", "operator": "within", "tolerance": 50},
                                                    {"field": "date", "operator": "within", "days": 3}]})]
    return (side(np.arange(n), amounts, days, "credit", np.arange(n)),
            side(np.arange(n) + n, (amounts + drift)[order], (days + rng.integers(-3, 4, n))[order], "debit",
                 references[order]), rules)


CASES = {
    "exact": (case_exact, "exact one_to_one, amount + reference equals, duplicates"),
    "keyed_window": (case_keyed_window, "amount equals + 3-day window"),
    "date_range": (case_date_range, "amount within 5 + 3-day window, no key"),
    "waterfall": (case_waterfall, "reference + amount equals, then amount within 50 + 3-day window"),
}


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def child_single(case: str, n: int, work: Path) -> dict:
    side_a, side_b, rules = CASES[case][0](n)
    inputs = peak_mb()
    started = time.perf_counter()
    outcome = match_records(side_a, side_b, rules)
    seconds = time.perf_counter() - started
    outcome.matches.write_parquet(work / "single-matches.parquet")
    outcome.members.write_parquet(work / "single-members.parquet")
    return {"seconds": seconds, "peak_mb": peak_mb(), "inputs_mb": inputs, "matches": outcome.matches.height}


def child_partitioned(case: str, n: int, partitions: int, work: Path) -> dict:
    side_a, side_b, rules = CASES[case][0](n)
    started = time.perf_counter()
    plan = plan_partitions(rules, partitions, side_a)
    parts_a, parts_b = split(side_a, plan, "a"), split(side_b, plan, "b")
    split_s = time.perf_counter() - started
    sizes = {p: parts_a[p].height + parts_b.get(p, pl.DataFrame()).height for p in parts_a}
    largest = max(sizes, key=sizes.__getitem__)
    for name, part in (("a", parts_a[largest]), ("b", parts_b.get(largest, side_b.clear()))):
        part.write_parquet(work / f"largest-{name}.parquet")
    (work / "rules.json").write_text(json.dumps([r.definition.as_body() for r in rules]))
    merge = PartitionMerge(plan, rules)
    todo = frozenset(parts_a) & frozenset(parts_b)
    match_s = merge_s = 0.0
    while todo:
        outcomes = {}
        begun = time.perf_counter()
        for p in sorted(todo):
            a, b = merge.open_records(parts_a[p]), merge.open_records(parts_b[p])
            if a.height and b.height:
                outcomes[p] = match_records(a, b, rules)
        match_s += time.perf_counter() - begun
        begun = time.perf_counter()
        todo = merge.add(outcomes)
        merge_s += time.perf_counter() - begun
    begun = time.perf_counter()
    outcome = merge.outcome(side_a["id"], side_b["id"])
    merge_s += time.perf_counter() - begun
    total = time.perf_counter() - started
    single_matches = pl.read_parquet(work / "single-matches.parquet")
    single_members = pl.read_parquet(work / "single-members.parquet")
    same = outcome.matches.equals(single_matches) and outcome.members.equals(single_members)
    copies = sum(p.height for p in parts_b.values()) / max(side_b.height, 1)
    return {"plan": "hash on " + ", ".join(k.field for k in plan.keys) if plan.keys else
            f"{plan.axis} range" if plan.axis else f"refused: {plan.reason}",
            "partitions": plan.partitions, "split_s": split_s, "match_s": match_s, "merge_s": merge_s,
            "seconds": total, "rounds": merge.rounds, "conflicts": merge.conflicts, "same": same,
            "proven": plan.exact or merge.conflicts == 0, "matches": outcome.matches.height,
            "b_copies": copies, "largest_records": sizes[largest], "peak_mb": peak_mb(),
            "plan_json": plan.as_dict() if plan.axis is None else {"axis": plan.axis, "cuts": len(plan.cuts)}}


def child_partition(work: Path) -> dict:
    bodies = json.loads((work / "rules.json").read_text())
    rules = [Rule("bench", i + 1, 1, validate_rule(b), None) for i, b in enumerate(bodies)]
    side_a, side_b = pl.read_parquet(work / "largest-a.parquet"), pl.read_parquet(work / "largest-b.parquet")
    inputs = peak_mb()
    started = time.perf_counter()
    outcome = match_records(side_a, side_b, rules)
    return {"seconds": time.perf_counter() - started, "peak_mb": peak_mb(), "inputs_mb": inputs,
            "matches": outcome.matches.height}


def child_result(script: str, *args: str) -> dict:
    """A step of `script` run in a fresh process (`--child`), so that its peak RSS is its own: the
    JSON it prints last."""
    done = subprocess.run([sys.executable, script, "--child", *args], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_child(*args: str) -> dict:
    return child_result(__file__, *args)


def machine_line() -> str:
    load = os.getloadavg()
    return (f"machine: {platform.machine()}, {platform.system()} {platform.release()}, {os.cpu_count()} cores, "
            f"python {platform.python_version()}, polars {pl.__version__}; load average {load[0]:.1f} at the start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000, help="records a side")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        step, *rest = args.child
        if step == "single":
            print(json.dumps(child_single(rest[0], args.records, Path(rest[1]))))
        elif step == "partitioned":
            print(json.dumps(child_partitioned(rest[0], args.records, args.partitions, Path(rest[1]))))
        else:
            print(json.dumps(child_partition(Path(rest[0]))))
        return
    print(machine_line())
    print(f"{args.records:,} x {args.records:,} records, {args.partitions} partitions asked for, one after the other")
    print("| case | single: time, peak RSS | plan | partitioned: total (split / match / merge) | rounds, conflicts "
          "| same answer | largest partition: records, time, peak RSS | B copies |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.case or list(CASES):
        with tempfile.TemporaryDirectory() as tmp:
            common = ["--records", str(args.records), "--partitions", str(args.partitions)]
            single = run_child("single", name, tmp, *common)
            parted = run_child("partitioned", name, tmp, *common)
            one = run_child("partition", tmp, *common)
        same = "yes" if parted["same"] else "no"
        same += " (proven)" if parted["proven"] else " (not proven: conflicts)"
        if parted["matches"] != single["matches"]:
            same += f" ({parted['matches']:,} matches)"
        print(f"| {CASES[name][1]} ({single['matches']:,} matches) | {single['seconds']:.1f} s, "
              f"{single['peak_mb']:,.0f} MB | {parted['plan']}, {parted['partitions']} | {parted['seconds']:.1f} s "
              f"({parted['split_s']:.1f} / {parted['match_s']:.1f} / {parted['merge_s']:.1f}) | "
              f"{parted['rounds']}, {parted['conflicts']:,} | {same} | "
              f"{parted['largest_records']:,}, {one['seconds']:.1f} s, {one['peak_mb']:,.0f} MB "
              f"(inputs {one['inputs_mb']:,.0f}) | {parted['b_copies']:.3f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
