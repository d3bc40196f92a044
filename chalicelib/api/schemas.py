"""Request and response models of the HTTP API (pydantic v2); the OpenAPI document is built from them."""
from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Annotated, Any, Literal, TypeAlias, cast
from zoneinfo import available_timezones

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    WithJsonSchema,
    model_serializer,
)
from pydantic.json_schema import JsonDict
from pydantic_core import PydanticCustomError

from chalicelib.domain.agents.definition import EMAIL, MAX_MENTIONS, MAX_PATTERN, MAX_RECIPIENTS, AgentKind, MentionType
from chalicelib.domain.agents.schedule import NEEDS_HOUR, Cadence
from chalicelib.domain.clock import iso
from chalicelib.domain.data_streams import KEY_PATTERN, PROPERTY_KEY_PATTERN
from chalicelib.domain.events import ALL_EVENTS, EVENT_TYPES
from chalicelib.domain.money import DEFAULT_CURRENCY, ISO_4217, MAX_AMOUNT, MAX_DECIMAL_PLACES
from chalicelib.domain.reconciliations import DEFAULT_EXCEPTION_AFTER_DAYS, MAX_EXCEPTION_AFTER_DAYS
from chalicelib.domain.records import MAX_DESCRIPTION as MAX_RECORD_DESCRIPTION
from chalicelib.domain.records import MAX_EXTERNAL_ID, MAX_METADATA_BYTES
from chalicelib.domain.rules import (
    MAX_CONDITIONS,
    MAX_DAYS,
    MAX_GROUP_FIELDS,
    MAX_PRIORITY,
    METADATA_KEY,
    OPERATORS_BY_FIELD,
    TEXT_FIELDS,
    Cardinality,
    Normalization,
    Operator,
)
from chalicelib.domain.rules import MAX_NAME as MAX_RULE_NAME
from chalicelib.domain.stories import MAX_LINKS as MAX_STORY_LINKS

Timestamp = Annotated[
    datetime, PlainSerializer(iso, return_type=str), WithJsonSchema({"type": "string", "format": "date-time"})
]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
# An id in a body or a query: at most 15 digits, like a path id (a longer one could not be a key).
Id = Annotated[int, Field(ge=1, le=10**15 - 1)]
Description = Annotated[str, StringConstraints(max_length=4000)]


def documented(**keywords: Any) -> JsonDict:
    """JSON Schema keywords for json_schema_extra (the rule itself is checked elsewhere)."""
    return cast(JsonDict, keywords)


def when(condition: dict[str, Any], then: dict[str, Any]) -> dict[str, Any]:
    """A rule between fields, for the document (JSON Schema if/then): the validation checks it elsewhere."""
    return {"if": condition, "then": then}


def read_only(description: str) -> Any:
    """A field a PATCH accepts only when it equals the current value: a client should not send it."""
    return Field(default=None, description=description, json_schema_extra={"readOnly": True})


def unchanged_when_absent(description: str | None = None, **documented: Any):
    """A PATCH field: absent leaves the value unchanged, null is refused (so no null default is documented).
    `documented`: JSON Schema keywords of a rule the validation checks elsewhere (an enum, a pattern)."""
    def schema_of(schema: dict[str, Any]) -> None:
        schema.pop("default", None)
        schema.update(documented)
    return Field(default=None, description=description, json_schema_extra=schema_of)


class Model(BaseModel):
    """Every model of the API: built (its validator and serializer) on first use, not at import, so
    that a cold start pays only for the models the request it serves needs."""
    model_config = ConfigDict(defer_build=True)


class RequestModel(Model):
    """Bodies are validated strictly from JSON: no "12" for 12, no 1 for true. Unknown fields are ignored."""
    model_config = ConfigDict(strict=True, extra="ignore")


class QueryModel(Model):
    """Query strings arrive as text, so their values are converted (lax)."""
    model_config = ConfigDict(extra="ignore")


class ResponseModel(Model):
    model_config = ConfigDict(from_attributes=True)


# Shared -------------------------------------------------------------------------------

class ErrorOut(Model):
    message: str


class FieldErrorOut(Model):
    field: str = Field(description="Path of the field, e.g. records[3].amount")
    message: str


class ValidationErrorOut(Model):
    message: str
    errors: list[FieldErrorOut]


class CursorQuery(QueryModel):
    cursor: str | None = Field(default=None, description="next_cursor of the previous page; omit for the first")
    limit: int = Field(default=50, ge=1, le=200)


class HealthOut(Model):
    status: Literal["ok"] = "ok"


# Data streams -------------------------------------------------------------------------

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


# Property definitions -----------------------------------------------------------------

PropertyTypeName = Literal["number", "date", "datetime", "string", "boolean"]


class CreatePropertyDefinition(RequestModel):
    key: Annotated[str, StringConstraints(pattern=PROPERTY_KEY_PATTERN.pattern)] = Field(
        description="The metadata key it types; unique in its stream", examples=["invoice_id", "Payer-Ref"]
    )
    name: Name
    type: PropertyTypeName
    data_stream_key: str
    optional: bool = False


class UpdatePropertyDefinition(RequestModel):
    name: Name = unchanged_when_absent()
    optional: bool = unchanged_when_absent()
    key: str | None = read_only("Immutable; accepted only when unchanged")
    type: str | None = read_only("Immutable; accepted only when unchanged")


class PropertyDefinitionQuery(QueryModel):
    data_stream_key: str | None = None


class PropertyDefinitionOut(ResponseModel):
    id: int
    key: str
    name: str
    type: str
    data_stream_key: str
    optional: bool
    created_at: Timestamp


# Records and bulk requests ------------------------------------------------------------

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
FileImportStatus = Literal["pending", "processing", "replicating", "completed", "failed", "cancelled"]


class JobCountsOut(ResponseModel):
    """What every ingestion job answers first; each model below narrows `status` to the statuses it shows
    (it stays second in the schema's properties)."""
    id: int
    status: str
    total_items: int
    processed_items: int
    successful_items: int
    failed_items: int
    skipped_items: int
    url: str


class BulkRequestSummaryOut(JobCountsOut):
    status: BulkRequestStatus = Field(description="`replicating` (a file-import status) reads as processing here")


