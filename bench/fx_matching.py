"""Currencies (issue 37, point 4): a cross-currency match of N x N records in the columnar engine,
against the same-currency match of the same records as the baseline, side by side in one run.

The data is generated here (fixed seed). Side B: N records in USD. Side A: N records, a half in EUR,
a quarter in JPY (no minor unit) and a quarter in GBP, whose amounts are the USD amounts converted
back at a rate of a year of daily rates (EUR/USD and GBP/USD direct, USD/JPY only as the reverse
pair, so JPY is divided), dates over a year, a few rates missing (weekends: the rate of the Friday
before serves). Each A record's exact conversion lies within the rule's tolerance of its B partner
unless it was made a near miss (a tenth, off by 2 to 50 cents).

  fx        rule: amount within 1 cent, currency equals, date within 2 days, converting side A to
            USD from the rate stream: add_conversions (the rate of each record's date, the Int128
            conversion, the notes) + engine_frames + match_records (each match with its conversions);
  baseline  the same rule without conversion, on side A already in USD (the converted amounts):
            engine_frames + match_records. Same pairs, same matches: the difference is the cost of
            converting and explaining.

Each timed as the best of `--repeat` runs; the load average is printed before and after.

    .venv/bin/python bench/fx_matching.py [--rows 100000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.domain.fx import Rate, RateRow, convert  # noqa: E402
from chalicelib.domain.matching import match_records  # noqa: E402
from chalicelib.domain.matching.conversion import add_conversions, rates_frame  # noqa: E402
from chalicelib.domain.matching.frames import engine_frames  # noqa: E402
from chalicelib.domain.rules import Rule, validate_rule  # noqa: E402

CONDITIONS = [{"field": "amount", "operator": "within", "tolerance": 1},
              {"field": "currency", "operator": "equals"},
              {"field": "date", "operator": "within", "days": 2}]
FX_RULE = Rule("bench", 1, 1, validate_rule({"name": "to USD", "conditions": CONDITIONS, "conversion": {
    "rate_stream_key": "ecb", "side": "side_a", "to_currency": "USD"}}), None)
PLAIN_RULE = Rule("bench", 1, 1, validate_rule({"name": "same currency", "conditions": CONDITIONS}), None)
START = date(2026, 1, 1)
SCHEMA = {"id": pl.Int64, "amount": pl.Int64, "currency": pl.Utf8, "decimal_places": pl.Int32, "date": pl.Date,
          "direction": pl.Utf8, "description": pl.Utf8, "external_id": pl.Utf8}


def daily_rates(rng: np.random.Generator) -> list[RateRow]:
    """A year of weekday rates: EUR/USD, GBP/USD, USD/JPY, each a random walk, 4 to 6 decimals."""
    rows = []
    levels = {("EUR", "USD"): 1.08, ("GBP", "USD"): 1.27, ("USD", "JPY"): 150.0}
    for day in range(366):
        when = START + timedelta(days=day)
        if when.weekday() >= 5:
            continue
        for (base, quote), level in levels.items():
            levels[(base, quote)] = level * (1 + rng.normal(0, 0.004))
            places = 2 if quote == "JPY" else 5
            rows.append(RateRow(when, base, quote, Rate(round(levels[(base, quote)] * 10 ** places), places)))
    return rows


def generated(rows: int, seed: int = 37) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, list[RateRow]]:
    """(side A in EUR/JPY/GBP, side A in USD at the converted amounts, side B in USD, the rates)."""
    rng = np.random.default_rng(seed)
    rates = daily_rates(rng)
    on = {}
    for r in rates:
        on[(r.day, r.base, r.quote)] = r.rate
    usd = rng.integers(1_000, 500_000, rows)          # 10.00 to 5,000.00 USD
    days = rng.integers(0, 366, rows)
    currency = rng.choice(np.array(["EUR", "EUR", "JPY", "GBP"]), rows)
    a_amounts, converted = [], []
    for amount, day, code in zip(usd.tolist(), days.tolist(), currency.tolist(), strict=True):
        when = START + timedelta(days=day)
        while (when, "EUR", "USD") not in on:           # the rate that serves: the last weekday's
            when -= timedelta(days=1)
        places = 0 if code == "JPY" else 2
        if code == "JPY":
            rate, inverted = on[(when, "USD", "JPY")], True
            own = convert(amount, 2, 0, rate)            # USD -> JPY at USD/JPY
        else:
            rate, inverted = on[(when, code, "USD")], False
            own = convert(amount, 2, 2, rate, inverted=True)  # USD -> EUR/GBP: divided by EUR/USD
        a_amounts.append(max(own, 1))
        converted.append(convert(max(own, 1), places, 2, rate, inverted))
    off = rng.random(rows) < 0.1
    b_amounts = np.array(converted) + np.where(off, rng.integers(2, 50, rows), 0)
    b_days = days + rng.integers(-2, 3, rows)
    ids = np.arange(rows)

    def frame(id_offset: int, amounts, codes, places, day_numbers) -> pl.DataFrame:
        return pl.DataFrame({"id": ids + id_offset, "amount": amounts, "currency": codes, "decimal_places": places,
                             "date": [START + timedelta(days=int(d)) for d in day_numbers],
                             "direction": "credit", "description": None, "external_id": None}, schema=SCHEMA)

    places = np.where(currency == "JPY", 0, 2)
    side_a = frame(1, a_amounts, currency.tolist(), places, days)
    side_a_usd = frame(1, converted, ["USD"] * rows, np.full(rows, 2), days)
    side_b = frame(10_000_000, b_amounts, ["USD"] * rows, np.full(rows, 2), b_days)
    return side_a, side_a_usd, side_b, rates


def best_of(repeat: int, work) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - started)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"polars {pl.__version__}; load average before {os.getloadavg()}")
    side_a, side_a_usd, side_b, rates = generated(args.rows)
    stream = {"ecb": rates_frame(rates)}
    print(f"{args.rows:,} x {args.rows:,} records; {len(rates):,} rates; side A: "
          + ", ".join(f"{c} {n:,}" for c, n in side_a.group_by("currency").len().sort("currency").iter_rows()))

    def baseline():
        a, b = engine_frames(side_a_usd, side_b)
        return match_records(a, b, [PLAIN_RULE])

    def converting():
        a, b = engine_frames(add_conversions(side_a, "a", [FX_RULE], stream), side_b)
        return match_records(a, b, [FX_RULE])

    def conversion_only():
        return add_conversions(side_a, "a", [FX_RULE], stream)

    base_time, base = best_of(args.repeat, baseline)
    fx_time, fx = best_of(args.repeat, converting)
    conv_time, _ = best_of(args.repeat, conversion_only)
    same = (base.members.sort("match_no", "side").select("side", "record_id").equals(
        fx.members.sort("match_no", "side").select("side", "record_id")))
    print(f"| what | seconds (best of {args.repeat}) | matches | matched records |")
    print("|---|---:|---:|---:|")
    print(f"| baseline: same-currency rule, side A already in USD | {base_time:.2f} | {base.matches.height:,} | "
          f"{base.members.height:,} |")
    print(f"| converting rule: rates + conversion + engine | {fx_time:.2f} | {fx.matches.height:,} | "
          f"{fx.members.height:,} |")
    print(f"| of which the conversion (rate of each date, Int128, notes) | {conv_time:.2f} | - | - |")
    print(f"ratio converting / baseline: {fx_time / base_time:.2f}; same members as the baseline: {same}")
    print(f"a match's differences: {fx.matches['differences'][0]}")
    print(f"load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
