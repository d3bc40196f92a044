"""Reconciliation rules: what a rule may say, checked in one place, and the shape the matching
engine reads.

A rule is the AND of its conditions. `field` names the side-A field and `side_b_field` (when
given) a differently named side-B field. Fields are the record's own (`amount`, `date`,
`direction`, `currency`, `description`, `external_id`) or a metadata key (`metadata.<key>`).

Tolerances stay exact: `tolerance` is minor units and `tolerance_percent` (at most two
decimals) is kept as basis points, so no float ever touches an amount.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any, TypeGuard, TypeVar

from chalicelib.domain.errors import FieldError, ValidationFailed, shown
from chalicelib.domain.fx import Conversion, validate_conversion

MAX_NAME = 200
MAX_PRIORITY = 1_000_000
MAX_DAYS = 366
MAX_CONDITIONS = 20
MAX_GROUP_FIELDS = 5
METADATA_KEY = re.compile(r"^metadata\.[A-Za-z0-9_\-]{1,64}$")


class Cardinality(StrEnum):
    ONE_TO_ONE = "one_to_one"
    ONE_TO_MANY = "one_to_many"    # one side-A record to several side-B records
    MANY_TO_ONE = "many_to_one"    # several side-A records to one side-B record
    MANY_TO_MANY = "many_to_many"

    @property
    def groups_a(self) -> bool:
        return self in (Cardinality.MANY_TO_ONE, Cardinality.MANY_TO_MANY)

    @property
    def groups_b(self) -> bool:
        return self in (Cardinality.ONE_TO_MANY, Cardinality.MANY_TO_MANY)


class Operator(StrEnum):
    EQUALS = "equals"
    WITHIN = "within"
    CONTAINS = "contains"
    SIMILAR = "similar"
    OPPOSITE = "opposite"


class Normalization(StrEnum):
    CASE = "case"
    WHITESPACE = "whitespace"
    PUNCTUATION = "punctuation"
    LEADING_ZEROS = "leading_zeros"


_E = TypeVar("_E", bound=StrEnum)

TEXT_OPERATORS = {Operator.EQUALS, Operator.CONTAINS, Operator.SIMILAR}
# Which operators each kind of field takes.
OPERATORS_BY_FIELD: dict[str, set[Operator]] = {
    "amount": {Operator.EQUALS, Operator.WITHIN},
    "date": {Operator.EQUALS, Operator.WITHIN},
    "direction": {Operator.EQUALS, Operator.OPPOSITE},
    "currency": {Operator.EQUALS},
    "description": TEXT_OPERATORS,
    "external_id": TEXT_OPERATORS,
}
TEXT_FIELDS = {"description", "external_id"}


def is_text_field(name: str) -> bool:
    return name in TEXT_FIELDS or name.startswith("metadata.")


def field_kind(name: str) -> str:
    """The field's entry in OPERATORS_BY_FIELD; metadata values compare as text."""
    return "description" if name.startswith("metadata.") else name


@dataclass(frozen=True)
class Condition:
    field: str
    operator: Operator
    side_b_field: str | None = None
    tolerance: int | None = None               # amount within: minor units
    tolerance_basis_points: int | None = None  # amount within: of the side-A amount (0.5% = 50)
    days: int | None = None                    # date within
    threshold: float | None = None             # similar: 0..1 (a score, not money)
    normalize: tuple[Normalization, ...] = ()

    @property
    def b_field(self) -> str:
        return self.side_b_field or self.field

    def allowed_amount_difference(self, amount_a: int) -> int:
        """The largest amount difference `within` accepts against a side-A amount: the larger of
        the absolute and the percent tolerance, the percent rounded down to a whole minor unit."""
        by_percent = amount_a * (self.tolerance_basis_points or 0) // 10_000
        return max(self.tolerance or 0, by_percent)

    def as_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"field": self.field, "operator": self.operator.value}
        if self.side_b_field is not None:
            body["side_b_field"] = self.side_b_field
        if self.tolerance is not None:
            body["tolerance"] = self.tolerance
        if self.tolerance_basis_points is not None:
            body["tolerance_percent"] = float(Decimal(self.tolerance_basis_points) / 100)
        if self.days is not None:
            body["days"] = self.days
        if self.threshold is not None:
            body["threshold"] = self.threshold
        if self.normalize:
            body["normalize"] = [n.value for n in self.normalize]
        return body


