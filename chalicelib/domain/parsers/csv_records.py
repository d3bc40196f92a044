"""CSV files to record items: a header row names the columns, each row becomes one item.

Columns map to record fields by name (date, amount, direction, description, external_id,
currency); `column_mapping` renames source columns first; every other column goes to
metadata. Amounts are in major units ("1,234.56", "$12.00", "(12.00)", "-12.00") and are
converted exactly to minor units from their digits, never through floats; without a
direction column the sign gives the direction (negative = debit). Rows fail alone.

Encoding and delimiter are the import's when given; else UTF-8 (or UTF-16 by its byte order
mark), falling back to Windows-1252 only where that cannot garble the text (_decode), and the
delimiter the header line is split by most (_sniff_delimiter).
"""
from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any

from chalicelib.domain.errors import shown
from chalicelib.domain.money import DEFAULT_CURRENCY, minor_units
from chalicelib.domain.parsers import FileRejected, ParsedFile, ParsedRow, without_gc

RECORD_FIELDS = ("date", "amount", "direction", "description", "external_id", "currency")
REQUIRED_COLUMNS = ("date", "amount")
DATE_FORMATS = ("YYYY-MM-DD", "MM/DD/YYYY", "DD/MM/YYYY")
MAX_FILE_BYTES = 512 * 1024 * 1024
DIRECTIONS = {"credit": "credit", "cr": "credit", "c": "credit", "debit": "debit", "dr": "debit", "d": "debit"}
AMOUNT = re.compile(r"^(?P<open>\()?\s*(?P<sign>[+-])?\s*[$€£¥]?\s*(?P<whole>\d{1,3}(?:,\d{3})+|\d+)?"
                    r"(?:\.(?P<fraction>\d+))?\s*(?P<close>\))?$", re.ASCII)

def _digits(text: str) -> bool:
    """ASCII digits only: str.isdigit also takes '²' and '٣', which int() then refuses or reads."""
    return text.isdigit() and text.isascii()


# '1,234,567' is grouped by thousands; '12,34' is not.
_GROUPED_BY_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+", re.ASCII).fullmatch


# The encodings an import may name -> Python's codec. utf-8 reads a byte order mark too.
ENCODINGS = {"utf-8": "utf-8-sig", "utf-16": "utf-16", "windows-1252": "cp1252", "iso-8859-1": "latin-1"}
DELIMITERS = (",", ";", "\t", "|")  # in the order a tie in the header line is settled
DELIMITER_NAMES = {",": "','", ";": "';'", "\t": "tab", "|": "'|'"}
UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")
# A character of two to four bytes as UTF-8 writes it: in a file that is not UTF-8 throughout it
# means broken UTF-8, which Windows-1252 would garble ("Ã©"), not Windows-1252 text.
UTF8_CHARACTER = re.compile(rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}")


@dataclass(frozen=True)
class CsvOptions:
    data_stream_key: str
    column_mapping: dict[str, str] = field(default_factory=dict)
    date_format: str = "YYYY-MM-DD"
    decimal_places: int | None = None
    encoding: str | None = None  # one of ENCODINGS; None: detected
    delimiter: str | None = None  # one of DELIMITERS; None: read from the header line


class RowError(ValueError):
    pass


def to_minor_units(text: str, decimal_places: int) -> int:
    """'1,234.56' -> 123456 with 2 places; the sign is kept (negative for '-' or parentheses)."""
    whole, dot, fraction = text.strip().partition(".")
    if "," in whole and _GROUPED_BY_THOUSANDS(whole):
        whole = whole.replace(",", "")
    if _digits(whole) and (not dot or _digits(fraction)) and len(fraction) <= decimal_places:
        # The common case, fast: plain digits with at most `decimal_places` decimals. (Annotated: typeshed types
        # int ** int as Any, the exponent might be negative.)
        amount: int = int(whole) * 10**decimal_places + (int(fraction.ljust(decimal_places, "0")) if fraction else 0)
        return amount
    match = AMOUNT.match(text.strip())
    if not match or (match["whole"] is None and match["fraction"] is None) or \
            bool(match["open"]) != bool(match["close"]):
        raise RowError(f"amount: '{shown(text, 40)}' is not an amount like 1234.56, 1,234.56, $12.00 or (12.00)")
    whole_part = int((match["whole"] or "0").replace(",", ""))
    fraction = match["fraction"] or ""
    if len(fraction) > decimal_places:
        if fraction[decimal_places:].strip("0"):
            raise RowError(f"amount: '{shown(text, 40)}' has more than {decimal_places} decimal places")
        fraction = fraction[:decimal_places]
    minor: int = whole_part * 10**decimal_places + int(fraction.ljust(decimal_places, "0") or "0")
    negative = (match["sign"] == "-") != bool(match["open"])
    return -minor if negative else minor


