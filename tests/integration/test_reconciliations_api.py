"""Reconciliations over the API, in-process on moto."""
from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb import keys
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.errors import Conflict

PATH = "/v1/reconciliations"


@pytest.fixture
def streams(api):
    for key in ("bank", "ledger", "psp", "fees"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
    return ["bank", "ledger", "psp", "fees"]


def create(api, name="Bank vs ledger", side_a=("bank",), side_b=("ledger",), **fields):
    return api.post(PATH, {"name": name, "side_a_stream_keys": list(side_a), "side_b_stream_keys": list(side_b),
                           **fields})


def start_a_run(services, reconciliation_id, run_id=77):
    """What the runs do when a run takes the reconciliation's slot."""
    services.table.update(keys.reconciliation("acme", reconciliation_id), "SET current_run_id = :run",
                          values={":run": run_id})


def test_creating_a_reconciliation_returns_it_with_its_streams(api, streams):
    response = create(api, side_a=["bank", "psp"], side_b=["ledger"])
    assert response.status_code == 201
    body = response.json_body
    assert isinstance(body["id"], int) and body["name"] == "Bank vs ledger"
    assert body["run_type"] == "continuous" and body["exception_after_days"] == 3
    assert body["current_run"] is None and body["last_run"] is None
    assert body["created_at"].endswith("Z") and body["updated_at"] == body["created_at"]
    assert [s["key"] for s in body["side_a_streams"]] == ["bank", "psp"]
    assert body["side_b_streams"] == [api.get("/v1/data_streams/ledger").json_body]
    assert api.get(f"{PATH}/{body['id']}").json_body == body


def test_run_type_and_exception_days_can_be_chosen(api, streams):
    body = create(api, run_type="batch", exception_after_days=0).json_body
    assert body["run_type"] == "batch" and body["exception_after_days"] == 0
    assert create(api, exception_after_days=365).status_code == 201


def test_ids_come_from_a_counter_and_grow(api, streams):
    first = create(api).json_body["id"]
    assert create(api).json_body["id"] == first + 1


@pytest.mark.parametrize("body, field, message", [
    ({"side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"]}, "name", "is required"),
    ({"name": "x" * 201, "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"]}, "name", "200"),
    ({"name": " ", "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"]}, "name", "at least 1"),
    ({"name": "R", "side_b_stream_keys": ["ledger"]}, "side_a_stream_keys", "is required"),
    ({"name": "R", "side_a_stream_keys": [], "side_b_stream_keys": ["ledger"]}, "side_a_stream_keys",
     "must name at least one data stream"),
    ({"name": "R", "side_a_stream_keys": ["bank"], "side_b_stream_keys": []}, "side_b_stream_keys",
     "must name at least one data stream"),
    ({"name": "R", "side_a_stream_keys": ["bank", "bank"], "side_b_stream_keys": ["ledger"]},
     "side_a_stream_keys[1]", "'bank' is named twice"),
    ({"name": "R", "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger", "bank"]},
     "side_b_stream_keys[1]", "'bank' is also on side A; the sides must not share a stream"),
    ({"name": "R", "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger", "ghost"]},
     "side_b_stream_keys[1]", "no data stream with key 'ghost'"),
    ({"name": "R", "side_a_stream_keys": ["Not A Key"], "side_b_stream_keys": ["ledger"]},
     "side_a_stream_keys[0]", "no data stream with key 'Not A Key'"),
    ({"name": "R", "side_a_stream_keys": "bank", "side_b_stream_keys": ["ledger"]}, "side_a_stream_keys",
     "valid array"),
    ({"name": "R", "side_a_stream_keys": [5], "side_b_stream_keys": ["ledger"]}, "side_a_stream_keys[0]", "string"),
    ({"name": "R", "side_a_stream_keys": [f"s{i}" for i in range(21)], "side_b_stream_keys": ["ledger"]},
     "side_a_stream_keys", "at most 20"),
    ({"name": "R", "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"], "exception_after_days": -1},
     "exception_after_days", "greater than or equal to 0"),
    ({"name": "R", "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"], "exception_after_days": 366},
     "exception_after_days", "less than or equal to 365"),
    ({"name": "R", "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"], "exception_after_days": "3"},
     "exception_after_days", "integer"),
    ({"name": "R", "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"], "exception_after_days": 1.5},
     "exception_after_days", "integer"),
    ({"name": "R", "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"], "run_type": "weekly"},
     "run_type", "'continuous' or 'batch'"),
])
def test_bad_fields_are_422_naming_the_field(api, streams, body, field, message):
    response = api.post(PATH, body)
    assert response.status_code == 422
    errors = {e["field"]: e["message"] for e in response.json_body["errors"]}
    assert field in errors, errors
    assert message in errors[field]
    assert response.json_body["message"]


