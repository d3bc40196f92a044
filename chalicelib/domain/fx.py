"""Currencies across a match: reference rates, and the conversion a rule may apply (docs/currencies.md).

Pure Python (the API runs without polars); the columnar conversion the engine uses is
domain/matching/conversion.py, held to `convert` here by property tests.

A rate is `date, base, quote, rate`: one `base` is worth `rate` of `quote` on that day. It is kept
as the decimal string it was given (normalized: no exponent, no trailing zeros), and as an integer
mantissa and scale (1.0842 = 10842 / 10**4): no float ever holds a rate or an amount.

Converting `amount` (minor units at `from_places` decimals) to the quote currency (at `to_places`,
its ISO 4217 minor units) is amount * rate, rounded half to even to a whole minor unit of the
target; with only the reverse pair known, amount / rate, rounded the same way. Exact integer
arithmetic throughout (`convert`).
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from chalicelib.domain.errors import FieldError, shown
from chalicelib.domain.money import ISO_4217, minor_units

MAX_RATE_DECIMALS = 12      # digits after the point a rate may have
MAX_RATE_DIGITS = 15        # significant digits a rate may have (its mantissa is below 10**15)
MAX_RATE_ROWS = 10_000      # rows one import request may carry
MAX_DAYS_BACK = 31          # how far back a conversion may look for a rate
DEFAULT_DAYS_BACK = 7
RATE_COLUMNS = ("date", "base", "quote", "rate")
RATE_TEXT = re.compile(r"^[0-9]+(\.[0-9]+)?$")
SIDES = ("side_a", "side_b")
KEY_PATTERN = re.compile(r"^[a-z0-9_-]{1,64}$")
KEY_RULE = "must be 1 to 64 characters of a-z, 0-9, '_' and '-'"


@dataclass(frozen=True)
class Rate:
    """A positive decimal as mantissa / 10**scale, and its text."""
    mantissa: int
    scale: int

    @property
    def text(self) -> str:
        digits = str(self.mantissa).rjust(self.scale + 1, "0")
        return digits if not self.scale else f"{digits[:-self.scale]}.{digits[-self.scale:]}"


def parse_rate(value: Any) -> Rate | str:
    """The rate a text says, or why it is refused (a message)."""
    if not isinstance(value, str) or not RATE_TEXT.match(value.strip()):
        return "must be a positive decimal such as 1.0842 (digits, one point, no sign or exponent)"
    whole, _, fraction = value.strip().partition(".")
    fraction = fraction.rstrip("0")
    if len(fraction) > MAX_RATE_DECIMALS:
        return f"has more than {MAX_RATE_DECIMALS} decimals"
    mantissa = int(whole + fraction)
    if mantissa == 0:
        return "must be above 0"
    if mantissa >= 10 ** MAX_RATE_DIGITS:
        return f"has more than {MAX_RATE_DIGITS} significant digits"
    return Rate(mantissa, len(fraction))


@dataclass(frozen=True)
class RateRow:
    day: date
    base: str
    quote: str
    rate: Rate

    def as_body(self) -> dict[str, str]:
        return {"date": self.day.isoformat(), "base": self.base, "quote": self.quote, "rate": self.rate.text}


@dataclass(frozen=True)
class RowResult:
    """One row of an import: its number (1 is the first row after the header), and either its
    rate or the problems of its fields."""
    row: int
    rate: RateRow | None
    errors: tuple[FieldError, ...] = ()


def check_row(number: int, raw: dict[str, Any]) -> RowResult:
    errors: list[FieldError] = []
    day: date | None = None
    text = raw.get("date")
    try:
        day = date.fromisoformat(text) if isinstance(text, str) and len(text.strip()) == 10 else None
    except ValueError:
        day = None
    if day is None:
        errors.append(FieldError("date", f"'{shown(text)}' is not a date YYYY-MM-DD"))
    codes: dict[str, str] = {}
    for name in ("base", "quote"):
        given = raw.get(name)
        code = given.strip().upper() if isinstance(given, str) else ""
        if code not in ISO_4217:
            errors.append(FieldError(name, f"'{shown(given)}' is not an ISO 4217 currency code"))
        codes[name] = code
    if not errors and codes["base"] == codes["quote"]:
        errors.append(FieldError("quote", "must differ from base"))
    rate = parse_rate(raw.get("rate"))
    if isinstance(rate, str):
        errors.append(FieldError("rate", f"'{shown(raw.get('rate'))}' {rate}"))
    if errors:
        return RowResult(number, None, tuple(errors))
    assert day is not None and isinstance(rate, Rate)
    return RowResult(number, RateRow(day, codes["base"], codes["quote"], rate))


def _split_by_a_comma(cells: list[str], at: int, names: list[str]) -> bool:
    """`1,27` unquoted under a header with a column after the rate that the rates do not read: the
    rate cell holds digits alone and the next cell, of an ignored column, digits alone too."""
    following = at + 1
    return (following < min(len(cells), len(names)) and names[following] not in RATE_COLUMNS
            and cells[at].strip().isdigit() and cells[following].strip().isdigit())


def parse_rates_csv(text: str) -> tuple[list[RowResult], str | None]:
    """Every row of a rates CSV checked: (results, None), or ([], why the file cannot be read at
    all). The header names the columns date, base, quote and rate (any order and case; other
    columns are ignored). Rows repeating a (date, base, quote) of an earlier row with another
    rate are refused: which one was meant cannot be told."""
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    try:
        header = next(reader)
    except StopIteration:
        return [], "the CSV is empty: its first line names the columns date, base, quote, rate"
    except csv.Error as error:
        return [], f"the CSV cannot be read: {error}"
    names = [h.strip().lower() for h in header]
    missing = [c for c in RATE_COLUMNS if c not in names]
    if missing:
        return [], f"the header lacks the column(s) {', '.join(missing)} (it names {', '.join(map(shown, header))})"
    where = {c: names.index(c) for c in RATE_COLUMNS}
    named = max(i for i, name in enumerate(names) if name) + 1  # a header's trailing commas name nothing
    results: list[RowResult] = []
    seen: dict[tuple[date, str, str], tuple[int, Rate]] = {}
    try:
        for number, cells in enumerate(reader, start=1):
            if not any(c.strip() for c in cells):
                continue
            if number > MAX_RATE_ROWS:
                return [], f"more than {MAX_RATE_ROWS:,} rows: send them in several imports"
            if any(c.strip() for c in cells[named:]) or _split_by_a_comma(cells, where["rate"], names):
                results.append(RowResult(number, None, (FieldError(
                    "rate", f"the row has {len(cells)} cells and the header names {named}: a decimal comma must "
                            "be quoted (\"1,27\") or written with a point (1.27)"),)))
                continue
            raw = {c: cells[i] if i < len(cells) else None for c, i in where.items()}
            result = check_row(number, raw)
            if result.rate is not None:
                row = result.rate
                earlier = seen.setdefault((row.day, row.base, row.quote), (number, row.rate))
                if earlier[1] != row.rate:
                    result = RowResult(number, None, (FieldError(
                        "rate", f"row {earlier[0]} gives {row.base}/{row.quote} on {row.day} the rate "
                                f"{earlier[1].text}, this row {row.rate.text}"),))
            results.append(result)
    except csv.Error as error:
        return [], f"the CSV cannot be read past row {len(results)}: {error}"
    if not results:
        return [], "the CSV has a header and no row"
    return results, None


# Converting -----------------------------------------------------------------------------------

def round_half_even(numerator: int, denominator: int) -> int:
    """numerator / denominator (both >= 0, denominator > 0) to the nearest integer, ties to even."""
    quotient, remainder = divmod(numerator, denominator)
    twice = 2 * remainder
    return quotient + (1 if twice > denominator or (twice == denominator and quotient % 2) else 0)


def convert(amount: int, from_places: int, to_places: int, rate: Rate, inverted: bool = False) -> int:
    """`amount` (minor units at `from_places` decimals, >= 0) in the other currency at `to_places`
    decimals: amount * rate (or amount / rate, `inverted`), rounded half to even. Integers only."""
    up, down = 10 ** max(to_places - from_places, 0), 10 ** max(from_places - to_places, 0)
    if inverted:
        return round_half_even(amount * 10 ** rate.scale * up, rate.mantissa * down)
    return round_half_even(amount * rate.mantissa * up, 10 ** rate.scale * down)


# A rule's conversion ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Conversion:
    """Before the rule compares, the records of `side` are converted to `to_currency` at the rate
    of their date in the rate stream `rate_stream_key`: the latest rate on or before the date, at
    most `max_days_back` days before it (docs/currencies.md)."""
    rate_stream_key: str
    side: str
    to_currency: str
    max_days_back: int = DEFAULT_DAYS_BACK

    @property
    def engine_side(self) -> str:
        return "a" if self.side == "side_a" else "b"

    @property
    def to_places(self) -> int:
        return minor_units(self.to_currency)

    def as_body(self) -> dict[str, Any]:
        return {"rate_stream_key": self.rate_stream_key, "side": self.side, "to_currency": self.to_currency,
                "max_days_back": self.max_days_back}


def validate_conversion(raw: Any, errors: list[FieldError], path: str = "conversion") -> Conversion | None:
    """A rule's `conversion` block (null: none); problems go to `errors` with their field paths."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        errors.append(FieldError(path, 'must be an object {"rate_stream_key", "side", "to_currency"} or null'))
        return None
    before = len(errors)
    key, side, to = raw.get("rate_stream_key"), raw.get("side"), raw.get("to_currency")
    days = raw.get("max_days_back", DEFAULT_DAYS_BACK)
    if not isinstance(key, str) or not KEY_PATTERN.match(key):
        errors.append(FieldError(f"{path}.rate_stream_key", f"is required and {KEY_RULE}"))
    if side not in SIDES:
        errors.append(FieldError(f"{path}.side", f"must be side_a or side_b, not '{shown(side)}'"))
    if not isinstance(to, str) or to not in ISO_4217:
        errors.append(FieldError(f"{path}.to_currency", f"'{shown(to)}' is not an ISO 4217 currency code"))
    if isinstance(days, bool) or not isinstance(days, int) or not 0 <= days <= MAX_DAYS_BACK:
        errors.append(FieldError(f"{path}.max_days_back", f"must be a whole number of days from 0 to {MAX_DAYS_BACK}"))
    unknown = sorted(set(raw) - {"rate_stream_key", "side", "to_currency", "max_days_back"})
    if unknown:
        errors.append(FieldError(f"{path}.{shown(unknown[0])}", "is not a field of a conversion"))
    if len(errors) > before:
        return None
    assert isinstance(key, str) and isinstance(side, str) and isinstance(to, str)  # else an error above
    return Conversion(key, side, to, days)


def no_rate_message(from_currency: str, to_currency: str, day: date, days_back: int) -> str:
    window = f"on {day}" if not days_back else f"on {day} nor in the {days_back} days before"
    return f"no rate for {from_currency}/{to_currency} (nor {to_currency}/{from_currency}) {window}"


@dataclass(frozen=True)
class RateStream:
    """An environment's stream of reference rates, by key; its rates are kept beside it."""
    environment: str
    key: str
    name: str
    created_at: datetime
    description: str | None = None
    rates_count: int = 0
