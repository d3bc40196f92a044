"""GET /reconciliation_stories/{id}/trace over the API on moto, after real runs: orders -> charges
(one to one by order) -> payouts (many charges to one payout) -> bank (one to one by amount)."""
from dataclasses import replace

import pytest

from chalicelib.services.api_keys import create_key
from tests.integration.conftest import record
from tests.support.worlds import world_of_api

PATH = "/v1/reconciliation_stories"


def rule(api, reconciliation_id, body):
    created = api.post(f"/v1/reconciliations/{reconciliation_id}/rules", {"name": "R", "priority": 1, **body})
    assert created.status_code == 201, created.json_body


def run(api, reconciliation_id):
    started = api.post(f"/v1/reconciliations/{reconciliation_id}/runs")
    assert started.status_code == 202, started.json_body
    done = api.get(f"/v1/reconciliations/{reconciliation_id}/runs/{started.json_body['id']}").json_body
    assert done["status"] == "completed", done


@pytest.fixture
def story(api, ingest, services):
    """Built once a process for each set of limits, restored after."""
    return world_of_api(f"test_story_trace_api.story:{services.ports.limits}", api, lambda: _story(api, ingest))


def _story(api, ingest):
    for key in ("orders", "charges", "payouts", "bank", "other"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
    recons = []
    for a, b in (("orders", "charges"), ("charges", "payouts"), ("payouts", "bank")):
        created = api.post("/v1/reconciliations", {"name": f"{a} to {b}", "run_type": "batch",
                                                   "side_a_stream_keys": [a], "side_b_stream_keys": [b]})
        recons.append(created.json_body["id"])
    rule(api, recons[0], {"conditions": [{"field": "metadata.order", "operator": "equals"}]})
    rule(api, recons[1], {"cardinality": "many_to_one", "group_by": {"side_a": ["metadata.payout"]},
                          "conditions": [{"field": "metadata.payout", "operator": "equals"},
                                         {"field": "amount", "operator": "equals"}]})
    rule(api, recons[2], {"conditions": [{"field": "amount", "operator": "equals"}]})
    orders = ingest(*[record("orders", n, 1000 * n, metadata={"order": f"o{n}"}) for n in (1, 2, 3, 4)])
    # The fourth charge's payout never arrived: it stays open in the middle link.
    charges = ingest(*[record("charges", n, 1000 * n, metadata={"order": f"o{n}", "payout": "p1" if n < 4 else "p2"})
                       for n in (1, 2, 3, 4)])
    [payout] = ingest(record("payouts", 1, 6000, metadata={"payout": "p1"}))
    [deposit] = ingest(record("bank", 1, 6000))
    [stray] = ingest(record("other", 1, 5))
    for reconciliation_id in recons:
        run(api, reconciliation_id)
    streams = {s["key"]: s["id"] for s in api.get("/v1/data_streams").json_body["data"]}
    created = api.post(PATH, {"name": "Order to cash", "links": [
        {"reconciliation_id": recons[0], "position": 1},
        {"reconciliation_id": recons[1], "position": 2, "shared_data_stream_id": streams["charges"]},
        {"reconciliation_id": recons[2], "position": 3, "shared_data_stream_id": streams["payouts"]}]})
    assert created.status_code == 201, created.json_body
    return {"id": created.json_body["id"], "recons": recons, "orders": orders, "charges": charges,
            "payout": payout, "deposit": deposit, "stray": stray, "streams": streams}


def trace(api, story, record_id, **kw):
    return api.get(f"{PATH}/{story['id']}/trace?record_id={record_id}", **kw)


def test_a_bank_deposit_traced_back_to_its_orders_after_real_runs(api, story):
    response = trace(api, story, story["deposit"])

    assert response.status_code == 200, response.json_body
    body = response.json_body
    assert set(body) == {"story_id", "record", "truncated", "hops", "breaks"}
    assert (body["story_id"], body["record"]["id"], body["truncated"], body["breaks"]) == (
        story["id"], story["deposit"], False, [])
    [start] = body["hops"]
    assert set(start) == {"link", "direction", "via_data_stream", "match", "break", "records", "next", "next_omitted"}
    assert start["link"] == {"id": start["link"]["id"], "position": 3, "role": "continuation",
                             "reconciliation_id": story["recons"][2], "reconciliation_name": "payouts to bank"}
    assert (start["direction"], start["via_data_stream"], start["break"], start["match"]["status"]) == (
        "start", None, None, "confirmed")
    assert [r["id"] for r in start["records"]["data"]] == [story["deposit"], story["payout"]]
    [payout_hop] = start["next"]
    assert (payout_hop["direction"], payout_hop["via_data_stream"]) == (
        "upstream", {"id": story["streams"]["payouts"], "name": "Payouts"})
    assert payout_hop["match"]["record_count"] == 4 and payout_hop["records"]["count"] == 4
    assert payout_hop["records"]["totals"] == [
        {"currency": "USD", "count": 4, "credits": 12000, "debits": 0, "decimal_places": 2}]
    order_hops = payout_hop["next"]
    assert [sorted(r["id"] for r in h["records"]["data"]) for h in order_hops] == [
        sorted([order, charge]) for order, charge in zip(story["orders"][:3], story["charges"][:3], strict=True)]
    assert all(h["direction"] == "upstream" and h["via_data_stream"]["name"] == "Charges" and h["next"] == []
               for h in order_hops)
    assert payout_hop["next_omitted"] is None


def test_an_order_whose_charge_was_never_paid_out_breaks_in_the_middle_link_at_its_exception(api, story):
    # The run's refresh put the charge, weeks old, in an exception of the middle link.
    [exception] = api.get(f"/v1/reconciliation_exceptions?reconciliation_id={story['recons'][1]}"
                          "&data_stream_key=charges").json_body["data"]

    body = trace(api, story, story["orders"][3]).json_body

    [start] = body["hops"]
    [open_charge] = start["next"]
    assert (open_charge["match"], open_charge["break"]) == (None, {"reason": "exception",
                                                                   "exception_id": exception["id"]})
    assert open_charge["next"] == [] and open_charge["records"]["count"] == 1
    assert body["breaks"] == [{"link_position": 2, "reconciliation_id": story["recons"][1], "reason": "exception",
                               "match_id": None, "exception_id": exception["id"],
                               "record_ids": [story["charges"][3]]}]


def test_the_story_and_the_record_of_another_environment_are_404(api, services, story):
    other_key = create_key(services.api_keys, "globex")[1]
    assert trace(api, story, story["deposit"], key=other_key).status_code == 404
    other_story = api.post(PATH, {"name": "B's", "links": [{"reconciliation_id": story["recons"][2], "position": 1}]},
                           key=other_key)
    assert other_story.status_code == 422  # B cannot even name A's reconciliation
    assert trace(api, story, 999_999).status_code == 404
    assert api.get(f"{PATH}/999/trace?record_id={story['deposit']}").status_code == 404


def test_a_record_outside_the_story_or_a_bad_record_id_is_422_naming_it(api, story):
    outside = trace(api, story, story["stray"])
    assert outside.status_code == 422
    assert outside.json_body["errors"] == [{"field": "record_id",
                                            "message": f"record {story['stray']}'s data stream is not in this story"}]
    for query in ("", "?record_id=0", "?record_id=-4"):
        response = api.get(f"{PATH}/{story['id']}/trace{query}")
        assert response.status_code == 422, (query, response.json_body)
        assert [e["field"] for e in response.json_body["errors"]] == ["record_id"]
    # Bad syntax is 400, as for every query parameter.
    assert api.get(f"{PATH}/{story['id']}/trace?record_id=abc").status_code == 400


def test_the_openapi_document_lists_the_trace(api):
    document = api.get("/v1/openapi.json", key=None).json_body
    operation = document["paths"]["/v1/reconciliation_stories/{id}/trace"]["get"]
    assert [(p["name"], p["in"], p["required"]) for p in operation["parameters"]] == [
        ("id", "path", True), ("record_id", "query", True)]
    assert {"200", "404", "422"} <= set(operation["responses"])
    hop = document["components"]["schemas"]["TraceHopOut"]["properties"]
    assert {"break", "next", "next_omitted", "via_data_stream"} <= set(hop)


@pytest.fixture
def money_kept_from_three(services):
    services.ports = replace(services.ports, limits=replace(services.ports.limits, keep_money_from=3))


def test_a_run_keeps_the_money_of_a_big_match_as_it_writes_it(money_kept_from_three, story):
    from chalicelib.container import container
    from chalicelib.domain.tallies import CurrencyAmounts
    ports = container().ports
    payout_match = ports.claims.held_records("acme", [story["payout"]])[0].match_in(story["recons"][1])
    members, money = ports.matches.members_and_money("acme", payout_match)
    assert len(members) == 4 and money == {"USD": CurrencyAmounts("USD", 4, 12000, 0, 2)}
    deposit_match = ports.claims.held_records("acme", [story["deposit"]])[0].match_in(story["recons"][2])
    assert ports.matches.members_and_money("acme", deposit_match)[1] is None  # 2 records: read as they are
