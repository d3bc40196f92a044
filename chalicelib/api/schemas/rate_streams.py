"""Bodies and answers of /rate_streams: reference exchange rates (docs/currencies.md)."""
from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from chalicelib.api.schemas.common import Description, Model, Name, QueryModel, RequestModel, ResponseModel, Timestamp
from chalicelib.domain.fx import KEY_PATTERN, MAX_RATE_DECIMALS, MAX_RATE_DIGITS, MAX_RATE_ROWS

MAX_CSV_CHARACTERS = 1_000_000
Currency = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$"), Field(examples=["EUR"])]


class CreateRateStream(RequestModel):
    key: Annotated[str, StringConstraints(pattern=KEY_PATTERN.pattern)] = Field(
        description="1 to 64 characters of a-z, 0-9, '_' and '-'; unique in the environment; a rule's "
                    "conversion names it", examples=["ecb"])
    name: Name
    description: Description | None = None


class RateStreamOut(ResponseModel):
    key: str
    name: str
    description: str | None
    rates_count: int = Field(description="Rates held: one a (date, base, quote)")
    created_at: Timestamp


class RateStreamList(Model):
    data: list[RateStreamOut]


class ImportRates(RequestModel):
    csv: Annotated[str, StringConstraints(min_length=1, max_length=MAX_CSV_CHARACTERS)] = Field(
        description=f"CSV text, its header naming the columns date, base, quote, rate (any order; other columns "
                    f"ignored), at most {MAX_RATE_ROWS:,} rows. A row says one `base` is worth `rate` of `quote` "
                    f"on `date` (YYYY-MM-DD); codes are ISO 4217; the rate is a positive decimal written with "
                    f"digits and a point (no exponent), at most {MAX_RATE_DECIMALS} decimals and "
                    f"{MAX_RATE_DIGITS} significant digits, kept exactly as a decimal, never a float. When any "
                    "row is refused nothing is stored, and the 422 names each refused row and field "
                    "(`csv.rows[<n>].<field>`, row 1 the first after the header).",
        examples=["date,base,quote,rate\n2026-03-02,EUR,USD,1.0842\n2026-03-02,USD,JPY,150.12\n"])


class RateOut(Model):
    date: date
    base: str
    quote: str
    rate: str = Field(description="The exact decimal, as text", examples=["1.0842"])


class RateRowResult(RateOut):
    row: int = Field(description="1: the first row after the header")
    status: Literal["created", "replaced", "unchanged"]
    previous_rate: str | None = Field(description="The rate a replaced row had")


class RatesImported(Model):
    rate_stream: RateStreamOut
    rows: int
    created: int
    replaced: int
    results: list[RateRowResult]


class RatesQuery(QueryModel):
    base: Currency | None = None
    quote: Currency | None = None


class RateList(Model):
    data: list[RateOut]
