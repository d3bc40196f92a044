"""NACHA (ACH) files: the fixed-width format parsed and validated whole, then one record item per entry.

Layout (94-character records, positions 1-based as in the NACHA rules):
  1 file header, then batches of: 5 batch header, 6 entry details each followed by its
  7 addenda (05 payment info, 98 notification of change, 99 return, 10-18 IAT), 8 batch
  control; then 9 file control and 9-filled padding to a multiple of ten records.
Lines may end with LF, CRLF or nothing at all (unbroken 94-byte blocks); lines whose trailing
blanks were trimmed in transit are padded back to 94.

Nothing is returned unless the whole file is valid: every batch's counts, entry hash and
debit/credit totals, and the file's, agree with the entries. FileRejected carries every
disagreement found (line, batch, field, expected, found).
"""
from __future__ import annotations

import re
from datetime import date
from typing import Any

from chalicelib.domain.parsers import FileRejected, ParsedFile, ParsedRow, without_gc

RECORD_LENGTH = 94
LINE_BREAK = re.compile(r"\r\n|\n|\r")
BLOCKING_FACTOR = 10
MAX_FILE_BYTES = 256 * 1024 * 1024
MAX_REPORTED_ERRORS = 50
PADDING = "9" * RECORD_LENGTH
SERVICE_CLASSES = {"200", "220", "225", "280"}
# Transaction codes by account (2 checking, 3 savings, 4 general ledger, 5 loan); the second
# digit says: 1 return/NOC credit, 2 credit, 3 prenote credit, 4 zero-dollar credit with
# remittance, 6 return/NOC debit, 7 debit, 8 prenote debit, 9 zero-dollar debit. Loans take
# no debits but 55 (reversals) and 56 (returns and NOCs).
CREDIT_KINDS = {"1", "2", "3", "4"}
ZERO_AMOUNT_KINDS = {"3", "4", "8", "9"}  # prenotes and zero-dollar entries
PRENOTE_KINDS = {"3", "8"}
TRANSACTION_CODES = frozenset(
    [a + k for a in "234" for k in "12346789"] + ["51", "52", "53", "54", "55", "56"])
ENTRY_HASH_MODULUS = 10**10


def _digits(text: str) -> bool:
    return text.isdigit()


class _Errors:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.total = 0

    def add(self, line: int, message: str, batch: int | None = None, **detail: Any) -> None:
        self.total += 1
        if len(self.items) < MAX_REPORTED_ERRORS:
            self.items.append({"line": line, "batch": batch, "message": message, **detail})


def split_records(data: bytes, max_bytes: int = MAX_FILE_BYTES) -> list[str]:
    if len(data) > max_bytes:
        raise FileRejected(f"file is {len(data)} bytes; NACHA files are accepted up to {max_bytes} bytes")
    if not data.strip():
        raise FileRejected("file is empty")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as error:
        raise FileRejected(f"not a NACHA file: byte {error.start} is not ASCII", {"byte": error.start}) from None
    text = text.rstrip("\r\n\x1a")  # a final line break, or a DOS end-of-file mark
    if not text.strip():
        raise FileRejected("file is empty")
    if not text.startswith("1"):
        raise FileRejected("not a NACHA file: it does not open with a file header record (type 1)")
    if "\n" in text or "\r" in text:
        lines = LINE_BREAK.split(text)
    else:
        if len(text) % RECORD_LENGTH:
            raise FileRejected(
                f"file has no line breaks and {len(text)} characters, which is not a whole number of "
                f"{RECORD_LENGTH}-character records: it looks truncated", {"characters": len(text)})
        lines = [text]
    records: list[str] = []
    for number, line in enumerate(lines, start=1):
        if len(line) > RECORD_LENGTH:
            if len(line) % RECORD_LENGTH:
                raise FileRejected(f"line {number} has {len(line)} characters; NACHA records have "
                                   f"{RECORD_LENGTH}", {"line": number, "length": len(line)})
            records += [line[i:i + RECORD_LENGTH] for i in range(0, len(line), RECORD_LENGTH)]  # unbroken blocks
        else:
            records.append(line if len(line) == RECORD_LENGTH else line.ljust(RECORD_LENGTH))
    if not records or not records[0].strip():
        raise FileRejected("file is empty")
    return records


