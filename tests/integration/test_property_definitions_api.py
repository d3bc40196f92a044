"""Property definitions over the API, in-process on moto."""
import pytest

PATH = "/v1/data_stream_property_definitions"


@pytest.fixture
def stream(api):
    assert api.post("/v1/data_streams", {"key": "payouts", "name": "Payouts"}).status_code == 201
    return "payouts"


def define(api, key="payout_id", stream="payouts", **fields):
    body = {"key": key, "name": fields.pop("name", key), "type": fields.pop("type", "string"),
            "data_stream_key": stream, **fields}
    return api.post(PATH, body)


def test_a_definition_is_created_optional_false_by_default(api, stream):
    response = define(api, "fee", type="number")
    assert response.status_code == 201
    body = response.json_body
    assert body["key"] == "fee" and body["type"] == "number" and body["optional"] is False
    assert body["data_stream_key"] == "payouts" and isinstance(body["id"], int)
    assert api.get(f"{PATH}/{body['id']}").json_body == body


@pytest.mark.parametrize("kind", ["number", "date", "datetime", "string", "boolean"])
def test_every_property_type_is_accepted(api, stream, kind):
    assert define(api, f"p_{kind}", type=kind).status_code == 201


def test_an_unknown_type_is_422(api, stream):
    response = define(api, "p", type="money")
    assert response.status_code == 422
    assert response.json_body["errors"][0]["field"] == "type"


def test_a_key_is_unique_per_stream_but_not_across_streams(api, stream):
    api.post("/v1/data_streams", {"key": "bank", "name": "Bank"})
    assert define(api, "ref").status_code == 201
    duplicate = define(api, "ref")
    assert duplicate.status_code == 409
    assert define(api, "ref", stream="bank").status_code == 201


def test_an_unknown_stream_is_422_on_data_stream_key(api):
    response = define(api, "ref", stream="ghost")
    assert response.status_code == 422
    assert response.json_body["errors"][0]["field"] == "data_stream_key"


def test_optional_must_be_a_real_boolean(api, stream):
    response = define(api, "ref", optional="yes")
    assert response.status_code == 422
    assert response.json_body["errors"][0]["field"] == "optional"


def test_the_list_is_a_bare_array_filtered_by_stream(api, stream):
    api.post("/v1/data_streams", {"key": "bank", "name": "Bank"})
    define(api, "a")
    define(api, "b", stream="bank")
    everything = api.get(PATH).json_body
    assert isinstance(everything, list) and {d["key"] for d in everything} == {"a", "b"}
    only_bank = api.get(f"{PATH}?data_stream_key=bank").json_body
    assert [d["key"] for d in only_bank] == ["b"]
    assert api.get(f"{PATH}?data_stream_key=ghost").json_body == []


def test_the_filter_does_not_match_streams_sharing_a_prefix(api):
    api.post("/v1/data_streams", {"key": "bank", "name": "Bank"})
    api.post("/v1/data_streams", {"key": "bank2", "name": "Bank 2"})
    define(api, "x", stream="bank2")
    assert api.get(f"{PATH}?data_stream_key=bank").json_body == []


def test_patch_changes_name_and_optional_only(api, stream):
    created = define(api, "ref", type="string").json_body
    response = api.patch(f"{PATH}/{created['id']}", {"name": "Reference", "optional": True, "type": "string",
                                                     "key": "ref"})
    assert response.status_code == 200
    body = response.json_body
    assert body["name"] == "Reference" and body["optional"] is True and body["type"] == "string"
    assert api.patch(f"{PATH}/{created['id']}", {"optional": None}).status_code == 422


@pytest.mark.parametrize("body, field", [({"key": "other"}, "key"), ({"type": "number"}, "type"),
                                         ({"name": "Renamed", "type": "number"}, "type")])
def test_patch_of_the_key_or_type_is_422_is_immutable_and_changes_nothing(api, stream, body, field):
    created = define(api, "ref", type="string").json_body
    response = api.patch(f"{PATH}/{created['id']}", body)
    assert response.status_code == 422
    assert response.json_body["errors"] == [{"field": field, "message": "is immutable"}]
    assert api.get(f"{PATH}/{created['id']}").json_body == created


def test_delete_frees_the_key_and_unknown_ids_are_404(api, stream):
    created = define(api, "ref").json_body
    assert api.delete(f"{PATH}/{created['id']}").status_code == 204
    assert api.get(f"{PATH}/{created['id']}").status_code == 404
    assert api.delete(f"{PATH}/{created['id']}").status_code == 404
    assert api.get(f"{PATH}/not-a-number").status_code == 404
    assert define(api, "ref").status_code == 201


def test_deleting_a_stream_removes_its_definitions(api, stream):
    created = define(api, "ref").json_body
    api.delete("/v1/data_streams/payouts")
    assert api.get(f"{PATH}/{created['id']}").status_code == 404
    assert api.get(PATH).json_body == []
    api.post("/v1/data_streams", {"key": "payouts", "name": "Payouts again"})
    assert define(api, "ref").status_code == 201
