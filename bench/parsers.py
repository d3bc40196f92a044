"""Parser speed: NACHA parse and validate of a 500,000-entry file (target: at most 5 s) and CSV
parse of 1,000,000 rows (target: at most 3 s), each beside a baseline in the same run (just
splitting the NACHA records; Python's csv.reader over the same CSV). Files are generated here.

    .venv/bin/python bench/parsers.py [--entries 500000] [--rows 1000000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import csv
import gc
import io
import platform
import statistics
import sys
import time
from datetime import date
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.domain.parsers.csv_records import CsvOptions, parse_csv  # noqa: E402
from chalicelib.domain.parsers.nacha import parse_nacha, split_records  # noqa: E402
from tests.support.nacha_writer import Batch, Entry, addenda_05, write_file  # noqa: E402


def nacha_file(entries: int) -> bytes:
    per_batch = 10_000
    batches = []
    for b in range(-(-entries // per_batch)):
        count = min(per_batch, entries - b * per_batch)
        batch_entries = []
        for n in range(count):
            entry = Entry("22" if n % 3 else "27", "091000019" if n % 2 else "021000021", f"{n:012d}",
                          1000 + n, f"PAYEE {n}", f"ID{n}")
            batches_trace = f"07640125{n + 1:07d}"
            if n % 10 == 0:
                entry.addenda = [addenda_05(f"INVOICE {n}", batches_trace)]
            batch_entries.append(entry)
        batches.append(Batch("CCD", "ACME AP", "1234567890", "VENDOR PMT", date(2026, 11, 3), batch_entries))
    return write_file(batches)


def csv_file(rows: int) -> bytes:
    lines = ["date,amount,description,external_id,payout_id"]
    for n in range(rows):
        amount = f"{n // 100}.{n % 100:02d}" if n % 10 else f"\"{n * 10:,}.00\""  # 1 in 10 with thousands
        lines.append(f"2026-10-{1 + n % 28:02d},{'-' if n % 7 == 0 else ''}{amount},Payment {n},tx-{n},po_{n // 50}")
    return ("\n".join(lines) + "\n").encode()


def timed(function, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - started)
        del result
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=500_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, "
          f"python {platform.python_version()}")

    nacha = nacha_file(args.entries)
    parsed = parse_nacha(nacha)
    assert len(parsed.rows) == args.entries
    base = timed(partial(split_records, nacha), args.repeat)
    full = timed(partial(parse_nacha, nacha), args.repeat)
    print(f"NACHA {args.entries:,} entries ({len(nacha) / 1e6:.0f} MB): parse+validate median "
          f"{statistics.median(full):.2f} s (runs {', '.join(f'{t:.2f}' for t in full)}); "
          f"baseline split into records {statistics.median(base):.2f} s; ratio {statistics.median(full) / statistics.median(base):.1f}x")
    del parsed, nacha

    data = csv_file(args.rows)
    options = CsvOptions(data_stream_key="bank")
    assert len(parse_csv(data, options).rows) == args.rows
    base = timed(lambda: sum(1 for _ in csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""))), args.repeat)
    full = timed(lambda: parse_csv(data, options), args.repeat)
    print(f"CSV {args.rows:,} rows ({len(data) / 1e6:.0f} MB): parse median {statistics.median(full):.2f} s "
          f"(runs {', '.join(f'{t:.2f}' for t in full)}); baseline csv.reader {statistics.median(base):.2f} s; "
          f"ratio {statistics.median(full) / statistics.median(base):.1f}x")


if __name__ == "__main__":
    main()
