"""Records: validation of one submitted item into a record draft, and the record entity.

Validation is per item and never raises for bad input: a bad item becomes an ItemError naming
its field, so one bad item fails alone and the rest of its batch is written.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import Enum
from typing import Any, TypeGuard

from chalicelib.domain.data_streams import PropertyDefinition, PropertyType
from chalicelib.domain.errors import shown
from chalicelib.domain.money import DEFAULT_CURRENCY, ISO_4217, MAX_AMOUNT, MAX_DECIMAL_PLACES, minor_units

DATE_PATTERN = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# Bytes of an external_id in UTF-8, not characters: its guard's sort key (DynamoDB: 1,024 bytes) and a
# chunk's results, which quote it (one item: 400 KB), stay within their limits whatever the alphabet.
MAX_EXTERNAL_ID = 255
MAX_DESCRIPTION = 2000
# A record must fit one DynamoDB item (400 KB) with room to spare for its other attributes.
MAX_METADATA_BYTES = 64 * 1024


class Direction(str, Enum):
    CREDIT = "credit"
    DEBIT = "debit"


class RecordStatus(str, Enum):
    UNRECONCILED = "unreconciled"
    PARTIALLY_RECONCILED = "partially_reconciled"
    PENDING_CONFIRMATION = "pending_confirmation"  # held by a proposed match: claimed, not yet reconciled
    RECONCILED = "reconciled"


DELETABLE_STATUSES = (RecordStatus.UNRECONCILED,)


@dataclass(frozen=True)
class StreamContext:
    """What validating an item needs to know about its target stream."""
    id: int
    key: str
    properties: tuple[PropertyDefinition, ...] = ()


@dataclass(frozen=True)
class RecordDraft:
    data_stream_key: str
    data_stream_id: int
    date: str
    amount: int
    direction: Direction
    currency: str
    decimal_places: int
    description: str | None = None
    external_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Record:
    environment: str
    id: int
    data_stream_key: str
    data_stream_id: int
    date: str
    amount: int
    direction: Direction
    currency: str
    decimal_places: int
    status: RecordStatus
    created_at: datetime
    description: str | None = None
    external_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    file_import_id: int | None = None
    # Partial payments (domain/allocation.py): reconciliation -> match -> the share of `amount` it
    # holds; only where a record was matched in parts (absent: none, or matched whole).
    allocations: Mapping[int, Mapping[int, int]] = field(default_factory=dict)

    @classmethod
    def from_draft(cls, draft: RecordDraft, *, environment: str, record_id: int, created_at: datetime,
                   file_import_id: int | None) -> Record:
        return cls(
            environment=environment, id=record_id, data_stream_key=draft.data_stream_key,
            data_stream_id=draft.data_stream_id, date=draft.date, amount=draft.amount, direction=draft.direction,
            currency=draft.currency, decimal_places=draft.decimal_places, status=RecordStatus.UNRECONCILED,
            created_at=created_at, description=draft.description, external_id=draft.external_id,
            metadata=draft.metadata, file_import_id=file_import_id,
        )


@dataclass(frozen=True)
class HeldRecord:
    """A stored record with the reconciliations that matched it: a match claims a record in one
    reconciliation at a time, so a claim, a person's match and an accept must see who holds it."""
    record: Record
    matched_in: frozenset[int] = frozenset()
    match_ids: Mapping[int, int] = field(default_factory=dict)  # reconciliation -> the match holding it there
    deleting: bool = False  # a DELETE is under way: hidden from every listing, never matched again
    exception_ids: Mapping[int, int] = field(default_factory=dict)  # reconciliation -> the exception holding it
    proposed_in: frozenset[int] = frozenset()  # the reconciliations whose holding match is proposed

    def match_in(self, reconciliation_id: int) -> int | None:
        """The match that holds the record in the reconciliation (None: it is open there)."""
        return self.match_ids.get(reconciliation_id)

    def exception_in(self, reconciliation_id: int) -> int | None:
        """The exception that holds the record, open, in the reconciliation (None: none does)."""
        return self.exception_ids.get(reconciliation_id)


@dataclass(frozen=True)
class OpenRecord:
    """A record as the open-records index projects it (no status, environment or timestamps, so
    not a Record): what the exception refresh and investigations read of it."""
    id: int
    data_stream_key: str
    date: str
    amount: int
    direction: Direction
    currency: str
    decimal_places: int
    description: str | None = None
    external_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    file_import_id: int | None = None
    matched_in: frozenset[int] = frozenset()
    exception_holds: Mapping[int, int] = field(default_factory=dict)  # reconciliation -> the exception holding it

    def exception_in(self, reconciliation_id: int) -> int | None:
        """The exception that holds the record in the reconciliation (None: none does)."""
        return self.exception_holds.get(reconciliation_id)


