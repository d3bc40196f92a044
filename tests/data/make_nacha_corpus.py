"""Writes the NACHA test corpus in tests/data/nacha/ with the project's own writer.

Run it again after changing the writer: `.venv/bin/python tests/data/make_nacha_corpus.py`.
The files are small and committed, so that the parser is tested against fixed bytes.
"""
from __future__ import annotations

import sys
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.nacha_writer import (  # noqa: E402
    Batch,
    Entry,
    addenda_05,
    addenda_98,
    addenda_99,
    addenda_iat,
    write_file,
)

OUT = Path(__file__).parent / "nacha"
DAY = date(2026, 11, 3)
ODFI = "07640125"


def trace(n: int) -> str:
    return f"{ODFI}{n:07d}"


def ppd() -> Batch:
    return Batch("PPD", "ACME PAYROLL", "1234567890", "PAYROLL", DAY, service_class="220", entries=[
        Entry("22", "091000019", "12345678901", 150000, "JANE DOE", "EMP001"),
        Entry("32", "021000021", "98765432", 98765, "JOHN ROE", "EMP002"),
        Entry("23", "011000015", "55550000", 0, "NEW HIRE PRENOTE", "EMP003"),
    ])


def ccd_with_addenda() -> Batch:
    return Batch("CCD", "ACME AP", "1234567890", "VENDOR PMT", DAY, entries=[
        Entry("22", "091000019", "400012345", 1234567, "GLOBEX LLC", "V-100",
              addenda=[addenda_05("RMR*IV*INV-2026-001*PO*1234.56\\", trace(1))]),
        Entry("27", "091000019", "400012345", 2500, "GLOBEX LLC FEE", "V-100"),
    ])


def ctx() -> Batch:
    return Batch("CTX", "ACME AP", "1234567890", "EDI PMT", DAY, entries=[
        Entry("22", "071000013", "77001234", 500000, "INITECH", "CTX-1", addenda=[
            addenda_05("ISA*00*          *00*          *ZZ*ACME*ZZ*INITECH*261103*0930*U*00401*1*0*P*>\\", trace(1), 1),
            addenda_05("BPR*C*5000*C*ACH*CTX*01*071000013*DA*77001234*1234567890**01*091000019\\", trace(1), 2),
        ]),
    ])


def web() -> Batch:
    return Batch("WEB", "ACME SUBS", "1234567890", "SUBSCRIBE", DAY, service_class="225", entries=[
        Entry("27", "091000019", "3300112233", 1999, "PAT CUSTOMER", "WEB-1"),
        Entry("37", "021000021", "4400112233", 4999, "SAM CUSTOMER", "WEB-2"),
    ])


def returns() -> Batch:
    return Batch("PPD", "ACME PAYROLL", "1234567890", "RETURN", DAY, entries=[
        Entry("21", "091000019", "12345678901", 150000, "JANE DOE", "EMP001",
              addenda=[addenda_99("R01", "076401250000001", "09100001", "INSUFFICIENT FUNDS", "091000010000001")]),
        Entry("26", "021000021", "98765432", 2500, "JOHN ROE", "EMP002",
              addenda=[addenda_99("R03", "076401250000002", "02100002", "NO ACCOUNT", "021000020000002")]),
    ])


def nocs() -> Batch:
    return Batch("COR", "ACME PAYROLL", "1234567890", "NOC", DAY, entries=[
        Entry("21", "091000019", "12345678901", 0, "JANE DOE", "EMP001",
              addenda=[addenda_98("C01", "076401250000001", "09100001", "1234567890123", "091000010000003")]),
    ])


def iat() -> Batch:
    t = trace(1)
    return Batch("IAT", "", "1234567890", "INTL PMT", DAY, iat_header="IATINDICATOR    FF3               DE",
                 entries=[Entry("22", "091000019", "DE89370400440532013000", 250000, addenda=[
                     addenda_iat("10", "ANN000000000000250000                      MUSTERMANN GMBH", t),
                     addenda_iat("11", "ACME CORP                          1 MAIN STREET", t),
                     addenda_iat("12", "SPRINGFIELD*IL\\                    US*62701\\", t),
                     addenda_iat("13", "FIRST BANK                         01091000019", t),
                     addenda_iat("14", "DEUTSCHE BANK                      0237040044", t),
                     addenda_iat("15", "CUST-42        HAUPTSTRASSE 1", t),
                     addenda_iat("16", "BERLIN*BE\\                         DE*10115\\", t),
                 ])])


def main() -> None:
    OUT.mkdir(exist_ok=True)
    files = {
        "ppd.ach": write_file([ppd()]),
        "ccd_addenda.ach": write_file([ccd_with_addenda()]),
        "ctx.ach": write_file([ctx()]),
        "web.ach": write_file([web()]),
        "returns.ach": write_file([returns()]),
        "noc.ach": write_file([nocs()]),
        "iat.ach": write_file([iat()]),
        "multi_batch_crlf.ach": write_file([ppd(), ccd_with_addenda(), web()], line_ending="\r\n"),
        "unbroken.ach": write_file([ppd(), web()], line_ending=""),
    }
    valid = files["ppd.ach"].decode().split("\n")
    # Broken on purpose.
    bad_totals = list(valid)
    control = next(i for i, line in enumerate(bad_totals) if line.startswith("8"))
    bad_totals[control] = bad_totals[control][:20] + "000000099999" + bad_totals[control][32:]
    files["broken_bad_batch_totals.ach"] = "\n".join(bad_totals).encode()
    short = list(valid)
    short[2] = short[2][:50]  # an entry cut off in transit, inside its amount... and all after
    files["broken_short_line.ach"] = "\n".join(short).encode()
    files["broken_missing_file_control.ach"] = "\n".join(
        line for line in valid if not (line.startswith("9") and not line.startswith("99"))).encode()
    files["broken_truncated.ach"] = files["unbroken.ach"][: len(files["unbroken.ach"]) - 200]
    files["broken_cut_mid_batch.ach"] = "\n".join(valid[:4]).encode()
    for name, data in files.items():
        (OUT / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