class ItemResultOut(ResponseModel):
    index: int
    external_id: str | None
    status: Literal["successful", "failed", "skipped"]
    record_id: int | None
    error: str | None


class FileItemResultOut(ItemResultOut):
    line: int | None = Field(description="The line of the file the row starts on")


class ResultsQuery(CursorQuery):
    status: Literal["successful", "failed", "skipped"] | None = Field(
        default=None, description="Only the results of this status; all of them when absent")


class ItemResultPage(Model):
    data: list[FileItemResultOut] = Field(description="In item order. A file import keeps the line of its failed "
                                          "and skipped rows only; a successful row's result comes from the record "
                                          "it wrote (no line; no external_id once that record is deleted)")
    next_cursor: str | None = Field(description="null at the end; a page may be short when the status asked for "
                                    "is rare, so follow next_cursor, not the page's length")
    limit: int


class IngestionJobOut(JobCountsOut):
    status: FileImportStatus
    source: str | None
    filename: str | None
    expected_records_count: int | None
    progress: int
    parsing: bool
    decimal_places: int | None
    stuck: bool
    on_conflict: str | None
    error_message: str | None
    error_details: dict | None
    data_stream_ids: list[int]
    created_at: Timestamp
    started_at: Timestamp | None
    records_written_at: Timestamp | None
    completed_at: Timestamp | None
    last_progress_at: Timestamp | None
    cancellation_requested_at: Timestamp | None
    records_url: str
    results_url: str = Field(description="Every item's result, a page at a time: GET it with ?status=&cursor=")


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


class RecordPage(Model):
    data: list[RecordOut]
    next_cursor: str | None
    limit: int


# File imports -------------------------------------------------------------------------

class CreateFileImport(RequestModel):
    filename: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=255)]
    format: Literal["csv", "nacha", "bai2", "camt053", "mt940"] = Field(
        description="bai2, camt053 and mt940 are bank statements: only the stream's own account (its "
        "bank_account_id) is imported; other accounts of the file are listed in error_details")
    on_conflict: Literal["skip", "error"] = "skip"
    column_mapping: dict[Annotated[str, StringConstraints(min_length=1, max_length=255)],
                         Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        default_factory=dict, description="Source column name -> field name (date, amount, direction, "
        "description, external_id, currency) or metadata key")
    date_format: Literal["YYYY-MM-DD", "MM/DD/YYYY", "DD/MM/YYYY"] = "YYYY-MM-DD"
    decimal_places: Annotated[int, Field(ge=0, le=6)] | None = Field(
        default=None, description="Minor units of the amounts; default: the currency's")
    encoding: Literal["utf-8", "utf-16", "windows-1252", "iso-8859-1"] | None = Field(
        default=None, description="CSV only: the file's text encoding. Default: UTF-8 (or UTF-16 by its byte "
        "order mark), read as Windows-1252 where the file is not UTF-8 and that is safe (see README)")
    delimiter: Literal[",", ";", "\t", "|"] | None = Field(
        default=None, description="CSV only: the field delimiter. Default: the one the header line is split by "
        "most")
    nacha_control_mismatch: Literal["refuse", "warn"] = Field(
        default="refuse", description="NACHA only: a file whose entries and amount totals agree but whose "
        "control counts (batch, block, entry/addenda count) or entry hash do not is refused (default), or "
        "imported with each disagreement listed in error_details.warnings ('warn'). See docs/nacha.md")
    control_mismatch: Literal["refuse", "warn"] = Field(
        default="refuse", description="Bank statements (bai2, camt053, mt940): a file whose control totals, "
        "record counts or balances disagree is refused (default), or imported with each disagreement listed in "
        "error_details.warnings ('warn')")


class CreateRoutedFileImport(RequestModel):
    filename: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=255)]
    format: Literal["bai2", "camt053", "mt940"] = Field(
        description="A bank statement format: each account goes to the bank_feed stream whose bank_account_id "
        "matches it")
    on_conflict: Literal["skip", "error"] = "skip"
    control_mismatch: Literal["refuse", "warn"] = "refuse"


class FileImportOut(IngestionJobOut):
    upload_url: str | None = None


class IgnoredUploadOut(ResponseModel):
    byte_size: int | None
    received_at: Timestamp
    message: str


class FileImportDetailOut(IngestionJobOut):
    upload_url: str | None = Field(default=None, description="While the import waits for its file: a fresh "
                                   "presigned PUT URL (valid an hour at most, and never past the upload deadline)")
    results: list[FileItemResultOut] = Field(description="Rows that failed or were skipped, with their line")
    results_truncated: bool
    ignored_uploads: list[IgnoredUploadOut] = Field(
        default_factory=list, description="Files PUT to the upload URL after the import had started or "
        "ended: S3 accepted them, but they were not imported (an upload URL takes one file)")


class FileImportSummaryOut(IngestionJobOut):
    record_count: int
    total_credits: int
    total_debits: int
    net_amount: int
    date_range_start: str | None
    date_range_end: str | None
    currency: str | None


class FileImportPage(Model):
    data: list[FileImportSummaryOut]
    next_cursor: str | None
    limit: int


# Reconciliations ----------------------------------------------------------------------

RunTypeName = Literal["continuous", "batch"]
StreamKeys = Annotated[list[str], Field(description="Keys of data streams of the environment; at least one, "
                                        "none twice, none on both sides")]
ExceptionAfterDays = Annotated[int, Field(ge=0, le=MAX_EXCEPTION_AFTER_DAYS)]


class CreateReconciliation(RequestModel):
    name: Name
    run_type: RunTypeName = "continuous"
    side_a_stream_keys: StreamKeys
    side_b_stream_keys: StreamKeys
    exception_after_days: ExceptionAfterDays = Field(
        default=DEFAULT_EXCEPTION_AFTER_DAYS, description="Days an unmatched record waits before it is an exception")


class UpdateReconciliation(RequestModel):
    name: Name = unchanged_when_absent()
    run_type: RunTypeName = unchanged_when_absent()
    side_a_stream_keys: StreamKeys = unchanged_when_absent()
    side_b_stream_keys: StreamKeys = unchanged_when_absent()
    exception_after_days: ExceptionAfterDays = unchanged_when_absent()


