"""Data streams over the API, in-process on moto."""
import json

import pytest


def create(api, key="bank", **fields):
    return api.post("/v1/data_streams", {"key": key, "name": fields.pop("name", key.title()), **fields})


def test_creating_a_stream_returns_it_with_an_integer_id(api):
    response = create(api, "bank", name="Bank of Tests", description="operating account")
    assert response.status_code == 201
    body = response.json_body
    assert isinstance(body["id"], int)
    assert body["key"] == "bank" and body["type"] == "api" and body["records_count"] == 0
    assert body["description"] == "operating account" and body["program_id"] is None
    assert body["created_at"].endswith("Z")


def test_ids_come_from_a_counter_and_grow(api):
    first = create(api, "a").json_body["id"]
    second = create(api, "b").json_body["id"]
    assert second == first + 1


def test_a_taken_key_is_409(api):
    create(api, "bank")
    response = create(api, "bank")
    assert response.status_code == 409
    assert "bank" in response.json_body["message"]


def test_a_bank_feed_without_a_bank_account_is_422_on_that_field(api):
    response = create(api, "feed", type="bank_feed")
    assert response.status_code == 422
    assert response.json_body["errors"] == [{"field": "bank_account_id", "message": "is required when type is 'bank_feed'"}]
    ok = create(api, "feed", type="bank_feed", bank_account_id="acct_9")
    assert ok.status_code == 201 and ok.json_body["bank_account_id"] == "acct_9"


@pytest.mark.parametrize("kind", ["csv", "payment_processor", "ledger"])
def test_other_stream_types_are_422(api, kind):
    response = create(api, "s", type=kind)
    assert response.status_code == 422
    assert response.json_body["errors"][0]["field"] == "type"


@pytest.mark.parametrize("body, field", [
    ({"name": "No key"}, "key"),
    ({"key": "Bad Key", "name": "x"}, "key"),
    ({"key": "k" * 65, "name": "x"}, "key"),
    ({"key": "ok"}, "name"),
    ({"key": "ok", "name": ""}, "name"),
    ({"key": "ok", "name": 12}, "name"),
    ({"key": 5, "name": "x"}, "key"),
])
def test_bad_fields_are_422_naming_the_field(api, body, field):
    response = api.post("/v1/data_streams", body)
    assert response.status_code == 422
    assert field in [e["field"] for e in response.json_body["errors"]]
    assert response.json_body["message"]


def test_a_body_that_is_not_an_object_is_422(api):
    response = api.post("/v1/data_streams", [1, 2])
    assert response.status_code == 422