@dataclass(frozen=True)
class GroupBy:
    side_a: tuple[str, ...] = ()
    side_b: tuple[str, ...] = ()

    def as_body(self) -> dict[str, list[str]]:
        return {"side_a": list(self.side_a), "side_b": list(self.side_b)}


@dataclass(frozen=True)
class RuleDefinition:
    """Everything a client sets on a rule, already checked."""
    name: str
    priority: int
    cardinality: Cardinality
    conditions: tuple[Condition, ...]
    group_by: GroupBy = field(default_factory=GroupBy)
    auto_confirm: bool = True
    active: bool = True
    conversion: Conversion | None = None  # currencies: converts one side first (domain/fx.py)
    allocation: str = "whole"  # "partial": a run may take part of a record (domain/allocation.py, partial_rules)

    def as_body(self) -> dict[str, Any]:
        body = {"name": self.name, "priority": self.priority, "cardinality": self.cardinality.value,
                "group_by": self.group_by.as_body(), "conditions": [c.as_body() for c in self.conditions],
                "auto_confirm": self.auto_confirm, "active": self.active, "allocation": self.allocation}
        if self.conversion is not None:
            body["conversion"] = self.conversion.as_body()
        return body

    def patched(self, changes: Mapping[str, Any]) -> RuleDefinition:
        """This definition with a PATCH body's fields replaced, checked whole again."""
        return validate_rule({**self.as_body(), **{k: v for k, v in changes.items() if k in RULE_FIELDS}})


RULE_FIELDS = ("name", "priority", "cardinality", "group_by", "conditions", "auto_confirm", "active", "conversion",
               "allocation")


class RuleStatus(StrEnum):
    """What a rule is to runs: `active` and `inactive` follow its `active` flag; a rule learned from
    decisions (docs/learned-rules.md) is `proposed` until a person accepts it (then active) or
    dismisses it (`dismissed`, kept so that it is not proposed again). Runs apply active rules only."""
    ACTIVE = "active"
    INACTIVE = "inactive"
    PROPOSED = "proposed"
    DISMISSED = "dismissed"


class RuleSource(StrEnum):
    USER = "user"        # written by a person (POST /reconciliations/{id}/rules)
    LEARNED = "learned"  # suggested from the reconciliation's decisions


@dataclass(frozen=True)
class Rule:
    """A stored rule: its identity plus its definition. A suggestion (`proposal` set) is stored
    inactive, so nothing that applies active rules ever applies it, and holds no priority."""
    environment: str
    id: int
    reconciliation_id: int
    definition: RuleDefinition
    created_at: Any
    updated_at: Any = None
    version: int = 1
    source: RuleSource = RuleSource.USER
    proposal: RuleStatus | None = None  # PROPOSED or DISMISSED while a suggestion
    evidence: dict[str, Any] | None = None  # a learned rule's evidence (domain/rule_learning.py)

    @property
    def status(self) -> RuleStatus:
        if self.proposal is not None:
            return self.proposal
        return RuleStatus.ACTIVE if self.definition.active else RuleStatus.INACTIVE

    @property
    def holds_priority(self) -> bool:
        """Whether its priority is reserved in its reconciliation (a suggestion's is not)."""
        return self.proposal is None

    def with_definition(self, definition: RuleDefinition, now: datetime) -> Rule:
        return replace(self, definition=definition, updated_at=now, version=self.version + 1)


# Validation ---------------------------------------------------------------------------------

def validate_rule(body: Mapping[str, Any]) -> RuleDefinition:
    """Check a whole rule body; every problem is reported with its field path (422)."""
    errors: list[FieldError] = []
    name = body.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        errors.append(FieldError("name", f"is required: a non-empty string of at most {MAX_NAME} characters"))
    priority = body.get("priority", 1)
    if not _is_int(priority) or not 1 <= priority <= MAX_PRIORITY:
        errors.append(FieldError("priority", f"must be an integer from 1 to {MAX_PRIORITY}"))
    cardinality = _enum(Cardinality, body.get("cardinality", Cardinality.ONE_TO_ONE.value), "cardinality", errors)
    for flag in ("auto_confirm", "active"):
        if not isinstance(body.get(flag, True), bool):
            errors.append(FieldError(flag, "must be true or false"))
    group_by = _group_by(body.get("group_by"), cardinality, errors)
    conditions = _conditions(body.get("conditions"), errors)
    conversion = validate_conversion(body.get("conversion"), errors)
    allocation = _allocation(body.get("allocation", "whole"), cardinality, group_by, conversion, errors)
    if errors:
        raise ValidationFailed(errors)
    assert isinstance(name, str) and cardinality is not None  # else an error was reported above
    return RuleDefinition(name=name.strip(), priority=priority, cardinality=cardinality,
                          conditions=conditions, group_by=group_by,
                          auto_confirm=body.get("auto_confirm", True), active=body.get("active", True),
                          conversion=conversion, allocation=allocation)


