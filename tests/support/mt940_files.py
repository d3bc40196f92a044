"""Writes SWIFT MT940 statement files: the property tests and the timing build their files with it
(test code: it lives in tests/support and does not ship).

Closing balances are computed from the lines unless a statement says otherwise, so a file written
here is valid unless a caller breaks it on purpose.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from chalicelib.domain.money import minor_units

TEXT_WIDTH = 65
SUBFIELD_WIDTH = 27


@dataclass
class Line:
    """A statement line (:61:) and its information to the account owner (:86:)."""
    amount: int  # minor units, never negative
    mark: str = "C"  # C, D, RC (reversal of a credit: a debit), RD (reversal of a debit: a credit)
    value_date: date = date(2026, 1, 5)
    entry_date: date | None = None
    type_code: str = "NTRF"
    customer_reference: str = "NONREF"
    bank_reference: str = ""
    funds_code: str = ""
    supplementary: str = ""
    information: list[str] = field(default_factory=list)  # the :86: lines, as written (see free_text, structured)

    @property
    def signed(self) -> int:
        return self.amount if self.mark in ("C", "RD") else -self.amount


@dataclass
class Statement:
    account: str  # as :25: writes it
    lines: list[Line] = field(default_factory=list)
    currency: str = "EUR"
    opening: int = 0  # signed minor units, credit positive
    reference: str = "STMT"
    number: str = "1/1"
    opening_date: date = date(2026, 1, 4)
    closing_date: date = date(2026, 1, 5)
    closing: int | None = None  # default: opening plus credits minus debits
    available: int | None = None
    intermediate_opening: bool = False  # :60M: instead of :60F:
    intermediate_closing: bool = False  # :62M: instead of :62F:

    def computed_closing(self) -> int:
        return self.opening + sum(line.signed for line in self.lines)


def amount_text(amount: int, currency: str) -> str:
    """Minor units as SWIFT writes them: 123456 EUR -> '1234,56', 1500 JPY -> '1500,'."""
    places = minor_units(currency)
    digits = str(abs(amount)).rjust(places + 1, "0")
    return f"{digits[:len(digits) - places]},{digits[len(digits) - places:]}"


def _balance(tag: str, amount: int, day: date, currency: str) -> str:
    mark = "D" if amount < 0 else "C"
    return f":{tag}:{mark}{day:%y%m%d}{currency}{amount_text(amount, currency)}"


def free_text(text: str) -> list[str]:
    """:86: free text cut into lines of 65 characters."""
    return [text[i:i + TEXT_WIDTH] for i in range(0, len(text), TEXT_WIDTH)] or [""]


def structured(code: str, posting_text: str = "", purpose: str = "", bank: str = "", account: str = "",
               name: str = "") -> list[str]:
    """:86: as German banks write it: `?00` posting text, purpose cut into `?20`.. `?29` then `?60`..,
    `?30` bank, `?31` account, `?32`/`?33` name, each subfield at most 27 characters; the whole cut
    into lines of 65 characters wherever that falls."""
    chunks = [purpose[i:i + SUBFIELD_WIDTH] for i in range(0, len(purpose), SUBFIELD_WIDTH)]
    numbers = [*range(20, 30), *range(60, 64)]
    text = code + (f"?00{posting_text}" if posting_text else "")
    text += "".join(f"?{number}{chunk}" for number, chunk in zip(numbers, chunks))
    text += f"?30{bank}" if bank else ""
    text += f"?31{account}" if account else ""
    names = [name[i:i + SUBFIELD_WIDTH] for i in range(0, len(name), SUBFIELD_WIDTH)][:2]
    text += "".join(f"?{number}{chunk}" for number, chunk in zip((32, 33), names))
    return free_text(text)


def statement_line(line: Line, currency: str) -> list[str]:
    entry = f"{line.entry_date:%m%d}" if line.entry_date else ""
    reference = line.customer_reference + (f"//{line.bank_reference}" if line.bank_reference else "")
    text = [f":61:{line.value_date:%y%m%d}{entry}{line.mark}{line.funds_code}{amount_text(line.amount, currency)}"
            f"{line.type_code}{reference}"]
    if line.supplementary:
        text.append(line.supplementary)
    if line.information:
        text.append(":86:" + line.information[0])
        text += line.information[1:]
    return text


def statement_text(statement: Statement) -> list[str]:
    currency = statement.currency
    closing = statement.computed_closing() if statement.closing is None else statement.closing
    text = [f":20:{statement.reference}", f":25:{statement.account}", f":28C:{statement.number}",
            _balance("60M" if statement.intermediate_opening else "60F", statement.opening, statement.opening_date,
                     currency)]
    for line in statement.lines:
        text += statement_line(line, currency)
    text.append(_balance("62M" if statement.intermediate_closing else "62F", closing, statement.closing_date,
                         currency))
    if statement.available is not None:
        text.append(_balance("64", statement.available, statement.closing_date, currency))
    return text


def write_file(statements: list[Statement], envelope: bool = False, line_ending: str = "\n",
               encoding: str = "latin-1") -> bytes:
    """One message per statement: in SWIFT blocks 1, 2 and 4 (and a trailer) with `envelope`,
    else bare and ended by a line of '-'."""
    lines: list[str] = []
    for statement in statements:
        if envelope:
            lines.append("{1:F01BANKDEFFAXXX0000000000}{2:O9401200260105BANKDEFFAXXX00000000002601051200N}{4:")
        lines += statement_text(statement)
        lines.append("-}{5:{CHK:0123456789AB}}" if envelope else "-")
    return (line_ending.join(lines) + line_ending).encode(encoding)
