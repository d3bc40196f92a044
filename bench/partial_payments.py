"""Partial payments (issue 37, point 3): a run's partial pass (domain/matching/partial.py) beside the
engine's whole match of the same frames (the baseline, measured in the same run).

The data is generated here (fixed seed): N invoices on side B (10.00 to 5,000.00, debits, each with
its own reference `INV-<n>` and a date over a year) and about 2.5 N payments on side A (credits):
each invoice is paid by 1 to 4 instalments dated after it, a quarter of the invoices in full, the
others short of it (by 1 % to 60 %), so the partial rule leaves the rest open; one payment in ten
refers to no invoice. The rule: many_to_one, description equals (case, punctuation), date within
60 days, with `allocation: partial`; some invoices are paid in part already (a tenth, by 5 %).
With `--refunds F`, a fraction F of the invoices also has a refund (a debit on side A, 5 % to 30 % of
its first instalment, dated a day after it), which the rule (no direction condition) nets.

What is timed, each the best of `--repeat` runs:
  baseline  match_records(engine frames, [rule]): the whole waterfall of the rule (a subset search of
            the instalments against each invoice, exact sums only);
  partial   with_partial_matches(outcome, frames, [rule], allocated): the pass that follows it (whole
            matches of invoices paid in part left out, then instalments allocated to the rest).
  previous  (with `--previous FILE`) the same pass from another version of
            domain/matching/partial.py (e.g. `git show <commit>:chalicelib/domain/matching/partial.py`),
            on the same outcome: the pass before a change, side by side.
Checked on the result: no invoice is allocated more than it has left nor a share of zero or less, no
payment twice, each share the net of its records (payments less refunds).

    .venv/bin/python bench/partial_payments.py [--invoices 40000] [--repeat 3] [--refunds 0.3] [--previous F]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.domain.matching import match_records  # noqa: E402
from chalicelib.domain.matching.frames import engine_frames  # noqa: E402
from chalicelib.domain.matching.partial import with_partial_matches  # noqa: E402
from chalicelib.domain.rules import Rule, validate_rule  # noqa: E402

RULE = Rule("bench", 1, 1, validate_rule({
    "name": "Instalments", "cardinality": "many_to_one", "allocation": "partial",
    "conditions": [{"field": "description", "operator": "equals", "normalize": ["case", "punctuation"]},
                   {"field": "date", "operator": "within", "days": 60}]}), None)
COLUMNS = {"id": pl.Int64, "amount": pl.Int64, "currency": pl.Utf8, "decimal_places": pl.Int64, "date": pl.Date,
           "direction": pl.Utf8, "description": pl.Utf8, "external_id": pl.Utf8}


def generated(invoices: int, seed: int = 37, refunds: float = 0.0) -> tuple[pl.DataFrame, pl.DataFrame, dict[int, int]]:
    rng = np.random.default_rng(seed)
    start = date(2026, 1, 1)
    amounts = rng.integers(1_000, 500_000, invoices)
    days = rng.integers(0, 300, invoices)
    b_rows = {"id": np.arange(1, invoices + 1), "amount": amounts, "date": [start + timedelta(int(d)) for d in days],
              "description": [f"INV-{n}" for n in range(invoices)]}
    a_ids, a_amounts, a_dates, a_texts, a_directions = [], [], [], [], []
    next_id = invoices + 1
    for n in range(invoices):
        parts = int(rng.integers(1, 5))
        paid = amounts[n] if rng.random() < 0.25 else int(amounts[n] * rng.uniform(0.4, 0.99))
        cuts = np.sort(rng.choice(np.arange(1, max(paid, parts + 1)), parts - 1, replace=False)) if parts > 1 else []
        pieces = np.diff(np.concatenate([[0], cuts, [paid]])).astype(int)
        for k, piece in enumerate(p for p in pieces if p > 0):
            a_ids.append(next_id)
            a_amounts.append(int(piece))
            a_dates.append(start + timedelta(int(days[n]) + 3 + 7 * k))
            a_texts.append(f"inv {n}" if rng.random() < 0.5 else f"INV-{n}")
            a_directions.append("credit")
            next_id += 1
            if k == 0 and refunds and rng.random() < refunds:  # a refund of part of the first instalment
                a_ids.append(next_id)
                a_amounts.append(max(1, int(piece * rng.uniform(0.05, 0.3))))
                a_dates.append(start + timedelta(int(days[n]) + 4))
                a_texts.append(f"INV-{n}")
                a_directions.append("debit")
                next_id += 1
    for _ in range(invoices // 10 * 2):  # payments referring to no invoice
        a_ids.append(next_id)
        a_amounts.append(int(rng.integers(100, 100_000)))
        a_dates.append(start + timedelta(int(rng.integers(0, 360))))
        a_texts.append(f"REF-{next_id}")
        a_directions.append("credit")
        next_id += 1

    def frame(ids, amounts_, dates, texts, direction):
        return pl.DataFrame({"id": ids, "amount": amounts_, "currency": "USD", "decimal_places": 2, "date": dates,
                             "direction": direction, "description": texts, "external_id": None}, schema=COLUMNS)

    side_a = frame(a_ids, a_amounts, a_dates, a_texts, a_directions)
    side_b = frame(b_rows["id"], b_rows["amount"], b_rows["date"], b_rows["description"], "debit")
    allocated = {int(i): int(a * 0.05) or 1 for i, a in zip(side_b["id"][::10], side_b["amount"][::10], strict=True)}
    return side_a, side_b, allocated


def best(repeat: int, work):
    times, result = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - began)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--invoices", type=int, default=40_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--refunds", type=float, default=0.0)
    parser.add_argument("--previous", type=Path, default=None)
    args = parser.parse_args()
    side_a, side_b, allocated = generated(args.invoices, refunds=args.refunds)
    engine_a, engine_b = engine_frames(side_a, side_b)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus; load average before: {os.getloadavg()}")
    refund_count = side_a.filter(pl.col("direction") == "debit").height
    print(f"records: {side_a.height:,} payments (side A, {refund_count:,} of them refunds), {side_b.height:,} "
          f"invoices (side B), {len(allocated):,} paid in part already")
    baseline, outcome = best(args.repeat, lambda: match_records(engine_a, engine_b, [RULE]))
    partial, final = best(args.repeat, lambda: with_partial_matches(outcome, side_a, side_b, [RULE], allocated))
    whole = outcome.matches.height
    checked(final, side_a, side_b, allocated)
    print(f"baseline  match_records: {baseline:.3f} s, {whole:,} whole matches")
    netted = final.members.join(side_a.filter(pl.col("direction") == "debit").select(record_id="id"),
                                on="record_id", how="semi").height
    print(f"partial   with_partial_matches: {partial:.3f} s, {final.matches.height:,} matches after it "
          f"({final.members['share'].is_not_null().sum():,} taking a share of an invoice, {netted:,} refunds netted)")
    print(f"ratio partial / baseline: {partial / baseline:.2f}")
    if args.previous is not None:
        spec = importlib.util.spec_from_file_location("previous_partial", args.previous)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        before, earlier = best(args.repeat, lambda: module.with_partial_matches(outcome, side_a, side_b, [RULE],
                                                                               allocated))
        print(f"previous  {args.previous}: {before:.3f} s, {earlier.matches.height:,} matches after it; "
              f"ratio this / previous: {partial / before:.2f}")
    print(f"load average after: {os.getloadavg()}")


def checked(final, side_a: pl.DataFrame, side_b: pl.DataFrame, allocated: dict[int, int]) -> None:
    """No record in two matches; each share positive, within what the invoice had left, and the net
    of its match's payments (credits) less refunds (debits): no cent lost or created."""
    members = final.members
    assert members["record_id"].n_unique() == members.height, "a record in two matches"
    both = pl.concat([side_a.select("id", "amount", "direction"), side_b.select("id", "amount", "direction")])
    rows = members.join(both.rename({"id": "record_id"}), on="record_id")
    nets = (rows.filter(pl.col("side") == "a")
            .group_by("match_no").agg(net=pl.when(pl.col("direction") == "credit").then(pl.col("amount"))
                                       .otherwise(-pl.col("amount")).sum()))
    invoices = rows.filter(pl.col("side") == "b").join(nets, on="match_no")
    for record_id, amount, share, net in invoices.select("record_id", "amount", "share", "net").iter_rows():
        left = amount - allocated.get(record_id, 0)
        taken = left if share is None else share
        assert 0 < taken <= left, f"invoice {record_id}: {taken} of {left} left"
        assert net == taken or share is None and net == amount, f"invoice {record_id}: share {taken}, net {net}"


if __name__ == "__main__":
    main()
