"""Python values to DynamoDB attribute values and back, as boto3's TypeSerializer and
TypeDeserializer make them, for the types items hold (text, integers, booleans, None, maps,
lists): boto3's walk through a Decimal context per number was a tenth of bulk ingestion's CPU
(bench/RESULTS.md, issue 30). Anything else (sets, bytes, Decimals) goes to boto3 unchanged, so
boto3 stays the reference; tests/unit/test_attribute_values.py holds the two to the same output.
Numbers come back as int when integral, else as Decimal (never float: money stays exact)."""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

_boto_serializer = TypeSerializer()
_boto_deserializer = TypeDeserializer()
_LARGEST_EXACT = 10 ** 38  # DynamoDB numbers hold 38 digits: boto3 refuses more, so it decides past it


def to_attribute(value: Any) -> dict[str, Any]:
    kind = type(value)
    if kind is str:
        return {"S": value}
    if kind is bool:
        return {"BOOL": value}
    if kind is int and -_LARGEST_EXACT < value < _LARGEST_EXACT:
        return {"N": str(value)}
    if value is None:
        return {"NULL": True}
    if kind is dict:
        return {"M": {k: to_attribute(v) for k, v in value.items()}}
    if kind is list or kind is tuple:
        return {"L": [to_attribute(v) for v in value]}
    return _boto_serializer.serialize(value)


def from_attribute(attribute: dict[str, Any]) -> Any:
    """The Python value of an attribute, numbers as int when integral (else Decimal)."""
    if len(attribute) == 1:
        (tag, value), = attribute.items()
        if tag == "S" or tag == "BOOL":
            return value
        if tag == "N":
            return _number(value)
        if tag == "NULL":
            return None
        if tag == "M":
            return {k: from_attribute(v) for k, v in value.items()}
        if tag == "L":
            return [from_attribute(v) for v in value]
        if tag == "NS":
            return {_number(v) for v in value}
    return _boto_deserializer.deserialize(attribute)


def _number(text: str) -> int | Decimal:
    if text.isdigit() or (text[:1] == "-" and text[1:].isdigit()):
        return int(text)
    number = _boto_deserializer.deserialize({"N": text})  # Decimal, in DynamoDB's own number context
    return int(number) if number == number.to_integral_value() else number
