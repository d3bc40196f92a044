"""Bodies and answers of /data_streams and their statement balances."""
from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_serializer

from chalicelib.api.schemas.common import (
    CursorQuery,
    Description,
    Model,
    Name,
    RequestModel,
    ResponseModel,
    Timestamp,
    read_only,
    unchanged_when_absent,
    when,
)
from chalicelib.domain.data_streams import KEY_PATTERN

StreamKey = Annotated[str, StringConstraints(pattern=KEY_PATTERN.pattern)]


BankAccountId = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class CreateDataStream(RequestModel):
    model_config = ConfigDict(json_schema_extra={"allOf": [
        when({"properties": {"type": {"const": "bank_feed"}}, "required": ["type"]},
             {"required": ["bank_account_id"]})]})
    key: StreamKey = Field(description="1 to 64 characters of a-z, 0-9, '_' and '-'; unique in the environment",
                           examples=["bank", "ledger-eur"])
    name: Name
    description: Description | None = None
    type: Literal["api", "bank_feed"] = "api"
    bank_account_id: BankAccountId | None = Field(
        default=None, description="Required when type is bank_feed; one bank_feed stream per account (409 naming "
                                  "the stream that holds it)"
    )


class UpdateDataStream(RequestModel):
    name: Name = unchanged_when_absent()
    description: Description | None = None
    bank_account_id: BankAccountId = unchanged_when_absent("A new account; one bank_feed stream per account")
    key: str | None = read_only("Immutable; accepted only when unchanged")
    type: str | None = read_only("Immutable; accepted only when unchanged")


class StatementDayOut(Model):
    """One statement day of a bank_feed stream, as the bank reported it (signed minor units:
    credit positive)."""
    date: date
    statement_id: str
    account: str
    currency: str
    decimal_places: int
    opening_booked: int | None
    closing_booked: int | None
    closing_available: int | None = Field(description="Where the bank reported it")
    file_import_id: int
    gap: bool = Field(description="The opening balance differs from the previous statement day's closing: a "
                                  "statement is missing, or the bank restated one")


class BalancePage(Model):
    data: list[StatementDayOut]
    next_cursor: str | None
    limit: int


class BalanceQuery(CursorQuery):
    date_from: date | None = Field(default=None, description="Statement days on or after (YYYY-MM-DD)")
    date_to: date | None = Field(default=None, description="Statement days on or before (YYYY-MM-DD)")


class DataStreamOut(ResponseModel):
    id: int
    key: str
    name: str
    description: str | None
    type: str
    bank_account_id: str | None = None
    program_id: int | None
    records_count: int
    created_at: Timestamp
    latest_balance: StatementDayOut | None = Field(default=None, description="bank_feed streams: the newest "
                                                   "statement day imported (null until one is)")

    @model_serializer(mode="wrap")
    def _balance_on_bank_feeds_only(self, handler):  # type: ignore[no-untyped-def]
        # No return annotation: the documented schema stays the model's own.
        shown = handler(self)
        if shown.get("type") != "bank_feed":
            shown.pop("latest_balance", None)
        return shown


class DataStreamPage(Model):
    data: list[DataStreamOut]
    next_cursor: str | None
    limit: int
