"""NACHA (ACH) files: the fixed-width format parsed and validated whole, then one record item per entry.

Layout (94-character records, positions 1-based as in the NACHA rules):
  1 file header, then batches of: 5 batch header, 6 entry details each followed by its
  7 addenda (05 payment info, 98 notification of change, 99 return, 10-18 IAT), 8 batch
  control; then 9 file control and 9-filled padding to a multiple of ten records.
Lines may end with LF, CRLF or nothing at all (unbroken 94-byte blocks); lines whose trailing
blanks were trimmed in transit are padded back to 94.

Text is read one byte to one character (Windows-1252, and Latin-1 for the five bytes that
Windows-1252 leaves undefined), so positions stay byte-exact; a line that is too long only
because it holds UTF-8 is read as UTF-8. Numeric and code fields must still be ASCII.

IAT batches (and IAT notifications of change, SEC COR with IATCOR) follow their own layout:
the batch header carries currencies and countries where other batches carry the company name,
each entry carries its foreign account and is followed by the seven mandatory addenda 10-16.

Nothing is returned unless the whole file is valid: every batch's counts, entry hash and
debit/credit totals, and the file's, agree with the entries. FileRejected carries every
disagreement found (line, batch, field, expected, found). With control_mismatch="warn", a
disagreeing count or entry hash (never an amount) is returned as a warning instead.
See docs/nacha.md for the record dates, external ids and the options.
"""
from __future__ import annotations

import codecs
import re
from datetime import date, timedelta
from typing import Any

from chalicelib.domain.parsers import FileRejected, ParsedFile, ParsedRow, claim_unique, without_gc

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
RETURN_KINDS = {"1", "6"}  # automated returns and notifications of change
TRANSACTION_CODES = frozenset(
    [a + k for a in "234" for k in "12346789"] + ["51", "52", "53", "54", "55", "56"])
ENTRY_HASH_MODULUS = 10**10
ADDENDA_TYPES = {"05", "98", "99", "10", "11", "12", "13", "14", "15", "16", "17", "18"}
IAT_MANDATORY_ADDENDA = ("10", "11", "12", "13", "14", "15", "16")
IAT_OPTIONAL_ADDENDA_LIMITS = {"17": 2, "18": 5}
FOREIGN_EXCHANGE_INDICATORS = {"FV", "VF", "FF"}
# Import option: what a control record whose counts or entry hash disagree with the entries
# does to the file. Amounts never get this leniency.
CONTROL_MISMATCH_MODES = ("refuse", "warn")
LENIENT_FIELDS = {"batch_count", "block_count", "entry_addenda_count", "entry_hash"}
_CODEC_FALLBACK = "nacha-latin-1"


def _latin1_fallback(error: UnicodeError) -> tuple[Any, int]:
    """Windows-1252 leaves 0x81, 0x8D, 0x8F, 0x90 and 0x9D undefined: read (and write back)
    those bytes as Latin-1, so that every byte is one character either way."""
    if isinstance(error, UnicodeDecodeError):
        return error.object[error.start:error.end].decode("latin-1"), error.end
    if isinstance(error, UnicodeEncodeError):
        return error.object[error.start:error.end].encode("latin-1"), error.end
    raise error


codecs.register_error(_CODEC_FALLBACK, _latin1_fallback)


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()  # '²' is a digit to str.isdigit, not to NACHA


class _Errors:
    def __init__(self, control_mismatch: str = "refuse") -> None:
        self.items: list[dict[str, Any]] = []
        self.total = 0
        self.warnings: list[dict[str, Any]] = []
        self.warning_total = 0
        self.lenient = control_mismatch == "warn"

    def add(self, line: int, message: str, batch: int | None = None, *, field: str | None = None,
            expected: Any = None, found: Any = None) -> None:
        self.total += 1
        if len(self.items) < MAX_REPORTED_ERRORS:
            self.items.append({"line": line, "batch": batch, "field": field, "expected": expected,
                               "found": found, "message": message})

    def mismatch(self, line: int, message: str, batch: int | None, field: str, expected: str, found: str) -> None:
        """A control field that disagrees with the entries: an error, or (counts and hashes,
        when the import allows it) a warning."""
        if self.lenient and field in LENIENT_FIELDS:
            self.warning_total += 1
            if len(self.warnings) < MAX_REPORTED_ERRORS:
                self.warnings.append({"line": line, "batch": batch, "field": field, "expected": expected,
                                      "found": found, "message": message})
            return
        self.add(line, message, batch, field=field, expected=expected, found=found)