def test_malformed_json_is_400(api):
    response = api.request("POST", "/v1/data_streams", body="{not json",
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json_body == {"message": "request body is not valid JSON"}


def test_another_content_type_is_415(api):
    response = api.request("POST", "/v1/data_streams", body="key=bank&name=Bank",
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert response.status_code == 415
    assert "application/json" in response.json_body["message"]


def test_a_json_content_type_with_charset_is_accepted(api):
    response = api.request("POST", "/v1/data_streams", body=json.dumps({"key": "k", "name": "K"}),
                           headers={"Content-Type": "application/json; charset=utf-8"})
    assert response.status_code == 201


def test_a_body_over_the_limit_is_413(api, services):
    too_big = json.dumps({"key": "big", "name": "x" * (services.settings.max_body_bytes + 1)})
    response = api.request("POST", "/v1/data_streams", body=too_big, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert set(response.json_body) == {"message"}


def test_an_unsupported_method_gets_our_error_shape(api):
    response = api.request("PUT", "/v1/data_streams/bank", json_body={})
    assert response.status_code == 405
    assert set(response.json_body) == {"message"}


def test_a_stream_is_found_by_key_and_unknown_keys_are_404(api):
    create(api, "bank")
    assert api.get("/v1/data_streams/bank").json_body["key"] == "bank"
    missing = api.get("/v1/data_streams/nope")
    assert missing.status_code == 404
    assert missing.json_body == {"message": "data stream 'nope' not found"}


def test_the_list_pages_newest_first_with_an_opaque_cursor(api):
    for i in range(5):
        create(api, f"s{i}")
    first = api.get("/v1/data_streams?limit=2").json_body
    assert [s["key"] for s in first["data"]] == ["s4", "s3"] and first["limit"] == 2
    second = api.get(f"/v1/data_streams?limit=2&cursor={first['next_cursor']}").json_body
    third = api.get(f"/v1/data_streams?limit=2&cursor={second['next_cursor']}").json_body
    assert [s["key"] for s in second["data"] + third["data"]] == ["s2", "s1", "s0"]
    assert third["next_cursor"] is None


def test_a_page_that_ends_the_list_exactly_has_no_cursor(api):
    for i in range(2):
        create(api, f"s{i}")
    page = api.get("/v1/data_streams?limit=2").json_body
    assert len(page["data"]) == 2 and page["next_cursor"] is None


def test_the_default_page_size_is_50(api):
    assert api.get("/v1/data_streams").json_body["limit"] == 50


@pytest.mark.parametrize("query, status", [
    ("limit=0", 422), ("limit=201", 422), ("limit=abc", 400), ("cursor=garbage!", 400),
])
def test_bad_list_parameters_are_rejected(api, query, status):
    response = api.get(f"/v1/data_streams?{query}")
    assert response.status_code == status
    assert response.json_body["message"]


def test_patch_renames_and_describes_but_keeps_key_and_type(api):
    create(api, "bank", description="old")
    response = api.patch("/v1/data_streams/bank", {"name": "Renamed"})
    assert response.status_code == 200
    assert response.json_body["name"] == "Renamed" and response.json_body["description"] == "old"
    cleared = api.patch("/v1/data_streams/bank", {"description": None}).json_body
    assert cleared["description"] is None and cleared["name"] == "Renamed"
    assert api.get("/v1/data_streams/bank").json_body["name"] == "Renamed"


@pytest.mark.parametrize("body, field", [
    ({"key": "other"}, "key"), ({"type": "bank_feed"}, "type"), ({"name": None}, "name"), ({"name": ""}, "name"),
])
def test_patch_refuses_changes_to_immutable_or_required_fields(api, body, field):
    create(api, "bank")
    response = api.patch("/v1/data_streams/bank", body)
    assert response.status_code == 422
    assert response.json_body["errors"][0]["field"] == field


def test_patch_accepts_the_unchanged_key_and_type(api):
    create(api, "bank")
    response = api.patch("/v1/data_streams/bank", {"key": "bank", "type": "api", "name": "B"})
    assert response.status_code == 200


def test_patch_of_an_unknown_stream_is_404(api):
    assert api.patch("/v1/data_streams/nope", {"name": "x"}).status_code == 404


def test_delete_removes_the_stream_and_frees_its_key(api):
    create(api, "bank")
    response = api.delete("/v1/data_streams/bank")
    assert response.status_code == 204
    assert api.get("/v1/data_streams/bank").status_code == 404
    assert api.delete("/v1/data_streams/bank").status_code == 404
    assert api.get("/v1/data_streams").json_body["data"] == []
    assert create(api, "bank").status_code == 201


def test_an_absurdly_long_key_in_the_path_is_simply_not_found(api):
    assert api.get("/v1/data_streams/" + "k" * 3000).status_code == 404
    assert api.get("/v1/data_stream_property_definitions?data_stream_key=" + "k" * 3000).json_body == []


@pytest.mark.parametrize("key", [
    {"pk": "x", "gsi1pk": "E#acme#DS", "gsi1sk": "1"},                          # sk missing
    {"pk": "x", "sk": 5, "gsi1pk": "E#acme#DS", "gsi1sk": "1"},                  # a number where a string goes
    {"pk": "x", "sk": "DS", "gsi1pk": "E#acme#DS", "gsi1sk": "1", "extra": "y"},  # an attribute too many
])
def test_a_crafted_cursor_is_a_bad_request(api, key):
    import base64

    cursor = base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")
    response = api.get(f"/v1/data_streams?cursor={cursor}")
    assert response.status_code == 400


def test_a_second_bank_feed_of_one_account_is_409_naming_the_stream_that_holds_it(api):
    # Given a bank_feed stream of an account
    assert create(api, "main", type="bank_feed", bank_account_id="50880050/0194774600888").status_code == 201
    # When another bank_feed stream claims it
    response = create(api, "copy", type="bank_feed", bank_account_id=" 50880050/0194774600888 ")
    # Then it is 409, naming the stream, and was not created
    assert response.status_code == 409
    assert "'main'" in response.json_body["message"] and "50880050/0194774600888" in response.json_body["message"]
    assert api.get("/v1/data_streams/copy").status_code == 404


def test_patching_a_bank_feeds_account_is_refused_onto_a_held_one_and_frees_the_old_one(api):
    create(api, "main", type="bank_feed", bank_account_id="acct-1")
    create(api, "spare", type="bank_feed", bank_account_id="acct-2")
    refused = api.patch("/v1/data_streams/main", {"bank_account_id": "acct-2"})
    assert refused.status_code == 409 and "'spare'" in refused.json_body["message"]
    moved = api.patch("/v1/data_streams/main", {"bank_account_id": "acct-3"})
    assert moved.status_code == 200 and moved.json_body["bank_account_id"] == "acct-3"
    assert create(api, "reuse", type="bank_feed", bank_account_id="acct-1").status_code == 201
    assert api.delete("/v1/data_streams/main").status_code == 204
    assert create(api, "after", type="bank_feed", bank_account_id="acct-3").status_code == 201
