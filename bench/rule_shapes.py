"""Every rule shape at scale: the shapes of tests/support/rule_shapes.py (the engine's scale tests
run them at 20,000) at 100,000 and 1,000,000 units a side, each in a fresh subprocess so that its
peak RSS is its own. Prints a markdown table: shape, units, records, matched, median time, peak.

    .venv/bin/python bench/rule_shapes.py [--units 100000 --units 1000000] [--repeat 3] [--shape NAME ...]
        [--explain]   # time the dry run's way: the match plus each condition's exclusion count
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
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.domain.matching import match_records  # noqa: E402
from tests.support.rule_shapes import SHAPES  # noqa: E402

BY_NAME = {shape.name: shape for shape in SHAPES}


def child(name: str, units: int, repeat: int, explain: bool) -> None:
    """With `explain`, the dry run's way: the match plus each condition's exclusion count."""
    shape = BY_NAME[name]
    side_a, side_b = shape.sides(units)
    rules = [shape.rule()]
    times, outcome = [], None
    for _ in range(repeat):
        outcome = None
        gc.collect()
        started = time.perf_counter()
        outcome = match_records(side_a, side_b, rules, only_new=shape.only_new,
                                explain_rule=rules[0].id if explain else None)
        times.append(time.perf_counter() - started)
    assert outcome is not None
    print(json.dumps({"times": times, "records": side_a.height + side_b.height,
                      "matched": outcome.members.height, "matches": outcome.match_count,
                      "excluded": outcome.condition_exclusions,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--units", type=int, action="append")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shape", action="append", choices=sorted(BY_NAME))
    parser.add_argument("--explain", action="store_true", help="count each condition's exclusions (dry run)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = args.units or [100_000, 1_000_000]
    if args.child:
        child(args.child, sizes[0], args.repeat, args.explain)
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores (shared), python {platform.python_version()}, "
          f"polars {pl.__version__}")
    print("| rule shape | units a side | records | matched records | engine, median (runs) | peak RSS |")
    print("|---|---|---|---|---|---|")
    for name in args.shape or list(BY_NAME):
        for units in sizes:
            done = subprocess.run([sys.executable, __file__, "--child", name, "--units", str(units),
                                   "--repeat", str(args.repeat), *(["--explain"] if args.explain else [])],
                                  capture_output=True, text=True)
            if done.returncode:
                print(f"| {name} | {units:,} | | | FAILED: {done.stderr.strip().splitlines()[-1]} | |", flush=True)
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"| {name} | {units:,} | {r['records']:,} | {r['matched']:,} | "
                  f"{statistics.median(r['times']) * 1000:,.0f} ms ({', '.join(f'{t * 1000:,.0f}' for t in r['times'])})"
                  f" | {r['peak_mb']:,.0f} MB |" + (f" {r['excluded']} |" if args.explain else ""), flush=True)


if __name__ == "__main__":
    main()