class ReconciliationOut(Model):
    id: int
    name: str
    run_type: str
    side_a_streams: list[DataStreamOut]
    side_b_streams: list[DataStreamOut]
    exception_after_days: int
    created_at: Timestamp
    updated_at: Timestamp
    current_run: RunOut | None = Field(description="The pending or running run, if any")
    last_run: RunOut | None = Field(description="The most recent completed or failed run, if any")


class ReconciliationPage(Model):
    data: list[ReconciliationOut]
    next_cursor: str | None
    limit: int


# Reconciliation rules -----------------------------------------------------------------
# Rule bodies are checked whole by domain.rules.validate_rule (one place for every rule about
# rules); these models only document them.

def _documented(schema: dict[str, Any], description: str | None = None) -> WithJsonSchema:
    """The JSON schema of a field the models do not validate: Annotated[Any, _documented(...)]."""
    return WithJsonSchema({**schema, **({"description": description} if description else {})})


# What `similar` computes, said where its threshold is documented (docs/rules.md says the same).
SIMILAR_THRESHOLD_DESCRIPTION = (
    "similar: above 0, at most 1 (default 0.85). similar scores rapidfuzz's token_set_ratio / 100 of the "
    "normalized texts: words in any order, a text whose every word the other has scores 1, extra words "
    "lower the score (\"ACH CREDIT CUST110 INV-10158\" against \"Invoice INV-10158 CUST110\": 0.81); "
    "for similar, whitespace and punctuation normalizations separate words")


def _condition_schemas() -> list[dict[str, Any]]:
    """One schema per shape a condition may take: which operators each field takes and which parameters
    each operator needs, from the tables of domain.rules."""
    metadata = {"type": "string", "pattern": METADATA_KEY.pattern, "examples": ["metadata.invoice_id"]}
    text_field = {"anyOf": [{"type": "string", "enum": sorted(TEXT_FIELDS)}, metadata],
                  "description": "description, external_id or metadata.<key>"}
    normalize = {"type": "array", "items": {"type": "string", "enum": [n.value for n in Normalization]}}

    def shape(title: str, field: dict[str, Any], operators: list[str], side_b: dict[str, Any] | None = None,
              **parameters: dict[str, Any]) -> dict[str, Any]:
        properties = {"field": field, "side_b_field": side_b or field,
                      "operator": {"type": "string", "enum": operators}, **parameters}
        required = ["field", "operator", *(p for p, s in parameters.items() if s.pop("required", False))]
        return {"title": title, "type": "object", "required": required, "properties": properties,
                "additionalProperties": False}

    def only(name: str) -> dict[str, Any]:
        return {"type": "string", "enum": [name]}

    def operators(name: str) -> list[str]:
        return sorted(o.value for o in OPERATORS_BY_FIELD[name])

    return [
        shape("amount equals", only("amount"), [Operator.EQUALS.value]),
        shape("amount within tolerance (minor units)", only("amount"), [Operator.WITHIN.value],
              tolerance={"type": "integer", "minimum": 0, "required": True}),
        shape("amount within tolerance_percent", only("amount"), [Operator.WITHIN.value],
              tolerance_percent={"type": "number", "minimum": 0, "maximum": 100, "multipleOf": 0.01,
                                 "required": True}),
        shape("date equals", only("date"), [Operator.EQUALS.value]),
        shape("date within days", only("date"), [Operator.WITHIN.value],
              days={"type": "integer", "minimum": 0, "maximum": MAX_DAYS, "required": True}),
        *(shape(f"{name} {' or '.join(operators(name))}", only(name), operators(name))
          for name in ("direction", "currency")),
        shape("text equals or contains", text_field, [Operator.EQUALS.value, Operator.CONTAINS.value], text_field,
              normalize=normalize),
        shape("text similar", text_field, [Operator.SIMILAR.value], text_field, normalize=normalize,
              threshold={"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 0.85,
                         "description": SIMILAR_THRESHOLD_DESCRIPTION}),
    ]


def _group_by_schema() -> dict[str, Any]:
    field = {"anyOf": [{"type": "string", "enum": sorted(OPERATORS_BY_FIELD)},
                       {"type": "string", "pattern": METADATA_KEY.pattern, "examples": ["metadata.invoice_id"]}]}
    fields = {"type": "array", "items": field, "maxItems": MAX_GROUP_FIELDS}
    return {"type": "object", "properties": {"side_a": fields, "side_b": fields}}


def _grouping_rules() -> list[dict[str, Any]]:
    """A side is grouped only by a cardinality that takes several records of it."""
    def ungrouped(side: str, groups: str) -> dict[str, Any]:
        return when({"properties": {"cardinality": {"enum": [c.value for c in Cardinality
                                                             if getattr(c, groups) is False]}}},
                    {"properties": {"group_by": {"properties": {side: {"maxItems": 0}}}}})
    return [ungrouped("side_a", "groups_a"), ungrouped("side_b", "groups_b")]


RuleName: TypeAlias = Annotated[Any, _documented(
    {"type": "string", "minLength": 1, "maxLength": MAX_RULE_NAME, "pattern": r"\S",
     "examples": ["Amount and date"]}, "Required on create")]
RulePriority: TypeAlias = Annotated[Any, _documented({"type": "integer", "minimum": 1, "maximum": MAX_PRIORITY},
                                                     "Unique within the reconciliation; lower runs first (default 1)")]
RuleCardinality: TypeAlias = Annotated[Any, _documented(
    {"type": "string", "enum": [c.value for c in Cardinality]}, "Default one_to_one")]
RuleGroupBy: TypeAlias = Annotated[Any, _documented(_group_by_schema(),
                                                    "Fields that group the records of the many side(s)")]
RuleConditions: TypeAlias = Annotated[Any, _documented(
    {"type": "array", "items": {"anyOf": _condition_schemas()}, "minItems": 1, "maxItems": MAX_CONDITIONS},
    f"1 to {MAX_CONDITIONS} conditions, all must hold")]
