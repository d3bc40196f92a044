"""Bank statement parsers at the sizes of issue 17: a BAI2 file of 1,000,000 transactions and a
camt.053 file of 200,000 entries, each parsed and validated (controls and balances) at most 5 s on
this machine, with memory that does not grow with the file beyond the records themselves. MT940
(200,000 statement lines) is measured beside them.

Each parse runs in a fresh child process, so its peak resident memory (VmHWM) is its own;
the file is written to a temporary file first and read by the child. Beside the parse, the child
measures the records alone: the list of parsed transactions kept, everything else released,
as the peak of a second child that only builds the same number of StatementTransaction objects
(what any parser must hand over). The difference is what parsing costs beyond the records.

    .venv/bin/python bench/statements.py [--bai2 1000000] [--camt 200000] [--mt940 200000]

`--long-token MIB` instead times a small camt.053 statement whose root element carries an
attribute of MIB MiB, and one with a comment of MIB MiB before it (issue 29: the time grew with
the square of such a token), whatever the parse answers (read, or refused).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
data = open({path!r}, "rb").read()
from chalicelib.domain.parsers.{module} import {function} as parse
started = time.perf_counter()
parsed = parse(data)
seconds = time.perf_counter() - started
print(json.dumps({{"seconds": seconds, "transactions": len(parsed.transactions),
                   "peak_mib": peak_mib(),
                   "file_mib": len(data) / 2**20}}))
"""

RECORDS_ONLY = r"""
import json, sys
sys.path.insert(0, {root!r})
data = open({path!r}, "rb").read()  # held, as the parse's child holds it
from datetime import date
from chalicelib.domain.parsers.statements import StatementTransaction
rows = [StatementTransaction(n, f"line {{n}}", "DE02120300000000202051", "EUR", 1000 + n, 2, "credit",
                             date(2026, 11, 3), date(2026, 11, 3), f"INVOICE {{n}} PAYER {{n}}", f"AS{{n:012d}}",
                             {{"bank_transaction_code": "PMNT/RCDT/ESCT", "end_to_end_id": f"E2E-{{n}}",
                               "statement_id": "STMT-1"}}) for n in range({count})]
print(json.dumps({{"peak_mib": peak_mib()}}))
"""
# The child's own high-water mark: VmHWM starts afresh with the exec'd program, where ru_maxrss keeps
# the forked parent's (which holds the generated files).
PEAK = """
def peak_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
"""


def child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(name: str, module: str, function: str, data: bytes) -> dict:
    with tempfile.NamedTemporaryFile(suffix=f".{name}", delete=False) as handle:
        handle.write(data)
        path = handle.name
    try:
        parsed = child(PEAK + CHILD.format(root=str(ROOT), path=path, module=module, function=function))
        records = child(PEAK + RECORDS_ONLY.format(root=str(ROOT), path=path, count=parsed["transactions"]))
    finally:
        os.unlink(path)
    return {**parsed, "records_only_peak_mib": records["peak_mib"]}


LONG_TOKEN = r"""
import json, sys, time
sys.path.insert(0, {root!r})
data = open({path!r}, "rb").read()
from chalicelib.domain.parsers import FileRejected
from chalicelib.domain.parsers.camt053 import parse_camt053
started = time.perf_counter()
try:
    outcome = f"read, {{len(parse_camt053(data).transactions)}} transaction(s)"
except FileRejected as rejected:
    outcome = "refused: " + rejected.message[:120]
print(json.dumps({{"seconds": time.perf_counter() - started, "outcome": outcome}}))
"""


def long_tokens(mib: int) -> None:
    from datetime import date

    from tests.support.camt_files import Entry, Statement, write_camt053

    day = date(2026, 11, 3)
    data = write_camt053([Statement("S-1", "DE89370400440532013000", "EUR", 10_000, day,
                                    [Entry(500, "CRDT", day)], closing=10_500)])
    long = b"a" * (mib * 2**20)
    files = {"attribute": data.replace(b"<Document ", b'<Document note="' + long + b'" ', 1),
             "comment": data.replace(b"<Document ", b"<!--" + long + b"--><Document ", 1)}
    for name, content in files.items():
        with tempfile.NamedTemporaryFile(suffix=".xml", delete=False) as handle:
            handle.write(content)
        try:
            result = child(LONG_TOKEN.format(root=str(ROOT), path=handle.name))
        finally:
            os.unlink(handle.name)
        print(f"camt.053 with a {mib} MiB {name} before the first element: {result['seconds']:.3f} s, "
              f"{result['outcome']}")


def mt940_file(lines: int, statements: int = 4) -> bytes:
    """`lines` statement lines over `statements` accounts, in SWIFT envelopes, each with an :86:
    (half of them structured, as German banks write it)."""
    from tests.support.mt940_files import Line, Statement, free_text, structured, write_file

    per = -(-lines // statements)
    written = []
    for s in range(statements):
        rows = [Line(1000 + n % 99_991, mark="C" if n % 3 else "D", bank_reference=f"B{s}{n:010d}",
                     customer_reference=f"C{n}",
                     information=(structured("166", "GUTSCHRIFT", f"INVOICE {n} CUSTOMER {n}", "BANKDEFF",
                                             "DE02120300000000202051") if n % 2 else free_text(f"Invoice {n}")))
                for n in range(min(per, lines - s * per))]
        written.append(Statement(f"DE{s + 10:02d}370400440532013{s:03d}", rows, opening=1_000_000,
                                 reference=f"STMT{s}"))
    return write_file(written, envelope=True, line_ending="\r\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bai2", type=int, default=1_000_000)
    parser.add_argument("--camt", type=int, default=200_000)
    parser.add_argument("--mt940", type=int, default=200_000)
    parser.add_argument("--long-token", type=int, default=0, metavar="MIB")
    args = parser.parse_args()
    if args.long_token:
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"load {os.getloadavg()[0]:.1f}")
        long_tokens(args.long_token)
        return
    from tests.support.camt_files import benchmark_statements, iter_camt053
    from tests.support.statement_files import bai2_large_file

    runs = {
        "bai2": ("bai2", "parse_bai2", bai2_large_file(args.bai2)),
        "camt053": ("camt053", "parse_camt053", b"".join(iter_camt053(list(benchmark_statements(args.camt))))),
        "mt940": ("mt940", "parse_mt940", mt940_file(args.mt940)),
    }
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.1f}")
    for name, (module, function, data) in runs.items():
        result = measure(name, module, function, data)
        print(f"{name}: {result['transactions']:,} transactions from {result['file_mib']:.0f} MiB in "
              f"{result['seconds']:.2f} s; peak {result['peak_mib']:.0f} MiB, of which the records alone (and the "
              f"file) {result['records_only_peak_mib']:.0f} MiB -> {result['peak_mib'] - result['records_only_peak_mib']:.0f} "
              f"MiB for parsing; target 5 s: {'met' if result['seconds'] <= 5 else 'NOT met'}")


if __name__ == "__main__":
    main()
