"""People's unmatches counted against learned rules (issue 37 follow-up): what the suggestions'
columnar path costs when it also weighs MAX_READ (5,000) unmatch decisions, side by side with the
same path without them, on the same frames as bench/rule_suggestions.py.

What is timed, each the best of `--repeat` runs:
  baseline   the path of POST /reconciliations/{id}/rule_suggestions without unmatch decisions
             (learn, then each of the 3 suggestions' evidence over the decisions and dry run);
  index      domain/unmatch_decisions.unmatched_pairs over the decisions (the index by record);
  with       the same path with them: the records of the newest unmatches (at most 2,000, as
             services/rule_suggestions.py reads) as negatives for the text conditions, and every
             dry-run match checked against the index.
The unmatch decisions are proposals people rejected: an open invoice paired with the decoy payment
that looks like its own (what amount and date alone pair wrongly), `--side` records a side each.
Reading them from DynamoDB (one query of at most 5,000 items, a batched read of 2,000 records) is
not in it.

    .venv/bin/python bench/unmatched_conflicts.py [--decisions 1000] [--rows 100000] [--unmatched 5000]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rule_suggestions import HIDDEN, best_of, frames, suggestions  # noqa: E402

from chalicelib.domain.unmatch_decisions import (  # noqa: E402
    MAX_READ,
    MAX_RECORDS_PER_SIDE,
    decision_of,
    repaired_by,
    unmatched_pairs,
)
from chalicelib.services.rule_suggestions import MAX_UNMATCHED_RECORDS  # noqa: E402


def undone(side_a: pl.DataFrame, side_b: pl.DataFrame, count: int, per_side: int) -> list:
    """`count` decisions, each `per_side` open invoices with the decoy payments that look like
    theirs: what a run of amount and date alone pairs wrongly and a person rejects."""
    decoys = side_b.filter(pl.col("external_id").str.contains("-d", literal=True))["id"].to_list()
    decoy_of = {d - 2: d for d in decoys}  # labelled_pairs writes an invoice, its payment, then its decoy
    invoices = [i for i in side_a["id"].to_list() if i in decoy_of]
    at = datetime(2026, 11, 30, tzinfo=UTC)
    found = []
    for n in range(min(count, len(invoices) // per_side)):
        taken = invoices[n * per_side:(n + 1) * per_side]
        found.append(decision_of("bench", 1, n + 1, [("a", i) for i in taken] + [("b", decoy_of[i]) for i in taken],
                                 "user:1", at, "proposed", 1))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--unmatched", type=int, default=5_000)
    parser.add_argument("--side", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    decided, side_a, side_b = frames(args.decisions, args.rows)
    decisions = undone(side_a, side_b, args.unmatched, args.side)
    everything = pl.concat([side_a.with_columns(side=pl.lit("a")), side_b.with_columns(side=pl.lit("b"))])
    wanted = []
    for number, d in enumerate(decisions):
        ids = [(number, "a", i) for i in d.side_a_record_ids] + [(number, "b", i) for i in d.side_b_record_ids]
        if len(wanted) + len(ids) > MAX_UNMATCHED_RECORDS:
            break
        wanted += ids
    rows = everything.join(pl.DataFrame({"decision": [n for n, _, _ in wanted], "id": [i for _, _, i in wanted]},
                                        schema={"decision": pl.Int64, "id": pl.Int64}), on="id")
    unmatched_frame = rows.select(decided.columns)
    load_before = os.getloadavg()
    base_wall, base_cpu, base = best_of(args.repeat, lambda: suggestions(decided, side_a, side_b))
    index_wall, index_cpu, pairs = best_of(args.repeat, lambda: unmatched_pairs(decisions))
    wall, cpu, ranked = best_of(args.repeat, lambda: suggestions(decided, side_a, side_b, unmatched_frame, pairs))
    widest = [decision_of("bench", 1, n, [("a", n * 1000 + i) for i in range(MAX_RECORDS_PER_SIDE)]
                          + [("b", 10**9 + n * 1000 + i) for i in range(MAX_RECORDS_PER_SIDE)], "user:1",
                          datetime(2026, 11, 30, tzinfo=UTC), "confirmed", None) for n in range(MAX_READ)]
    wide_wall, wide_cpu, wide = best_of(args.repeat, lambda: unmatched_pairs(widest))
    checks_wall, _, hits = best_of(args.repeat, lambda: sum(
        repaired_by([n * 1000 + 5], [10**9 + n * 1000 + 7], wide) is not None for n in range(side_a.height)))
    load_after = os.getloadavg()
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, polars {pl.__version__}")
    print(f"load average (1, 5, 15 min): before {' '.join(f'{x:.2f}' for x in load_before)}, "
          f"after {' '.join(f'{x:.2f}' for x in load_after)}")
    print(f"decisions: {args.decisions:,}; open records: side A {side_a.height:,}, side B {side_b.height:,}; "
          f"unmatch decisions: {len(decisions):,} ({args.side} record(s) a side), {unmatched_frame.height:,} "
          f"records read as negatives")
    print(f"baseline, suggest without unmatches: {base_wall:.3f} s wall, {base_cpu:.3f} s CPU (best of {args.repeat})")
    print(f"index of the unmatched pairs: {index_wall * 1000:.1f} ms wall, {index_cpu * 1000:.1f} ms CPU")
    print(f"worst case at the bounds: the index of {MAX_READ:,} decisions of {MAX_RECORDS_PER_SIDE} records a side: "
          f"{wide_wall * 1000:.0f} ms wall, {wide_cpu * 1000:.0f} ms CPU; {side_a.height:,} matches checked against it: "
          f"{checks_wall * 1000:.0f} ms ({hits:,} pairing again)")
    print(f"suggest with them: {wall:.3f} s wall, {cpu:.3f} s CPU, {wall / base_wall:.2f}x the baseline's wall, "
          f"{cpu / base_cpu:.2f}x its CPU")
    for name, result in (("without", base), ("with", ranked)):
        for rank, (_, _, definition, evidence) in enumerate(result, start=1):
            dry = evidence["dry_run"]
            print(f"  {name} {rank}. {definition.name}: dry run adds {dry['matches']:,}, conflicting "
                  f"{dry['conflicting_matches']:,} (of them unmatched {dry.get('unmatched_conflicts', 0):,})"
                  + (" <- the hidden rule" if set(definition.conditions) == HIDDEN else ""))


if __name__ == "__main__":
    main()