def test_every_unknown_stream_is_named_at_once(api, streams):
    response = create(api, side_a=["nope", "bank"], side_b=["ghost"])
    assert [e["field"] for e in response.json_body["errors"]] == ["side_a_stream_keys[0]", "side_b_stream_keys[0]"]


def test_a_stream_being_deleted_cannot_be_used(api, services, streams):
    services.data_streams.mark_deleting("acme", "psp")  # a delete that has not finished
    response = create(api, side_b=["psp"])
    assert response.status_code == 422
    assert response.json_body["errors"][0]["field"] == "side_b_stream_keys[0]"


def test_an_unknown_reconciliation_is_404(api):
    assert api.get(f"{PATH}/999").status_code == 404
    assert api.get(f"{PATH}/999").json_body == {"message": "reconciliation 999 not found"}
    assert api.get(f"{PATH}/not-a-number").status_code == 404


def test_the_list_pages_newest_first_with_an_opaque_cursor(api, streams):
    ids = [create(api, name=f"R{i}").json_body["id"] for i in range(5)]
    first = api.get(f"{PATH}?limit=2").json_body
    assert [r["id"] for r in first["data"]] == ids[:-3:-1] and first["limit"] == 2
    second = api.get(f"{PATH}?limit=2&cursor={first['next_cursor']}").json_body
    third = api.get(f"{PATH}?limit=2&cursor={second['next_cursor']}").json_body
    assert [r["id"] for r in second["data"] + third["data"]] == ids[2::-1]
    assert third["next_cursor"] is None
    assert first["data"][0]["side_a_streams"][0]["key"] == "bank"


def test_the_default_page_size_is_50_and_bad_parameters_are_refused(api):
    assert api.get(PATH).json_body == {"data": [], "next_cursor": None, "limit": 50}
    for query, status in [("limit=0", 422), ("limit=201", 422), ("limit=x", 400), ("cursor=garbage!", 400)]:
        assert api.get(f"{PATH}?{query}").status_code == status, query


def test_patch_changes_the_given_fields_only(api, streams):
    created = create(api).json_body
    response = api.patch(f"{PATH}/{created['id']}", {"name": "Renamed", "run_type": "batch",
                                                      "exception_after_days": 10})
    assert response.status_code == 200
    body = response.json_body
    assert (body["name"], body["run_type"], body["exception_after_days"]) == ("Renamed", "batch", 10)
    assert body["side_a_streams"] == created["side_a_streams"] and body["created_at"] == created["created_at"]
    assert body["updated_at"] >= created["updated_at"]
    assert api.get(f"{PATH}/{created['id']}").json_body == body


def test_patch_replaces_a_side_and_moves_the_stream_usages(api, streams):
    created = create(api, side_a=["bank"], side_b=["ledger"]).json_body
    response = api.patch(f"{PATH}/{created['id']}", {"side_b_stream_keys": ["psp", "fees"]})
    assert [s["key"] for s in response.json_body["side_b_streams"]] == ["psp", "fees"]
    assert api.delete("/v1/data_streams/ledger").status_code == 204  # no longer used
    assert api.delete("/v1/data_streams/psp").status_code == 409     # now used


@pytest.mark.parametrize("body, field", [
    ({"name": None}, "name"), ({"name": ""}, "name"), ({"run_type": "hourly"}, "run_type"),
    ({"side_a_stream_keys": []}, "side_a_stream_keys"), ({"side_a_stream_keys": ["ledger"]}, "side_a_stream_keys[0]"),
    ({"side_b_stream_keys": ["bank"]}, "side_b_stream_keys[0]"), ({"side_b_stream_keys": ["ghost"]},
                                                                  "side_b_stream_keys[0]"),
    ({"exception_after_days": 400}, "exception_after_days"), ({"exception_after_days": None}, "exception_after_days"),
])
def test_patch_refuses_bad_fields_naming_them(api, streams, body, field):
    created = create(api).json_body
    response = api.patch(f"{PATH}/{created['id']}", body)
    assert response.status_code == 422
    assert response.json_body["errors"][0]["field"] == field
    assert api.get(f"{PATH}/{created['id']}").json_body == created


def test_patch_of_an_unknown_reconciliation_is_404(api):
    assert api.patch(f"{PATH}/999", {"name": "x"}).status_code == 404