def to_iso_date(text: str, date_format: str) -> str:
    """A date in the declared format to YYYY-MM-DD; an error names the declared format."""
    value = text.strip()
    if date_format == "YYYY-MM-DD":
        return value  # validated with every other item field, in this very format
    parts = value.split("/")
    if len(parts) != 3 or not all(_digits(p) for p in parts) or len(parts[2]) != 4:
        raise RowError(f"date: '{shown(text, 40)}' is not a date in the form {date_format}")
    month, day = (parts[0], parts[1]) if date_format == "MM/DD/YYYY" else (parts[1], parts[0])
    try:
        return date(int(parts[2]), int(month), int(day)).isoformat()
    except ValueError:
        raise RowError(f"date: '{shown(text, 40)}' is not a real date in the form {date_format}") from None


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _decode(data: bytes, encoding: str | None) -> tuple[str, str | None]:
    """The file's text, and a warning when its encoding was guessed rather than given or sure.
    Not given: a UTF-16 byte order mark is UTF-16; else UTF-8 (with or without its mark); a file
    that is not UTF-8 is Windows-1252 only when that is safe: no NUL byte (UTF-16 without a
    mark), none of the five bytes Windows-1252 leaves undefined, and no run of bytes that reads
    as a UTF-8 character (then it is broken UTF-8). Anything else is refused naming the line."""
    if len(data) > MAX_FILE_BYTES:
        raise FileRejected(f"file is {len(data)} bytes; CSV files are accepted up to {MAX_FILE_BYTES} bytes")
    if encoding is not None:
        try:
            return data.decode(ENCODINGS[encoding]), None
        except UnicodeError as error:
            line = _line_of(data, getattr(error, "start", 0))
            raise FileRejected(f"CSV is not {encoding}: line {line} holds bytes {encoding} cannot read; "
                               f"pass the file's encoding ({', '.join(ENCODINGS)})",
                               {"line": line, "encoding": encoding}) from None
    if data.startswith(UTF16_MARKS):
        try:
            return data.decode("utf-16"), None
        except UnicodeError as error:
            line = _line_of(data, getattr(error, "start", 0))
            raise FileRejected(f"CSV opens as UTF-16 but line {line} cannot be read as UTF-16",
                               {"line": line, "encoding": "utf-16"}) from None
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as error:
        line = _line_of(data, error.start)
    why = ("it holds NUL bytes (UTF-16 without a byte order mark?)" if b"\x00" in data
           else "it is UTF-8 elsewhere" if UTF8_CHARACTER.search(data) else None)
    if why is None:
        try:
            return data.decode("cp1252"), (f"read as Windows-1252: the file is not UTF-8 (line {line} is the first "
                                           "that is not); pass encoding to read it otherwise")
        except UnicodeDecodeError as error:
            line, why = _line_of(data, error.start), "it holds a byte Windows-1252 leaves undefined there"
    raise FileRejected(f"CSV is not UTF-8: line {line} cannot be read, and the file is not read as Windows-1252 "
                       f"because {why}; pass its encoding ({', '.join(ENCODINGS)})",
                       {"line": line}) from None


def _sniff_delimiter(text: str) -> str:
    """The delimiter the header line is split by most (outside quotes); a tie goes to the first
    of DELIMITERS, so a comma-separated header stays comma-separated."""
    header = re.sub(r'"[^"]*"', "", text.split("\n", 1)[0])
    counts = {d: header.count(d) for d in DELIMITERS}
    return max(DELIMITERS, key=lambda d: (counts[d], -DELIMITERS.index(d)))


def _columns(header: list[str], options: CsvOptions) -> list[str]:
    names = [options.column_mapping.get(name.strip(), name.strip()) for name in header]
    unknown = set(options.column_mapping) - {name.strip() for name in header}
    if unknown:
        raise FileRejected(f"column_mapping names columns the file does not have: {', '.join(sorted(unknown))}",
                           {"columns": header})
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise FileRejected(f"CSV header names a column twice: {', '.join(duplicates)}", {"columns": header})
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        used = options.delimiter or ","
        looks = _sniff_delimiter(used.join(header))
        advice = (f"the header looks {DELIMITER_NAMES[looks]}-separated: pass delimiter {looks!r}" if looks != used
                  else f"columns: {', '.join(header)}; map one with column_mapping")
        raise FileRejected(f"CSV has no {' or '.join(repr(m) for m in missing)} column in the header (read with "
                           f"delimiter {DELIMITER_NAMES[used]}; {advice})", {"columns": header, "delimiter": used})
    return names