RuleFlag: TypeAlias = Annotated[Any, _documented({"type": "boolean"}, "Default true")]


class RuleBody(RequestModel):
    model_config = ConfigDict(json_schema_extra=documented(allOf=_grouping_rules()))
    name: RuleName = unchanged_when_absent()
    priority: RulePriority = unchanged_when_absent()
    cardinality: RuleCardinality = unchanged_when_absent()
    group_by: RuleGroupBy = unchanged_when_absent()
    conditions: RuleConditions = unchanged_when_absent()
    auto_confirm: RuleFlag = unchanged_when_absent()
    active: RuleFlag = unchanged_when_absent()

    def given(self) -> dict[str, Any]:
        """The fields the client sent, as sent."""
        return self.model_dump(exclude_unset=True)


class NewRuleBody(RuleBody):
    """A rule's create body: name and conditions are required (they are checked with the rest, in one 422)."""
    model_config = ConfigDict(json_schema_extra=documented(allOf=_grouping_rules(), required=["name", "conditions"]))


class ReconciliationRuleOut(Model):
    id: int
    reconciliation_id: int
    name: str
    priority: int
    cardinality: str
    group_by: dict[str, list[str]]
    conditions: list[dict[str, Any]]
    auto_confirm: bool
    active: bool
    created_at: Timestamp
    updated_at: Timestamp


class ReconciliationRuleList(Model):
    data: list[ReconciliationRuleOut]


# Runs and matches -------------------------------------------------------------------------

class RunOut(ResponseModel):
    id: int
    reconciliation_id: int
    kind: Literal["batch", "continuous"]
    status: Literal["pending", "running", "completed", "failed"]
    trigger: Literal["manual", "schedule", "agent", "records_ingested", "reconciliation_changed"]
    total_records: int
    processed_records: int
    matched_records: int
    rule_summary: dict[str, Any] = Field(description="{rule_id: matched_record_count, unmatched: {side_a, side_b}}")
    progress: float = Field(ge=0, le=100)
    error_message: str | None
    created_at: Timestamp
    started_at: Timestamp | None
    completed_at: Timestamp | None


class RunPage(Model):
    data: list[RunOut]
    next_cursor: str | None
    limit: int


class MatchRecordOut(RecordOut):
    side: Literal["a", "b"]


class MatchOut(Model):
    id: int
    status: Literal["confirmed", "proposed"]
    group_key: str
    reconciliation_id: int
    reconciliation_rule_id: int | None = Field(description="null for a match made by hand")
    run_id: int | None
    differences: dict[str, Any] = Field(description="What differs between the sides, per condition of the rule")
    reason: str | None = Field(description="Why a person accepted a difference")
    created_at: Timestamp
    records: list[MatchRecordOut] | None = Field(default=None,
                                                 description="Inline when the match has at most 100 records")
    record_count: int | None = Field(default=None, description="Instead of records when the match has more than 100")


class MatchPage(Model):
    data: list[MatchOut]
    next_cursor: str | None
    limit: int


class MatchesQuery(CursorQuery):
    reconciliation_id: Id
    status: Literal["proposed", "confirmed"] | None = None


class CreateMatch(RequestModel):
    reconciliation_id: Id
    record_ids: list[Id] = Field(min_length=1, max_length=1000, description="Records of both sides")
    allow_difference: bool = False
    reason: str | None = Field(default=None, max_length=500)


class DryRunMatchOut(Model):
    status: Literal["confirmed", "proposed"]
    group_key: str
    side_a_record_ids: list[int]
    side_b_record_ids: list[int]
    differences: dict[str, Any]


class ConditionExclusionOut(Model):
    condition: int = Field(description="Position of the condition in the rule's `conditions`, from 0")
    field: str
    operator: str
    excluded_pairs: int | None = Field(description=(
        "Candidate pairs (of the records, or groups, the rule compares, among those left to it) that meet "
        "every other condition of the rule but not this one. null when counting them would take more than "
        "1,000,000 pairs, and for the amount conditions of a grouped rule without a group key (a subset "
        "search sums those amounts)"))


class DryRunOut(Model):
    reconciliation_rule_id: int
    open_records: dict[str, int] = Field(description="{side_a, side_b}: open records the rule was tried on")
    taken_by_earlier_rules: int = Field(description="Records the active rules of higher priority would match first")
    matches: int
    proposed: int
    matched_records: int
    sample: list[DryRunMatchOut]
    excluded_by_condition: list[ConditionExclusionOut] | None = Field(default=None, description=(
        "One entry a condition, in the rule's order: how many candidate pairs it alone turned away. "
        "null when the rule is inactive (it would match nothing)"))


# Exceptions -------------------------------------------------------------------------------

class AggregatesOut(Model):
    record_count: int
    total_amount: int = Field(description="Credits minus debits, in minor units")
    debit_count: int
    debit_sum: int
    credit_count: int
    credit_sum: int
    pending_confirmation_count: int = Field(description="Records among these that a proposed match holds, awaiting "
                                                        "a person's confirm or reject")
    avg_age_days: float
    oldest_at: str | None
    newest_at: str | None


class AssigneeOut(Model):
    id: int
    idp_user_id: str


class CommentOut(Model):
    id: int
    body: str
    author_idp_id: str
    mentions: list[int]
    created_at: str


class ExceptionOut(Model):
    id: int
    reconciliation_id: int
    reconciliation_name: str | None
    data_stream_id: int
    data_stream_name: str | None
    data_stream_key: str
    title: str
    description: str
    status: Literal["open", "investigating", "dismissed", "resolved"]
    created_at: Timestamp
    updated_at: Timestamp
    opened_at: Timestamp
    closed_at: Timestamp | None
    assignees: list[AssigneeOut]
    decimal_places: int
    aggregates: AggregatesOut
    refresh_pending: bool = Field(default=False, description="A match, unmatch or confirm by a person (or an "
                                  "accepted investigation) changed the reconciliation since its exceptions were last "
                                  "refreshed: records and aggregates are brought up to date within a minute")


