"""Bodies and answers of reconciliation rules. The bodies are checked whole by
domain.rules.validate_rule (one place for every rule about rules); these models only document them."""
from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import ConfigDict, Field, WithJsonSchema

from chalicelib.api.schemas.common import (
    Model,
    QueryModel,
    RequestModel,
    Timestamp,
    documented,
    unchanged_when_absent,
    when,
)
from chalicelib.domain.fx import DEFAULT_DAYS_BACK, MAX_DAYS_BACK
from chalicelib.domain.fx import KEY_PATTERN as FX_KEY_PATTERN
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


def _allocation_rules() -> list[dict[str, Any]]:
    """`allocation: partial` only on a one_to_many or many_to_one rule (an absent cardinality reads as
    the default one_to_one, as in _grouping_rules), and without group_by."""
    whole_only = [c.value for c in Cardinality if c not in (Cardinality.ONE_TO_MANY, Cardinality.MANY_TO_ONE)]
    no_group = {"properties": {"side_a": {"maxItems": 0}, "side_b": {"maxItems": 0}}}
    return [when({"properties": {"cardinality": {"enum": whole_only}}},
                 {"properties": {"allocation": {"enum": ["whole"]}}}),
            when({"properties": {"allocation": {"enum": ["partial"]}}, "required": ["allocation"]},
                 {"properties": {"group_by": no_group}})]


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
CONVERSION_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["rate_stream_key", "side", "to_currency"], "additionalProperties": False,
    "properties": {
        "rate_stream_key": {"type": "string", "pattern": FX_KEY_PATTERN.pattern, "examples": ["ecb"],
                            "description": "A rate stream of the environment (POST /v1/rate_streams)"},
        "side": {"type": "string", "enum": ["side_a", "side_b"], "description": "Whose records are converted"},
        "to_currency": {"type": "string", "pattern": "^[A-Z]{3}$", "examples": ["USD"],
                        "description": "ISO 4217: the currency they are converted to (its minor units)"},
        "max_days_back": {"type": "integer", "minimum": 0, "maximum": MAX_DAYS_BACK, "default": DEFAULT_DAYS_BACK,
                          "description": "How many days before a record's date its rate may be"}}}
RuleConversion: TypeAlias = Annotated[Any, _documented({"anyOf": [CONVERSION_SCHEMA, {"type": "null"}]}, (
    "Currencies (docs/currencies.md): before the rule compares, the records of `side` are converted to "
    "`to_currency` at the rate of their date (the latest on or before it, at most max_days_back days "
    "earlier; the direct pair, else the reverse one applied as a division), rounded half to even to a "
    "minor unit, in integers; every amount condition then compares converted amounts (tolerances in "
    "to_currency's minor units) and `currency` reads to_currency. A record with no rate is left out of "
    "the rule (its near miss says which rate is missing). A match lists each converted record in "
    "differences.conversions: amount, rate, pair, rate_date and converted_amount. null removes "
    "it."))]
RuleAllocation: TypeAlias = Annotated[Any, _documented(
    {"type": "string", "enum": ["whole", "partial"]}, "Default whole. partial (one_to_many or many_to_one, no "
    "group_by): a run (and a dry run) also matches the one record to many whose sum is at most what it has left, "
    "taking that share and leaving the rest open. The payments are of the direction the rule's direction condition "
    "asks, else of the one record's other direction; without a direction condition the records of the one "
    "record's own direction are refunds, netted against the payments: in date order, the longest run whose net "
    "is positive and fits (docs/partial-payments.md)")]


class RuleBody(RequestModel):
    model_config = ConfigDict(json_schema_extra=documented(allOf=_grouping_rules() + _allocation_rules()))
    name: RuleName = unchanged_when_absent()
    priority: RulePriority = unchanged_when_absent()
    cardinality: RuleCardinality = unchanged_when_absent()
    group_by: RuleGroupBy = unchanged_when_absent()
    conditions: RuleConditions = unchanged_when_absent()
    auto_confirm: RuleFlag = unchanged_when_absent()
    active: RuleFlag = unchanged_when_absent()
    conversion: RuleConversion = unchanged_when_absent()
    allocation: RuleAllocation = unchanged_when_absent()

    def given(self) -> dict[str, Any]:
        """The fields the client sent, as sent."""
        return self.model_dump(exclude_unset=True)


class NewRuleBody(RuleBody):
    """A rule's create body: name and conditions are required (they are checked with the rest, in one 422)."""
    model_config = ConfigDict(json_schema_extra=documented(allOf=_grouping_rules() + _allocation_rules(),
                                                           required=["name", "conditions"]))


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
    conversion: dict[str, Any] | None = Field(default=None, description=(
        "The rule's currency conversion (docs/currencies.md), absent when it converts nothing"),
        json_schema_extra={"properties": CONVERSION_SCHEMA["properties"]})
    allocation: str = "whole"
    status: str = Field(description="active, inactive (runs apply active rules only), proposed (a learned rule "
                                    "awaiting acceptance: POST /reconciliation_rules/{id}/accept) or dismissed")
    source: str = Field(description="user (written by a person) or learned (suggested from decisions)")
    evidence: dict[str, Any] | None = Field(default=None, description=(
        "A learned rule's evidence (docs/learned-rules.md): decisions read, explained and contradicted, what "
        "they agree on, and a dry run over the open records; null for a rule a person wrote"))
    created_at: Timestamp
    updated_at: Timestamp


class ReconciliationRuleList(Model):
    data: list[ReconciliationRuleOut]


class RuleListQuery(QueryModel):
    status: Literal["active", "inactive", "proposed", "dismissed"] | None = Field(default=None, description=(
        "Only the rules of this status; without it, the active and inactive rules (a reconciliation's rule set), "
        "not the suggestions"))
