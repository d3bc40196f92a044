"""Near misses, in a dry run's answer and an exception's detail (docs/near-misses.md)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from chalicelib.api.schemas.common import Model

Measure = int | float | str | None


class FailedConditionOut(Model):
    condition: int | None = Field(description=(
        "Position of the condition in the rule's `conditions`, from 0; null for a converting rule's missing "
        "rate (operator `convert`: the record has no rate of its date, docs/currencies.md)"))
    field: str
    side_b_field: str | None = None
    operator: str
    expected: Measure = Field(description=(
        "What the condition allows: amount, the allowed difference in minor units (0 for equals); date, the "
        "window in days (0 for equals); similar, the threshold; equals and contains, this record's compared "
        "(normalized) value; opposite, the direction the candidate should have"))
    actual: Measure = Field(description=(
        "What the pair has: amount, this record's amount minus the candidate's, in minor units (null when their "
        "currencies differ); date, this "
        "record's date minus the candidate's, in days; similar, the score (0 to 1, 4 decimals; null when a "
        "text is missing); equals and contains, the candidate's compared value; opposite, its direction"))
    difference: Measure = Field(default=None, description=(
        "How far the pair is from passing: amount, minor units beyond the allowed difference (null when the "
        "currencies differ: the message names each amount in its own currency); date, days past the window; "
        "similar, threshold minus score; null for the others"))
    unit: str | None = Field(default=None, description="This record's currency for an amount, `days`, or `similarity`")
    decimal_places: int | None = Field(default=None, description="This record's amount's decimal places (the scale "
                                       "compared)")
    difference_decimal: str | None = Field(default=None, description="An amount's `difference` as an exact decimal "
                                           "(null when the currencies differ)")
    message: str = Field(description='e.g. "amount off by 1.50 USD, 1.00 USD more than the 0.50 USD allowed"')


class ConversionNoteOut(Model):
    """How a converting rule turned a record's amount into the rule's currency (docs/currencies.md)."""
    record: Literal["subject", "candidate"] | None = None
    record_id: int | None = None
    from_currency: str
    amount: str = Field(description="The record's own amount, an exact decimal")
    to_currency: str
    converted_amount: str = Field(description="amount * rate (or / rate when inverted), rounded half to even to a "
                                              "minor unit of to_currency, an exact decimal")
    rate: str = Field(description="The rate used, an exact decimal as imported")
    pair: str = Field(description="The pair the rate is of, BASE/QUOTE", examples=["EUR/USD"])
    inverted: bool = Field(description="true when only the reverse pair had a rate: the amount was divided by it")
    rate_date: str = Field(description="The day of the rate: the latest on or before the record's date")


class NearMissOut(Model):
    side: Literal["a", "b"] = Field(description="The side of the unmatched record")
    record_id: int
    reconciliation_rule_id: int
    candidate_record_id: int | None = Field(description=(
        "Its closest open record on the other side under the rule, among the candidates the searches find "
        "(docs/near-misses.md); null when they find none (the other side has no open record). With "
        "`would_match`, a record the rule would match it with"))
    would_match: bool = Field(default=False, description=(
        "true when the candidate meets every condition: the rule would match the pair (no failed conditions). A "
        "dry run's rule leaves such a pair only on a conflict; an exception's rules are not applied in sequence "
        "as in a run, and the candidate may have arrived after the last run"))
    failed_condition_count: int | None
    distance: float | None = Field(description=(
        "How far the pair is from matching: the sum over its failed conditions of how far each is from passing, "
        "each from 0 to 1 (docs/near-misses.md). The closest candidate fails the fewest conditions, then has the "
        "smallest distance, then the smallest amount difference, date difference and id"))
    failed_conditions: list[FailedConditionOut]
    conversions: list[ConversionNoteOut] | None = Field(default=None, description=(
        "A converting rule's conversions behind the amounts compared (docs/currencies.md): this record's "
        "(`record` subject) and/or the candidate's; absent for a rule that converts nothing"))


class ConditionNearMissesOut(Model):
    condition: int
    field: str
    operator: str
    records: int = Field(description="Unmatched records whose closest candidate fails this condition")


class DryRunNearMissesOut(Model):
    explained: bool = Field(description="false for a rule comparing groups of records (not one_to_one)")
    reason: str | None
    scope: Literal["sample", "all"] = Field(description=(
        "sample: only the records of `sample` were explained (the default, cheap); all: every record left open "
        "(?near_misses=true)"))
    left_open: int = Field(description="Records the dry run leaves open, both sides")
    records: int = Field(description="Unmatched records explained, both sides")
    by_condition: list[ConditionNearMissesOut] | None = Field(description=(
        "With ?near_misses=true: for each condition, how many of the records left open have a closest candidate "
        "failing it; null otherwise"))
    sample: list[NearMissOut] = Field(description="The first records left open of each side, ids ascending")


class RuleExplainedOut(Model):
    reconciliation_rule_id: int
    name: str
    explained: bool
    reason: str | None


class ExceptionNearMissesOut(Model):
    side: Literal["a", "b"] = Field(description="The side of the reconciliation the exception's stream is on")
    records: int = Field(description="The exception's records explained: of those still open, the 20 newest")
    rules: list[RuleExplainedOut] = Field(description="The reconciliation's active rules, in priority order")
    data: list[NearMissOut] = Field(description="One entry a record and rule, newest record first")
    refused: str | None = Field(description="Why nothing was explained: too many open records to read")

