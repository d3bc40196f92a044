"""Reconciliation rules over the API, in-process on moto."""
from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb import keys
from chalicelib.domain.clock import iso, utc_now

RULES = "/v1/reconciliation_rules"
EXACT = [{"field": "amount", "operator": "equals"}, {"field": "date", "operator": "within", "days": 2}]


@pytest.fixture
def reconciliation(api):
    for key in ("bank", "ledger"):
        api.post("/v1/data_streams", {"key": key, "name": key.title()})
    created = api.post("/v1/reconciliations", {"name": "Bank vs ledger", "side_a_stream_keys": ["bank"],
                                               "side_b_stream_keys": ["ledger"]})
    return created.json_body["id"]


def add(api, reconciliation_id, name="Exact", priority=1, conditions=EXACT, **fields):
    return api.post(f"/v1/reconciliations/{reconciliation_id}/rules",
                    {"name": name, "priority": priority, "conditions": conditions, **fields})


def test_a_rule_is_created_with_its_defaults_and_read_back(api, reconciliation):
    response = api.post(f"/v1/reconciliations/{reconciliation}/rules", {"name": "Exact", "conditions": EXACT})
    assert response.status_code == 201
    body = response.json_body
    assert isinstance(body["id"], int) and body["reconciliation_id"] == reconciliation
    assert (body["name"], body["priority"], body["cardinality"]) == ("Exact", 1, "one_to_one")
    assert body["auto_confirm"] is True and body["active"] is True
    assert body["group_by"] == {"side_a": [], "side_b": []}
    assert body["conditions"] == EXACT
    assert body["created_at"].endswith("Z") and body["updated_at"] == body["created_at"]
    assert api.get(f"{RULES}/{body['id']}").json_body == body


def test_every_parameter_of_a_rule_survives_storage(api, reconciliation):
    conditions = [
        {"field": "amount", "operator": "within", "tolerance": 5, "tolerance_percent": 0.5},
        {"field": "metadata.ref", "side_b_field": "description", "operator": "similar", "threshold": 0.9,
         "normalize": ["case", "whitespace"]},
        {"field": "direction", "operator": "opposite"},
    ]
    body = add(api, reconciliation, "Grouped", 3, conditions, cardinality="many_to_one",
               group_by={"side_a": ["metadata.batch"], "side_b": []}, auto_confirm=False, active=False).json_body
    stored = api.get(f"{RULES}/{body['id']}").json_body
    assert stored["conditions"] == conditions
    assert stored["group_by"] == {"side_a": ["metadata.batch"], "side_b": []}
    assert (stored["cardinality"], stored["auto_confirm"], stored["active"]) == ("many_to_one", False, False)


@pytest.mark.parametrize("body, field", [
    ({"conditions": EXACT}, "name"),
    ({"name": "R"}, "conditions"),
    ({"name": "R", "conditions": []}, "conditions"),
    ({"name": "R", "conditions": EXACT, "priority": 0}, "priority"),
    ({"name": "R", "conditions": EXACT, "priority": "1"}, "priority"),
    ({"name": "R", "conditions": EXACT, "cardinality": "one_to_few"}, "cardinality"),
    ({"name": "R", "conditions": EXACT, "active": "yes"}, "active"),
    ({"name": "R", "conditions": [{"field": "amount", "operator": "contains"}]}, "conditions[0].operator"),
    ({"name": "R", "conditions": [{"field": "colour", "operator": "equals"}]}, "conditions[0].field"),
    ({"name": "R", "conditions": [EXACT[0], {"field": "date", "operator": "within"}]}, "conditions[1].days"),
    ({"name": "R", "conditions": EXACT, "group_by": {"side_b": ["description"]}}, "group_by.side_b"),
])
def test_a_bad_rule_is_422_with_the_field_errors_of_the_rule_checks(api, reconciliation, body, field):
    response = api.post(f"/v1/reconciliations/{reconciliation}/rules", body)
    assert response.status_code == 422
    assert field in [e["field"] for e in response.json_body["errors"]], response.json_body
    assert api.get(f"/v1/reconciliations/{reconciliation}/rules").json_body == {"data": []}


def test_a_body_that_is_not_an_object_is_422(api, reconciliation):
    assert api.post(f"/v1/reconciliations/{reconciliation}/rules", [1]).status_code == 422


def test_an_unknown_reconciliation_or_rule_is_404(api):
    assert add(api, 999).status_code == 404
    assert add(api, 999).json_body == {"message": "reconciliation 999 not found"}
    assert api.get("/v1/reconciliations/999/rules").status_code == 404
    for method in ("GET", "PATCH", "DELETE"):
        assert api.request(method, f"{RULES}/999", {"name": "x"} if method == "PATCH" else None).status_code == 404
    assert api.get(f"{RULES}/abc").status_code == 404


def test_the_rules_of_a_reconciliation_are_listed_by_priority(api, reconciliation):
    for name, priority in (("third", 30), ("first", 1), ("second", 2)):
        assert add(api, reconciliation, name, priority).status_code == 201
    listed = api.get(f"/v1/reconciliations/{reconciliation}/rules").json_body
    assert set(listed) == {"data"}
    assert [(r["name"], r["priority"]) for r in listed["data"]] == [("first", 1), ("second", 2), ("third", 30)]