class InvestigationOut(Model):
    id: int
    status: Literal["pending", "running", "completed", "failed"]
    recommendation_text: str | None
    confidence_score: float | None = Field(ge=0, le=1, description="0.9 and above is right at least 9 times in 10 "
                                           "on the project's labelled set (bench/RESULTS.md)")
    candidate_records_searched: int
    suggested_record_ids: list[int]
    filter_params: dict[str, Any]
    error_message: str | None
    accepted_match_id: int | None
    completed_at: Timestamp | None
    created_at: Timestamp


class ExceptionDetailOut(ExceptionOut):
    filtered_aggregates: AggregatesOut
    comments: list[CommentOut]
    investigation: InvestigationOut | None = Field(description="The latest investigation")
    investigation_sessions: list[InvestigationOut] = Field(description="The five newest investigations")


class ExceptionPage(Model):
    data: list[ExceptionOut]
    has_more: bool
    offset: int


class ExceptionsQuery(QueryModel):
    reconciliation_id: Id | None = None
    status: Literal["open", "investigating", "dismissed", "resolved"] | None = None
    data_stream_key: str | None = Field(default=None, max_length=200)
    assignee: str | None = Field(default=None, max_length=200)
    offset: int = Field(default=0, ge=0, le=1_000_000)
    limit: int = Field(default=25, ge=1, le=100)


class ExceptionRecordsFilter(QueryModel):
    amount_min: int | None = Field(default=None, ge=0, le=MAX_AMOUNT)
    amount_max: int | None = Field(default=None, ge=0, le=MAX_AMOUNT)
    date_from: date | None = None
    date_to: date | None = None
    direction: Literal["credit", "debit"] | None = None
    age_bucket: Literal["lt_7d", "7_30d", "30_90d", "gt_90d"] | None = None
    record_status: Literal["unreconciled", "pending_confirmation"] | None = Field(
        default=None, description="`pending_confirmation`: the records a proposed match holds until a person confirms "
                                  "or rejects it; `unreconciled`: the others")


class ExceptionRecordsQuery(ExceptionRecordsFilter):
    cursor: str | None = None
    limit: int = Field(default=50, ge=1, le=200)


class UpdateException(RequestModel):
    title: Name | None = unchanged_when_absent()
    description: Description | None = unchanged_when_absent()
    status: Literal["open", "investigating", "dismissed", "resolved"] | None = unchanged_when_absent()


class CreateAssignee(RequestModel):
    idp_user_id: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class CreateComment(RequestModel):
    body: Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
    author_idp_id: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
    mentions: list[Id] = Field(default_factory=list, max_length=100)


# Reconciliation stories -----------------------------------------------------------------

def _digits_to_int(value: Any) -> Any:
    """An id given as a string of digits (as the spec's PATCH body types them) is that number."""
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 15 else value


LinkId = Annotated[int, BeforeValidator(_digits_to_int), Field(ge=1, le=10**15 - 1),
                   WithJsonSchema({"oneOf": [{"type": "integer", "minimum": 1, "maximum": 10**15 - 1},
                                             {"type": "string", "pattern": "^[0-9]{1,15}$", "examples": ["1"]}]})]


class StoryLinkIn(RequestModel):
    model_config = ConfigDict(json_schema_extra={"allOf": [
        when({"properties": {"position": {"const": 1}}},
             {"properties": {"shared_data_stream_id": {"type": "null"}, "role": {"enum": ["origin", None]}}}),
        when({"properties": {"position": {"minimum": 2}}},
             {"required": ["shared_data_stream_id"], "properties": {"role": {"enum": ["continuation", None]}}})]})
    reconciliation_id: LinkId
    position: int = Field(ge=1, description="1-based; the positions of a chain are 1..n, in any order in the body")
    shared_data_stream_id: LinkId | None = Field(
        default=None, description="The data stream this link shares with the previous link's reconciliation "
                                  "(both must use it); none on the origin (position 1)")
    role: Literal["origin", "continuation"] | None = Field(
        default=None, description="origin for position 1, continuation for every other (may be omitted)")


StoryLinks = Annotated[list[StoryLinkIn], Field(min_length=1, max_length=MAX_STORY_LINKS)]


class CreateStory(RequestModel):
    name: Name
    links: StoryLinks


class UpdateStory(RequestModel):
    name: Name = unchanged_when_absent()
    links: StoryLinks = unchanged_when_absent("When present, replaces the whole chain")


class StreamRefOut(Model):
    id: int
    name: str


class StoryLinkOut(Model):
    id: int
    position: int
    role: str
    reconciliation_id: int
    reconciliation_name: str
    shared_data_stream_id: int | None
    shared_data_stream_name: str | None
    side_a_streams: list[StreamRefOut]
    side_b_streams: list[StreamRefOut]


class StoryOut(Model):
    id: int
    name: str
    created_at: Timestamp
    links: list[StoryLinkOut]


class StoryPage(Model):
    data: list[StoryOut]
    next_cursor: str | None
    limit: int


class MoneyOut(Model):
    currency: str
    count: int
    credits: int = Field(description="Minor units at decimal_places, the largest of the currency's records")
    debits: int
    decimal_places: int


class OpenMoneyOut(MoneyOut):
    oldest_date: str | None = Field(description="The earliest record date (YYYY-MM-DD)")


class StoryTraceQuery(QueryModel):
    record_id: Id = Field(description="The record to follow through the story's chain")


class TraceLinkOut(ResponseModel):
    id: int
    position: int
    role: Literal["origin", "continuation"]
    reconciliation_id: int
    reconciliation_name: str


class TraceMatchOut(ResponseModel):
    id: int
    status: Literal["confirmed", "proposed"]
    reconciliation_rule_id: int | None = Field(description="null for a match made by hand")
    record_count: int


class TraceHopBreakOut(ResponseModel):
    reason: Literal["unmatched", "proposed", "exception"] = Field(
        description="unmatched or exception: records open in the link's reconciliation (the trace stops); "
                    "proposed: a match nobody confirmed yet (the trace goes on through it)")
    exception_id: int | None = Field(description="The exception holding the open records (reason exception)")


class TraceRecordsOut(ResponseModel):
    data: list[RecordOut] = Field(description="At most 20: those the trace came in by first, then by id")
    count: int = Field(description="All the hop's records")
    totals: list[MoneyOut] = Field(description="Over all the hop's records, per currency")