def _structure_error(message: str, line: int | None, field: str, expected: Any, found: Any) -> FileRejected:
    return FileRejected(message, {"errors": [{"line": line, "batch": None, "field": field, "expected": expected,
                                              "found": found, "message": message}], "error_count": 1})


def _decode(data: bytes) -> tuple[str, str]:
    try:
        return data.decode("ascii"), "ascii"
    except UnicodeDecodeError:
        return data.decode("cp1252", errors=_CODEC_FALLBACK), "windows-1252"


def _utf8_record(line: str) -> str | None:
    """A line too long only because it is UTF-8 (a multibyte name): its UTF-8 reading, padded."""
    try:
        text = line.encode("cp1252", errors=_CODEC_FALLBACK).decode("utf-8")
    except UnicodeError:
        return None
    return text.ljust(RECORD_LENGTH) if len(text) <= RECORD_LENGTH else None


def split_records(data: bytes, max_bytes: int = MAX_FILE_BYTES) -> list[str]:
    return _split(data, max_bytes)[0]


def _split(data: bytes, max_bytes: int = MAX_FILE_BYTES) -> tuple[list[str], str]:
    if len(data) > max_bytes:
        raise FileRejected(f"file is {len(data)} bytes; NACHA files are accepted up to {max_bytes} bytes")
    if not data.strip():
        raise FileRejected("file is empty")
    text, encoding = _decode(data)
    text = text.rstrip("\r\n\x1a")  # a final line break, or a DOS end-of-file mark
    if not text.strip():
        raise FileRejected("file is empty")
    if not text.startswith("1"):
        raise _structure_error("not a NACHA file: it does not open with a file header record (type 1)", 1,
                               "record_type_code", "1", text[:1])
    if "\n" in text or "\r" in text:
        lines = LINE_BREAK.split(text)
    else:
        if len(text) % RECORD_LENGTH:
            raise _structure_error(
                f"file has no line breaks and {len(text)} characters, which is not a whole number of "
                f"{RECORD_LENGTH}-character records: it looks truncated", None, "record_length",
                f"a multiple of {RECORD_LENGTH}", len(text))
        lines = [text]
    records: list[str] = []
    for number, line in enumerate(lines, start=1):
        if len(line) > RECORD_LENGTH:
            utf8 = _utf8_record(line) if not line.isascii() else None
            if utf8 is not None:
                records.append(utf8)
                encoding = "utf-8"
                continue
            if len(line) % RECORD_LENGTH:
                raise _structure_error(f"line {number} has {len(line)} characters; NACHA records have "
                                       f"{RECORD_LENGTH}", number, "record_length", RECORD_LENGTH, len(line))
            records += [line[i:i + RECORD_LENGTH] for i in range(0, len(line), RECORD_LENGTH)]  # unbroken blocks
        else:
            records.append(line if len(line) == RECORD_LENGTH else line.ljust(RECORD_LENGTH))
    if not records or not records[0].strip():
        raise FileRejected("file is empty")
    return records, encoding


def _yymmdd(text: str) -> date | None:
    if not _digits(text):
        return None
    try:
        return date(2000 + int(text[0:2]), int(text[2:4]), int(text[4:6]))
    except ValueError:
        return None


def _settlement_date(julian: str, created: date | None) -> date | None:
    """The settlement date is a day of the year (001-366) without its year: the year is the one
    that puts the day nearest the file's creation (a file of 30 December may settle on day 002)."""
    if created is None or not _digits(julian) or not 1 <= int(julian) <= 366:
        return None
    day = int(julian)
    candidates = []
    for year in (created.year - 1, created.year, created.year + 1):
        start = date(year, 1, 1)
        candidate = start + timedelta(days=day - 1)
        if candidate.year == year:  # day 366 exists in leap years only
            candidates.append(candidate)
    return min(candidates, key=lambda d: abs((d - created).days)) if candidates else None


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


