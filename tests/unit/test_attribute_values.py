"""Our attribute values against boto3's TypeSerializer and TypeDeserializer, the reference: the same
attribute value for every Python value an item may hold, and the same value back (numbers as int
when integral, as the table always gave them)."""
from __future__ import annotations

from decimal import Decimal

import pytest
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.adapters.dynamodb.attribute_values import from_attribute, to_attribute

boto_serializer, boto_deserializer = TypeSerializer(), TypeDeserializer()

scalars = st.one_of(
    st.text(), st.booleans(), st.none(),
    st.integers(-10 ** 38 + 1, 10 ** 38 - 1), st.integers(-(2 ** 63), 2 ** 63),
    st.decimals(allow_nan=False, allow_infinity=False, places=4, min_value=-10 ** 20, max_value=10 ** 20),
    st.binary(max_size=8),
    st.frozensets(st.text(min_size=1, max_size=5), min_size=1, max_size=3).map(set),
    st.frozensets(st.integers(-1000, 1000), min_size=1, max_size=3).map(set),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=3).map(tuple),
    st.dictionaries(st.text(max_size=6), inner, max_size=4)), max_leaves=12)


def as_the_table_read_it(value):
    """boto3's value as the table has always handed it on: integral numbers as int."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else value
    if isinstance(value, dict):
        return {k: as_the_table_read_it(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_the_table_read_it(v) for v in value]
    if isinstance(value, set):
        return {as_the_table_read_it(v) for v in value}
    return value


@settings(max_examples=400, deadline=None)
@given(values)
def test_every_value_serializes_as_boto3_serializes_it_and_reads_back_as_the_table_read_it(value):
    attribute = to_attribute(value)

    assert attribute == boto_serializer.serialize(value)
    assert from_attribute(attribute) == as_the_table_read_it(boto_deserializer.deserialize(attribute))


@pytest.mark.parametrize("refused", [1.5, 10 ** 38, -(10 ** 40)])
def test_what_boto3_refuses_is_refused_the_same_way(refused):
    # Floats never reach the table (money is integers); numbers past 38 digits do not fit DynamoDB.
    with pytest.raises(Exception) as ours:
        to_attribute(refused)
    with pytest.raises(Exception) as theirs:
        boto_serializer.serialize(refused)
    assert type(ours.value) is type(theirs.value)


@pytest.mark.parametrize("text", ["0", "-0", "12", "-12", "1.50", "1E+3", "-2.5", "100.00", "0.000"])
def test_numbers_read_back_as_int_when_integral_else_decimal(text):
    value = from_attribute({"N": text})

    expected = Decimal(text)
    assert value == expected
    assert isinstance(value, int) is (expected == expected.to_integral_value())
