"""SWIFT MT940 customer statements: every statement (each `:28C:`) of every account in a file,
its transactions and balances, checked: opening balance plus credits minus debits is the closing.

Our own parser, not PyPI's mt-940 (5.1.1, WoLpH; BSD-3-Clause, maintained, typed, Decimal
amounts). It reads whatever banks send, the opposite of what an import must do: garbage gives no
transactions and no error, a truncated file the transactions before the cut, `50.0.0` the amount
50 (the rest goes to the reference); a reversal of a credit (`RC`) is a credit unless
`Options(reversal_sign=True)`; a field it cannot read raises RuntimeError, a bad date ValueError,
neither with a line number (it does not count lines); it checks no balance; `parse()` keeps only
the last statement's balances (`parse_statements()` splits on `:20:`); `:86:` is cut after nine
65-character chunks unless `unbounded_details`. Checking all that around it would be a parser of
its own, and it took 12-18 s on 200,000 statement lines where this one takes about 2 s.

The format as read here. Messages come bare or in SWIFT blocks (`{1:..}{2:..}{4:` .. `-}`); a
message is one or more statements of `:20:` reference, `:21:`, `:25:` account, `:28C:` statement
number, `:60F:`/`:60M:` opening balance, statement lines (`:61:` with an optional `:86:`),
`:62F:`/`:62M:` closing balance, `:64:` closing available, `:65:` (ignored), a final `:86:`
(ignored). A line that does not open a tag continues the one before (`:61:` supplementary details,
`:86:` text). Amounts are exact (digits, a decimal comma, at most 15 characters). Text is ASCII
(SWIFT's set), else UTF-8, else Latin-1.

A statement line's mark: C credit, D debit, RC (reversal of a credit) a debit, RD (reversal of a
debit) a credit, both with `reversal` in metadata. The entry date (MMDD) takes the year that puts
it nearest the value date (a value date of 31 December may be booked on 2 January).

Structured `:86:` (German banks: `166?00GUTSCHRIFT?20..?29 purpose?30 bank?31 account?32..?33
name?38 IBAN?60..?63 purpose`): the description is the purpose subfields; a 27-character subfield
is a cut one and joins the next without a space (free text does the same at 65 characters).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date
from typing import Any, Literal

from chalicelib.domain.money import ISO_4217, decimal_string
from chalicelib.domain.parsers import FileRejected, without_gc
from chalicelib.domain.parsers.statements import (
    MAX_STATEMENT_BYTES,
    ParsedStatements,
    StatementBalance,
    StatementTransaction,
    account_part,
    deterministic_id,
    normalise_account,
    to_minor_units,
)

TAG = re.compile(r":([0-9]{2}[A-Z]?|NS):")
STATEMENT_LINE = re.compile(
    r"(?P<value>[0-9]{6})(?P<entry>[0-9]{4})?(?P<mark>RC|RD|C|D)(?P<funds>[A-Z])?(?P<amount>[0-9][0-9,.]*)"
    r"(?P<type>[NFS][A-Z0-9]{3})(?P<reference>.*)")
STATEMENT_LINE_FORMAT = "YYMMDD[MMDD] C|D|RC|RD [funds code] amount type reference[//bank reference]"
BALANCE = re.compile(r"(?P<mark>[CD])(?P<date>[0-9]{6})(?P<currency>[A-Z]{3})(?P<amount>[0-9][0-9,.]*)")
AMOUNT = re.compile(r"[0-9]{1,14},[0-9]*")
AMOUNT_LENGTH = 15  # SWIFT's 15d: digits and the decimal comma
STATEMENT_NUMBER = re.compile(r"[0-9]{1,5}(/[0-9]{1,5})?")
STRUCTURED_86 = re.compile(r"(?:[0-9]{3})?\?[0-9]{2}")
SUBFIELD = re.compile(r"\?([0-9]{2})")
IGNORED_TAGS = {"13", "13D", "34F", "65", "90C", "90D", "NS"}  # creation time, MT942 extras, bank extensions
KNOWN_TAGS = IGNORED_TAGS | {"20", "21", "25", "28", "28C", "60F", "60M", "61", "62F", "62M", "64", "86"}
HEADER_TAGS = {"21", "25", "28", "28C"}
NO_REFERENCE = "NONREF"
FREE_TEXT_WIDTH = 65  # a line of :86: this long was cut by the bank, mid-word as likely as not
SUBFIELD_WIDTH = 27
PURPOSE_SUBFIELDS = frozenset([*(f"{n}" for n in range(20, 30)), "60", "61", "62", "63"])
MAX_ENTRY_DATE_DISTANCE = 183  # days between value and entry date when the entry date's year is inferred
FOUND_WIDTH = 40  # how much of a bad value an error quotes
# SWIFT transaction type identification codes (the three characters after N or F; S is followed
# by the SWIFT message type of the transfer, e.g. S103), the common ones.
TRANSACTION_TYPES = {
    "BOE": "bill of exchange", "BRF": "brokerage fee", "CHG": "charges and other expenses",
    "CHK": "cheque", "CLR": "cash letters/cheques remittance", "CMI": "cash management item",
    "CMN": "cash management item, notional pooling", "CMS": "cash management item, sweeping",
    "CMT": "cash management item, topping", "CMZ": "cash management item, zero balancing",
    "COL": "collection", "COM": "commission", "DCR": "documentary credit", "DDT": "direct debit",
    "DIV": "dividend", "EQA": "equivalent amount", "FEX": "foreign exchange", "INT": "interest",
    "LBX": "lock box", "LDP": "loan deposit", "MSC": "miscellaneous", "RTI": "returned item",
    "SEC": "securities", "STO": "standing order", "TCK": "travellers cheques", "TRF": "transfer",
    "VDA": "value date adjustment",
}
TYPE_MEANINGS = {**{f"N{code}": meaning for code, meaning in TRANSACTION_TYPES.items()},
                 **{f"F{code}": f"{meaning} (first advice)" for code, meaning in TRANSACTION_TYPES.items()}}


def _type_meaning(code: str) -> str | None:
    if code[0] == "S":
        return f"SWIFT MT{code[1:]} transfer" if code[1:].isdigit() else None
    return TYPE_MEANINGS.get(code)


def _reject(line: int, message: str, expected: str, found: str, account: str | None = None) -> FileRejected:
    where = f"line {line}"
    shown = found if len(found) <= FOUND_WIDTH else found[:FOUND_WIDTH] + "..."
    return FileRejected(f"{where}: {message}", {"where": where, "line": line, "account": account,
                                                 "expected": expected, "found": shown})


def _decode(data: bytes) -> str:
    for encoding in ("ascii", "utf-8"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            pass
    return data.decode("latin-1")


def _lines(data: bytes) -> list[str]:
    text = _decode(data).removeprefix("\ufeff").rstrip("\x1a")  # a byte order mark, a DOS end-of-file mark
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _with_blocks(lines: list[str]) -> Iterator[tuple[int, str]]:
    """Each line with its number; a SWIFT block 4 opening with a field on the same line gives two."""
    for index, line in enumerate(lines):
        if line[:1] == "{":
            start = line.find("{4:")
            if start >= 0 and line[start + 3:].strip():
                yield index + 1, line[:start + 3]
                yield index + 1, line[start + 3:].strip()
                continue
        yield index + 1, line


def _date(text: str, line: int, what: str, account: str | None) -> date:
    try:
        return date(2000 + int(text[0:2]), int(text[2:4]), int(text[4:6]))
    except ValueError:
        raise _reject(line, f"{what} {text} is not a date YYMMDD", "YYMMDD", text, account) from None


def _entry_date(text: str, value_date: date, line: int, account: str | None) -> date:
    month, day = int(text[:2]), int(text[2:])
    nearest: date | None = None
    for year in (value_date.year, value_date.year - 1, value_date.year + 1):
        try:
            candidate = date(year, month, day)
        except ValueError:
            continue
        if nearest is None or abs((candidate - value_date).days) < abs((nearest - value_date).days):
            nearest = candidate
    if nearest is None or abs((nearest - value_date).days) > MAX_ENTRY_DATE_DISTANCE:
        raise _reject(line, f"entry date {text} is not a date MMDD within half a year of the value date "
                      f"{value_date.isoformat()}", "MMDD", text, account)
    return nearest


def _amount(text: str, currency: str, line: int, account: str | None) -> tuple[int, int]:
    if len(text) > AMOUNT_LENGTH or not AMOUNT.fullmatch(text):
        raise _reject(line, f"amount {text!r} is not a SWIFT amount (digits and a decimal comma, at most "
                      f"{AMOUNT_LENGTH} characters)", "an amount like 1234,56", text, account)
    try:
        return to_minor_units(text, currency, f"line {line}")
    except FileRejected as error:
        raise _reject(line, error.message.removeprefix(f"line {line}: "), error.details.get("expected", ""),
                      text, account) from None


def _account(text: str) -> str:
    """`:25:` as routing needs it: `BIC/account` and `bank code/account` give the account, an IBAN
    followed by its currency (`NL91ABNA0417164300EUR`) the IBAN."""
    return account_part(text)


def _join(parts: list[str], width: int) -> str:
    """Parts the bank cut at `width` characters join without a space; others with one."""
    if len(parts) == 1:
        return " ".join(parts[0].split())
    pieces: list[str] = []
    for index, part in enumerate(parts):
        if index and len(parts[index - 1]) < width:
            pieces.append(" ")
        pieces.append(part)
    return " ".join("".join(pieces).split())


def _describe(transaction: StatementTransaction, first: str, more: list[str]) -> None:
    """A `:86:` after a statement line: its description, and counterparty details when structured."""
    text = (first + "".join(more)).strip() if more else first.strip()  # structured text wraps anywhere
    if not STRUCTURED_86.match(text):
        transaction.description = _join([first, *more], FREE_TEXT_WIDTH)
        return
    pieces = SUBFIELD.split(text)
    purpose: list[str] = []
    names: list[str] = []
    subfields: dict[str, str] = {}  # the others, the first of each number
    for index in range(1, len(pieces), 2):
        number, value = pieces[index], pieces[index + 1]
        if number in PURPOSE_SUBFIELDS:
            purpose.append(value)
        elif number == "32" or number == "33":
            names.append(value)
        else:
            subfields.setdefault(number, value)
    metadata = transaction.metadata
    if pieces[0]:
        metadata["business_transaction_code"] = pieces[0]
    for number, name in (("00", "posting_text"), ("30", "counterparty_bank")):
        value = subfields.get(number, "").strip()
        if value:
            metadata[name] = value
    counterparty = (subfields.get("38", "").strip() or subfields.get("31", "").strip())
    if counterparty:
        metadata["counterparty_account"] = counterparty
    name = _join(names, SUBFIELD_WIDTH) if names else ""
    if name:
        metadata["counterparty_name"] = name
    transaction.description = (_join(purpose, SUBFIELD_WIDTH) if purpose else "") or metadata.get("posting_text", "")


class _Statement:
    __slots__ = ("reference", "line", "account", "number", "id", "currency", "places", "opening", "credits",
                 "debits", "balance", "closed")

    def __init__(self, reference: str, line: int) -> None:
        self.reference = reference
        self.line = line
        self.account: str | None = None
        self.number: str | None = None
        self.id = reference  # and its number, when known: "reference/number[/sequence]"
        self.currency = ""
        self.places = 0
        self.opening: int | None = None
        self.credits = 0
        self.debits = 0
        self.balance: StatementBalance | None = None
        self.closed = False


class _Reader:
    def __init__(self, lenient: bool) -> None:
        self.lenient = lenient
        self.transactions: list[StatementTransaction] = []
        self.balances: list[StatementBalance] = []
        self.accounts: list[str] = []
        self.seen_accounts: set[str] = set()
        self.warnings: list[str] = []
        self.statement: _Statement | None = None
        self.last: StatementTransaction | None = None  # the statement line a :86: would describe
        self.in_message = False  # the statements since the last message boundary
        self.message_line = 0
        self.enveloped = False  # the message is a SWIFT block 4, closed by -}
        self.dates: dict[str, date] = {}  # dates read so far, by their text (a statement repeats them)
        self.entry_dates: dict[tuple[str, date], date] = {}

    def read(self, lines: list[str]) -> None:
        """Lines to fields (a tag's line and the lines that continue it), each handed to `field`."""
        tag: str | None = None
        tag_line = more_line = last_line = 0
        first = ""  # the text after the tag, and the lines that continue it, as the file has them
        more: list[str] = []
        for number, line in _with_blocks(lines):
            text = line.rstrip()
            if not text:
                if tag == "86" and self.in_message:
                    more.append(line)  # spaces that a line of structured text may consist of
                continue
            last_line = number
            head = text[0]
            if self.in_message:
                if head == ":":
                    match = TAG.match(text)
                    if match and not (tag == "86" and match.group(1) not in KNOWN_TAGS):
                        if tag is not None:
                            self.field(tag, tag_line, first, more, more_line)
                        tag, tag_line, first, more = match.group(1), number, line[match.end():], []
                        continue
                elif head == "-" and (text == "-" or text.startswith("-}")):
                    if tag is not None:
                        self.field(tag, tag_line, first, more, more_line)
                    tag = None
                    self.end_message(number)
                    continue
                elif head == "{":
                    if self.enveloped:
                        raise _reject(number, f"a SWIFT message begins before the one of line {self.message_line} "
                                      "ends with -}: that one looks truncated", "-}", text,
                                      self.statement.account if self.statement else None)
                    if tag is not None:
                        self.field(tag, tag_line, first, more, more_line)
                    tag = None
                    self.end_message(number)
                if self.in_message:
                    if tag is None:
                        raise _reject(number, "text where a field (:20:) belongs", ":20:", text)
                    if not more:
                        more_line = number
                    more.append(line)
                    continue
            if head == "{":
                if text.endswith("{4:"):
                    self.in_message, self.enveloped, self.message_line = True, True, number
                continue  # the basic, application and user header blocks, and trailers
            match = TAG.match(text) if head == ":" else None
            if match is None:
                raise _reject(number, "not an MT940 statement: expected a SWIFT block ({1:) or a field (:20:)",
                              "{1: or :20:", text)
            self.in_message, self.enveloped, self.message_line = True, False, number
            tag, tag_line, first, more = match.group(1), number, line[match.end():], []
        if tag is not None:
            self.field(tag, tag_line, first, more, more_line)
        self.end_of_file(last_line)

    def end_of_file(self, line: int) -> None:
        statement = self.statement
        if self.in_message:
            if statement is not None and not statement.closed:
                raise self.unclosed(statement, line, "the file ends")
            if self.enveloped:
                raise _reject(line, f"the file ends inside the SWIFT message of line {self.message_line}, "
                              "which is not closed by -}: it looks truncated", "-}", "end of file",
                              statement.account if statement else None)
            if statement is None:
                raise _reject(line, "the message has no statement", ":20:", "end of file")
        if not self.balances:
            raise _reject(line, "no MT940 statement in the file", ":20:", "end of file")

    def read_date(self, text: str, line: int, what: str, account: str | None) -> date:
        self.dates[text] = _date(text, line, what, account)
        return self.dates[text]

    def read_entry_date(self, text: str, value_date: date, line: int, account: str | None) -> date:
        self.entry_dates[(text, value_date)] = _entry_date(text, value_date, line, account)
        return self.entry_dates[(text, value_date)]

    def unclosed(self, statement: _Statement, line: int, what: str) -> FileRejected:
        return _reject(line, f"{what} before the closing balance (:62F:) of statement {statement.id} "
                       f"(line {statement.line}) of account {statement.account}: it looks truncated",
                       ":62F:", "end of file" if what == "the file ends" else what, statement.account)

    def end_message(self, line: int) -> None:
        statement = self.statement
        if statement is None:
            raise _reject(line, "the message has no statement", ":20:", "-}")
        if not statement.closed:
            raise self.unclosed(statement, line, "the message ends")
        self.in_message = False
        self.enveloped = False
        self.statement = None
        self.last = None

    def field(self, tag: str, line: int, first: str, more: list[str], more_line: int) -> None:
        statement = self.statement
        last, self.last = self.last, None
        if tag == "61":
            self.statement_line(statement, line, first.strip(), [text.strip() for text in more])
            return
        if tag == "86":
            if last is not None:
                _describe(last, first, more)
            elif statement is None:
                raise _reject(line, "a statement begins with :20:", ":20:", ":86:")
            return  # information to the account owner about the statement as a whole
        first = first.strip()
        if tag == "20":
            if statement is not None and not statement.closed:
                raise self.unclosed(statement, line, "a new statement (:20:) begins")
            if not first:
                raise _reject(line, "the statement's reference :20: is empty", "a reference", "")
            self.statement = _Statement(first, line)
            self.check_single_line(tag, more, more_line, None)
            return
        if statement is None:
            raise _reject(line, f"a statement begins with :20:, found :{tag}:", ":20:", f":{tag}:")
        account = statement.account
        self.check_single_line(tag, more, more_line, account)
        if tag in IGNORED_TAGS:
            return
        if tag not in KNOWN_TAGS:
            raise _reject(line, f"unknown field :{tag}:", "an MT940 field", f":{tag}:", account)
        if statement.closed and tag != "64":
            raise _reject(line, f":{tag}: after the closing balance of statement {statement.id}",
                          ":64:, :65:, :86: or a new statement :20:", f":{tag}:", account)
        if tag in HEADER_TAGS:
            self.header(statement, tag, line, first)
        elif tag in ("60F", "60M"):
            self.opening(statement, tag, line, first)
        elif tag in ("62F", "62M"):
            self.closing(statement, tag, line, first)
        else:  # 64
            if statement.balance is None:
                raise _reject(line, ":64: before the closing balance", ":62F:", ":64:", account)
            if statement.balance.closing_available is not None:
                raise _reject(line, ":64: given twice", "one :64:", ":64:", account)
            statement.balance.closing_available = self.balance(statement, tag, line, first)[0]

    def check_single_line(self, tag: str, more: list[str], more_line: int, account: str | None) -> None:
        if more and tag not in IGNORED_TAGS:
            raise _reject(more_line, f"text after :{tag}:, which takes one line", "a field", more[0].strip(),
                          account)

    def header(self, statement: _Statement, tag: str, line: int, text: str) -> None:
        if statement.opening is not None:
            raise _reject(line, f":{tag}: after the opening balance", ":61: or :62F:", f":{tag}:", statement.account)
        if tag == "25":
            if statement.account is not None:
                raise _reject(line, ":25: given twice in one statement", "one :25:", text, statement.account)
            account = _account(text)
            if not account:
                raise _reject(line, "the account :25: is empty", "an account or IBAN", text)
            statement.account = account
            key = normalise_account(account)
            if key not in self.seen_accounts:
                self.seen_accounts.add(key)
                self.accounts.append(account)
        elif tag in ("28C", "28"):
            if statement.number is not None:
                raise _reject(line, ":28C: given twice in one statement", "one :28C:", text, statement.account)
            if not STATEMENT_NUMBER.fullmatch(text):
                raise _reject(line, f"statement number {text!r} is not 'number[/sequence]'", "5n[/5n]", text,
                              statement.account)
            statement.number = text
            statement.id = f"{statement.reference}/{text}"

    def balance(self, statement: _Statement, tag: str, line: int, text: str) -> tuple[int, date, str]:
        """A balance field: (signed minor units, date, currency)."""
        account = statement.account
        match = BALANCE.fullmatch(text)
        if match is None:
            raise _reject(line, f"balance :{tag}: is not 'C|D YYMMDD currency amount'", "C|D YYMMDD CCY amount",
                          text, account)
        currency = match["currency"]
        if currency not in ISO_4217:
            raise _reject(line, f"currency {currency} is not an ISO 4217 code", "a currency", currency, account)
        if statement.currency and currency != statement.currency:
            raise _reject(line, f"balance :{tag}: is in {currency} but the statement in {statement.currency}",
                          statement.currency, currency, account)
        balance_date = _date(match["date"], line, "date", account)
        amount, places = _amount(match["amount"], currency, line, account)
        statement.currency, statement.places = currency, places
        return (-amount if match["mark"] == "D" else amount), balance_date, currency

    def opening(self, statement: _Statement, tag: str, line: int, text: str) -> None:
        if statement.opening is not None:
            raise _reject(line, "a second opening balance", "one :60F:", f":{tag}:", statement.account)
        if statement.account is None or statement.number is None:
            missing = ":25: account" if statement.account is None else ":28C: statement number"
            raise _reject(line, f"opening balance before the {missing} of statement {statement.reference}",
                          missing.split()[0], f":{tag}:", statement.account)
        statement.opening = self.balance(statement, tag, line, text)[0]

    def closing(self, statement: _Statement, tag: str, line: int, text: str) -> None:
        account = statement.account
        if statement.opening is None:
            raise _reject(line, "closing balance before the opening balance (:60F:)", ":60F:", f":{tag}:", account)
        closing, closing_date, currency = self.balance(statement, tag, line, text)
        expected = statement.opening + statement.credits - statement.debits
        if expected != closing:
            places = statement.places
            message = (f"line {line}: the closing balance (:{tag}:) of account {account}, statement {statement.id}, "
                       f"is {currency} {decimal_string(closing, places)}, but the opening balance plus credits "
                       f"minus debits is {currency} {decimal_string(expected, places)}")
            if not self.lenient:
                raise FileRejected(message, {"where": f"line {line}", "line": line, "account": account,
                                             "statement_id": statement.id, "expected": decimal_string(expected, places),
                                             "found": decimal_string(closing, places)})
            self.warnings.append(message)
        assert account is not None  # an opening balance needs it
        statement.balance = StatementBalance(account, currency, statement.places, closing_date, statement.id,
                                             statement.opening, closing)
        self.balances.append(statement.balance)
        statement.closed = True

    def statement_line(self, statement: _Statement | None, line: int, text: str, more: list[str]) -> None:
        account = statement.account if statement else None
        if statement is None or statement.opening is None or statement.closed or account is None:
            what = ("after the closing balance" if statement is not None and statement.closed
                    else "before the account (:25:) and opening balance (:60F:)")
            raise _reject(line, f"statement line :61: {what}", ":60F:" if not statement or not statement.closed
                          else ":20:", ":61:", account)
        match = STATEMENT_LINE.fullmatch(text)
        if match is None and more:  # a bank that broke the line inside its first subfields
            match = STATEMENT_LINE.fullmatch(text + more[0])
            more = more[1:]
        if match is None:
            raise _reject(line, f"statement line :61: is not '{STATEMENT_LINE_FORMAT}'", STATEMENT_LINE_FORMAT,
                          text, account)
        value_text, entry, mark, funds, amount_text, code, reference = match.groups()
        value_date = self.dates.get(value_text) or self.read_date(value_text, line, "value date", account)
        if entry:
            booking_date = self.entry_dates.get((entry, value_date)) or self.read_entry_date(entry, value_date, line,
                                                                                      account)
        else:
            booking_date = value_date
        amount, places = _amount(amount_text, statement.currency, line, account)
        direction: Literal["credit", "debit"]
        if mark == "C" or mark == "RD":
            direction = "credit"
            statement.credits += amount
        else:
            direction = "debit"
            statement.debits += amount
        customer, _, bank = reference.partition("//")
        customer, bank = customer.strip(), bank.strip()
        metadata: dict[str, Any] = {"transaction_type": code}
        meaning = _type_meaning(code)
        if meaning:
            metadata["transaction_type_meaning"] = meaning
        if customer and customer != NO_REFERENCE:
            metadata["customer_reference"] = customer
        metadata["statement_id"] = statement.id
        metadata["value_date"] = value_date.isoformat()
        details = " ".join(" ".join(more).split())
        if details:
            metadata["supplementary_details"] = details
        if mark[0] == "R":
            metadata["reversal"] = True
        if funds:
            metadata["funds_code"] = funds
        position = len(self.transactions) + 1
        external_id = (bank if bank and bank != NO_REFERENCE
                       else deterministic_id(account, booking_date, amount, direction, position))
        transaction = StatementTransaction(position, f"line {line}", account, statement.currency, amount, places,
                                           direction, booking_date, value_date, "", external_id, metadata)
        self.transactions.append(transaction)
        self.last = transaction


def parse_mt940(data: bytes, lenient: bool = False, *, max_bytes: int = MAX_STATEMENT_BYTES) -> ParsedStatements:
    if len(data) > max_bytes:
        raise FileRejected(f"file is {len(data)} bytes; statements are accepted up to {max_bytes} bytes",
                           {"where": "file", "expected": f"at most {max_bytes} bytes", "found": f"{len(data)} bytes"})
    if not data.strip():
        raise FileRejected("file is empty", {"where": "file", "expected": "an MT940 statement", "found": "nothing"})
    reader = _Reader(lenient)
    with without_gc():
        reader.read(_lines(data))
    return ParsedStatements(reader.transactions, reader.balances, reader.accounts, reader.warnings)