class _FileIdentity:
    """What names the file among all files: immediate origin, creation date and time, file id
    modifier. With the batch number and trace number it names an entry (its external_id)."""
    __slots__ = ("created", "key")

    def __init__(self, header: str) -> None:
        self.created = _yymmdd(header[23:29])
        origin = header[13:23].strip()
        self.key = f"{origin}-{header[23:29]}{header[29:33].strip()}{header[33:34].strip()}"


class _Batch:
    __slots__ = ("line", "number", "service_class", "company_name", "company_id", "sec", "description",
                 "effective_date", "date_source", "date_missing", "raw_date", "not_returns", "odfi",
                 "batch_number", "records", "hash", "debits", "credits", "iat", "base_metadata")

    def __init__(self, line_number: int, line: str, errors: _Errors, ordinal: int, file: _FileIdentity) -> None:
        self.line = line_number
        self.number = ordinal
        self.service_class = line[1:4]
        self.sec = line[50:53]
        # IAT entries, and IAT notifications of change (SEC COR, "IATCOR" in the IAT indicator).
        self.iat = self.sec == "IAT" or (self.sec == "COR" and line[4:10] == "IATCOR")
        self.company_name = line[4:20].strip() if not self.iat else ""
        self.company_id = line[40:50]  # the originator identification in IAT batches
        self.description = line[53:63].strip()
        self.odfi = line[79:87]
        self.batch_number = line[87:94]
        self.raw_date = line[69:75]
        self.not_returns = 0  # the first line of an entry that is neither a return nor a NOC
        self.base_metadata = {"sec_code": self.sec, "company_name": self.company_name,
                              "company_id": self.company_id.strip(), "batch_number": self.batch_number}
        if self.iat:
            self._read_iat_header(line_number, line, errors)
        self.records = 0
        self.hash = 0
        self.debits = 0
        self.credits = 0
        if self.service_class not in SERVICE_CLASSES:
            errors.add(line_number, f"unknown service class code '{self.service_class}'", ordinal,
                       field="service_class_code", expected="200, 220, 225 or 280", found=self.service_class)
        if not (self.sec.isascii() and self.sec.isalpha() and self.sec.isupper()):
            errors.add(line_number, f"SEC code '{self.sec}' is not three capital letters", ordinal,
                       field="standard_entry_class", expected="three capital letters", found=self.sec)
        self._date(line_number, line, errors, file)
        if not _digits(self.batch_number):
            errors.add(line_number, "batch number is not numeric", ordinal, field="batch_number",
                       expected="7 digits", found=self.batch_number)

    def _date(self, line_number: int, line: str, errors: _Errors, file: _FileIdentity) -> None:
        """The records' date: the effective entry date; returns and NOCs may leave it 000000 or
        blank, and then take the settlement date, else the file creation date."""
        effective = _yymmdd(self.raw_date)
        self.date_missing = effective is None and self.raw_date in ("000000", "      ")
        self.date_source = "effective_entry_date"
        if effective is None and self.date_missing:
            settlement = _settlement_date(line[75:78], file.created)
            effective = settlement or file.created
            self.date_source = "settlement_date" if settlement else "file_creation_date"
        self.effective_date = effective.isoformat() if effective else None
        if effective is None:
            detail = (" and the file has no settlement or file creation date to take instead"
                      if self.date_missing else "")
            errors.add(line_number, f"effective entry date '{self.raw_date}' is not a date YYMMDD{detail}",
                       self.number, field="effective_entry_date", expected="YYMMDD", found=self.raw_date)

    def _read_iat_header(self, line_number: int, line: str, errors: _Errors) -> None:
        fx_indicator, fx_reference_indicator = line[20:22], line[22]
        country, from_currency, to_currency = line[38:40], line[63:66], line[66:69]
        self.base_metadata.update({
            "foreign_exchange_indicator": fx_indicator, "iso_destination_country": country,
            "iso_originating_currency": from_currency, "iso_destination_currency": to_currency})
        checks = [
            ("foreign_exchange_indicator", fx_indicator, fx_indicator in FOREIGN_EXCHANGE_INDICATORS, "FV, VF or FF"),
            ("foreign_exchange_reference_indicator", fx_reference_indicator, fx_reference_indicator in ("1", "2", "3"),
             "1, 2 or 3"),
            ("iso_destination_country_code", country, country.isascii() and country.isalpha(), "two letters"),
            ("iso_originating_currency_code", from_currency, from_currency.isascii() and from_currency.isalpha(),
             "three letters"),
            ("iso_destination_currency_code", to_currency, to_currency.isascii() and to_currency.isalpha(),
             "three letters"),
        ]
        for field, found, ok, expected in checks:
            if not ok:
                errors.add(line_number, f"IAT batch header {field} is '{found}', expected {expected}", self.number,
                           field=field, expected=expected, found=found)