def test_patch_and_delete_are_409_while_a_run_is_current(api, services, streams):
    created = create(api).json_body
    start_a_run(services, created["id"])
    patch = api.patch(f"{PATH}/{created['id']}", {"name": "Renamed"})
    assert patch.status_code == 409
    assert set(patch.json_body) == {"message"} and "run in progress" in patch.json_body["message"]
    delete = api.delete(f"{PATH}/{created['id']}")
    assert delete.status_code == 409 and "run in progress" in delete.json_body["message"]
    assert api.get(f"{PATH}/{created['id']}").json_body["name"] == "Bank vs ledger"


def test_an_edit_based_on_a_stale_read_is_409(api, services, streams):
    created = create(api).json_body
    stale = services.reconciliations.get("acme", created["id"])
    assert api.patch(f"{PATH}/{created['id']}", {"name": "First"}).status_code == 200
    with pytest.raises(Conflict):
        services.reconciliations.save(stale.changed(utc_now(), name="Second"), previous=stale)
    assert api.get(f"{PATH}/{created['id']}").json_body["name"] == "First"


def test_the_run_ids_are_kept_on_the_reconciliation_and_an_edit_leaves_them(api, services, streams):
    created = create(api).json_body
    services.table.update(keys.reconciliation("acme", created["id"]), "SET last_run_id = :run", values={":run": 5})
    api.patch(f"{PATH}/{created['id']}", {"name": "Renamed"})
    stored = services.reconciliations.get("acme", created["id"])
    assert stored.last_run_id == 5 and stored.current_run_id is None


def test_delete_removes_the_reconciliation_its_rules_and_frees_its_streams(api, streams):
    created = create(api).json_body
    rule = api.post(f"{PATH}/{created['id']}/rules", {"name": "Exact", "conditions": [
        {"field": "amount", "operator": "equals"}]}).json_body
    assert api.delete(f"{PATH}/{created['id']}").status_code == 204
    assert api.get(f"{PATH}/{created['id']}").status_code == 404
    assert api.get(f"/v1/reconciliation_rules/{rule['id']}").status_code == 404
    assert api.get(PATH).json_body["data"] == []
    assert api.delete(f"{PATH}/{created['id']}").status_code == 404
    assert api.delete("/v1/data_streams/bank").status_code == 204


def test_a_delete_cut_short_is_hidden_and_finished_by_the_next_delete(api, services, streams):
    created = create(api).json_body
    services.reconciliations.mark_deleting("acme", created["id"])  # then the Lambda died
    assert api.get(f"{PATH}/{created['id']}").status_code == 404
    assert api.get(PATH).json_body["data"] == []
    assert api.delete("/v1/data_streams/bank").status_code == 204  # a reconciliation being deleted holds nothing
    assert api.delete(f"{PATH}/{created['id']}").status_code == 204
    assert services.table.get(keys.reconciliation("acme", created["id"])) is None


def test_deleting_a_stream_in_use_is_409_naming_the_reconciliation(api, streams):
    created = create(api, name="Bank vs ledger").json_body
    response = api.delete("/v1/data_streams/ledger")
    assert response.status_code == 409
    assert response.json_body == {"message": f"data stream 'ledger' is used by reconciliation {created['id']} "
                                             "('Bank vs ledger'); remove it from the reconciliation first"}
    assert api.get("/v1/data_streams/ledger").status_code == 200


def _usage_left_by_a_crashed_create(services, reconciliation_id, stream_key, age):
    services.table.put({**keys.stream_usage("acme", stream_key, reconciliation_id), "entity": "stream_usage",
                        "environment": "acme", "stream_key": stream_key, "reconciliation_id": reconciliation_id,
                        "version": 1, "created_at": iso(utc_now() - age)})


def test_a_usage_left_by_a_crashed_create_holds_the_stream_only_for_a_while(api, services, streams):
    _usage_left_by_a_crashed_create(services, 4242, "psp", timedelta(seconds=5))
    young = api.delete("/v1/data_streams/psp")
    assert young.status_code == 409 and "reconciliation 4242 (being created)" in young.json_body["message"]
    _usage_left_by_a_crashed_create(services, 4242, "psp", timedelta(minutes=10))
    assert api.delete("/v1/data_streams/psp").status_code == 204
    assert services.table.get(keys.stream_usage("acme", "psp", 4242)) is None
    assert api.post("/v1/data_streams", {"key": "psp", "name": "Psp again"}).status_code == 201
    assert api.delete("/v1/data_streams/psp").status_code == 204


def test_a_usage_left_by_a_crashed_edit_stops_holding_the_stream_once_stale(api, services, streams):
    created = create(api).json_body  # uses bank and ledger, not psp
    _usage_left_by_a_crashed_create(services, created["id"], "psp", timedelta(minutes=10))
    assert api.delete("/v1/data_streams/psp").status_code == 204
    assert api.delete("/v1/data_streams/bank").status_code == 409
