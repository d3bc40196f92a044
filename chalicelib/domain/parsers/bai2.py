"""BAI2 bank statements (Cash Management Balance Reporting Specification, version 2): each account's
16 transaction details become StatementTransactions and its 03 balances a StatementBalance, once
every 49/98/99 record count and control total is checked.

Our own parser, not PyPI's `bai2` (0.15.0, MIT, Ministry of Justice, which calls itself "not
production ready"). Its integrity checks are all or nothing (no warnings to go on with) and stop
at the first disagreement with a message naming neither the line nor the account; a truncated
file sends it into an endless loop; a type code missing from its table (any bank-specific 9xx),
an unknown record code or a bad number raises its own exceptions or a bare ValueError; it reads a
03 continued without "/" terminators wrongly; and it builds a tree of objects per record that we
would walk again to build ours: 15 s for 1,000,000 transactions on this machine, where this
parser takes about 3 s.

What the format leaves to the reader, and how it is read here:
- A record is a line. A final "/" is its terminator (files have it or not), spaces after it are
  padding; blank lines are not records.
- A file of no line breaks (some banks send one long line) is read when its records are
  "/"-terminated (it is split at a "/" that a record code follows: "/02,", "/16,", spaces between
  allowed), or else when it is fixed 80-character records (every 80-character block opens with a
  record code; the padding is dropped). Anything else is refused: where one record ends is not
  known. Line numbers then count records. A 16's text may hold "/16,", "/88," or "/01/" too: in
  a text the line breaks only before a record that may follow there, and an account read with more
  records than its trailer counts takes the earliest splits that make it agree back into its
  texts (_split).
- 88 records continue the record before them, broken between any two fields. A 03's continuations
  hold more summaries (or its currency, when the 03 stops after its account number): a summary
  that a line cuts short goes on in the next line. After a line ending with "/" it goes on only
  if the 88's fields read as its rest and not as summaries of their own (or it has no more than
  its type code); else the "/" ended it, defaulting its missing item count and funds type, as
  the record's last line does. A 16's continuations go on with its fields until its text has
  started, then with its text.
- A 16's text runs to the end of its line and may hold commas and slashes; a "/" ending it is the
  terminator. The description is the text and its continuations joined by a space.
- The funds type decides how many fields follow it: none for 0, 1, 2, Z or blank; three amounts
  for S; a value date and time for V; a count and that many day/amount pairs for D.
- Amounts are in the currency's minor units (USD 2 decimals, JPY 0, BHD 3); 03 amounts and
  control totals may carry a sign.
- Type codes 100-399 are credits, 400-699 debits, the loan details 721-728 credits and 760 a debit.
  890-999 (non-monetary and bank-specific codes) give no record, though their amounts count in
  the totals. The reversal codes (251, 252, 258, 395 credits; 551, 552, 558, 694 debits) keep the
  class their range gives them, which already moves the money back, and say `reversal: true`.
- A 49's control total is the sum of every amount of the account's 03 (balances and summaries)
  and 16 records, and its count every record from the 03 to the 49, 88s included. A 98's total
  is the sum of its accounts' amounts, a 99's of the whole file's (as read, not as the 49s say);
  their counts run from the 02, or the 01, to the trailer.
- external_id is the bank reference; a reference that repeats in an account's file gets "-2",
  "-3"... (both are imported, the same way each time); without one, deterministic_id(...).
- One StatementBalance per account and group that reports any of 010 (opening ledger), 015
  (closing ledger), 045 (closing available, else 040 opening available); an account whose 03
  comes again in the group is another statement (its id gets "-2", "-3"...).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date
from itertools import combinations
from typing import Any, Literal

from chalicelib.domain.money import DEFAULT_CURRENCY, ISO_4217, minor_units
from chalicelib.domain.parsers import FileRejected, claim_unique, without_gc
from chalicelib.domain.parsers.statements import (
    MAX_STATEMENT_BYTES,
    ParsedStatements,
    StatementBalance,
    StatementTransaction,
    deterministic_id,
    normalise_account,
)

Direction = Literal["credit", "debit"]
CHUNK_CHARACTERS = 1 << 22  # lines are split a few MB at a time, not all at once
MAX_AMOUNT_DIGITS = 18  # any 18 digits fit the signed 64-bit amounts
MAX_TOTAL_DIGITS = 30
MAX_COUNT_DIGITS = 12
MAX_REPORTED = 50
SHOWN_CHARACTERS = 40
RECORD_WIDTH = 80  # fixed-length records of a file with no line breaks
RECORD_CODES = ("01", "02", "03", "16", "49", "88", "98", "99")
# A "/" and a record code after it: where a file of one line may break into records (see _split).
NEXT_RECORD = re.compile(r"/[ \t]*(?=(?:" + "|".join(RECORD_CODES) + r")[,/])")
# The records that may follow each record; an 88 continues the record before it and takes its successors.
SUCCESSORS = {"01": ("02", "88", "99"), "02": ("03", "88"), "03": ("16", "88", "49"), "16": ("16", "88", "49"),
              "49": ("03", "98"), "98": ("02", "99"), "99": ()}
MORE_LINES = re.compile(r"\n\s*\S")
MAX_SPLIT_TRIES = 10_000  # ways of reading the accounts of a one-line file tried against their trailers, in all
SIMPLE_FUNDS_TYPES = frozenset({"", "0", "1", "2", "Z"})
KNOWN_FUNDS_TYPES = SIMPLE_FUNDS_TYPES | {"S", "V", "D"}
FUNDS_TYPES = "0, 1, 2, S, V, D, Z or blank"
REVERSAL_CODES = frozenset({"251", "252", "258", "395", "551", "552", "558", "694"})
OPENING_LEDGER, CLOSING_LEDGER, OPENING_AVAILABLE, CLOSING_AVAILABLE = "010", "015", "040", "045"

# The most used type codes of the specification's appendix A.
TYPE_DESCRIPTIONS = {
    "010": "Opening Ledger", "015": "Closing Ledger", "030": "Current Ledger", "040": "Opening Available",
    "045": "Closing Available", "060": "Current Available", "072": "1-Day Float", "074": "2 or More Days Float",
    "100": "Total Credits", "108": "Credit (Any Type)", "115": "Lockbox Deposit",
    "140": "Total ACH Credits", "142": "ACH Credit Received", "145": "ACH Concentration Credit",
    "165": "Preauthorized ACH Credit", "166": "ACH Settlement", "169": "Miscellaneous ACH Credit",
    "174": "Other Deposit", "175": "Check Deposit Package", "187": "Cash Letter Credit",
    "191": "Individual Incoming Internal Money Transfer", "195": "Incoming Money Transfer",
    "196": "Money Transfer Adjustment", "201": "Individual Automatic Transfer Credit",
    "206": "Book Transfer Credit", "208": "Individual International Money Transfer Credit",
    "251": "Total Debit Reversals", "252": "Debit Reversal", "257": "Individual ACH Return Item",
    "258": "ACH Reversal Credit", "275": "ZBA Credit", "277": "ZBA Credit Transfer", "301": "Commercial Deposit",
    "354": "Interest Credit", "357": "Credit Adjustment", "395": "Check Reversal",
    "398": "Miscellaneous Fee Refund", "399": "Miscellaneous Credit", "400": "Total Debits",
    "409": "Debit (Any Type)", "451": "ACH Debit Received", "455": "Preauthorized ACH Debit",
    "466": "ACH Settlement", "469": "Miscellaneous ACH Debit", "474": "Certified Check Debit",
    "475": "Check Paid", "481": "Individual Loan Payment", "491": "Individual Outgoing Internal Money Transfer",
    "495": "Outgoing Money Transfer", "496": "Money Transfer Adjustment",
    "501": "Individual Automatic Transfer Debit", "506": "Book Transfer Debit",
    "508": "Individual International Money Transfer Debit", "551": "Total Credit Reversals",
    "552": "Credit Reversal", "555": "Deposited Item Returned", "557": "Individual ACH Return Item",
    "558": "ACH Reversal Debit", "564": "Overdraft Fee", "566": "Return Item", "575": "ZBA Debit",
    "577": "ZBA Debit Transfer", "631": "Debit Adjustment", "654": "Interest Debit",
    "661": "Account Analysis Fee", "694": "Deposit Reversal", "695": "Deposit Correction Debit",
    "698": "Miscellaneous Fees", "699": "Miscellaneous Debit", "890": "Contains Non-monetary Information",
}


def _detail_classes() -> dict[str, tuple[Direction | None, str | None, bool]]:
    """Type code of a 16 -> (direction, or None for no record; meaning; reversal). Codes missing
    here (status codes 001-099, loan balances, 800-889) are not transaction details."""
    classes = {}
    for number in range(100, 1000):
        direction: Direction | None
        if number < 400 or 721 <= number <= 728:
            direction = "credit"
        elif number < 700 or number == 760:
            direction = "debit"
        elif number >= 890:
            direction = None
        else:
            continue
        code = f"{number:03d}"
        classes[code] = (direction, TYPE_DESCRIPTIONS.get(code), code in REVERSAL_CODES)
    return classes


DETAIL_CLASSES = _detail_classes()


def parse_bai2(data: bytes, lenient: bool = False, *, max_bytes: int = MAX_STATEMENT_BYTES) -> ParsedStatements:
    """The file's transactions, balances and accounts. Strict: a count or control total that
    disagrees raises FileRejected; lenient, it is a warning. A file that cannot be read raises
    in both modes."""
    if len(data) > max_bytes:
        raise _reject(None, f"file is {len(data)} bytes; statements are accepted up to {max_bytes} bytes",
                      expected=f"at most {max_bytes} bytes", found=len(data))
    text, warnings = _records_of(_decode(data))
    with without_gc():
        reader = _Reader(lenient)
        reader.warnings += warnings
        return reader.read(text)


def _decode(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")
    text = text.removeprefix("\ufeff").rstrip("\x1a")  # a byte-order mark, a DOS end-of-file mark
    if "\n" not in text and "\r" in text:
        text = text.replace("\r", "\n")
    return text


def _records_of(text: str) -> tuple[str, list[str]]:
    """The text with one record a line, and warnings: as it is, unless the file has no line breaks
    (see the module's notes): then split at its "/" terminators (_split), or in fixed 80-character
    records, or refused."""
    head = text.lstrip()
    first_break = head.find("\n")
    if first_break >= 0 and MORE_LINES.search(head, first_break) is not None:
        return text, []  # lines already (found at the first line's end: the file is not copied)
    body = head.rstrip()
    if len(body) <= RECORD_WIDTH or not body.startswith("01,"):
        return text, []  # one record at most, or not BAI2 at all (read() says so)
    split = _split(body)
    if split is not None:
        return split
    blocks = [body[i:i + RECORD_WIDTH] for i in range(0, len(body), RECORD_WIDTH)]
    if all(block[:2] in RECORD_CODES and block[2:3] in (",", "/") for block in blocks):
        return "\n".join(block.rstrip() for block in blocks) + "\n", []
    raise _reject(1, f"the file is one line of {len(body)} characters with no line breaks, and neither "
                  "\"/\"-terminated records nor fixed 80-character records: where its records end is not known",
                  expected="records on lines of their own, ended by \"/\", or of 80 characters each",
                  found=_show(body))


def _split(body: str) -> tuple[str, list[str]] | None:
    """A one-line file's records, one a line, and warnings; None if it has fewer than three "/"
    terminated records. A "/" and a record code may stand in a 16's text too (an invoice
    "2024/16,17", a date "12/01/2024", "REF A/88,B"), so inside a 16 (and its 88s) the line breaks
    only before a record that may follow it (SUCCESSORS): a 16 with a detail's type code, an 88, or
    a 49 that a 03 or a 98 follows. Any other record ends at the first "/" and a record code (what
    follows is left for read() to judge). Where an account still reads more records than its
    trailer (49) counts, the earliest of its breaks inside texts that bring its count and control
    total to the trailer's are taken back into the texts, provided every group (98) and file (99)
    trailer then counts the records read; if another choice would agree too, a warning says so."""
    starts = [0]  # where each record begins, and ends (its "/" included)
    ends: list[int] = []
    breaks = NEXT_RECORD.finditer(body)
    following = next(breaks, None)
    base = "01"  # the record being read (an 88: the record it continues)
    account = -1  # the 03 of the account being read
    in_texts: list[int] = []  # records of the account begun inside a 16's text
    unsure: list[tuple[int, int, list[int], int]] = []  # accounts with more records than their 49 counts
    groups: list[tuple[int, int]] = []  # 02 and 98
    group = -1
    while following is not None:
        found, following = following, next(breaks, None)
        start = found.end()
        code = body[start:start + 2]
        if base == "16":
            if code == "16":
                if body[start + 2] != "," or body[start + 3:start + 6] not in DETAIL_CLASSES or \
                        body[start + 6:start + 7] not in (",", "/", ""):
                    continue
            elif code == "49":
                if body[start + 2] != "," or (following is not None and
                                              body[following.end():following.end() + 2] not in ("03", "98")):
                    continue
            elif code != "88":
                continue
        index = len(starts)
        ends.append(found.start() + 1)
        starts.append(start)
        if code == "88":
            if base == "16":
                in_texts.append(index)
            continue
        if code == "16" and base == "16":
            in_texts.append(index)
        elif code == "03":
            account, in_texts = index, []
        elif code == "49" and account >= 0:
            count = _field(body, start, 2)
            if count is not None and count < index - account + 1 and in_texts:
                unsure.append((account, index, in_texts, index - account + 1 - count))
            account = -1
        elif code == "02":
            group = index
        elif code == "98" and group >= 0:
            groups.append((group, index))
            group = -1
        base = code
    ends.append(len(body))
    if len(starts) < 3:  # at least header, something, trailer
        return None
    taken_back: set[int] = set()
    warnings: list[str] = []
    tries = [MAX_SPLIT_TRIES]
    for first, last, candidates, excess in unsure:
        choice, other = _take_back(body, starts, ends, first, last, candidates, excess, tries)
        if choice:
            taken_back.update(choice)
            if other:
                name = body[starts[first]:ends[first]].split(",")[1].strip()
                kept = ", ".join(_show("/" + body[starts[i]:ends[i]].removesuffix("/")) for i in choice)
                warnings.append(
                    f"account {name}: the file has no line breaks, and where its records end can be read in more "
                    f"than one way that agrees with the account trailer (49); read with {kept} as text of the "
                    "record before")
    if taken_back and not _trailers_agree(body, starts, groups, taken_back):
        taken_back, warnings = set(), []
    lines: list[str] = []
    for index, (start, end) in enumerate(zip(starts, ends, strict=True)):
        if index in taken_back:
            lines[-1] += body[ends[index - 1]:end]
        else:
            lines.append(body[start:end])
    return "\n".join(lines) + "\n", warnings


def _field(body: str, start: int, index: int) -> int | None:
    """Field `index` of the record at `start` of a one-line file, a signed number (None: not one)."""
    end = body.find("/", start)
    fields = body[start:end if end >= 0 else len(body)].split(",", index + 1)
    return _signed(fields[index].strip(), MAX_TOTAL_DIGITS) if len(fields) > index else None


def _take_back(body: str, starts: list[int], ends: list[int], first: int, last: int, candidates: list[int],
               excess: int, tries: list[int]) -> tuple[tuple[int, ...], bool]:
    """Which `excess` of an account's records begun inside a text (`candidates`) go back into it so
    that its amounts add up to its trailer's control total: the earliest such choice, and whether
    another would do too. ((), False): none found. One record is looked for among all; several,
    among as many choices as `tries` (the file's budget, MAX_SPLIT_TRIES) has left."""
    total = _field(body, starts[last], 1)
    continued = first + 1
    while continued < last and body[starts[continued]:starts[continued] + 2] == "88":
        continued += 1
    summaries = _summaries_total([body[starts[i]:ends[i]] for i in range(first, continued)])
    if total is None or summaries is None:
        return (), False
    amounts = {}
    details = summaries
    for index in range(continued, last):
        if body[starts[index]:starts[index] + 2] == "16":
            amount = _field(body, starts[index], 2) or 0
            details += amount
            amounts[index] = amount
    surplus = details - total  # what the details taken back must add up to
    found: list[tuple[int, ...]] = []
    for choice in combinations(candidates, excess):
        if excess > 1:
            if tries[0] <= 0:
                break
            tries[0] -= 1
        if sum(amounts.get(index, 0) for index in choice) == surplus:
            found.append(choice)
            if len(found) == 2:
                break
    return (found[0], len(found) > 1) if found else ((), False)


def _trailers_agree(body: str, starts: list[int], groups: list[tuple[int, int]], taken_back: set[int]) -> bool:
    """Whether every group trailer (98) and the file trailer (99) count the records left."""
    for opening, trailer in groups:
        records = trailer - opening + 1 - sum(1 for index in taken_back if opening < index < trailer)
        if _field(body, starts[trailer], 3) != records:
            return False
    last = starts[-1]
    return body[last:last + 2] == "99" and _field(body, last, 3) == len(starts) - len(taken_back)


def _summaries_total(records: list[str]) -> int | None:
    """The amounts of a 03 and its 88s, as its account's control total counts them (None: they
    cannot be read)."""
    reader = _Reader(lenient=True)
    reader.group = _Group(1, 1, 1, date(2000, 1, 1), DEFAULT_CURRENCY)
    try:
        reader._account_header(records[0], 1, [(1, record[3:]) for record in records[1:]], 1)
    except FileRejected:
        return None
    return reader.account.total if reader.account is not None else None


def _chunks(text: str) -> Iterator[list[str]]:
    """The lines of `text`, a few MB of them at a time."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + CHUNK_CHARACTERS)
        if end < 0:
            yield text[start:].split("\n")
            return
        yield text[start:end].split("\n")
        start = end + 1


def _is_type_code(text: str) -> bool:
    return len(text) == 3 and text.isdigit() and text.isascii()


def _reads_as_summaries(fields: list[str]) -> bool:
    """Whether `fields` read as a run of summaries (type code, amount, item count, funds type and
    the fields it adds), the last perhaps cut short."""
    index = 0
    while index < len(fields) and any(fields[index:]):
        code, amount, count, funds = (fields[index:] + ["", "", ""])[:4]
        if not (_is_type_code(code) and (not amount or _signed(amount, MAX_AMOUNT_DIGITS) is not None)
                and (not count or (count.isdigit() and count.isascii())) and funds in KNOWN_FUNDS_TYPES):
            return False
        extra = {"S": 3, "V": 2}.get(funds, 0)
        if funds == "D":
            days = fields[index + 4] if index + 4 < len(fields) else "0"
            extra = 1 + 2 * int(days) if days.isdigit() and days.isascii() and len(days) <= 3 else 1
        index += 4 + extra
    return True


def _carries_on(carried: list[str], following: list[str]) -> bool:
    """A 03's line ended with "/" inside a summary (`carried`): whether the 88 goes on with that
    summary (a record may break between any two fields) rather than open the next one: when its
    fields read as the summary's rest and not as summaries of their own, or when the summary has
    no more than its type code (a summary is not ended before its amount)."""
    if not _reads_as_summaries(carried + following):
        return False
    return len(carried) == 1 or not _reads_as_summaries(following)


def _unslash(text: str) -> str:
    """A physical record without its "/" terminator."""
    return text[:-1] if text[-1:] == "/" else text


def _show(text: str) -> str:
    return repr(text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "...")


def _reject(line: int | None, message: str, *, account: str | None = None, expected: Any = None,
            found: Any = None) -> FileRejected:
    where = (f"line {line}: " if line is not None else "") + (f"account {account}: " if account else "")
    return FileRejected(where + message, {"line": line, "account": account, "expected": expected, "found": found})


def _yymmdd(text: str) -> date | None:
    if len(text) != 6 or not (text.isdigit() and text.isascii()):
        return None
    try:
        return date(2000 + int(text[:2]), int(text[2:4]), int(text[4:]))
    except ValueError:
        return None


def _signed(text: str, digits: int) -> int | None:
    """A signed whole number as BAI2 writes it ("+123", "-123", "123"), or None if it is not one."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not (body.isdigit() and body.isascii()) or len(body) > digits:
        return None
    return -int(body) if text[:1] == "-" else int(body)


class _Account:
    __slots__ = ("number", "currency", "places", "as_of", "line", "first_record", "total", "statement_id",
                 "references")

    def __init__(self, number: str, currency: str, as_of: date, line: int, first_record: int, statement_id: str,
                 references: set[str]) -> None:
        self.number = number
        self.currency = currency
        self.places = minor_units(currency)
        self.as_of = as_of
        self.line = line
        self.first_record = first_record
        self.total = 0  # every amount of its 03 and 16 records
        self.statement_id = statement_id
        self.references = references  # bank references already used by this account in the file


class _Group:
    __slots__ = ("ordinal", "line", "first_record", "as_of", "currency", "accounts", "total")

    def __init__(self, ordinal: int, line: int, first_record: int, as_of: date, currency: str) -> None:
        self.ordinal = ordinal
        self.line = line
        self.first_record = first_record
        self.as_of = as_of
        self.currency = currency
        self.accounts = 0
        self.total = 0


class _Reader:
    def __init__(self, lenient: bool) -> None:
        self.lenient = lenient
        self.transactions: list[StatementTransaction] = []
        self.balances: list[StatementBalance] = []
        self.accounts: dict[str, None] = {}  # in the order they first appear
        self.references: dict[str, set[str]] = {}  # normalised account -> its bank references so far
        self.statement_ids: set[str] = set()
        self.warnings: list[str] = []
        self.errors: list[dict[str, Any]] = []
        self.error_count = 0
        self.file_key = ""
        self.header_line = 0
        self.trailer_line = 0
        self.groups = 0
        self.file_total = 0
        self.group: _Group | None = None
        self.account: _Account | None = None
        self.position = 0

    def read(self, text: str) -> ParsedStatements:
        stripped = text.lstrip()
        if not stripped:
            raise _reject(None, "file is empty", expected="a BAI2 file", found="nothing")
        if not stripped.startswith("01,"):
            line_number = text[:len(text) - len(stripped)].count("\n") + 1
            raise _reject(line_number, "not a BAI2 file: it does not open with a file header record (01)",
                          expected="01", found=_show(stripped.split("\n", 1)[0].rstrip()))
        pending = ""  # the record read last, waiting for its continuations (88)
        pending_line = 0
        continued: list[tuple[int, str]] | None = None
        number = 0
        records = 0
        transaction = self._transaction
        simple_funds = SIMPLE_FUNDS_TYPES
        for lines in _chunks(text):
            for raw in lines:
                number += 1
                line = raw.rstrip()
                if not line:
                    continue
                records += 1
                if line[:2] == "88" and line[2:3] in (",", "/", ""):
                    if continued is None:
                        continued = []
                    continued.append((number, line[3:]))
                    continue
                if pending_line:
                    if continued is None and pending[:3] == "16,":
                        # a 16 of one line whose funds type adds no fields (nearly all): split once
                        parts = pending.split(",", 6)
                        account = self.account
                        if len(parts) == 7 and parts[3] in simple_funds and account is not None:
                            narrative = parts[6]
                            if narrative[-1:] == "/":
                                narrative = narrative[:-1]
                            transaction(pending_line, parts[1], parts[2], parts[3], None, parts[4].strip(),
                                        parts[5].strip(), narrative.strip(), account)
                        else:
                            self._record(pending, pending_line, None, records - 1)
                    else:
                        self._record(pending, pending_line, continued, records - 1)
                pending, pending_line, continued = line, number, None
        if pending_line:
            self._record(pending, pending_line, continued, records)
        last_line = continued[-1][0] if continued else pending_line
        if not self.trailer_line:
            message = "the file ends without its file trailer (99): it looks truncated"
            if self.account is not None:
                message += f"; account {self.account.number} (line {self.account.line}) has no trailer (49)"
            elif self.group is not None:
                message += f"; group {self.group.ordinal} (line {self.group.line}) has no trailer (98)"
            raise _reject(last_line, message, account=self.account.number if self.account else None, expected="99",
                          found="end of file")
        if self.errors:
            first = self.errors[0]
            raise FileRejected(
                f"BAI2 controls disagree in {self.error_count} place(s); first: {first['message']}",
                {key: first[key] for key in ("line", "account", "record", "field", "expected", "found")}
                | {"errors": self.errors, "error_count": self.error_count})
        return ParsedStatements(transactions=self.transactions, balances=self.balances,
                                accounts=list(self.accounts), warnings=self.warnings)

    # Records -------------------------------------------------------------------------------

    def _record(self, line: str, number: int, continued: list[tuple[int, str]] | None, last_record: int) -> None:
        """One logical record: `line` and its continuations; `last_record` is the number (in
        records, from 1) of its last physical record."""
        kind = line[:2] if line[2:3] in (",", "/", "") else line.split(",", 1)[0]
        if self.trailer_line:
            raise _reject(number, f"a record ({_show(kind)}) after the file trailer (99) of line {self.trailer_line}",
                          expected="end of file", found=kind)
        if kind == "16":
            self._detail(line, number, continued)
            return
        if kind == "03":
            self._account_header(line, number, continued, last_record - (len(continued) if continued else 0))
            return
        fields = _unslash(line).split(",")
        for _, content in continued or ():
            fields += _unslash(content).split(",")
        if kind == "01":
            self._file_header(fields, number)
        elif kind == "02":
            self._group_header(fields, number, last_record - (len(continued) if continued else 0))
        elif kind == "49":
            self._account_trailer(fields, number, last_record)
        elif kind == "98":
            self._group_trailer(fields, number, last_record)
        elif kind == "99":
            self._file_trailer(fields, number, last_record)
        else:
            raise _reject(number, f"unknown record type {_show(kind)}", expected="01, 02, 03, 16, 49, 88, 98 or 99",
                          found=kind)

    def _file_header(self, fields: list[str], number: int) -> None:
        if self.header_line:
            raise _reject(number, f"a second file header (01); the first is on line {self.header_line}",
                          expected="02 or 99", found="01")
        fields += [""] * (9 - len(fields))
        _, sender, _receiver, created, created_time, file_id, _length, _block, version = fields[:9]
        if _yymmdd(created) is None:
            raise _reject(number, f"file creation date {_show(created)} is not a date (YYMMDD)", expected="YYMMDD",
                          found=created)
        if version.strip() != "2":
            raise _reject(number, f"BAI version {_show(version)}: only version 2 is read", expected="2",
                          found=version)
        self.header_line = number
        self.file_key = f"{sender.strip()}-{created}{created_time.strip()}-{file_id.strip()}"

    def _group_header(self, fields: list[str], number: int, first_record: int) -> None:
        if self.account is not None:
            raise _reject(number, f"a group header (02) inside account {self.account.number} of line "
                          f"{self.account.line}: the account has no trailer (49)", account=self.account.number,
                          expected="49", found="02")
        if self.group is not None:
            raise _reject(number, f"a group header (02) inside group {self.group.ordinal} of line {self.group.line}: "
                          "the group has no trailer (98)", expected="98", found="02")
        fields += [""] * (7 - len(fields))
        as_of = _yymmdd(fields[4])
        if as_of is None:
            raise _reject(number, f"group as-of date {_show(fields[4])} is not a date (YYMMDD)", expected="YYMMDD",
                          found=fields[4])
        currency = self._currency(fields[6], number, DEFAULT_CURRENCY, None)
        self.groups += 1
        self.group = _Group(self.groups, number, first_record, as_of, currency)

    def _currency(self, text: str, number: int, default: str, account: str | None) -> str:
        code = text.strip()
        if not code:
            return default
        if code not in ISO_4217:
            raise _reject(number, f"currency {_show(code)} is not an ISO 4217 code", account=account,
                          expected="an ISO 4217 currency code", found=code)
        return code

    def _account_header(self, line: str, number: int, continued: list[tuple[int, str]] | None,
                        first_record: int) -> None:
        group = self.group
        if group is None:
            raise _reject(number, "an account identifier (03) outside a group: no group header (02) before it",
                          expected="02", found="03")
        if self.account is not None:
            raise _reject(number, f"an account identifier (03) inside account {self.account.number} of line "
                          f"{self.account.line}: the account has no trailer (49)", account=self.account.number,
                          expected="49", found="03")
        fields = _unslash(line).split(",")
        more = [(n, _unslash(piece).split(","), piece[-1:] == "/") for n, piece in continued or ()]
        if len(fields) == 2 and more and not _is_type_code(more[0][1][0]):
            fields.append(more[0][1].pop(0))  # the 03 broke after its account number: the 88 opens with the currency
        fields += [""] * (3 - len(fields))
        name = fields[1].strip()
        if not name:
            raise _reject(number, "the account identifier (03) has no account number", expected="an account number",
                          found="")
        currency = self._currency(fields[2], number, group.currency, name)
        key = normalise_account(name)
        self.accounts.setdefault(name, None)
        # An account reported twice in a group (one 03 per value day, say) is two statement days.
        statement_id = claim_unique(f"{self.file_key}/{group.ordinal}/{name}", self.statement_ids)
        account = _Account(name, currency, group.as_of, number, first_record, statement_id,
                           self.references.setdefault(key, set()))
        balances: dict[str, int | None] = {}
        pieces = [(number, fields[3:], line[-1:] == "/")] + more
        carried: list[str] = []  # a summary a line cut short, to go on in the next one
        for index, (line_number, summaries, _) in enumerate(pieces):
            if carried and pieces[index - 1][2] and not _carries_on(carried, summaries):
                # the "/" ended the summary: its missing fields take their defaults
                self._summaries(carried, pieces[index - 1][0], account, balances, ended=True)
                carried = []
            carried = self._summaries(carried + summaries, line_number, account, balances,
                                      ended=index == len(pieces) - 1)
        group.accounts += 1
        self.account = account
        if balances:
            self.balances.append(StatementBalance(
                account=name, currency=currency, decimal_places=account.places, date=group.as_of,
                statement_id=account.statement_id, opening_booked=balances.get(OPENING_LEDGER),
                closing_booked=balances.get(CLOSING_LEDGER),
                closing_available=balances.get(CLOSING_AVAILABLE, balances.get(OPENING_AVAILABLE))))

    def _summaries(self, fields: list[str], number: int, account: _Account, balances: dict[str, int | None],
                   ended: bool) -> list[str]:
        """The summaries (type code, amount, item count, funds type and what it adds) of one line
        of a 03. A summary that the line cuts short has its missing fields defaulted if the line
        `ended` (with "/", or the record's last), else it is returned to go on in the next line."""
        index = 0
        while index < len(fields):
            rest = fields[index:]
            if not any(rest):
                return []  # nothing but empty fields left: a trailing comma
            if len(rest) < 4 and not ended:
                return rest
            code, amount_text, count, funds = (rest + ["", "", ""])[:4]
            extra, _ = self._availability(rest[4:], funds, number, account, complete=ended)
            if extra < 0:
                return rest
            index += 4 + extra
            if len(code) != 3 or not (code.isdigit() and code.isascii()):
                raise _reject(number, f"summary type code {_show(code)} is not three digits", account=account.number,
                              expected="a type code (3 digits)", found=code)
            amount = _signed(amount_text, MAX_AMOUNT_DIGITS) if amount_text else None
            if amount_text and amount is None:
                raise _reject(number, f"amount {_show(amount_text)} of type code {code} is not a number",
                              account=account.number, expected="a signed amount in minor units", found=amount_text)
            if count and not (count.isdigit() and count.isascii()):
                raise _reject(number, f"item count {_show(count)} of type code {code} is not a number",
                              account=account.number, expected="a count", found=count)
            account.total += amount or 0
            if code in (OPENING_LEDGER, CLOSING_LEDGER, OPENING_AVAILABLE, CLOSING_AVAILABLE) and amount is not None:
                balances[code] = amount
        return []

    def _availability(self, fields: list[str], funds: str, number: int, account: _Account,
                      complete: bool) -> tuple[int, date | None]:
        """How many fields the funds type adds, and the value date (V). With `complete`, fields
        missing are an error; else (a 16 whose 88 may bring them) the count is -1."""
        if funds in SIMPLE_FUNDS_TYPES:
            return 0, None
        if funds == "S":
            needed = 3
        elif funds == "V":
            needed = 2
        elif funds == "D":
            if not fields:
                needed = 1
            else:
                count = fields[0]
                if not (count.isdigit() and count.isascii()) or len(count) > 3:
                    raise _reject(number, f"distributed availability (D) count {_show(count)} is not a number",
                                  account=account.number, expected="a count", found=count)
                needed = 1 + 2 * int(count)
        else:
            raise _reject(number, f"funds type {_show(funds)} is not one of {FUNDS_TYPES}", account=account.number,
                          expected=FUNDS_TYPES, found=funds)
        if len(fields) < needed:
            if not complete:
                return -1, None
            raise _reject(number, f"funds type {funds} needs {needed} field(s) after it, the record has {len(fields)}",
                          account=account.number, expected=f"{needed} fields", found=len(fields))
        if funds == "V":
            value_date = _yymmdd(fields[0]) if fields[0] else None
            if fields[0] and value_date is None:
                raise _reject(number, f"value date {_show(fields[0])} is not a date (YYMMDD)", account=account.number,
                              expected="YYMMDD", found=fields[0])
            return needed, value_date
        amounts = fields[:needed] if funds == "S" else fields[2:needed:2]
        for text in amounts:
            if text and _signed(text, MAX_AMOUNT_DIGITS) is None:
                raise _reject(number, f"availability amount {_show(text)} is not a number", account=account.number,
                              expected="an amount in minor units", found=text)
        return needed, None

    def _detail(self, line: str, number: int, continued: list[tuple[int, str]] | None) -> None:
        account = self.account
        if account is None:
            raise _reject(number, "a transaction detail (16) outside an account: no account identifier (03) before it",
                          expected="03", found="16")
        content = _unslash(line[3:])
        more = [_unslash(piece) for _, piece in continued or ()]
        texts: list[str] = []
        fields = self._detail_fields(content, number, account, complete=not more)
        for index, piece in enumerate(more, start=1):
            if fields is not None and fields[-1] is not None:
                texts.append(piece.strip())
            else:  # the 16 ended before its text: the 88 goes on with its fields
                content += "," + piece
                fields = self._detail_fields(content, number, account, complete=index == len(more))
        assert fields is not None  # complete=True reads the fields or raises
        code, amount, funds, value_date, bank, customer, text = fields
        description = " ".join(part for part in [(text or "").strip(), *texts] if part)
        self._transaction(number, code, amount, funds, value_date, bank.strip(), customer.strip(), description,
                          account)

    def _detail_fields(self, content: str, number: int, account: _Account, complete: bool
                       ) -> tuple[str, str, str, date | None, str, str, str | None] | None:
        """A 16's fields: type code, amount, funds type, value date (V), bank and customer
        reference, text (None: the record ended before it). None: the record ended inside the
        fields its funds type adds (an error if `complete`: no continuation will bring them)."""
        parts = content.split(",", 3)
        if len(parts) < 3:
            parts += [""] * (3 - len(parts))
        code, amount, funds = parts[:3]
        rest = parts[3] if len(parts) > 3 else None
        value_date = None
        if funds not in SIMPLE_FUNDS_TYPES:
            extra = rest.split(",") if rest is not None else []
            needed, value_date = self._availability(extra, funds, number, account, complete)
            if needed < 0:
                return None
            rest = rest.split(",", needed)[needed] if rest is not None and len(extra) > needed else None
        if rest is None:
            return code, amount, funds, value_date, "", "", None
        tail = rest.split(",", 2)
        if len(tail) < 3:
            tail.append("")
            return code, amount, funds, value_date, tail[0], tail[1], None
        return code, amount, funds, value_date, tail[0], tail[1], tail[2]

    def _transaction(self, number: int, code: str, amount_text: str, funds: str, value_date: date | None,
                     bank: str, customer: str, description: str, account: _Account) -> None:
        kind = DETAIL_CLASSES.get(code)
        if kind is None:
            raise _reject(number, f"type code {_show(code)} is not a transaction detail's (100-699, 721-728, 760, "
                          "890-999)", account=account.number, expected="a transaction type code", found=code)
        direction, meaning, reversal = kind
        if not (amount_text.isdigit() and amount_text.isascii()) or len(amount_text) > MAX_AMOUNT_DIGITS:
            if not amount_text and direction is None:
                return  # a non-monetary detail without an amount
            raise _reject(number, f"amount {_show(amount_text)} is not a number of minor units", account=account.number,
                          expected=f"up to {MAX_AMOUNT_DIGITS} digits", found=amount_text)
        amount = int(amount_text)
        account.total += amount
        if direction is None:
            return
        self.position += 1
        position = self.position
        if bank:
            external_id = claim_unique(bank, account.references)
        else:
            external_id = deterministic_id(account.number, account.as_of, amount, direction, position)
        metadata: dict[str, Any] = {"type_code": code, "statement_id": account.statement_id}
        if meaning:
            metadata["type_description"] = meaning
        if customer:
            metadata["customer_reference"] = customer
        if funds:
            metadata["funds_type"] = funds
        if value_date is not None:
            metadata["value_date"] = value_date.isoformat()
        if reversal:
            metadata["reversal"] = True
        self.transactions.append(StatementTransaction(
            position, f"line {number}", account.number, account.currency, amount, account.places, direction,
            account.as_of, value_date, description, external_id, metadata))

    # Trailers ------------------------------------------------------------------------------

    def _trailer_numbers(self, fields: list[str], number: int, kind: str, names: tuple[str, ...],
                         account: str | None) -> list[int]:
        """A trailer's control total (signed) and counts."""
        values = []
        for index, name in enumerate(names, start=1):
            text = fields[index].strip() if index < len(fields) else ""
            value = _signed(text, MAX_TOTAL_DIGITS) if index == 1 else (
                int(text) if text.isdigit() and text.isascii() and len(text) <= MAX_COUNT_DIGITS else None)
            if value is None:
                raise _reject(number, f"{kind} {name} {_show(text)} is not a number", account=account,
                              expected=f"a {name}", found=text)
            values.append(value)
        return values

    def _account_trailer(self, fields: list[str], number: int, last_record: int) -> None:
        account = self.account
        if account is None:
            raise _reject(number, "an account trailer (49) with no account identifier (03) before it",
                          expected="03", found="49")
        total, count = self._trailer_numbers(fields, number, "account trailer (49)",
                                             ("control total", "number of records"), account.number)
        records = last_record - account.first_record + 1
        if total != account.total:
            self._mismatch(number, account.number, "49", "control_total", account.total, total,
                           f"the account trailer (49) control total is {total} but the account's amounts add up "
                           f"to {account.total}")
        if count != records:
            self._mismatch(number, account.number, "49", "number_of_records", records, count,
                           f"the account trailer (49) counts {count} records but the account has {records} "
                           f"(from its 03 on line {account.line} to this 49)")
        assert self.group is not None  # an account is only opened inside a group
        self.group.total += account.total
        self.account = None

    def _group_trailer(self, fields: list[str], number: int, last_record: int) -> None:
        group = self.group
        if self.account is not None:
            raise _reject(number, f"a group trailer (98) inside account {self.account.number} of line "
                          f"{self.account.line}: the account has no trailer (49)", account=self.account.number,
                          expected="49", found="98")
        if group is None:
            raise _reject(number, "a group trailer (98) with no group header (02) before it", expected="02", found="98")
        total, accounts, count = self._trailer_numbers(
            fields, number, "group trailer (98)", ("control total", "number of accounts", "number of records"), None)
        records = last_record - group.first_record + 1
        where = f"group {group.ordinal} (line {group.line})"
        if total != group.total:
            self._mismatch(number, None, "98", "control_total", group.total, total,
                           f"the group trailer (98) of {where} has control total {total} but the group's amounts "
                           f"add up to {group.total}")
        if accounts != group.accounts:
            self._mismatch(number, None, "98", "number_of_accounts", group.accounts, accounts,
                           f"the group trailer (98) of {where} counts {accounts} accounts but the group has "
                           f"{group.accounts}")
        if count != records:
            self._mismatch(number, None, "98", "number_of_records", records, count,
                           f"the group trailer (98) of {where} counts {count} records but the group has {records}")
        self.file_total += group.total
        self.group = None

    def _file_trailer(self, fields: list[str], number: int, last_record: int) -> None:
        if self.account is not None:
            raise _reject(number, f"the file trailer (99) inside account {self.account.number} of line "
                          f"{self.account.line}: the account has no trailer (49)", account=self.account.number,
                          expected="49", found="99")
        if self.group is not None:
            raise _reject(number, f"the file trailer (99) inside group {self.group.ordinal} of line "
                          f"{self.group.line}: the group has no trailer (98)", expected="98", found="99")
        total, groups, count = self._trailer_numbers(
            fields, number, "file trailer (99)", ("control total", "number of groups", "number of records"), None)
        if total != self.file_total:
            self._mismatch(number, None, "99", "control_total", self.file_total, total,
                           f"the file trailer (99) has control total {total} but the file's amounts add up to "
                           f"{self.file_total}")
        if groups != self.groups:
            self._mismatch(number, None, "99", "number_of_groups", self.groups, groups,
                           f"the file trailer (99) counts {groups} groups but the file has {self.groups}")
        if count != last_record:
            self._mismatch(number, None, "99", "number_of_records", last_record, count,
                           f"the file trailer (99) counts {count} records but the file has {last_record}")
        self.trailer_line = number

    def _mismatch(self, number: int, account: str | None, record: str, field: str, expected: int, found: int,
                  message: str) -> None:
        """A count or control total that disagrees: an error, or lenient, a warning."""
        message = f"line {number}: " + (f"account {account}: " if account else "") + message
        if self.lenient:
            self.warnings.append(message)
            return
        self.error_count += 1
        if len(self.errors) < MAX_REPORTED:
            self.errors.append({"line": number, "account": account, "record": record, "field": field,
                                "expected": expected, "found": found, "message": message})