def _check_control(batch: _Batch, line_number: int, line: str, errors: _Errors) -> None:
    checks = [
        ("service_class_code", line[1:4], batch.service_class),
        ("entry_addenda_count", line[4:10], f"{batch.records:06d}"),
        ("entry_hash", line[10:20], f"{batch.hash % ENTRY_HASH_MODULUS:010d}"),
        ("total_debit_amount", line[20:32], f"{batch.debits:012d}"),
        ("total_credit_amount", line[32:44], f"{batch.credits:012d}"),
        ("batch_number", line[87:94], batch.batch_number),
    ]
    for field, found, expected in checks:
        if found != expected:
            errors.mismatch(line_number, f"batch control {field} is {found.strip() or 'blank'} but the batch has "
                            f"{expected.strip() or 'blank'}", batch.number, field, expected, found)
    # Tools align the company identification left or right; IAT batch controls may leave it blank.
    found = line[44:54]
    if found.strip() != batch.company_id.strip() and not (batch.iat and not found.strip()):
        errors.add(line_number, f"batch control company_identification is '{found.strip() or 'blank'}' but the "
                   f"batch has '{batch.company_id.strip() or 'blank'}'", batch.number,
                   field="company_identification", expected=batch.company_id, found=found)
    if batch.date_missing and batch.not_returns:
        errors.add(batch.line, f"effective entry date '{batch.raw_date}' is not a date YYMMDD: only returns and "
                   f"notifications of change may leave it out, and the entry on line {batch.not_returns} is "
                   f"neither", batch.number, field="effective_entry_date", expected="YYMMDD", found=batch.raw_date)


class _Entry:
    """The entry being read and what its addenda have shown so far."""
    __slots__ = ("item", "line", "expects_addenda", "addenda", "iat_next", "optional", "returned", "order_broken")

    def __init__(self, item: dict[str, Any], line: int, expects_addenda: bool, returned: bool) -> None:
        self.item = item
        self.line = line
        self.expects_addenda = expects_addenda
        self.addenda = 0
        self.iat_next = 0          # IAT: how many of the mandatory addenda 10-16 came, in order
        self.optional: dict[str, int] = {}
        self.returned = returned   # a return or a notification of change
        self.order_broken = False


def parse_nacha(data: bytes, max_bytes: int = MAX_FILE_BYTES, *, control_mismatch: str = "refuse") -> ParsedFile:
    """Validate the whole file, then return one row per entry. Raises FileRejected otherwise.
    control_mismatch="warn" accepts control counts and entry hashes that disagree with the
    entries, listing them in summary["warnings"]."""
    if control_mismatch not in CONTROL_MISMATCH_MODES:
        raise ValueError(f"control_mismatch must be one of {CONTROL_MISMATCH_MODES}")
    with without_gc():
        records, encoding = _split(data, max_bytes)
        parsed = _parse(records, _Errors(control_mismatch))
        parsed.summary["text_encoding"] = encoding
        return parsed