@dataclass(frozen=True)
class ReconciledRecord:
    """A record other reconciliations reconciled, as a run reads it: when a stream joins a
    reconciliation, its status is computed again from `matched_in` (a stale read only makes the
    conditional write refuse)."""
    id: int
    data_stream_key: str
    matched_in: frozenset[int]


# A page of stored records as columns, one list (or polars Series) per attribute
# (adapters/dynamodb/record_columns): a run reads a million records this way, without an object per record.
RecordColumns = dict[str, Any]


def rows_in(page: RecordColumns) -> int:
    return len(page["id"])


@dataclass(frozen=True)
class ExternalIdClaim:
    """The outcome of claiming an external_id in a stream for one job item."""
    claimed: bool
    record_id: int | None  # the owner's record id (ours when claimed, the existing one when not)


def writer_lease_holder(job_id: int, execution: str) -> str:
    """Who holds a stream's writer lease (the right to write its external_id guards unconditionally):
    one execution of a job. Executions of one job hold it together (see `lease_owner`)."""
    return f"job:{job_id}/{execution}"


def lease_owner(holder: str) -> str:
    """The job a writer lease's holder writes for: executions of one job (a delivery again after a
    crash, a sweeper's restart beside a slow one) write the same rows' guards, so they may hold the
    lease together, and it goes back when the last of them gives it back. A holder without an
    execution part is its own job."""
    return holder.split("/", 1)[0]


