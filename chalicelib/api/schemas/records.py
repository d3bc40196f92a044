"""Bodies and answers of /records and /bulk_requests."""
from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, ValidationInfo, WithJsonSchema, field_validator

from chalicelib.api.schemas.common import CursorQuery, Id, Model, RequestModel, ResponseModel, Timestamp, documented
from chalicelib.api.schemas.data_streams import StreamKey
from chalicelib.api.schemas.file_imports import IngestionJobOut, ItemResultOut, JobCountsOut
from chalicelib.domain.money import DEFAULT_CURRENCY, ISO_4217, MAX_AMOUNT, MAX_DECIMAL_PLACES
from chalicelib.domain.records import MAX_DESCRIPTION as MAX_RECORD_DESCRIPTION
from chalicelib.domain.records import MAX_EXTERNAL_ID, MAX_METADATA_BYTES

MAX_BULK_RECORDS = 1000


class BulkRecordIn(RequestModel):
    """One record of a bulk request. Each is validated on its own: a bad one fails alone, in the results."""
    # Documents domain.records.validate_item, which checks the items (with the same limits).
    date: Annotated[str, WithJsonSchema({"type": "string", "format": "date", "description": "YYYY-MM-DD, a real "
                                         "date"})]
    data_stream_key: StreamKey = Field(description="A data stream of the environment", examples=["bank"])
    amount: int = Field(ge=0, le=MAX_AMOUNT, description="Minor units (1050 for 10.50); never negative, the "
                        "sign is direction")
    direction: Literal["credit", "debit"]
    currency: str = Field(default=DEFAULT_CURRENCY, json_schema_extra=documented(enum=sorted(ISO_4217)),
                          description="ISO 4217, accepted in any case, returned uppercase")
    decimal_places: int | None = Field(default=None, ge=0, le=MAX_DECIMAL_PLACES,
                                       description="Minor units of amount; default: the currency's")
    description: Annotated[str, StringConstraints(max_length=MAX_RECORD_DESCRIPTION)] | None = None
    external_id: Annotated[str, StringConstraints(min_length=1, max_length=MAX_EXTERNAL_ID, pattern=r"\S")] | None \
        = Field(default=None, description="Unique in the stream (see on_conflict); a number is taken as its digits; "
                f"at most {MAX_EXTERNAL_ID} bytes in UTF-8",
                examples=["INV-1001"])
    metadata: dict[str, Any] = Field(default_factory=dict, description="Typed and checked by the stream's property "
                                     f"definitions; at most {MAX_METADATA_BYTES} bytes as JSON")


class BulkRecordsBody(RequestModel):
    records: Annotated[list[Annotated[Any, WithJsonSchema(BulkRecordIn.model_json_schema())]],
                       Field(min_length=1, max_length=MAX_BULK_RECORDS)] = Field(
        description="1 to 1000 record items; each is validated on its own and fails alone"
    )
    on_conflict: Literal["skip", "error"] = Field(
        default="skip", description="An external_id that already exists in the stream: skip the item or fail it"
    )


BulkRequestStatus = Literal["pending", "processing", "completed", "failed", "cancelled"]


class BulkRequestSummaryOut(JobCountsOut):
    status: BulkRequestStatus = Field(description="`replicating` (a file-import status) reads as processing here")


class BulkRequestOut(IngestionJobOut):
    status: BulkRequestStatus = Field(description="`replicating` (a file-import status) reads as processing here")
    results: list[ItemResultOut]


class RecordsQuery(CursorQuery):
    data_stream_key: StreamKey | None = None
    status: Literal["unreconciled", "partially_reconciled", "pending_confirmation", "reconciled"] | None = None
    reconciliation_match_id: Id | None = None
    file_import_id: Id | None = None
    external_id: Annotated[str, StringConstraints(min_length=1, max_length=255)] | None = None
    date_from: date | None = None
    date_to: date | None = None


class ShareOut(Model):
    reconciliation_match_id: int
    amount: int = Field(description="Minor units of the record's amount this match holds")


class RecordAllocationOut(Model):
    """A record paid in part in one reconciliation (docs/partial-payments.md)."""
    reconciliation_id: int
    amount_allocated: int = Field(description="Minor units the matches hold, in the record's decimal places")
    amount_remaining: int = Field(description="amount - amount_allocated; the record is reconciled there at 0")
    shares: list[ShareOut]


class RecordOut(ResponseModel):
    id: int
    data_stream_key: str
    data_stream_id: int
    date: str
    amount: int
    currency: str
    decimal_places: int
    direction: str
    description: str | None
    external_id: str | None
    metadata: dict[str, Any]
    status: str
    file_import_id: int | None
    created_at: Timestamp
    allocations: list[RecordAllocationOut] = Field(
        default_factory=list, description="The reconciliations where the record is paid in part, with what is "
        "allocated and what remains; a reconciliation not listed holds the record whole (matched) or not at all")

    @field_validator("allocations", mode="before")
    @classmethod
    def _shares(cls, value: Any, info: ValidationInfo) -> Any:
        """A record's `allocations` (reconciliation -> match -> share) as the list the API shows."""
        if not isinstance(value, Mapping):
            return value
        amount = info.data.get("amount", 0)
        return [{"reconciliation_id": reconciliation, "amount_allocated": sum(shares.values()),
                 "amount_remaining": amount - sum(shares.values()),
                 "shares": [{"reconciliation_match_id": m, "amount": s} for m, s in sorted(shares.items())]}
                for reconciliation, shares in sorted(value.items()) if shares]


class RecordPage(Model):
    data: list[RecordOut]
    next_cursor: str | None
    limit: int