def _parse(lines: list[str], errors: _Errors) -> ParsedFile:
    rows: list[ParsedRow] = []
    if lines[0][0] != "1":
        raise _structure_error("not a NACHA file: the first record is not a file header (type 1)", 1,
                               "record_type_code", "1", lines[0][:1])
    header = lines[0]
    if header[34:37] != "094":
        errors.add(1, f"file header record size is '{header[34:37]}', expected '094'", field="record_size",
                   expected="094", found=header[34:37])
    file = _FileIdentity(header)
    seen_ids: set[str] = set()

    batch: _Batch | None = None
    entry: _Entry | None = None
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
        batch_number = batch.number if batch else None
        if entry.expects_addenda and not entry.addenda:
            errors.add(entry.line, "entry says it has addenda (indicator 1) but none follows", batch_number,
                       field="addenda_record_indicator", expected="an addenda record", found="none")
        if batch is not None and batch.iat and entry.iat_next < len(IAT_MANDATORY_ADDENDA) and not entry.order_broken:
            missing = IAT_MANDATORY_ADDENDA[entry.iat_next]
            errors.add(entry.line, f"IAT entry has {entry.iat_next} of its 7 mandatory addenda (10-16): "
                       f"addenda {missing} is missing", batch_number, field="addenda_type_code",
                       expected=missing, found="none")
        if batch is not None and not entry.returned and not batch.not_returns:
            batch.not_returns = entry.line
        rows.append(ParsedRow(line=entry.line, item=entry.item))
        entry = None

    for index in range(1, total_lines):
        line = lines[index]
        number = index + 1
        kind = line[0]
        if file_control_line:
            if line != PADDING:
                errors.add(number, "only 9-filled padding may follow the file control record",
                           field="record_type_code", expected=PADDING[:10], found=line[:10])
            continue
        if kind == "5":
            if batch is not None:
                errors.add(number, "batch header inside a batch: the previous batch has no control record",
                           batch.number, field="record_type_code", expected="8", found=kind)
                close_entry()
            batches += 1
            batch = _Batch(number, line, errors, batches, file)
        elif kind == "6":
            if batch is None:
                errors.add(number, "entry detail outside a batch", field="record_type_code", expected="5",
                           found=kind)
                continue
            close_entry()
            entry = _entry(line, number, batch, errors, file, seen_ids)
            batch.records += 1
        elif kind == "7":
            if entry is None or batch is None:
                errors.add(number, "addenda record without an entry detail before it",
                           batch.number if batch else None, field="record_type_code", expected="6", found=kind)
                continue
            if not entry.expects_addenda:
                errors.add(number, "addenda record after an entry whose addenda indicator is 0", batch.number,
                           field="addenda_record_indicator", expected="1", found="0")
            entry.addenda += 1
            batch.records += 1
            _attach_addenda(entry, line, number, batch, errors)
        elif kind == "8":
            if batch is None:
                errors.add(number, "batch control without a batch header", field="record_type_code",
                           expected="5", found=kind)
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
                errors.add(number, "padding before the file control record", field="record_type_code",
                           expected="9 (file control)", found=line[:10])
                continue
            if batch is not None:
                errors.add(number, "file control inside a batch: the batch has no control record", batch.number,
                           field="record_type_code", expected="8", found=kind)
                close_entry()
                batch = None
            file_control_line = number
            _check_file_control(line, number, batches, file_records, file_hash, file_debits, file_credits,
                                total_lines, errors)
        elif kind == "1":
            errors.add(number, "a second file header", field="record_type_code", expected="5 or 9", found=kind)
        else:
            errors.add(number, f"unknown record type '{kind}'", batch.number if batch else None,
                       field="record_type_code", expected="1, 5, 6, 7, 8 or 9", found=kind)

    if batch is not None:
        errors.add(total_lines, "file ends inside a batch: no batch control record", batch.number,
                   field="record_type_code", expected="8", found="end of file")
    if not file_control_line:
        errors.add(total_lines, "file control record (type 9) is missing: the file looks truncated",
                   field="record_type_code", expected="9", found="end of file")
    warnings = {"warnings": errors.warnings, "warning_count": errors.warning_total} if errors.warning_total else {}
    if errors.total:
        first = errors.items[0]
        raise FileRejected(
            f"NACHA validation failed with {errors.total} error(s); first at line {first['line']}: "
            f"{first['message']}", {"errors": errors.items, "error_count": errors.total, **warnings})
    created = file.created
    return ParsedFile(rows=rows, summary={
        "batches": batches, "entries": len(rows), "total_debit_amount": file_debits,
        "total_credit_amount": file_credits, "file_creation_date": created.isoformat() if created else None,
        "immediate_origin_name": header[63:86].strip(), "immediate_destination_name": header[40:63].strip(),
        "file_id": file.key, **warnings,
    })


