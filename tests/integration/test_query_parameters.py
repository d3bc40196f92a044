"""Query parameters: a route answers 400 naming a parameter it does not take (a mistyped filter
never silently returns everything), and the match list filters by status."""
import pytest

from chalicelib.api.routers import ROUTERS
from tests.integration.conftest import record

ROUTES = sorted({(s.method, s.path) for r in ROUTERS for s in r.specs if not s.public})
LISTS = [(m, p) for m, p in ROUTES if m == "GET" and not p.endswith("}")]


def test_every_list_route_is_checked():
    assert ("GET", "/reconciliation_matches") in LISTS and ("GET", "/reconciliation_exceptions") in LISTS
    assert ("GET", "/reconciliations/{id}/rules") in LISTS and ("GET", "/records") in LISTS


def test_a_known_parameter_alone_is_not_refused(api):
    assert api.get("/v1/reconciliations?limit=5").status_code == 200
    assert api.get("/v1/health?probe=1").status_code == 200  # public routes take anything


@pytest.fixture
def proposed_and_confirmed(api, ingest, reconciliation):
    rule = {"name": "Amount", "priority": 1, "auto_confirm": False, "conditions": [
        {"field": "amount", "operator": "equals"}, {"field": "date", "operator": "within", "days": 3}]}
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", rule).status_code == 201
    ingest(record("bank", 1, 1000), record("bank", 2, 2000))
    ingest(record("ledger", 1, 1000), record("ledger", 2, 2000))
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body["matched_records"] == 4
    base = f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}"
    first, second = api.get(base).json_body["data"]
    assert api.post(f"/v1/reconciliation_matches/{second['id']}/confirm").status_code == 200
    return base, first["id"], second["id"]


def test_the_match_list_filters_by_status(api, proposed_and_confirmed):
    base, proposed, confirmed = proposed_and_confirmed

    assert [m["id"] for m in api.get(f"{base}&status=proposed").json_body["data"]] == [proposed]
    assert [m["id"] for m in api.get(f"{base}&status=confirmed").json_body["data"]] == [confirmed]
    assert [m["id"] for m in api.get(base).json_body["data"]] == [proposed, confirmed]
    assert api.get(f"{base}&status=rejected").status_code == 422


def test_a_mistyped_match_filter_is_refused_instead_of_listing_everything(api, proposed_and_confirmed):
    base, _, _ = proposed_and_confirmed

    response = api.get(f"{base}&stauts=proposed")

    assert response.status_code == 400
    assert "'stauts'" in response.json_body["message"] and "status" in response.json_body["message"]


# Refused before any action (the query is parsed before the view runs), so one world serves every route
# (module_state_unchanged checks it); it runs after the tests of a world of their own (see tests/conftest.py).
@pytest.mark.parametrize("method,path", ROUTES)
def test_a_query_parameter_a_route_does_not_take_is_400_naming_it(module_api, module_state_unchanged, method, path):
    api = module_api
    url = "/v1" + path.replace("{key}", "bank").replace("{id}", "1").replace("{run_id}", "1") \
        .replace("{investigation_id}", "1").replace("{assignee_id}", "1")

    response = api.request(method, f"{url}?reconciliation_id=1&statuss=proposed", body="{}",
                           headers={"Content-Type": "application/json"})

    assert response.status_code == 400, (method, path, response.json_body)
    assert "'statuss'" in response.json_body["message"]