@dataclass(frozen=True)
class ItemError:
    field: str
    message: str

    def describe(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_date(value: Any) -> bool:
    if not isinstance(value, str) or not DATE_PATTERN.match(value):
        return False
    try:
        date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _check_datetime(value: Any) -> bool:
    if not isinstance(value, str) or "T" not in value:
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


_PROPERTY_CHECKS: dict[PropertyType, tuple[Callable[[Any], bool], str]] = {
    PropertyType.NUMBER: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    PropertyType.STRING: (lambda v: isinstance(v, str), "a string"),
    PropertyType.BOOLEAN: (lambda v: isinstance(v, bool), "true or false"),
    PropertyType.DATE: (_check_date, "a date YYYY-MM-DD"),
    PropertyType.DATETIME: (_check_datetime, "an ISO 8601 date-time"),
}


def check_metadata(metadata: Mapping[str, Any], properties: tuple[PropertyDefinition, ...]) -> ItemError | None:
    for definition in properties:
        path = f"metadata.{definition.key}"
        if definition.key not in metadata or metadata[definition.key] is None:
            if not definition.optional:
                return ItemError(path, f"is required by the property definition '{definition.key}'")
            continue
        check, expected = _PROPERTY_CHECKS[definition.type]
        if not check(metadata[definition.key]):
            return ItemError(path, f"must be {expected} (property type {definition.type.value})")
    return None


def declared_decimal_places(raw: Any) -> int | None:
    """The decimal places an item's amount is in: its own, else its currency's (USD when it gives
    none); None when the item does not say in a readable way (it then fails validation anyway)."""
    if not isinstance(raw, dict):
        return None
    currency = _currency_of(raw)
    places = _decimal_places_of(raw, currency if isinstance(currency, str) else None)
    return places if isinstance(places, int) else None


def _currency_of(raw: dict[str, Any]) -> str | ItemError:
    currency = raw.get("currency")
    if currency is None:
        return DEFAULT_CURRENCY
    if not isinstance(currency, str) or currency.upper() not in ISO_4217:
        return ItemError("currency", "must be an ISO 4217 currency code such as USD")
    return currency.upper()


def _decimal_places_of(raw: dict[str, Any], currency: str | None) -> int | ItemError:
    """The item's own decimal places, else its currency's (an error when it has no readable one)."""
    places = raw.get("decimal_places")
    if places is None:
        return minor_units(currency) if currency else ItemError("currency", "is not a currency code")
    if not _is_int(places) or not 0 <= places <= MAX_DECIMAL_PLACES:
        return ItemError("decimal_places", f"must be an integer from 0 to {MAX_DECIMAL_PLACES}")
    return places


def shared_decimal_places(items: Any) -> int | None:
    """The decimal places of a batch of items when all that say agree; None when they mix (or none says)."""
    seen = {declared_decimal_places(item) for item in items} - {None}
    return seen.pop() if len(seen) == 1 else None


def fits_external_id(external_id: str) -> bool:
    """At most MAX_EXTERNAL_ID bytes of UTF-8 (a lone surrogate, which UTF-8 cannot carry, does not fit)."""
    try:
        return len(external_id.encode("utf-8")) <= MAX_EXTERNAL_ID
    except UnicodeEncodeError:
        return False


def shown_external_id(value: str) -> str:
    """A failed row's external_id as its result quotes it: valid UTF-8 within MAX_EXTERNAL_ID bytes."""
    encoded = value.encode("utf-8", "replace")
    if len(encoded) <= MAX_EXTERNAL_ID:
        return encoded.decode("utf-8")
    return encoded[:MAX_EXTERNAL_ID - 3].decode("utf-8", "ignore") + "..."


def validate_item(raw: Any, streams: Mapping[str, StreamContext | None]) -> RecordDraft | ItemError:
    """Turn one submitted item into a draft, or say which field is wrong and why.

    `streams` maps each referenced stream key to its context, or to None when the stream
    does not exist in the caller's environment.
    """
    if not isinstance(raw, dict):
        return ItemError("", "must be an object")
    for required in ("date", "data_stream_key", "amount", "direction"):
        if raw.get(required) is None:
            return ItemError(required, "is required")

    stream_key = raw["data_stream_key"]
    if not isinstance(stream_key, str):
        return ItemError("data_stream_key", "must be a string")
    stream = streams.get(stream_key)
    if stream is None:
        return ItemError("data_stream_key", f"no data stream with key '{shown(stream_key)}'")
    if not _check_date(raw["date"]):
        return ItemError("date", "must be a real date in the form YYYY-MM-DD")

    amount = raw["amount"]
    if not _is_int(amount):
        return ItemError("amount", "must be an integer in minor units (e.g. 1050 for 10.50)")
    if amount < 0:
        return ItemError("amount", "must not be negative; the sign is given by direction")
    if amount > MAX_AMOUNT:
        return ItemError("amount", f"must be at most {MAX_AMOUNT}")

    direction = raw["direction"]
    if direction not in ("credit", "debit"):
        return ItemError("direction", "must be 'credit' or 'debit'")

    currency = _currency_of(raw)
    if isinstance(currency, ItemError):
        return currency
    decimal_places = _decimal_places_of(raw, currency)
    if isinstance(decimal_places, ItemError):
        return decimal_places

    description = raw.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > MAX_DESCRIPTION):
        return ItemError("description", f"must be a string of at most {MAX_DESCRIPTION} characters")

    external_id = raw.get("external_id")
    if external_id is not None:
        if _is_int(external_id):
            external_id = str(external_id)  # clients often send numeric references
        if not isinstance(external_id, str) or not external_id.strip() or not fits_external_id(external_id):
            return ItemError("external_id", f"must be a non-empty string of at most {MAX_EXTERNAL_ID} bytes in UTF-8 "
                                            f"({MAX_EXTERNAL_ID} ASCII characters)")

    metadata = raw.get("metadata")
    if metadata is None:
        metadata = {}
    elif not isinstance(metadata, dict):
        return ItemError("metadata", "must be an object")
    try:
        metadata_size = len(json.dumps(metadata, separators=(",", ":"), allow_nan=False))
    except ValueError:
        return ItemError("metadata", "must not hold NaN or Infinity")
    if metadata_size > MAX_METADATA_BYTES:
        return ItemError("metadata", f"is {metadata_size} bytes as JSON; at most {MAX_METADATA_BYTES} are kept")
    problem = check_metadata(metadata, stream.properties)
    if problem:
        return problem

    return RecordDraft(
        data_stream_key=stream.key, data_stream_id=stream.id, date=raw["date"], amount=amount,
        direction=Direction(direction), currency=currency, decimal_places=decimal_places,
        description=description, external_id=external_id, metadata=metadata,
    )


@dataclass(frozen=True)
class RecordQuery:
    data_stream_key: str | None = None
    status: RecordStatus | None = None
    file_import_id: int | None = None
    external_id: str | None = None
    date_from: str | None = None
    date_to: str | None = None

    def admits(self, record: Record) -> bool:
        """The same filters, on a record already read (the index query applies them itself)."""
        return self.admits_values(record.data_stream_key, record.status, record.file_import_id, record.external_id,
                                  record.date)

    def admits_values(self, data_stream_key: str, status: RecordStatus, file_import_id: int | None,
                      external_id: str | None, date: str) -> bool:
        """`admits`, on a record's values read apart (an export's row from the analytics mirror)."""
        return ((self.data_stream_key is None or data_stream_key == self.data_stream_key)
                and (self.status is None or status is self.status)
                and (self.file_import_id is None or file_import_id == self.file_import_id)
                and (self.external_id is None or external_id == self.external_id)
                and (self.date_from is None or date >= self.date_from)
                and (self.date_to is None or date <= self.date_to))
