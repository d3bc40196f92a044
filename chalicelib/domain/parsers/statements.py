"""Bank statements (BAI2, ISO 20022 camt.053, SWIFT MT940): what each parser gives, whatever the
format. One file may hold several accounts and several statements (days); each transaction
becomes one record of the `bank_feed` stream that holds its account, and each statement day's
balances are kept as the bank reported them.

A parser is `parse(data: bytes, lenient: bool = False) -> ParsedStatements`. Strict by default: a
file whose controls disagree (BAI2 record counts and control totals; MT940/camt opening balance
plus credits minus debits against the closing balance) raises `FileRejected` naming where (line
or XML element), the account, what was expected and what was found; nothing of it is written.
Lenient (the same option as NACHA's `warn`), each disagreement is a warning instead. A file that
cannot be read at all (truncated, garbage, too large) is rejected in both modes.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from chalicelib.domain.money import ISO_4217, MAX_AMOUNT, minor_units
from chalicelib.domain.parsers import FileRejected

MAX_STATEMENT_BYTES = 200 * 1024 * 1024  # a day's statement file of a large bank holds a few million lines
MAX_AMOUNT_DIGITS = 24
PLAIN_DECIMAL = re.compile(r"^\+?[0-9]{1,24}(?:[.,][0-9]{0,12})?$")


@dataclass(slots=True)
class StatementTransaction:
    position: int  # 1-based, in file order: a deterministic id's position, and the row's order
    where: str  # where it came from, for a message: "line 12" or "Stmt[2]/Ntry[5]/NtryDtls/TxDtls[1]"
    account: str  # as the file names it (an account number or an IBAN)
    currency: str  # ISO 4217
    amount: int  # in minor units of `currency` (decimal_places of them), never negative
    decimal_places: int
    direction: Literal["credit", "debit"]  # a reversal turns the mark around (see each format)
    booking_date: date
    value_date: date | None
    description: str
    external_id: str  # the bank's own reference where the format has one, else deterministic_id(...)
    # type code and its meaning, customer reference, end-to-end id, counterparty name and account,
    # statement id, value date (ISO text), reversal (bool): only what the file gives.
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class StatementBalance:
    """One account's statement day, as the bank reported it (signed minor units: credit positive)."""
    account: str
    currency: str
    decimal_places: int
    date: date
    statement_id: str
    opening_booked: int | None
    closing_booked: int | None
    closing_available: int | None = None


@dataclass
class ParsedStatements:
    transactions: list[StatementTransaction]
    balances: list[StatementBalance]
    accounts: list[str]  # every account of the file, in the order it first appears
    warnings: list[str] = field(default_factory=list)  # lenient: every control that disagreed


StatementParser = Callable[..., ParsedStatements]  # (data: bytes, lenient: bool = False)


DETAIL_KEYS = ("line", "element", "statement_id", "account", "expected", "found")
LINE_WHERE = re.compile(r"^line (\d+)")


def uniform_details(details: Mapping[str, Any]) -> dict[str, Any]:
    """A parser's FileRejected details in the one shape every format shows (error_details of a
    failed import): `line` (1-based, or None), `element` (the XML element path of camt.053, the
    record code of BAI2, or None), `statement_id`, `account`, `expected` and `found` (None when the
    parser does not know), and, when controls disagreed in several places, `errors` (each in the
    same shape plus its `message`) and `error_count`."""
    where = str(details.get("where") or "")
    line = details.get("line")
    if not isinstance(line, int) or isinstance(line, bool):
        matched = LINE_WHERE.match(where)
        line = int(matched.group(1)) if matched else None
    element = details.get("element") or details.get("record")
    if not element and where and where != "file" and not LINE_WHERE.match(where):
        element = where  # camt.053: "Stmt[2]/Ntry[5]/NtryDtls/TxDtls[1]"
    shown: dict[str, Any] = {"line": line, "element": element or None,
                             "statement_id": details.get("statement_id") or None,
                             "account": details.get("account") or None,
                             "expected": details.get("expected"), "found": details.get("found")}
    errors = details.get("errors")
    if isinstance(errors, list):
        shown["errors"] = [uniform_details(e) | {"message": e.get("message")} for e in errors
                           if isinstance(e, Mapping)]
        shown["error_count"] = details.get("error_count", len(errors))
    return shown