class TraceBreakCountsOut(ResponseModel):
    unmatched: int
    proposed: int
    exception: int


class TraceOmittedOut(ResponseModel):
    hops: int = Field(description="Hops of the step left out (not followed further)")
    records: int = Field(description="The records the trace reached those hops by")
    totals: list[MoneyOut]
    breaks: TraceBreakCountsOut = Field(description="How many of the hops left out are breaks, by reason")


class TraceHopOut(ResponseModel):
    model_config = ConfigDict(from_attributes=True, serialize_by_alias=True)
    link: TraceLinkOut
    direction: Literal["start", "upstream", "downstream"]
    via_data_stream: StreamRefOut | None = Field(description="The shared stream the hop was entered through "
                                                             "(null on a start hop)")
    match: TraceMatchOut | None
    break_: TraceHopBreakOut | None = Field(serialization_alias="break")
    records: TraceRecordsOut
    next: list[TraceHopOut] = Field(description="At most 10 hops per link step, breaks first; a start hop's "
                                                "next may go both upstream and downstream")
    next_omitted: TraceOmittedOut | None


class TraceBreakOut(ResponseModel):
    link_position: int
    reconciliation_id: int
    reason: Literal["unmatched", "proposed", "exception"]
    match_id: int | None
    exception_id: int | None
    record_ids: list[int] = Field(description="At most 20")


class StoryTraceOut(ResponseModel):
    story_id: int
    record: RecordOut
    truncated: bool = Field(description="The trace reached its budget of 200 hops followed: the rest is summarised "
                                        "in next_omitted")
    hops: list[TraceHopOut] = Field(description="The start hops (the links whose reconciliation uses the record's "
                                                "stream), by position")
    breaks: list[TraceBreakOut] = Field(description="Every break of the hops shown, in tree order")


# Story summary ----------------------------------------------------------------------------

class SideFiguresOut(Model):
    matched: list[MoneyOut] = Field(description="Records matched in the link's reconciliation, per currency")
    unmatched: list[OpenMoneyOut] = Field(description="Records still open in it, per currency")


class StreamFiguresOut(SideFiguresOut):
    data_stream: StreamRefOut
    side: Literal["a", "b"]


class FromPreviousLinkOut(Model):
    data_stream: StreamRefOut = Field(description="The shared stream")
    count: int
    totals: list[OpenMoneyOut] = Field(description="Per currency")
    oldest_date: str | None


class StoryLinkSummaryOut(Model):
    link: StoryLinkOut
    computed_at: Timestamp | None = Field(description="When the figures were computed (the oldest of the link's "
                                                      "streams): after every run, and at least hourly; null until "
                                                      "the reconciliation was first run or refreshed")
    refresh_pending: bool = Field(description="Matching changed since (a person's match, unmatch or confirm, or a "
                                              "run of a neighbouring link): the figures catch up within a minute")
    side_a: SideFiguresOut
    side_b: SideFiguresOut
    data_streams: list[StreamFiguresOut]
    open_exceptions: list[ExceptionOut] = Field(description="The link's active exceptions with their aggregates")
    last_run: RunOut | None = Field(description="The run under way, else the last one")
    from_previous_link: FromPreviousLinkOut | None = Field(
        description="A continuation only: records of the shared stream matched in the previous link but still "
                    "unmatched in this one: where the chain leaks")


class StorySummaryOut(Model):
    story_id: int
    name: str
    links: list[StoryLinkSummaryOut]


# Agents -----------------------------------------------------------------------------------

class MentionIn(RequestModel):
    type: str = Field(description="reconciliation, data_stream, user or agent",
                      json_schema_extra={"enum": [t.value for t in MentionType]})
    id: int | str = Field(description="A reconciliation's id, a data stream's id or key, an agent's id (UUID), a "
                                      "user's identity provider id")
    label: str = Field(default="", max_length=200)


def _int_from(low: int, high: int) -> WithJsonSchema:
    return WithJsonSchema({"type": "integer", "minimum": low, "maximum": high})


def _schedule_rules() -> list[dict[str, Any]]:
    """The cadence table as the document states it (domain.agents.schedule.check_schedule checks it)."""
    def needs(cadences: list[str], fields: list[str]) -> dict[str, Any]:
        return when({"properties": {"cadence": {"enum": cadences}}, "required": ["cadence"]},
                    {"required": fields, "properties": {f: {"type": "integer"} for f in fields}})
    return [needs([c.value for c in NEEDS_HOUR], ["hour", "minute"]),
            needs([c.value for c in Cadence if c is not Cadence.MANUAL], ["minute"]),
            needs([Cadence.WEEKLY.value], ["day_of_week"]),
            when({"properties": {"delivery_enabled": {"const": True}}, "required": ["delivery_enabled"]},
                 {"required": ["delivery_recipients"], "properties": {"delivery_recipients": {"minItems": 1}}})]


class AgentFieldsIn(RequestModel):
    """Every writable field of an agent; the cadence rules are checked together (422 naming each field)."""
    # The rules below are checked by domain.agents (all of a body's problems in one 422), so the
    # models only document them.
    model_config = ConfigDict(json_schema_extra=documented(allOf=_schedule_rules()))
    description: Description = unchanged_when_absent()
    instructions: Annotated[str, StringConstraints(max_length=20_000)] = unchanged_when_absent(
        "The standing prompt every run executes")
    kind: str = unchanged_when_absent("llm (browser agents are set up by the operator)", enum=[AgentKind.LLM.value])
    model: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = Field(
        default=None, description="null: the platform's default")
    cadence: str = unchanged_when_absent("manual (the default), hourly, daily, weekdays or weekly",
                                         enum=[c.value for c in Cadence])
    hour: Annotated[int, _int_from(0, 23)] | None = Field(
        default=None, description="0-23; required for daily, weekdays and weekly")
    minute: Annotated[int, _int_from(0, 59)] | None = Field(
        default=None, description="0-59; required for every cadence but manual")
    day_of_week: Annotated[int, _int_from(0, 6)] | None = Field(
        default=None, description="0-6, 0 = Sunday; required for weekly")
    timezone: str = unchanged_when_absent("IANA name the schedule is evaluated in (default UTC)",
                                          enum=sorted(available_timezones()), examples=["UTC", "America/New_York"])
    active: bool = unchanged_when_absent("Inactive agents are never scheduled but can be run on demand")
    handles_file_drops: bool = unchanged_when_absent("At most one active agent per environment")
    delivery_enabled: bool = unchanged_when_absent("true needs at least one delivery_recipients")
    delivery_recipients: list[Annotated[str, WithJsonSchema({"type": "string", "format": "email",
                                                             "pattern": EMAIL.pattern})]] = unchanged_when_absent(
        "Email addresses; required when delivery is enabled", maxItems=MAX_RECIPIENTS)
    delivery_file_pattern: Annotated[str, StringConstraints(max_length=MAX_PATTERN)] = unchanged_when_absent(
        "Case-insensitive glob of the output files mailed (default *)", pattern=r"^[^/]*[^/\s][^/]*$",
        examples=["*.csv", "*"])
    mentions: list[MentionIn] = unchanged_when_absent(maxItems=MAX_MENTIONS)


