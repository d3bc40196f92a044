"""Instances of a JSON schema (the subset our OpenAPI document uses): a minimal valid one and boundary ones
(each enum value, each bound, each example), and where cheap, invalid ones just past a bound.

It stands in for hypothesis-jsonschema (not installed), deterministically: a client generated from the
document may send any of these, so the API must take every valid one and refuse every invalid one.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

# Values of the formats the document uses; a format outside this table is a gap of the generator.
FORMAT_VALUES = {"date": "2026-08-03", "date-time": "2026-08-03T10:00:00Z", "uri": "https://example.com/hook",
                 "email": "finance@example.com"}
MAX_ARRAY_BOUNDARY = 100
MAX_ENUM_VALUES = 30  # a longer enum (timezones, currencies) is tried at its first, middle and last value  # longer maxItems boundaries are left to the operation's own tests (cost)


class SchemaGap(AssertionError):
    """The schema says too little to build a valid value (a pattern with no examples, an unknown format):
    a client generated from it could not build one either."""


@dataclass(frozen=True)
class Instance:
    label: str  # where it differs from the minimal one, e.g. "cadence=daily" or "name:maxLength"
    value: Any


class Generator:
    def __init__(self, components: Mapping[str, Any], known: Mapping[str, Any] | None = None,
                 always: frozenset[str] = frozenset()) -> None:
        """`components`: the document's components.schemas. `known`: property name -> a value that refers to
        something existing (a stream key, an id): used instead of generated values, which could not know it.
        `always`: optional properties sent every time (what the state of the world requires, e.g. metadata)."""
        self.components = components
        self.known = dict(known or {})
        self.always = always

    def takes(self, schema: Mapping[str, Any], instance: Any) -> bool:
        """Whether the schema, with every rule JSON Schema has (if/then, anyOf, not), takes the instance."""
        # The document's "#/components/..." references resolve against the root schema.
        root = {"components": {"schemas": dict(self.components)}, "allOf": [dict(schema)]}
        return Draft202012Validator(root).is_valid(instance)

    # --- valid -----------------------------------------------------------------------------------------

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in schema:
            schema = {**self.components[schema["$ref"].rsplit("/", 1)[-1]],
                      **{k: v for k, v in schema.items() if k != "$ref"}}
        return schema

    def minimal(self, schema: Mapping[str, Any], name: str = "") -> Any:
        schema = self.resolve(schema)
        if name in self.known:
            return copy.deepcopy(self.known[name])
        if "const" in schema:
            return schema["const"]
        if "examples" in schema:
            return copy.deepcopy(schema["examples"][0])
        if "enum" in schema:
            return schema.get("default", schema["enum"][0])
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            # An object's anyOf of `required` lists ("at least one of"): the first one is met.
            required = [*schema.get("required", []), *next(iter(schema.get("anyOf", [])), {}).get("required", [])]
            return self._completed(schema, {p: self.minimal(s, p) for p, s in schema.get("properties", {}).items()
                                            if p in required or p in self.always})
        for union in ("oneOf", "anyOf"):
            if union in schema:
                branches = [b for b in schema[union] if self.resolve(b).get("type") != "null"] or schema[union]
                return self.minimal(branches[0], name)
        if kind == "array":
            return [self.minimal(schema.get("items", {}), name) for _ in range(schema.get("minItems", 0))]
        if kind == "string":
            return self._string(schema, schema.get("minLength", 0))
        if kind in ("integer", "number"):
            return self._number(schema, "minimum")
        if kind == "boolean":
            return schema.get("default", False)
        if kind == "null":
            return None
        raise SchemaGap(f"no value for the schema {dict(schema)} of '{name}'")

    def variants(self, schema: Mapping[str, Any], name: str = "") -> Iterator[Instance]:
        """Valid values at the schema's boundaries (the minimal one not repeated)."""
        schema = self.resolve(schema)
        if name in self.known:
            return
        for example in schema.get("examples", [])[1:]:
            yield Instance(f"{name}=example {example!r}"[:80], copy.deepcopy(example))
        enum = schema.get("enum", [])
        for value in enum if len(enum) <= MAX_ENUM_VALUES else [enum[0], enum[len(enum) // 2], enum[-1]]:
            yield Instance(f"{name}={value}", value)
        for union in ("oneOf", "anyOf") if not schema.get("properties") else ():
            for branch in schema.get(union, []):
                if "examples" in schema and self.resolve(branch).get("type") != "null":
                    branch = {**self.resolve(branch), "examples": schema["examples"]}  # the field's, for its branch
                yield Instance(f"{name}:{self.resolve(branch).get('type', 'branch')}", self.minimal(branch, name))
                yield from self.variants(branch, name)
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            yield from self._object_variants(schema, name)
        elif kind == "array":
            item = schema.get("items", {})
            base = self.minimal(schema, name)
            for variant in self.variants(item, name + "[]"):
                yield Instance(variant.label, [variant.value] + base[1:])
            scalar = self.resolve(item).get("type") in ("string", "integer", "number", "boolean")
            if scalar and "maxItems" in schema and 1 < schema["maxItems"] <= MAX_ARRAY_BOUNDARY:
                yield Instance(f"{name}:maxItems", self._distinct_items(item, schema["maxItems"], name))
        elif kind == "string" and "enum" not in schema and "examples" not in schema:
            if "maxLength" in schema and not (schema.get("pattern") or schema.get("format")):
                yield Instance(f"{name}:maxLength", self._string(schema, schema["maxLength"]))
        elif kind in ("integer", "number"):
            if "maximum" in schema or "exclusiveMaximum" in schema:
                yield Instance(f"{name}:maximum", self._number(schema, "maximum"))
        elif kind == "boolean":
            yield Instance(f"{name}=true", True)
            yield Instance(f"{name}=false", False)

    def instances(self, schema: Mapping[str, Any]) -> list[Instance]:
        """The minimal instance, then every boundary one the schema takes (a boundary built without
        regard to a rule between fields is dropped: no client would send it). The minimal one must hold."""
        minimal = Instance("minimal", self.minimal(schema))
        if not self.takes(schema, minimal.value):
            raise SchemaGap(f"the minimal instance {minimal.value!r} breaks its own schema")
        return [minimal, *(v for v in self.variants(schema) if self.takes(schema, v.value))]

    def _object_variants(self, schema: Mapping[str, Any], name: str) -> Iterator[Instance]:
        base = self.minimal(schema, name)
        required = schema.get("required", [])
        for prop, prop_schema in schema.get("properties", {}).items():
            if self.resolve(prop_schema).get("readOnly"):
                continue
            prefix = f"{name}." if name else ""
            if prop not in required and prop not in self.known:
                yield Instance(f"{prefix}{prop}:present", self._completed(schema, {**base, prop: self.minimal(
                    prop_schema, prop)}))
            for variant in self.variants(prop_schema, prop):
                yield Instance(prefix + variant.label, self._completed(schema, {**base, prop: variant.value}))

    def _completed(self, schema: Mapping[str, Any], instance: dict[str, Any]) -> dict[str, Any]:
        """The instance with what the schema's if/then rules (in allOf) require once their `if` holds."""
        for rule in schema.get("allOf", []):
            if "if" in rule and self._holds(rule["if"], instance):
                then = rule.get("then", {})
                # An anyOf of `required` lists ("at least one of"): the first one is met, as `minimal` does.
                for prop in [*then.get("required", []), *next(iter(then.get("anyOf", [])), {}).get("required", [])]:
                    if prop not in instance:
                        prop_schema = {**schema.get("properties", {}).get(prop, {}),
                                       **then.get("properties", {}).get(prop, {})}
                        instance[prop] = self.minimal(prop_schema, prop)
        return instance

    def _holds(self, condition: Mapping[str, Any], instance: Mapping[str, Any]) -> bool:
        return self.takes(condition, instance)

    def _string(self, schema: Mapping[str, Any], length: int) -> str:
        if schema.get("format") in FORMAT_VALUES:
            return FORMAT_VALUES[schema["format"]]
        if schema.get("format") or schema.get("pattern"):
            raise SchemaGap(f"a string of format {schema.get('format')!r} or pattern {schema.get('pattern')!r} "
                            "has no examples to build a value from")
        return "x" * length

    @staticmethod
    def _number(schema: Mapping[str, Any], bound: str) -> int | float:
        exclusive = "exclusive" + bound[0].upper() + bound[1:]
        step = 1 if schema.get("type") == "integer" else 0.5
        if bound in schema:
            return schema[bound]
        if exclusive in schema:
            return schema[exclusive] + (step if bound == "minimum" else -step)
        if bound == "minimum" and "maximum" in schema:
            return min(0, schema["maximum"])
        return 0

    def _distinct_items(self, item: Mapping[str, Any], count: int, name: str) -> list[Any]:
        """`count` items; distinct where the item schema lets them differ (an enum, an integer range)."""
        item = self.resolve(item)
        if "enum" in item and len(item["enum"]) >= count:
            return list(item["enum"][:count])
        if item.get("type") == "integer":
            return [self._number(item, "minimum") + n for n in range(count)]
        return [self.minimal(item, name) for _ in range(count)]

    # --- invalid ---------------------------------------------------------------------------------------

    def violations(self, schema: Mapping[str, Any]) -> Iterator[Instance]:
        """Instances the schema refuses, one rule broken at a time: a required property missing, a value
        just past a bound, an enum value that is not one. Only top-level properties (cheap and clear)."""
        whole, schema = schema, self.resolve(schema)
        yield from (v for v in self._violations(schema) if not self.takes(whole, v.value))

    def _violations(self, schema: Mapping[str, Any]) -> Iterator[Instance]:
        base = self.minimal(schema)
        for prop in schema.get("required", []):
            yield Instance(f"{prop}:missing", {k: v for k, v in base.items() if k != prop})
        for prop, prop_schema in schema.get("properties", {}).items():
            for label, bad in self._bad_values(self.resolve(prop_schema)):
                yield Instance(f"{prop}:{label}", {**base, prop: bad})

    def _bad_values(self, schema: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
        if any(u in schema for u in ("oneOf", "anyOf")):
            return  # a union's bounds are its branches'; left to the valid side
        if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
            yield "not in enum", "zz_not_a_value"
        kind = schema.get("type")
        if kind == "integer":
            if "minimum" in schema:
                yield "below minimum", schema["minimum"] - 1
            if "maximum" in schema:
                yield "above maximum", schema["maximum"] + 1
        if kind == "string" and "maxLength" in schema and "enum" not in schema:
            yield "over maxLength", "x" * (schema["maxLength"] + 1)
        if kind == "string" and schema.get("minLength", 0) > 0 and not schema.get("pattern"):
            yield "under minLength", "x" * (schema["minLength"] - 1)
        if kind == "array" and "maxItems" in schema and schema["maxItems"] < MAX_ARRAY_BOUNDARY:
            yield "over maxItems", [self.minimal(schema.get("items", {}))] * (schema["maxItems"] + 1)
        if kind == "array" and schema.get("minItems", 0) > 0:
            yield "under minItems", []