def _allocation(raw: Any, cardinality: Cardinality | None, group_by: GroupBy, conversion: Conversion | None,
                errors: list[FieldError]) -> str:
    """`whole` (default), or `partial` on a one_to_many or many_to_one rule without group_by
    (docs/partial-payments.md): the one record may be covered by several over time."""
    if raw not in ("whole", "partial"):
        errors.append(FieldError("allocation", "must be 'whole' or 'partial'"))
        return "whole"
    if raw == "partial" and cardinality not in (Cardinality.ONE_TO_MANY, Cardinality.MANY_TO_ONE, None):
        errors.append(FieldError("allocation", "partial takes a one_to_many or many_to_one rule"))
    if raw == "partial" and (group_by.side_a or group_by.side_b):
        errors.append(FieldError("allocation", "partial allocates record by record: it takes no group_by"))
    if raw == "partial" and conversion is not None:  # shares are minor units of the records' own currency
        errors.append(FieldError("allocation", "partial allocates within one currency: it takes no conversion"))
    return str(raw)


def _group_by(raw: Any, cardinality: Cardinality | None, errors: list[FieldError]) -> GroupBy:
    if raw is None:
        return GroupBy()
    if not isinstance(raw, dict):
        errors.append(FieldError("group_by", 'must be an object {"side_a": [...], "side_b": [...]}'))
        return GroupBy()
    sides = {}
    for side in ("side_a", "side_b"):
        fields = raw.get(side) or []
        path = f"group_by.{side}"
        if not isinstance(fields, list) or len(fields) > MAX_GROUP_FIELDS:
            errors.append(FieldError(path, f"must be a list of at most {MAX_GROUP_FIELDS} field names"))
            fields = []
        for i, name in enumerate(fields):
            if not _known_field(name):
                errors.append(FieldError(f"{path}[{i}]", _unknown_field_message(name)))
        sides[side] = tuple(f for f in fields if isinstance(f, str))
    if cardinality is not None:
        if sides["side_a"] and not cardinality.groups_a:
            errors.append(FieldError("group_by.side_a",
                                     f"must be empty: a {cardinality.value} rule takes one side-A record a match"))
        if sides["side_b"] and not cardinality.groups_b:
            errors.append(FieldError("group_by.side_b",
                                     f"must be empty: a {cardinality.value} rule takes one side-B record a match"))
    return GroupBy(**sides)


def _conditions(raw: Any, errors: list[FieldError]) -> tuple[Condition, ...]:
    if not isinstance(raw, list) or not raw or len(raw) > MAX_CONDITIONS:
        errors.append(FieldError("conditions", f"must be a list of 1 to {MAX_CONDITIONS} conditions"))
        return ()
    parsed = []
    for i, item in enumerate(raw):
        condition = _condition(item, f"conditions[{i}]", errors)
        if condition is not None:
            parsed.append(condition)
    return tuple(parsed)


def _condition(raw: Any, path: str, errors: list[FieldError]) -> Condition | None:
    if not isinstance(raw, dict):
        errors.append(FieldError(path, "must be an object with field and operator"))
        return None
    before = len(errors)
    name, b_name = raw.get("field"), raw.get("side_b_field")
    if not _known_field(name):
        errors.append(FieldError(f"{path}.field", _unknown_field_message(name)))
    if b_name is not None and not _known_field(b_name):
        errors.append(FieldError(f"{path}.side_b_field", _unknown_field_message(b_name)))
    if len(errors) > before:
        return None
    assert isinstance(name, str) and (b_name is None or isinstance(b_name, str))  # else an error above
    if (b_name is not None and field_kind(b_name) != field_kind(name)
            and not (is_text_field(name) and is_text_field(b_name))):
        errors.append(FieldError(f"{path}.side_b_field", f"'{shown(b_name)}' cannot be compared with '{name}'"))
        return None
    operator = _enum(Operator, raw.get("operator"), f"{path}.operator", errors)
    if operator is None:
        return None
    allowed = OPERATORS_BY_FIELD[field_kind(name)]
    if operator not in allowed:
        errors.append(FieldError(f"{path}.operator", f"'{operator.value}' does not apply to {name}; use one of "
                                 + ", ".join(sorted(o.value for o in allowed))))
        return None
    condition = Condition(field=name, operator=operator, side_b_field=b_name)
    return _parameters(condition, raw, path, errors)