def _yymmdd(text: str) -> str | None:
    if not text.isdigit():
        return None
    try:
        return date(2000 + int(text[0:2]), int(text[2:4]), int(text[4:6])).isoformat()
    except ValueError:
        return None


def _mask(account: str) -> str:
    """Last 4 digits only, behind a fixed mask so that the length does not leak either."""
    account = account.strip()
    return "****" + account[-4:] if account else ""


def _addenda_detail(line: str) -> dict[str, Any]:
    kind = line[1:3]
    if kind == "05" or kind == "17":
        return {"type": kind, "text": line[3:83].rstrip()}
    if kind == "98":
        return {"type": kind, "change_code": line[3:6], "original_trace": line[6:21],
                "original_rdfi": line[27:35], "corrected_data": line[35:64].rstrip()}
    if kind == "99":
        return {"type": kind, "return_reason_code": line[3:6], "original_trace": line[6:21],
                "date_of_death": line[21:27].strip() or None, "original_rdfi": line[27:35],
                "text": line[35:79].rstrip()}
    return {"type": kind, "text": line[3:87].rstrip()}


class _Batch:
    __slots__ = ("line", "number", "service_class", "company_name", "company_id", "sec", "description",
                 "effective_date", "odfi", "batch_number", "records", "hash", "debits", "credits", "iat",
                 "base_metadata")

    def __init__(self, line_number: int, line: str, errors: _Errors, ordinal: int) -> None:
        self.line = line_number
        self.number = ordinal
        self.service_class = line[1:4]
        self.sec = line[50:53]
        self.iat = self.sec == "IAT"
        self.company_name = line[4:20].strip() if not self.iat else ""
        self.company_id = line[40:50]
        self.description = line[53:63].strip()
        self.effective_date = _yymmdd(line[69:75])
        self.odfi = line[79:87]
        self.batch_number = line[87:94]
        self.base_metadata = {"sec_code": self.sec, "company_name": self.company_name,
                              "company_id": self.company_id.strip(), "batch_number": self.batch_number}
        self.records = 0
        self.hash = 0
        self.debits = 0
        self.credits = 0
        if self.service_class not in SERVICE_CLASSES:
            errors.add(line_number, f"unknown service class code '{self.service_class}'", ordinal,
                       field="service_class_code", found=self.service_class)
        if not self.sec.isalpha() or not self.sec.isupper():
            errors.add(line_number, f"SEC code '{self.sec}' is not three capital letters", ordinal,
                       field="standard_entry_class", found=self.sec)
        if self.effective_date is None:
            errors.add(line_number, f"effective entry date '{line[69:75]}' is not a date YYMMDD", ordinal,
                       field="effective_entry_date", found=line[69:75])
        if not _digits(self.batch_number):
            errors.add(line_number, "batch number is not numeric", ordinal, field="batch_number",
                       found=self.batch_number)


def _check_control(batch: _Batch, line_number: int, line: str, errors: _Errors) -> None:
    checks = [
        ("service_class_code", line[1:4], batch.service_class),
        ("entry_addenda_count", line[4:10], f"{batch.records:06d}"),
        ("entry_hash", line[10:20], f"{batch.hash % ENTRY_HASH_MODULUS:010d}"),
        ("total_debit_amount", line[20:32], f"{batch.debits:012d}"),
        ("total_credit_amount", line[32:44], f"{batch.credits:012d}"),
        ("company_identification", line[44:54], batch.company_id),
        ("batch_number", line[87:94], batch.batch_number),
    ]
    for field, found, expected in checks:
        if found != expected:
            errors.add(line_number, f"batch control {field} is {found.strip() or 'blank'} but the batch has "
                       f"{expected.strip() or 'blank'}", batch.number, field=field, expected=expected, found=found)


def parse_nacha(data: bytes, max_bytes: int = MAX_FILE_BYTES) -> ParsedFile:
    """Validate the whole file, then return one row per entry. Raises FileRejected otherwise."""
    with without_gc():
        return _parse(split_records(data, max_bytes))