def test_a_priority_is_unique_within_a_reconciliation_only(api, reconciliation):
    assert add(api, reconciliation, "A", 5).status_code == 201
    clash = add(api, reconciliation, "B", 5)
    assert clash.status_code == 409
    assert set(clash.json_body) == {"message"} and "priority 5" in clash.json_body["message"]
    other = api.post("/v1/reconciliations", {"name": "Other", "side_a_stream_keys": ["ledger"],
                                             "side_b_stream_keys": ["bank"]}).json_body["id"]
    assert add(api, other, "B", 5).status_code == 201


def test_patch_merges_the_given_fields_into_the_rule(api, reconciliation):
    created = add(api, reconciliation, "Exact", 1).json_body
    response = api.patch(f"{RULES}/{created['id']}", {"name": "Exact amount", "active": False})
    assert response.status_code == 200
    body = response.json_body
    assert (body["name"], body["active"], body["conditions"], body["priority"]) == (
        "Exact amount", False, EXACT, 1)
    assert body["created_at"] == created["created_at"] and body["updated_at"] >= created["updated_at"]
    assert api.get(f"{RULES}/{created['id']}").json_body == body


def test_patch_checks_the_merged_rule_whole(api, reconciliation):
    created = add(api, reconciliation).json_body
    for body, field in [({"conditions": []}, "conditions"), ({"name": None}, "name"),
                        ({"cardinality": "one_to_one", "group_by": {"side_a": ["description"]}}, "group_by.side_a")]:
        response = api.patch(f"{RULES}/{created['id']}", body)
        assert response.status_code == 422
        assert response.json_body["errors"][0]["field"] == field
    assert api.get(f"{RULES}/{created['id']}").json_body == created


def test_patch_moves_the_priority_and_frees_the_old_one(api, reconciliation):
    first = add(api, reconciliation, "first", 1).json_body
    add(api, reconciliation, "second", 2)
    clash = api.patch(f"{RULES}/{first['id']}", {"priority": 2})
    assert clash.status_code == 409 and "priority 2" in clash.json_body["message"]
    assert api.get(f"{RULES}/{first['id']}").json_body["priority"] == 1
    assert api.patch(f"{RULES}/{first['id']}", {"priority": 10}).json_body["priority"] == 10
    assert add(api, reconciliation, "new first", 1).status_code == 201
    listed = api.get(f"/v1/reconciliations/{reconciliation}/rules").json_body["data"]
    assert [r["name"] for r in listed] == ["new first", "second", "first"]
    assert add(api, reconciliation, "clash", 10).status_code == 409


def test_an_edit_based_on_a_stale_read_is_409(api, services, reconciliation):
    from chalicelib.domain.errors import Conflict

    created = add(api, reconciliation, "Exact", 1).json_body
    stale = services.reconciliation_rules.get("acme", created["id"])
    api.patch(f"{RULES}/{created['id']}", {"priority": 2})
    moved_again = stale.with_definition(stale.definition.patched({"priority": 3}), utc_now())
    with pytest.raises(Conflict):
        services.reconciliation_rules.save(moved_again, previous=stale)
    assert add(api, reconciliation, "takes 3", 3).status_code == 201  # the refused edit released its claim
    assert add(api, reconciliation, "takes 2", 2).status_code == 409


def test_delete_removes_the_rule_and_frees_its_priority(api, reconciliation):
    created = add(api, reconciliation, "Exact", 4).json_body
    assert api.delete(f"{RULES}/{created['id']}").status_code == 204
    assert api.get(f"{RULES}/{created['id']}").status_code == 404
    assert api.delete(f"{RULES}/{created['id']}").status_code == 404
    assert api.get(f"/v1/reconciliations/{reconciliation}/rules").json_body == {"data": []}
    assert add(api, reconciliation, "Again", 4).status_code == 201


def _guard_left_by_a_crashed_create(services, reconciliation_id, priority, age):
    services.table.put({**keys.rule_priority_guard("acme", reconciliation_id, priority),
                        "entity": "rule_priority_guard", "rule_id": 4242, "created_at": iso(utc_now() - age)})


def test_a_priority_left_by_a_crashed_create_is_reclaimed_once_stale(api, services, reconciliation):
    _guard_left_by_a_crashed_create(services, reconciliation, 7, timedelta(seconds=5))
    assert add(api, reconciliation, "R", 7).status_code == 409  # may still be in flight
    _guard_left_by_a_crashed_create(services, reconciliation, 7, timedelta(minutes=5))
    assert add(api, reconciliation, "R", 7).status_code == 201


def test_a_priority_left_by_a_crashed_move_is_reclaimed_once_stale(api, services, reconciliation):
    moved = add(api, reconciliation, "R", 1).json_body
    # A move to 8 claimed its guard but died before the rule was written: the rule is still at 1.
    services.table.put({**keys.rule_priority_guard("acme", reconciliation, 8), "entity": "rule_priority_guard",
                        "rule_id": moved["id"], "created_at": iso(utc_now() - timedelta(minutes=5))})
    assert add(api, reconciliation, "S", 8).status_code == 201
    assert api.patch(f"{RULES}/{moved['id']}", {"priority": 8}).status_code == 409


def test_rules_are_editable_while_a_run_is_current(api, services, reconciliation):
    created = add(api, reconciliation).json_body
    services.table.update(keys.reconciliation("acme", reconciliation), "SET current_run_id = :r", values={":r": 1})
    assert api.patch(f"{RULES}/{created['id']}", {"name": "Renamed"}).status_code == 200