def _entry(line: str, number: int, batch: _Batch, errors: _Errors, file: _FileIdentity,
           seen_ids: set[str]) -> _Entry:
    code = line[1:3]
    rdfi = line[3:11]
    amount_text = line[29:39]
    trace = line[79:94]
    indicator = line[78]
    if batch.iat:
        account = line[39:74]
        name = ""
        addenda_count = line[12:16]
        if not _digits(addenda_count):
            errors.add(number, f"IAT number of addenda records '{addenda_count}' is not numeric", batch.number,
                       field="number_of_addenda_records", expected="4 digits", found=addenda_count)
        if indicator == "0":
            errors.add(number, "an IAT entry always has addenda, but its addenda record indicator is 0",
                       batch.number, field="addenda_record_indicator", expected="1", found=indicator)
    elif batch.sec == "CTX":
        account = line[12:29]
        name = line[58:74].strip()
    else:
        account = line[12:29]
        name = line[54:76].strip()
    if code not in TRANSACTION_CODES:
        errors.add(number, f"unknown transaction code '{code}'", batch.number, field="transaction_code",
                   expected="a NACHA transaction code", found=code)
        code = "22"
    if not (rdfi.isdigit() and rdfi.isascii()):
        errors.add(number, "receiving DFI identification is not numeric", batch.number,
                   field="receiving_dfi_identification", expected="8 digits", found=rdfi)
        rdfi = "0"
    if not (amount_text.isdigit() and amount_text.isascii()):
        errors.add(number, f"amount '{amount_text}' is not numeric", batch.number, field="amount",
                   expected="10 digits (cents)", found=amount_text)
        amount_text = "0"
    if not (trace.isdigit() and trace.isascii()):
        errors.add(number, f"trace number '{trace}' is not numeric", batch.number, field="trace_number",
                   expected="15 digits", found=trace)
    if indicator not in ("0", "1"):
        errors.add(number, f"addenda record indicator '{indicator}' is not 0 or 1", batch.number,
                   field="addenda_record_indicator", expected="0 or 1", found=indicator)
    amount = int(amount_text)
    kind = code[1]
    credit = kind in CREDIT_KINDS and code not in ("55", "56")
    if kind in ZERO_AMOUNT_KINDS and amount:
        what = "prenote" if kind in PRENOTE_KINDS else "zero-dollar entry"
        errors.add(number, f"{what} (transaction code {code}) must have a zero amount", batch.number,
                   field="amount", expected="0000000000", found=amount_text)
    batch.hash += int(rdfi)
    if credit:
        batch.credits += amount
    else:
        batch.debits += amount
    metadata: dict[str, Any] = dict(batch.base_metadata)
    metadata["transaction_code"] = code
    metadata["receiving_routing_number"] = rdfi + line[11]
    metadata["account_number"] = _mask(account)
    metadata["trace_number"] = trace
    metadata["date_source"] = batch.date_source
    if kind in PRENOTE_KINDS:
        metadata["prenote"] = True
    if batch.iat:
        metadata["addenda_count"] = line[12:16]
    item = {
        "date": batch.effective_date, "amount": amount, "direction": "credit" if credit else "debit",
        "external_id": _external_id(file, batch, trace, seen_ids), "description": f"{batch.description} {name}".strip(),
        "metadata": metadata,
    }
    return _Entry(item, number, indicator == "1", returned=kind in RETURN_KINDS or batch.sec == "COR")