def parse_csv(data: bytes, options: CsvOptions) -> ParsedFile:
    if options.date_format not in DATE_FORMATS:
        raise FileRejected(f"date_format must be one of {', '.join(DATE_FORMATS)}")
    text, warning = _decode(data, options.encoding)
    delimiter = options.delimiter or _sniff_delimiter(text)
    options = replace(options, delimiter=delimiter)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        raise FileRejected("CSV is empty: a header row is required") from None
    except csv.Error as error:
        raise FileRejected(f"CSV header cannot be read: {error}") from None
    names = _columns(header, options)
    to_item = _row_reader(names, options)
    external_id_at = names.index("external_id") if "external_id" in names else None
    width = len(names)
    rows: list[ParsedRow] = []
    append = rows.append
    line = reader.line_num + 1
    with without_gc():
        try:
            for values in reader:
                if len(values) == width:
                    try:
                        append(ParsedRow(line, to_item(values)))
                    except (RowError, ValueError) as error:  # ValueError: a value no check foresaw
                        # A failed row keeps its external_id, so that its result names it.
                        kept = values[external_id_at].strip() if external_id_at is not None else ""
                        append(ParsedRow(line, {"external_id": kept} if kept else None,
                                         str(error) if isinstance(error, RowError)
                                         else f"row cannot be read: {shown(error, 80)}"))
                elif values and (len(values) > 1 or values[0].strip()):
                    append(ParsedRow(line, None, f"row has {len(values)} fields; the header has {width}"))
                line = reader.line_num + 1
        except csv.Error as error:
            raise FileRejected(f"CSV cannot be read at line {line}: {error}", {"line": line}) from None
    summary: dict[str, Any] = {"columns": header, "rows": len(rows), "delimiter": delimiter}
    if warning:
        summary.update(warnings=[warning], warning_count=1)
    return ParsedFile(rows=rows, summary=summary)


def _row_reader(names: list[str], options: CsvOptions) -> Callable[[list[str]], dict[str, Any]]:
    """A function turning one row's values into a record item, with the column positions bound once."""
    position = {name: i for i, name in enumerate(names)}
    date_at, amount_at = position["date"], position["amount"]
    direction_at = position.get("direction")
    currency_at = position.get("currency")
    description_at = position.get("description")
    external_id_at = position.get("external_id")
    metadata_columns = [(i, name) for i, name in enumerate(names) if name not in RECORD_FIELDS]
    stream_key, date_format = options.data_stream_key, options.date_format
    fixed_places = options.decimal_places
    default_places = fixed_places if fixed_places is not None else minor_units(DEFAULT_CURRENCY)
    iso_dates = date_format == "YYYY-MM-DD"

    def to_item(values: list[str]) -> dict[str, Any]:
        currency = DEFAULT_CURRENCY
        places = default_places
        if currency_at is not None:
            currency = values[currency_at].strip().upper() or DEFAULT_CURRENCY
            places = fixed_places if fixed_places is not None else minor_units(currency)
        text = values[amount_at]
        whole, dot, fraction = text.partition(".")
        if len(fraction) == places and whole.isdigit() and fraction.isdigit() and text.isascii():
            amount = int(whole + fraction)  # the common case, '1234.56', without a call
        else:
            amount = to_minor_units(text, places)
        if direction_at is None:
            direction: str | None = "debit" if amount < 0 else "credit"
        else:
            raw_direction = values[direction_at].strip().lower()
            direction = DIRECTIONS.get(raw_direction)
            if direction is None:
                raise RowError(f"direction: '{shown(raw_direction, 40)}' is not credit or debit")
            if amount < 0:
                raise RowError("amount: negative with a direction column; give the amount unsigned")
        item: dict[str, Any] = {
            "data_stream_key": stream_key,
            "date": values[date_at].strip() if iso_dates else to_iso_date(values[date_at], date_format),
            "amount": abs(amount), "direction": direction, "currency": currency,
            "decimal_places": places,
        }
        if description_at is not None:
            item["description"] = values[description_at].strip() or None
        if external_id_at is not None:
            item["external_id"] = values[external_id_at].strip() or None
        if metadata_columns:
            item["metadata"] = {name: values[i] for i, name in metadata_columns if values[i] != ""}
        return item

    return to_item