def _parameters(condition: Condition, raw: dict[str, Any], path: str, errors: list[FieldError]) -> Condition | None:
    """The parameters each operator needs, and no parameter it would ignore."""
    before = len(errors)
    expected: set[str] = set()
    changes: dict[str, Any] = {}
    kind, operator = field_kind(condition.field), condition.operator
    if kind == "amount" and operator is Operator.WITHIN:
        expected = {"tolerance", "tolerance_percent"}
        if "tolerance" not in raw and "tolerance_percent" not in raw:
            errors.append(FieldError(path, "amount within needs tolerance (minor units) or tolerance_percent"))
        if "tolerance" in raw:
            if not _is_int(raw["tolerance"]) or raw["tolerance"] < 0:
                errors.append(FieldError(f"{path}.tolerance", "must be a whole number of minor units, 0 or more"))
            else:
                changes["tolerance"] = raw["tolerance"]
        if "tolerance_percent" in raw:
            basis_points = _basis_points(raw["tolerance_percent"])
            if basis_points is None:
                errors.append(FieldError(f"{path}.tolerance_percent",
                                         "must be a number from 0 to 100 with at most two decimals"))
            changes["tolerance_basis_points"] = basis_points
    elif kind == "date" and operator is Operator.WITHIN:
        expected = {"days"}
        days = raw.get("days")
        if not _is_int(days) or not 0 <= days <= MAX_DAYS:
            errors.append(FieldError(f"{path}.days", f"must be a whole number of days from 0 to {MAX_DAYS}"))
        changes["days"] = days
    elif operator is Operator.SIMILAR:
        expected = {"threshold", "normalize"}
        threshold = raw.get("threshold", 0.85)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
            errors.append(FieldError(f"{path}.threshold", "must be a number above 0 and at most 1"))
        changes["threshold"] = float(threshold) if not errors[before:] else None
    elif operator in (Operator.EQUALS, Operator.CONTAINS) and is_text_field(condition.field):
        expected = {"normalize"}
    if "normalize" in raw:
        if "normalize" not in expected:
            errors.append(FieldError(f"{path}.normalize", f"applies to text fields only, not {condition.field}"))
        else:
            changes["normalize"] = _normalizations(raw["normalize"], f"{path}.normalize", errors)
    for name in ("tolerance", "tolerance_percent", "days", "threshold"):
        if name in raw and name not in expected:
            errors.append(FieldError(f"{path}.{name}", f"does not apply to {condition.field} {operator.value}"))
    if len(errors) > before:
        return None
    return replace(condition, **changes)


def _normalizations(raw: Any, path: str, errors: list[FieldError]) -> tuple[Normalization, ...]:
    if not isinstance(raw, list):
        errors.append(FieldError(path, "must be a list of " + ", ".join(n.value for n in Normalization)))
        return ()
    found = []
    for i, value in enumerate(raw):
        normalization = _enum(Normalization, value, f"{path}[{i}]", errors)
        if normalization is not None and normalization not in found:
            found.append(normalization)
    return tuple(found)


def _basis_points(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        percent = Decimal(str(value))
    except InvalidOperation:
        return None
    basis_points = percent * 100
    if not percent.is_finite() or not 0 <= percent <= 100 or basis_points != basis_points.to_integral_value():
        return None
    return int(basis_points)


def _known_field(name: Any) -> bool:
    return isinstance(name, str) and (name in OPERATORS_BY_FIELD or bool(METADATA_KEY.match(name)))


def _unknown_field_message(name: Any) -> str:
    return (f"unknown field '{shown(name)}'; use one of " + ", ".join(sorted(OPERATORS_BY_FIELD))
            + " or metadata.<key>")


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _enum(kind: type[_E], value: Any, path: str, errors: list[FieldError]) -> _E | None:
    try:
        return kind(value)
    except ValueError:
        errors.append(FieldError(path, f"must be one of {', '.join(m.value for m in kind)}, not '{shown(value)}'"))
        return None