class CreateAgent(AgentFieldsIn):
    name: Name


class UpdateAgent(AgentFieldsIn):
    name: Name = unchanged_when_absent()
    kind: str = unchanged_when_absent("Immutable; accepted only when it is the agent's own", readOnly=True)


class MentionOut(Model):
    type: Literal["reconciliation", "data_stream", "user", "agent"]
    id: int | str
    label: str


class AgentFileOut(Model):
    id: str
    filename: str
    byte_size: int | None = Field(description="null until an uploaded file lands")
    content_type: str
    created_at: Timestamp
    url: str = Field(description="A presigned download, valid for an hour")


class BrowserOut(Model):
    """A browser agent's automation, as the operator set it up (the portal login is never shown)."""
    automation: Literal["portal_export"]
    portal_url: str
    has_credentials: bool = Field(description="The operator stored the portal login (command line: "
                                  "`agents set-credentials`)")
    has_browser_context: bool = Field(description="A run saved the logged-in browser (cookies, storage); the next "
                                      "run reuses it and logs in only when its session expired")
    settings: dict[str, Any] = Field(description="What the automation does: login, verification, export, "
                                     "data_stream_key, import_options")
    needs_verification: bool = Field(description="The portal asked for a verification code: post it to "
                                     "/agents/{id}/verification")
    verification_reason: Literal["code_requested"] | None
    verification_required_at: Timestamp | None


class AgentOut(Model):
    id: str
    name: str
    description: str
    instructions: str
    kind: Literal["llm", "browser"]
    browser: BrowserOut | None = Field(default=None, description="Browser agents only")
    mentions: list[MentionOut]
    model: str | None
    cadence: Literal["manual", "hourly", "daily", "weekdays", "weekly"]
    hour: int | None
    minute: int | None
    day_of_week: int | None
    timezone: str
    active: bool
    handles_file_drops: bool
    delivery_enabled: bool
    delivery_recipients: list[str]
    delivery_file_pattern: str
    input_files: list[AgentFileOut] = Field(description="Files attached for every run")
    next_run_at: Timestamp | None
    last_run_at: Timestamp | None
    created_at: Timestamp
    updated_at: Timestamp

    @model_serializer(mode="wrap")
    def _browser_on_browser_agents_only(self, handler):  # type: ignore[no-untyped-def]
        # No return annotation: the documented schema stays the model's own.
        shown = handler(self)
        if shown.get("browser") is None:
            shown.pop("browser", None)
        return shown


class AgentPage(Model):
    data: list[AgentOut]
    next_cursor: str | None
    limit: int


# A media type as HTTP carries it: type/subtype and parameters, printable ASCII only (it is signed
# into the upload URL and stored as the object's Content-Type).
MEDIA_TYPE = r"^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+( *; *[A-Za-z0-9!#$&^_.+-]+=[\x21-\x7e]+)*$"


class CreateAgentFile(RequestModel):
    filename: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    content_type: Annotated[str, StringConstraints(max_length=200, pattern=MEDIA_TYPE)] | None = Field(
        default=None, description="A media type such as text/csv; default: from the filename's extension",
        examples=["text/csv", "application/pdf", "text/plain; charset=utf-8"])
    content_base64: str | None = Field(
        default=None, description="The file, base64; a request body is at most 5 MB, so about 3.7 MB of file. "
                                  "Omit it to get an upload_url instead")


class AgentFileCreatedOut(AgentFileOut):
    upload_url: str | None = Field(default=None, description="When no content was given: PUT the file here "
                                   "(with the same Content-Type) within an hour; byte_size fills in once it lands")


class AgentRunFileOut(Model):
    id: str
    filename: str
    byte_size: int
    content_type: str
    created_at: Timestamp
    url: str


class AgentRunDeliveryOut(Model):
    recipient: str
    status: Literal["sent", "failed"]
    message_id: str | None
    error: str | None


class AgentRunUsageOut(Model):
    input_tokens: int
    output_tokens: int
    model: str | None


class AgentRunStepOut(Model):
    name: str = Field(description="The tool called; `final_answer` for the model's last message")
    input: Any
    failed: bool
    result_preview: str


class VerificationCodeIn(RequestModel):
    code: str = Field(description="The code the portal sent (1 to 64 characters, no spaces)")


class AgentRunOut(Model):
    id: int
    agent_id: str
    status: Literal["queued", "running", "waiting_for_verification", "completed", "failed"]
    trigger: Literal["manual", "schedule", "file_drop", "agent"]
    created_at: Timestamp
    started_at: Timestamp | None
    completed_at: Timestamp | None
    error_message: str | None
    output_files: list[AgentRunFileOut]
    deliveries: list[AgentRunDeliveryOut]
    usage: AgentRunUsageOut
    steps: list[AgentRunStepOut]
    file_import_id: int | None = Field(default=None, description="Browser agents: the file import of what the "
                                       "portal exported")


class AgentRunPage(Model):
    data: list[AgentRunOut]
    next_cursor: str | None
    limit: int


# Webhooks -------------------------------------------------------------------------------------