def _parse(lines: list[str]) -> ParsedFile:
    errors = _Errors()
    rows: list[ParsedRow] = []
    if lines[0][0] != "1":
        raise FileRejected("not a NACHA file: the first record is not a file header (type 1)",
                           {"errors": [{"line": 1, "batch": None, "message": "first record must be type 1",
                                        "found": lines[0][:1]}]})
    header = lines[0]
    if header[34:37] != "094":
        errors.add(1, f"file header record size is '{header[34:37]}', expected '094'", field="record_size")

    batch: _Batch | None = None
    entry: dict[str, Any] | None = None
    entry_line = 0
    addenda_expected = 0
    addenda_seen = 0
    batches = 0
    file_records = 0      # entries and addenda in the whole file
    file_hash = 0
    file_debits = 0
    file_credits = 0
    file_control_line = 0
    total_lines = len(lines)

    def close_entry() -> None:
        nonlocal entry
        if entry is None:
            return
        if addenda_expected and not addenda_seen:
            errors.add(entry_line, "entry says it has addenda (indicator 1) but none follows",
                       batch.number if batch else None, field="addenda_record_indicator")
        rows.append(ParsedRow(line=entry_line, item=entry))
        entry = None

    for index in range(1, total_lines):
        line = lines[index]
        number = index + 1
        kind = line[0]
        if file_control_line:
            if line != PADDING:
                errors.add(number, "only 9-filled padding may follow the file control record",
                           found=line[:10])
            continue
        if kind == "5":
            if batch is not None:
                errors.add(number, "batch header inside a batch: the previous batch has no control record",
                           batch.number)
                close_entry()
            batches += 1
            batch = _Batch(number, line, errors, batches)
        elif kind == "6":
            if batch is None:
                errors.add(number, "entry detail outside a batch")
                continue
            close_entry()
            entry_line = number
            entry, addenda_expected = _entry(line, number, batch, errors)
            addenda_seen = 0
            batch.records += 1
        elif kind == "7":
            if entry is None or batch is None:
                errors.add(number, "addenda record without an entry detail before it",
                           batch.number if batch else None)
                continue
            if not addenda_expected:
                errors.add(number, "addenda record after an entry whose addenda indicator is 0", batch.number,
                           field="addenda_record_indicator")
            addenda_seen += 1
            batch.records += 1
            _attach_addenda(entry, line, number, batch, errors)
        elif kind == "8":
            if batch is None:
                errors.add(number, "batch control without a batch header")
                continue
            close_entry()
            _check_control(batch, number, line, errors)
            file_records += batch.records
            file_hash += batch.hash
            file_debits += batch.debits
            file_credits += batch.credits
            batch = None
        elif kind == "9":
            if line == PADDING and batch is None:
                errors.add(number, "padding before the file control record")
                continue
            if batch is not None:
                errors.add(number, "file control inside a batch: the batch has no control record", batch.number)
                close_entry()
                batch = None
            file_control_line = number
            _check_file_control(line, number, batches, file_records, file_hash, file_debits, file_credits,
                                total_lines, errors)
        elif kind == "1":
            errors.add(number, "a second file header")
        else:
            errors.add(number, f"unknown record type '{kind}'", batch.number if batch else None, found=kind)

    if batch is not None:
        errors.add(total_lines, "file ends inside a batch: no batch control record", batch.number)
    if not file_control_line:
        errors.add(total_lines, "file control record (type 9) is missing: the file looks truncated")
    if errors.total:
        first = errors.items[0]
        raise FileRejected(
            f"NACHA validation failed with {errors.total} error(s); first at line {first['line']}: "
            f"{first['message']}", {"errors": errors.items, "error_count": errors.total})
    return ParsedFile(rows=rows, summary={
        "batches": batches, "entries": len(rows), "total_debit_amount": file_debits,
        "total_credit_amount": file_credits, "file_creation_date": _yymmdd(header[23:29]),
        "immediate_origin_name": header[63:86].strip(), "immediate_destination_name": header[40:63].strip(),
    })


