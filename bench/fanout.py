"""A run fanned out (issue 32, points 2, 4, 5) at 10M x 10M: what each function of the fan-out does,
timed and measured in its own process, with the Parquet files the run keeps in S3 written to and
read from local disk instead (S3's transfer is not timed here).

Steps, each a fresh subprocess so that its peak RSS (ru_maxrss) is its own:
1. split (the load's share, `run_partitions.fan_out`): the sides as the engine takes them,
   `plan_partitions` with n from `partitions_for(records, PARTITION_RECORDS)` as the service
   chooses it, `split`, each partition's sides written as zstd Parquet, the manifest;
2. partition (one Map item, `run_partitions.match_partition`): a partition's files read, matched
   with `match_records`, its outcome written; every partition, `--concurrency` at once (the local
   driver's bound: the machine's CPUs), each in its own process;
3. merge (`run_partitions.merge`): every outcome read, `PartitionMerge`, a second round matched in
   the merge's process if the plan asks (a range plan's contested records; on AWS the Map does it),
   the run's outcome, then what `save_outcome` does: the plan's chunks, written as Parquet.

The generated inputs are those of bench/partitioned_matching.py (fixed seeds).

    nice .venv/bin/python bench/fanout.py [--records 10000000] [--case exact --case date_range] [--concurrency 2]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from partitioned_matching import CASES, child_result, machine_line, peak_mb  # noqa: E402

from chalicelib.domain.matching import match_records  # noqa: E402
from chalicelib.domain.matching.frames import plan_chunks  # noqa: E402
from chalicelib.domain.matching.outcome import MatchOutcome  # noqa: E402
from chalicelib.domain.matching.partition import (  # noqa: E402
    PartitionMerge,
    PartitionPlan,
    partitions_for,
    plan_partitions,
    split,
)
from chalicelib.domain.rules import Rule, validate_rule  # noqa: E402
from chalicelib.domain.runs import CHUNK_RECORDS, PARTITION_RECORDS, RUN_RECORDS, chunk_records_for  # noqa: E402


def rules_of(work: Path) -> list[Rule]:
    bodies = json.loads((work / "rules.json").read_text())
    return [Rule("bench", i + 1, 1, validate_rule(b), None) for i, b in enumerate(bodies)]


def child_split(case: str, n: int, work: Path) -> dict:
    side_a, side_b, rules = CASES[case][0](n)
    generated = peak_mb()
    started = time.perf_counter()
    plan = plan_partitions(rules, partitions_for(side_a.height + side_b.height, PARTITION_RECORDS), side_a)
    plan_s = time.perf_counter() - started
    parts_a, parts_b = split(side_a, plan, "a"), split(side_b, plan, "b")
    split_s = time.perf_counter() - started - plan_s
    items = []
    for p in sorted(set(parts_a) & set(parts_b)):
        for name, part in (("a", parts_a[p]), ("b", parts_b[p])):
            part.write_parquet(work / f"{p}-{name}.parquet", compression="zstd")
        items.append({"round": 0, "partition": p, "records": parts_a[p].height + parts_b[p].height})
    (work / "rules.json").write_text(json.dumps([r.definition.as_body() for r in rules]))
    (work / "plan.json").write_text(json.dumps(plan.as_dict()))
    (work / "manifest.json").write_text(json.dumps(items))
    # the merge reads the sides' persisted columns (PERSISTED_RECORD_COLUMNS) for the plan's chunks
    for name, frame, stream in (("a", side_a, "bank"), ("b", side_b, "ledger")):
        frame.select("id", "amount", "currency", "direction").with_columns(
            data_stream_key=pl.lit(stream), matched_in=pl.lit(None, dtype=pl.List(pl.Int64)),
            decimal_places=pl.lit(2, dtype=pl.Int64)).write_parquet(work / f"side-{name}.parquet")
    return {"plan": ("hash on " + ", ".join(k.field for k in plan.keys)) if plan.keys else f"{plan.axis} range",
            "partitions": len(items), "plan_s": plan_s, "split_s": split_s,
            "write_s": time.perf_counter() - started - plan_s - split_s, "seconds": time.perf_counter() - started,
            "generated_mb": generated, "peak_mb": peak_mb(),
            "largest": max(i["records"] for i in items), "smallest": min(i["records"] for i in items),
            "b_copies": sum(p.height for p in parts_b.values()) / side_b.height}


def child_partition(work: Path, partition: int, round_: int = 0) -> dict:
    started = time.perf_counter()
    rules = rules_of(work)
    side_a = pl.read_parquet(work / f"{partition}-a.parquet" if round_ == 0 else work / f"r{round_}-{partition}-a.parquet")
    side_b = pl.read_parquet(work / f"{partition}-b.parquet" if round_ == 0 else work / f"r{round_}-{partition}-b.parquet")
    read_s = time.perf_counter() - started
    outcome = match_records(side_a, side_b, rules)
    match_s = time.perf_counter() - started - read_s
    outcome.members.write_parquet(work / f"r{round_}-{partition}-members.parquet")
    outcome.matches.write_parquet(work / f"r{round_}-{partition}-matches.parquet")
    return {"partition": partition, "records": side_a.height + side_b.height, "read_s": read_s, "match_s": match_s,
            "seconds": time.perf_counter() - started, "peak_mb": peak_mb(), "matches": outcome.matches.height}


def child_merge(work: Path) -> dict:
    started = time.perf_counter()
    rules = rules_of(work)
    merge = PartitionMerge(PartitionPlan.from_dict(json.loads((work / "plan.json").read_text())), rules)
    items = json.loads((work / "manifest.json").read_text())
    empty = pl.Series([], dtype=pl.Int64)

    def outcomes(round_: int, partitions) -> dict[int, MatchOutcome]:
        return {p: MatchOutcome(pl.read_parquet(work / f"r{round_}-{p}-matches.parquet"),
                                pl.read_parquet(work / f"r{round_}-{p}-members.parquet"), {}, empty, empty)
                for p in partitions}

    again = merge.add(outcomes(0, [i["partition"] for i in items]))
    round_, again_s, again_partitions = 0, 0.0, 0
    while again:  # the next round, matched here (on AWS: the Map again)
        round_ += 1
        begun = time.perf_counter()
        matched = []
        for p in sorted(again):
            sides = merge.next_round(pl.read_parquet(work / f"{p}-a.parquet"), pl.read_parquet(work / f"{p}-b.parquet"))
            if sides is not None:
                a, b = sides
                a.write_parquet(work / f"r{round_}-{p}-a.parquet")
                b.write_parquet(work / f"r{round_}-{p}-b.parquet")
                child_partition(work, p, round_)
                matched.append(p)
        again_s += time.perf_counter() - begun
        again_partitions += len(matched)
        again = merge.add(outcomes(round_, matched)) if matched else frozenset()
    side_a, side_b = pl.read_parquet(work / "side-a.parquet"), pl.read_parquet(work / "side-b.parquet")
    outcome = merge.outcome(side_a["id"], side_b["id"])
    rounds, conflicts = merge.rounds, merge.conflicts
    del merge  # its kept frames: the outcome has them now (run_partitions.merge does the same)
    merged_s = time.perf_counter() - started
    # what save_outcome does next: the plan's chunks, written as the run's plan files
    chunk_records = chunk_records_for(outcome.members.height, CHUNK_RECORDS)
    matches, members, starts = plan_chunks(outcome, side_a, side_b, chunk_records)
    matches.write_parquet(work / "plan-matches.parquet", compression="zstd", row_group_size=16_384)
    members.write_parquet(work / "plan-members.parquet", compression="zstd", row_group_size=16_384)
    return {"seconds": time.perf_counter() - started, "merged_s": merged_s, "chunks": len(starts),
            "chunk_records": chunk_records, "again_s": again_s, "rounds": rounds,
            "conflicts": conflicts, "again_partitions": again_partitions, "peak_mb": peak_mb(),
            "matches": outcome.matches.height, "matched_records": outcome.members.height}


def run_child(*args: str) -> dict:
    return child_result(__file__, *args)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=10_000_000, help="records a side")
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        step, *rest = args.child
        if step == "split":
            print(json.dumps(child_split(rest[0], args.records, Path(rest[1]))))
        elif step == "partition":
            print(json.dumps(child_partition(Path(rest[0]), int(rest[1]))))
        else:
            print(json.dumps(child_merge(Path(rest[0]))))
        return
    print(machine_line())
    print(f"{args.records:,} x {args.records:,}; partitions of about {PARTITION_RECORDS:,} records "
          f"(one function holds {RUN_RECORDS:,}); {args.concurrency} partitions at once")
    for name in args.case or ["exact", "date_range"]:
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
            common = ["--records", str(args.records)]
            parted = run_child("split", name, tmp, *common)
            items = json.loads((Path(tmp) / "manifest.json").read_text())
            begun = time.perf_counter()
            with ThreadPoolExecutor(args.concurrency) as pool:
                results = list(pool.map(lambda i, tmp=tmp, common=common: run_child(
                    "partition", tmp, str(i["partition"]), *common), items))
            map_s = time.perf_counter() - begun
            merged = run_child("merge", tmp, *common)
        print(json.dumps({"case": name, "split": parted, "map_s": map_s, "partitions": results, "merge": merged}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