WebhookUrl = Annotated[str, StringConstraints(min_length=1, max_length=2048), WithJsonSchema({
    "type": "string", "format": "uri", "pattern": "^https?://", "minLength": 1, "maxLength": 2048,
    "examples": ["https://hooks.example.com/recon"]})]
# domain.webhooks.event_problems checks the names (its message lists them), so the enum only documents them.
EventTypes = Annotated[list[Annotated[str, StringConstraints(max_length=100), Field(
    json_schema_extra={"enum": [ALL_EVENTS, *EVENT_TYPES]})]], Field(min_length=1, max_length=50)]


class CreateWebhookEndpoint(RequestModel):
    url: WebhookUrl = Field(description="https; it may not resolve to a private, loopback or link-local address "
                            "(locally, http and loopback are allowed too)")
    events: EventTypes = Field(description='Event types to receive, or ["*"] for all')
    description: Description = ""
    active: bool = True


class UpdateWebhookEndpoint(RequestModel):
    url: WebhookUrl = unchanged_when_absent()
    events: EventTypes = unchanged_when_absent('Event types to receive, or ["*"] for all')
    description: Description = unchanged_when_absent()
    active: bool = unchanged_when_absent("true again clears an automatic disable")


class WebhookEndpointOut(Model):
    id: int
    url: str
    events: list[str]
    description: str
    active: bool
    disabled_reason: str | None = Field(description="Why the service disabled the endpoint (deliveries failed for "
                                        "3 days); null when it did not")
    disabled_at: Timestamp | None
    failing_since: Timestamp | None = Field(description="The first failed attempt since the last success")
    previous_secret_expires_at: Timestamp | None = Field(description="After a rotation, when the previous secret "
                                                         "stops signing")
    created_at: Timestamp
    updated_at: Timestamp


class WebhookEndpointWithSecretOut(WebhookEndpointOut):
    secret: str = Field(description="The signing secret (whsec_...): shown in this response only")


class WebhookEndpointPage(Model):
    data: list[WebhookEndpointOut]
    next_cursor: str | None
    limit: int


class WebhookDeliveryOut(Model):
    id: int
    endpoint_id: int
    event_id: str = Field(description="Also the webhook-id header: the same on every attempt")
    event_type: str
    status: Literal["pending", "delivering", "succeeded", "failed"]
    attempts: int
    last_status_code: int | None
    last_error: str | None = Field(description="A timeout, a connection error, a refused address, or the HTTP status")
    response_excerpt: str | None = Field(description="The start of the endpoint's last answer (200 characters)")
    next_attempt_at: Timestamp | None
    last_attempt_at: Timestamp | None
    created_at: Timestamp
    updated_at: Timestamp


class WebhookDeliveryPage(Model):
    data: list[WebhookDeliveryOut]
    next_cursor: str | None
    limit: int


# Audit trail --------------------------------------------------------------------------------------

ResourceType = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
Actor = Annotated[str, StringConstraints(pattern=r"^(api_key|agent|system):[^\s]{1,120}$")]


def _in_utc(moment: datetime) -> datetime:
    """The moment in UTC (naive: taken as UTC). One whose UTC falls outside years 1 to 9999 is refused."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise PydanticCustomError("utc_range", "is outside years 1 to 9999 once converted to UTC") from None


UtcMoment = Annotated[datetime, AfterValidator(_in_utc)]


class AuditEventsQuery(CursorQuery):
    resource_type: ResourceType | None = Field(default=None, description="e.g. reconciliation_exception",
                                               examples=["reconciliation_exception", "data_stream"])
    resource_id: Annotated[str, StringConstraints(min_length=1, max_length=120)] | None = Field(
        default=None, description="The resource's id as its routes name it (needs resource_type)")
    actor: Actor | None = Field(default=None, description="api_key:<id>, agent:<agent id> or system:<kind>[:<id>]",
                                examples=["api_key:1", "system:sweeper"])
    at_from: UtcMoment | None = Field(default=None, alias="from", description="Entries at or after (ISO 8601; UTC "
                                      "when no offset is given)")
    at_to: UtcMoment | None = Field(default=None, alias="to", description="Entries at or before (ISO 8601; UTC "
                                    "when no offset is given)")


class AuditEventOut(Model):
    id: int = Field(description="The entry's seq: its place in the environment's chain")
    seq: int = Field(description="1-based and dense per environment")
    at: Timestamp
    actor: str = Field(description="api_key:<id>, agent:<agent id>, or system:<kind>[:<run or job id>]")
    action: str = Field(description="resource.verb, e.g. reconciliation_exception.updated")
    resource_type: str
    resource_id: str | None
    summary: dict[str, Any] = Field(description="A short account: before/after of changed fields, counts, ids")
    prev_hash: str = Field(description="The previous entry's hash (64 zeros for the first)")
    hash: str = Field(description="sha256 hex of prev_hash + the entry's canonical JSON (every field but hash)")


class AuditEventPage(Model):
    data: list[AuditEventOut]
    next_cursor: str | None = Field(description="null at the end; a filtered page may be short, so follow "
                                    "next_cursor, not the page's length")
    limit: int


class AuditVerifyQuery(QueryModel):
    from_seq: int = Field(default=1, ge=1, description="Start here: a previous call's next_from_seq")


class ChainBreakOut(Model):
    seq: int = Field(description="Where the chain breaks")
    id: int | None = Field(description="The entry found at that place, if any")
    reason: Literal["hash_mismatch", "prev_hash_mismatch", "missing_entry", "head_mismatch", "head_missing"]
    message: str


class AuditVerifyOut(Model):
    intact: bool = Field(description="No break in the entries checked (all of the chain when complete)")
    checked: int = Field(description="Entries checked intact by this call")
    first_break: ChainBreakOut | None
    from_seq: int
    last_checked_seq: int = Field(description="The last seq checked intact (from_seq - 1 when none)")
    head_seq: int = Field(description="The chain's last seq as its head records it")
    head_hash: str | None
    complete: bool = Field(description="The walk reached the chain's end or a break; false: continue with "
                           "from_seq=next_from_seq")
    next_from_seq: int | None