def _entry(line: str, number: int, batch: _Batch, errors: _Errors) -> tuple[dict[str, Any], int]:
    code = line[1:3]
    rdfi = line[3:11]
    amount_text = line[29:39]
    trace = line[79:94]
    indicator = line[78]
    if batch.iat:
        account = line[39:74]
        name = ""
    elif batch.sec == "CTX":
        account = line[12:29]
        name = line[58:74].strip()
    else:
        account = line[12:29]
        name = line[54:76].strip()
    if code not in TRANSACTION_CODES:
        errors.add(number, f"unknown transaction code '{code}'", batch.number, field="transaction_code", found=code)
        code = "22"
    if not rdfi.isdigit():
        errors.add(number, "receiving DFI identification is not numeric", batch.number,
                   field="receiving_dfi_identification", found=rdfi)
        rdfi = "0"
    if not amount_text.isdigit():
        errors.add(number, f"amount '{amount_text}' is not numeric", batch.number, field="amount",
                   found=amount_text)
        amount_text = "0"
    if not trace.isdigit():
        errors.add(number, f"trace number '{trace}' is not numeric", batch.number, field="trace_number",
                   found=trace)
    if indicator not in "01":
        errors.add(number, f"addenda record indicator '{indicator}' is not 0 or 1", batch.number,
                   field="addenda_record_indicator", found=indicator)
    amount = int(amount_text)
    kind = code[1]
    credit = kind in CREDIT_KINDS and code not in ("55", "56")
    if kind in ZERO_AMOUNT_KINDS and amount:
        what = "prenote" if kind in PRENOTE_KINDS else "zero-dollar entry"
        errors.add(number, f"{what} (transaction code {code}) must have a zero amount", batch.number,
                   field="amount", found=amount_text)
    batch.hash += int(rdfi)
    if credit:
        batch.credits += amount
    else:
        batch.debits += amount
    metadata = dict(batch.base_metadata)
    metadata["transaction_code"] = code
    metadata["receiving_routing_number"] = rdfi + line[11]
    metadata["account_number"] = _mask(account)
    if kind in PRENOTE_KINDS:
        metadata["prenote"] = True
    if batch.iat:
        metadata["addenda_count"] = line[12:16]
    item = {
        "date": batch.effective_date, "amount": amount, "direction": "credit" if credit else "debit",
        "external_id": trace, "description": f"{batch.description} {name}".strip(), "metadata": metadata,
    }
    return item, 1 if indicator == "1" else 0


def _attach_addenda(entry: dict[str, Any], line: str, number: int, batch: _Batch, errors: _Errors) -> None:
    kind = line[1:3]
    if not kind.isdigit() or kind not in {"05", "98", "99", "10", "11", "12", "13", "14", "15", "16", "17", "18"}:
        errors.add(number, f"unknown addenda type code '{kind}'", batch.number, field="addenda_type_code",
                   found=kind)
        return
    metadata = entry["metadata"]
    detail = _addenda_detail(line)
    if kind in ("05", "17", "18") and line[87:94] != entry["external_id"][-7:]:
        errors.add(number, "addenda entry detail sequence number does not match its entry's trace number",
                   batch.number, field="entry_detail_sequence_number", expected=entry["external_id"][-7:],
                   found=line[87:94])
    if kind == "99":
        metadata["return_reason_code"] = detail["return_reason_code"]
        metadata["original_trace"] = detail["original_trace"]
    elif kind == "98":
        metadata["change_code"] = detail["change_code"]
        metadata["original_trace"] = detail["original_trace"]
        metadata["corrected_data"] = detail["corrected_data"]
    text = detail.get("text") or detail.get("corrected_data") or ""
    if text:
        metadata["addenda"] = f"{metadata['addenda']} {text}" if "addenda" in metadata else text


def _check_file_control(line: str, number: int, batches: int, records: int, entry_hash: int, debits: int,
                        credits: int, total_lines: int, errors: _Errors) -> None:
    blocks = -(-total_lines // BLOCKING_FACTOR)
    checks = [
        ("batch_count", line[1:7], f"{batches:06d}"),
        ("block_count", line[7:13], f"{blocks:06d}"),
        ("entry_addenda_count", line[13:21], f"{records:08d}"),
        ("entry_hash", line[21:31], f"{entry_hash % ENTRY_HASH_MODULUS:010d}"),
        ("total_debit_amount", line[31:43], f"{debits:012d}"),
        ("total_credit_amount", line[43:55], f"{credits:012d}"),
    ]
    for field, found, expected in checks:
        if found != expected:
            errors.add(number, f"file control {field} is {found.strip() or 'blank'} but the file has {expected}",
                       field=field, expected=expected, found=found)
