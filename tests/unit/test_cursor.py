import pytest

from chalicelib.adapters.dynamodb.table import decode_cursor, encode_cursor, serialize
from chalicelib.domain.errors import BadRequest


def test_a_cursor_round_trips_to_the_same_start_key():
    key = {"pk": "E#acme#DS#bank", "sk": "DS", "gsi1pk": "E#acme#DS", "gsi1sk": "000000000007"}
    cursor = encode_cursor(serialize(key))
    assert decode_cursor(cursor, "gsi1pk", "E#acme#DS") == serialize(key)


def test_the_end_of_a_list_has_no_cursor():
    assert encode_cursor(None) is None


@pytest.mark.parametrize("garbage", ["!!!", "bm90IGpzb24", "WzEsMl0", ""])
def test_a_garbled_cursor_is_a_bad_request(garbage):
    with pytest.raises(BadRequest):
        decode_cursor(garbage or "x", "gsi1pk", "E#acme#DS")


def test_a_cursor_of_another_environment_is_refused():
    cursor = encode_cursor(serialize({"pk": "p", "sk": "s", "gsi1pk": "E#other#DS", "gsi1sk": "1"}))
    with pytest.raises(BadRequest, match="does not belong"):
        decode_cursor(cursor, "gsi1pk", "E#acme#DS")