def _external_id(file: _FileIdentity, batch: _Batch, trace: str, seen_ids: set[str]) -> str:
    """File identity, batch number, trace number: unique in the file (an entry repeating a batch
    number and trace number of the same file gets '-2', '-3'...), the same on every import."""
    return claim_unique(f"{file.key}-{batch.batch_number}-{trace}", seen_ids)


def _attach_addenda(entry: _Entry, line: str, number: int, batch: _Batch, errors: _Errors) -> None:
    kind = line[1:3]
    if kind not in ADDENDA_TYPES:
        errors.add(number, f"unknown addenda type code '{kind}'", batch.number, field="addenda_type_code",
                   expected="05, 10-18, 98 or 99", found=kind)
        return
    if not _addenda_fit_the_batch(entry, kind, number, batch, errors):
        return
    item = entry.item
    metadata = item["metadata"]
    detail = _addenda_detail(line)
    trace = metadata["trace_number"]
    if kind not in ("98", "99") and line[87:94] != trace[-7:]:
        errors.add(number, "addenda entry detail sequence number does not match its entry's trace number",
                   batch.number, field="entry_detail_sequence_number", expected=trace[-7:], found=line[87:94])
    if kind == "99":
        entry.returned = True
        metadata["return_reason_code"] = detail["return_reason_code"]
        metadata["original_trace"] = detail["original_trace"]
    elif kind == "98":
        entry.returned = True
        metadata["change_code"] = detail["change_code"]
        metadata["original_trace"] = detail["original_trace"]
        metadata["corrected_data"] = detail["corrected_data"]
    elif kind == "10":
        receiver = line[46:81].strip()
        if receiver:
            metadata["receiver_name"] = receiver
            item["description"] = f"{item['description']} {receiver}".strip()
    text = detail.get("text") or detail.get("corrected_data") or ""
    if text:
        metadata["addenda"] = f"{metadata['addenda']} {text}" if "addenda" in metadata else text


def _addenda_fit_the_batch(entry: _Entry, kind: str, number: int, batch: _Batch, errors: _Errors) -> bool:
    """IAT entries take the addenda 10-16 once each and in order, then at most two 17, five 18,
    and a 98 or 99 for an IAT notification of change or return; other entries take no IAT addenda."""
    if not batch.iat:
        if kind in IAT_MANDATORY_ADDENDA or kind in IAT_OPTIONAL_ADDENDA_LIMITS:
            errors.add(number, f"IAT addenda type {kind} in a {batch.sec} batch", batch.number,
                       field="addenda_type_code", expected="05, 98 or 99", found=kind)
            return False
        return True
    if kind == "05":
        errors.add(number, "addenda type 05 in an IAT batch", batch.number, field="addenda_type_code",
                   expected="10-18, 98 or 99", found=kind)
        return False
    if entry.order_broken:
        return True
    if entry.iat_next < len(IAT_MANDATORY_ADDENDA):
        expected = IAT_MANDATORY_ADDENDA[entry.iat_next]
        if kind != expected:
            entry.order_broken = True
            errors.add(number, f"IAT addenda out of order: addenda {expected} must come next, found {kind}",
                       batch.number, field="addenda_type_code", expected=expected, found=kind)
            return True
        entry.iat_next += 1
        return True
    limit = IAT_OPTIONAL_ADDENDA_LIMITS.get(kind)
    if limit is not None:
        entry.optional[kind] = entry.optional.get(kind, 0) + 1
        if entry.optional[kind] > limit:
            errors.add(number, f"an IAT entry takes at most {limit} addenda {kind}", batch.number,
                       field="addenda_type_code", expected=f"at most {limit}", found=str(entry.optional[kind]))
    elif kind in IAT_MANDATORY_ADDENDA:
        errors.add(number, f"IAT addenda {kind} repeated: the entry already has 10-16", batch.number,
                   field="addenda_type_code", expected="17, 18, 98 or 99", found=kind)
    return True


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
            errors.mismatch(number, f"file control {field} is {found.strip() or 'blank'} but the file has "
                            f"{expected}", None, field, expected, found)