def normalise_account(text: str) -> str:
    """An account as routing compares it: upper case, no spaces or dashes; a plain account number
    (digits only) without its leading zeros. `DE89 3704 0044 0532 0130 00` == `de89370400440532013000`;
    `000123456` == `123456`."""
    compact = re.sub(r"[\s-]+", "", text).upper()
    return (compact.lstrip("0") or "0") if compact.isdigit() else compact


def _is_iban(text: str) -> bool:
    if not (15 <= len(text) <= 34 and text[:2].isalpha() and text[2:4].isdigit() and text.isalnum()
            and text.isascii()):
        return False
    rearranged = text[4:] + text[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def account_part(text: str) -> str:
    """The account of an account as a bank writes it: after a bank code or BIC and "/"
    (`50880050/0194774600888`, `DEUTDEFF/0194774600888`) the part after it; an IBAN followed by its
    currency (`NL91ABNA0417164300EUR`) the IBAN; else the text (stripped)."""
    account = text.rsplit("/", 1)[-1].strip()
    compact = account.replace(" ", "").upper()
    if len(compact) > 3 and compact[-3:] in ISO_4217 and _is_iban(compact[:-3]):
        return compact[:-3]
    return account


def deterministic_id(account: str, booking_date: date, amount: int, direction: str, position: int) -> str:
    """The external id of a transaction whose format gives no bank reference: the same statement
    imported again gives the same ids (so its records are skipped), another statement others."""
    text = f"{normalise_account(account)}|{booking_date.isoformat()}|{amount}|{direction}|{position}"
    return "stmt-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def to_minor_units(text: str, currency: str, where: str, implied_decimals: int | None = None) -> tuple[int, int]:
    """An amount as the file writes it, exactly, in minor units of `currency`: (amount, decimal places).
    `text` is a decimal ("1234.56", "1234,56" with a comma as MT940 writes it) or, with
    `implied_decimals` (BAI2), digits whose last `implied_decimals` are the fraction. More
    fraction digits than the currency has (non-zero) is a FileRejected naming `where`."""
    places = minor_units(currency)
    raw = text.strip()
    try:
        # Plain digits only: Decimal would also take exponents ("1e999999" is slow to scale, and
        # larger ones overflow with an error of its own) and NaN.
        if implied_decimals is not None:
            if not raw.lstrip("+-").isdigit() or len(raw) > MAX_AMOUNT_DIGITS:
                raise InvalidOperation
            value = Decimal(raw).scaleb(-implied_decimals)
        else:
            if not PLAIN_DECIMAL.match(raw):
                raise InvalidOperation
            value = Decimal(raw.replace(",", "."))
    except InvalidOperation:
        raise FileRejected(f"{where}: amount {text!r} is not a number",
                           {"where": where, "expected": "an amount", "found": text}) from None
    if not value.is_finite() or value < 0:
        raise FileRejected(f"{where}: amount {text!r} is not a positive number",
                           {"where": where, "expected": "a positive amount", "found": text})
    scaled = value.scaleb(places)
    if scaled > MAX_AMOUNT:
        raise FileRejected(f"{where}: amount {text!r} is too large",
                           {"where": where, "expected": f"at most {MAX_AMOUNT} minor units", "found": text})
    if scaled != scaled.to_integral_value():
        raise FileRejected(f"{where}: amount {text!r} has more decimals than {currency}'s {places}",
                           {"where": where, "expected": f"at most {places} decimals", "found": text})
    return int(scaled), places
