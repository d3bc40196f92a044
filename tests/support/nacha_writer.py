"""Writes NACHA files: the test corpus, property-based tests and benchmarks build their files with it
(test code: it lives in tests/support and does not ship).

Field positions mirror chalicelib/domain/parsers/nacha.py; totals, hashes, counts and padding are computed, so a file
written here is valid unless a caller breaks it on purpose.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

RECORD_LENGTH = 94


def _alpha(value: str, width: int) -> str:
    return value[:width].ljust(width)


def _num(value: int | str, width: int) -> str:
    return str(value).rjust(width, "0")[-width:]


@dataclass
class Entry:
    transaction_code: str
    routing_number: str          # 9 digits: 8 of the RDFI identification and the check digit
    account: str
    amount: int                  # cents
    name: str = ""
    individual_id: str = ""
    addenda: list[str] = field(default_factory=list)   # addenda records built by the helpers below
    trace: str | None = None     # default: ODFI + sequence


@dataclass
class Batch:
    sec: str
    company_name: str
    company_id: str
    description: str
    effective_date: date | str   # a string is written as is ("000000", blanks)
    entries: list[Entry]
    service_class: str = "200"
    odfi: str = "07640125"
    iat_header: str | None = None  # positions 5-40 of an IAT batch header
    iat_currencies: str = "USDEUR"  # IAT: ISO originating and destination currency codes
    settlement_day: str = "   "     # Julian day, inserted by the ACH operator
    batch_number: int | None = None  # default: the batch's position in the file


def addenda_05(text: str, entry_trace: str, sequence: int = 1) -> str:
    return "705" + _alpha(text, 80) + _num(sequence, 4) + _num(entry_trace[-7:], 7)


def addenda_98(change_code: str, original_trace: str, original_rdfi: str, corrected: str, trace: str) -> str:
    return ("798" + _alpha(change_code, 3) + _num(original_trace, 15) + " " * 6 + _num(original_rdfi, 8)
            + _alpha(corrected, 29) + " " * 15 + _num(trace, 15))


def addenda_99(reason: str, original_trace: str, original_rdfi: str, information: str, trace: str) -> str:
    return ("799" + _alpha(reason, 3) + _num(original_trace, 15) + " " * 6 + _num(original_rdfi, 8)
            + _alpha(information, 44) + _num(trace, 15))


def addenda_iat(type_code: str, text: str, entry_trace: str, sequence: int | None = None) -> str:
    """IAT addenda 10-16 (free text up to position 87, then the entry detail sequence number)."""
    if type_code in ("17", "18"):
        return "7" + type_code + _alpha(text, 80) + _num(sequence or 1, 4) + _num(entry_trace[-7:], 7)
    return "7" + type_code + _alpha(text, 84) + _num(entry_trace[-7:], 7)


def _entry_line(batch: Batch, entry: Entry, trace: str) -> str:
    indicator = "1" if entry.addenda else "0"
    head = "6" + entry.transaction_code + _num(entry.routing_number[:8], 8) + entry.routing_number[8]
    if batch.sec == "IAT" or batch.iat_header is not None:
        return (head + _num(len(entry.addenda), 4) + " " * 13 + _num(entry.amount, 10)
                + _alpha(entry.account, 35) + "  " + "  " + indicator + trace)
    if batch.sec == "CTX":
        return (head + _alpha(entry.account, 17) + _num(entry.amount, 10) + _alpha(entry.individual_id, 15)
                + _num(len(entry.addenda), 4) + _alpha(entry.name, 16) + "  " + "  " + indicator + trace)
    return (head + _alpha(entry.account, 17) + _num(entry.amount, 10) + _alpha(entry.individual_id, 15)
            + _alpha(entry.name, 22) + "  " + indicator + trace)


def write_file(batches: list[Batch], *, line_ending: str = "\n", pad: bool = True,
               created: date = date(2026, 11, 2), created_time: str = "0930", modifier: str = "A",
               origin: str = " 076401251", encoding: str = "ascii") -> bytes:
    lines = ["101" + " 091000019" + _alpha(origin, 10) + created.strftime("%y%m%d") + _alpha(created_time, 4)
             + _alpha(modifier, 1) + "094101" + _alpha("FIRST BANK", 23) + _alpha("ACME CORP", 23) + _alpha("", 8)]
    file_records = file_hash = file_debits = file_credits = 0
    for position, batch in enumerate(batches, start=1):
        number = batch.batch_number or position
        iat = batch.sec == "IAT" or batch.iat_header is not None
        if iat:
            middle = _alpha(batch.iat_header or "", 36) + _alpha(batch.company_id, 10)
        else:
            middle = _alpha(batch.company_name, 16) + _alpha("", 20) + _alpha(batch.company_id, 10)
        effective = batch.effective_date if isinstance(batch.effective_date, str) else \
            batch.effective_date.strftime("%y%m%d")
        lines.append("5" + batch.service_class + middle + batch.sec + _alpha(batch.description, 10)
                     + _alpha(batch.iat_currencies if iat else "", 6) + _alpha(effective, 6)
                     + _alpha(batch.settlement_day, 3) + "1" + batch.odfi + _num(number, 7))
        records = entry_hash = debits = credits = 0
        for sequence, entry in enumerate(batch.entries, start=1):
            trace = entry.trace or batch.odfi + _num(sequence, 7)
            lines.append(_entry_line(batch, entry, trace))
            lines.extend(entry.addenda)
            records += 1 + len(entry.addenda)
            entry_hash += int(entry.routing_number[:8])
            if entry.transaction_code[1] in "1234":
                credits += entry.amount
            else:
                debits += entry.amount
        lines.append("8" + batch.service_class + _num(records, 6) + _num(entry_hash, 10) + _num(debits, 12)
                     + _num(credits, 12) + _alpha(batch.company_id, 10) + " " * 19 + " " * 6 + batch.odfi
                     + _num(number, 7))
        file_records += records
        file_hash += entry_hash
        file_debits += debits
        file_credits += credits
    total = len(lines) + 1
    blocks = -(-total // 10)
    lines.append("9" + _num(len(batches), 6) + _num(blocks, 6) + _num(file_records, 8) + _num(file_hash, 10)
                 + _num(file_debits, 12) + _num(file_credits, 12) + " " * 39)
    if pad:
        lines.extend(["9" * RECORD_LENGTH] * (blocks * 10 - total))
    assert all(len(line) == RECORD_LENGTH for line in lines), [len(line) for line in lines]
    return (line_ending.join(lines) + (line_ending if line_ending else "")).encode(encoding, errors="strict")
