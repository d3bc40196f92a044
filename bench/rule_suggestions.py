"""Rules suggested from decisions (issue 37, point 1): suggestions computed from 1,000 decisions
with a dry run over 100,000 open records a side, their time and load average, and whether the top
suggestion recovers the hidden rule of the labelled set (tests/support/learned_rules.py: side B is
side A less a 30-cent fee, 1-2 days later, the invoice number of side A's external_id in side B's
description; decoys every third invoice that amount and date alone would take).

What is timed, each the best of `--repeat` runs, on the same frames:
  baseline   the dry run of the hidden rule itself (domain/matching/dry_run.dry_run_answer: what
             POST /reconciliation_rules/{id}/dry_run computes) over the open records;
  learn      domain/rule_learning.learn over the decided records (what the decisions agree on);
  suggest    the whole columnar path of POST /reconciliations/{id}/rule_suggestions: learn, then for
             each of the 3 suggestions its evidence over the decisions and its dry run over the open
             records with the decided ones among them, then the ranking.
Reading the decisions from DynamoDB (a query per match for its members, a batch read of their
records) is not in it: see docs/learned-rules.md.

    .venv/bin/python bench/rule_suggestions.py [--decisions 1000] [--rows 100000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.domain import rule_learning as learning  # noqa: E402
from chalicelib.domain.matching.dry_run import dry_run_answer  # noqa: E402
from chalicelib.domain.rules import Condition, Normalization, Operator, Rule, validate_rule  # noqa: E402
from tests.support.learned_rules import FEE, MAX_LAG, labelled_pairs  # noqa: E402

FULL = (Normalization.CASE, Normalization.WHITESPACE, Normalization.PUNCTUATION)
HIDDEN = {Condition("external_id", Operator.CONTAINS, "description", normalize=FULL),
          Condition("amount", Operator.WITHIN, tolerance=FEE), Condition("date", Operator.WITHIN, days=MAX_LAG)}
HIDDEN_RULE = Rule("bench", 1, 1, validate_rule({"name": "hidden", "conditions": [c.as_body() for c in HIDDEN]}),
                   None)


def frames(decisions: int, rows: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The decided records (the first `decisions` real pairs) and the open ones (`rows` invoices,
    their payments and a decoy payment every third invoice)."""
    pairs = labelled_pairs(decisions + rows, seed=11)
    decided, opened, next_id, decision = [], [], 1, 0
    for invoice, payment in pairs:
        real = invoice is not None and decision < decisions
        for side, row in ((("a", invoice), ("b", payment)) if invoice is not None else (("b", payment),)):
            (decided if real else opened).append({**row, "id": next_id, "side": side, "decimal_places": 2,
                                                  "decision": decision if real else None})
            next_id += 1
        decision += real
    open_frame = learning.decided_frame(opened, [])
    side_a = open_frame.filter(pl.col("side") == "a").drop("decision", "side")
    side_b = open_frame.filter(pl.col("side") == "b").drop("decision", "side")
    return learning.decided_frame(decided, []), side_a, side_b


def suggestions(decided: pl.DataFrame, side_a: pl.DataFrame, side_b: pl.DataFrame,
                unmatched_frame: pl.DataFrame | None = None, pairs=None) -> list[tuple]:
    """The service's columnar path (services/rule_suggestions.suggest without storage); with people's
    unmatch decisions (`unmatched_frame` for learning, `pairs` for the dry run) when given."""
    learned = learning.learn(decided, unmatched=unmatched_frame)
    measured = []
    for position, definition in enumerate(learned.candidates(3)):
        rule = learning.candidate_rule(definition)
        on_decisions = learning.decision_evidence(decided, rule)
        evidence = {"decisions_explained": on_decisions["explained"],
                    "decisions_contradicted": on_decisions["contradicted"],
                    "dry_run": learning.dry_run_evidence(side_a, side_b, decided, [], rule, unmatched=pairs)}
        measured.append((learning.ranking_key(evidence, definition), position, definition, evidence))
    return sorted(measured, key=lambda m: (m[0], m[1]))


def best_of(repeat: int, work) -> tuple[float, float, object]:
    wall = cpu = float("inf")
    result = None
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = work()
        wall = min(wall, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - started_cpu)
    return wall, cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    decided, side_a, side_b = frames(args.decisions, args.rows)
    load_before = os.getloadavg()
    baseline, baseline_cpu, answer = best_of(args.repeat, lambda: dry_run_answer(side_a, side_b, [], HIDDEN_RULE))
    learn_wall, learn_cpu, learned = best_of(args.repeat, lambda: learning.learn(decided))
    wall, cpu, ranked = best_of(args.repeat, lambda: suggestions(decided, side_a, side_b))
    load_after = os.getloadavg()
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, polars {pl.__version__}")
    print(f"load average (1, 5, 15 min): before {' '.join(f'{x:.2f}' for x in load_before)}, "
          f"after {' '.join(f'{x:.2f}' for x in load_after)}")
    print(f"decisions: {learned.decisions:,} ({decided.height:,} records); open records: side A {side_a.height:,}, "
          f"side B {side_b.height:,}")
    print(f"baseline, dry run of the hidden rule: {baseline:.3f} s wall, {baseline_cpu:.3f} s CPU "
          f"({answer['matches']:,} matches; best of {args.repeat})")
    print(f"learn from the decisions: {learn_wall * 1000:.1f} ms wall, {learn_cpu * 1000:.1f} ms CPU")
    print(f"suggest (learn, 3 suggestions: evidence over the decisions and dry run each): {wall:.3f} s wall, "
          f"{cpu:.3f} s CPU, {wall / baseline:.1f}x the baseline")
    for rank, (_, _, definition, evidence) in enumerate(ranked, start=1):
        dry = evidence["dry_run"]
        print(f"  {rank}. {definition.name}: explains {evidence['decisions_explained']:,}, contradicts "
              f"{evidence['decisions_contradicted']:,}; dry run adds {dry['matches']:,} matches, "
              f"{dry['conflicting_matches']:,} conflicting")
    top = ranked[0][2]
    recovered = set(top.conditions) == HIDDEN
    print(f"recovery: the top suggestion's conditions are the hidden rule's -> {'yes' if recovered else 'NO'}; "
          f"its dry run adds {ranked[0][3]['dry_run']['matches']:,} of the {side_a.height:,} open invoices' matches")


if __name__ == "__main__":
    main()
