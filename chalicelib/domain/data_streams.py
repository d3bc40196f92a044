"""Data streams and their property definitions: the entities and the rules about them."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum

from chalicelib.domain.errors import ValidationFailed
from chalicelib.domain.parsers.statements import account_part, normalise_account

KEY_PATTERN = re.compile(r"^[a-z0-9_-]{1,64}$")
KEY_RULE = "must be 1 to 64 characters of a-z, 0-9, '_' and '-'"
PROPERTY_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PROPERTY_KEY_RULE = "must be 1 to 64 characters of letters, digits, '_' and '-'"


class StreamType(str, Enum):
    API = "api"
    CSV = "csv"
    BANK_FEED = "bank_feed"
    PAYMENT_PROCESSOR = "payment_processor"


# Other types are made by the service itself (file imports, processor connections).
CREATABLE_STREAM_TYPES = (StreamType.API, StreamType.BANK_FEED)


class PropertyType(str, Enum):
    NUMBER = "number"
    DATE = "date"
    DATETIME = "datetime"
    STRING = "string"
    BOOLEAN = "boolean"


@dataclass(frozen=True)
class DataStream:
    environment: str
    id: int
    key: str
    name: str
    type: StreamType
    created_at: datetime
    description: str | None = None
    bank_account_id: str | None = None
    program_id: int | None = None
    records_count: int = 0
    deleting: bool = False
    version: int = 1

    def renamed(self, name: str | None, description: str | None, description_given: bool,
                bank_account_id: str | None = None) -> DataStream:
        """With the fields given changed (`bank_account_id` None: unchanged)."""
        return replace(
            self,
            name=self.name if name is None else name,
            description=description if description_given else self.description,
            bank_account_id=self.bank_account_id if bank_account_id is None else bank_account_id,
            version=self.version + 1,
        )

    @property
    def routing_key(self) -> str | None:
        """The account key this stream holds alone: a bank_feed's account (see account_routing_key)."""
        if self.type is not StreamType.BANK_FEED or not self.bank_account_id:
            return None
        return account_routing_key(self.bank_account_id)


@dataclass(frozen=True)
class PropertyDefinition:
    environment: str
    id: int
    key: str
    name: str
    type: PropertyType
    data_stream_key: str
    optional: bool
    created_at: datetime


def check_new_stream(key: str, type_: StreamType, bank_account_id: str | None) -> None:
    if not KEY_PATTERN.match(key):
        raise ValidationFailed.on("key", KEY_RULE)
    if type_ not in CREATABLE_STREAM_TYPES:
        raise ValidationFailed.on(
            "type", f"'{type_.value}' streams cannot be created; use 'api' or 'bank_feed'"
        )
    if type_ is StreamType.BANK_FEED and not bank_account_id:
        raise ValidationFailed.on("bank_account_id", "is required when type is 'bank_feed'")


def account_routing_key(bank_account_id: str) -> str:
    """An account as statement routing compares it, the same for a stream's bank_account_id and
    for the account a file names: the account after a bank code or BIC and "/", an IBAN without
    a currency after it, no spaces or dashes, upper case, a plain number without leading zeros.
    `50880050/0194774600888`, `0194774600888` and `194774600888` are one account. A bank_feed
    stream holds its account's key alone (the guard of data streams)."""
    return normalise_account(account_part(bank_account_id))


def check_property_key(key: str) -> None:
    if not PROPERTY_KEY_PATTERN.match(key):
        raise ValidationFailed.on("key", PROPERTY_KEY_RULE)
