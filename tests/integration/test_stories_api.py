"""Reconciliation stories over the API, in-process on moto: the chain's rules, names read live,
and the deletes they refuse."""
import pytest

from tests.support.worlds import world_of_api

PATH = "/v1/reconciliation_stories"


@pytest.fixture
def chain(api):
    """orders -> (orders vs charges) -> charges -> (charges vs payouts) -> payouts -> (payouts vs bank).
    Built once a process, restored after."""
    return world_of_api("test_stories_api.chain", api, lambda: _chain(api))


def _chain(api):
    streams = {}
    for key in ("orders", "charges", "payouts", "bank", "other"):
        created = api.post("/v1/data_streams", {"key": key, "name": key.title()})
        assert created.status_code == 201
        streams[key] = created.json_body["id"]
    recons = {}
    for name, a, b in (("orders", "orders", "charges"), ("charges", "charges", "payouts"),
                       ("payouts", "payouts", "bank"), ("other", "other", "bank")):
        created = api.post("/v1/reconciliations", {"name": f"R {name}", "run_type": "batch",
                                                   "side_a_stream_keys": [a], "side_b_stream_keys": [b]})
        assert created.status_code == 201, created.json_body
        recons[name] = created.json_body["id"]
    return {"streams": streams, "recons": recons}


def three_links(chain):
    s, r = chain["streams"], chain["recons"]
    # In any order in the body; ids as integers or strings of digits.
    return [{"reconciliation_id": str(r["payouts"]), "position": 3, "shared_data_stream_id": str(s["payouts"])},
            {"reconciliation_id": r["orders"], "position": 1, "role": "origin"},
            {"reconciliation_id": r["charges"], "position": 2, "shared_data_stream_id": s["charges"],
             "role": "continuation"}]


def test_create_get_and_the_link_shape(api, chain):
    s, r = chain["streams"], chain["recons"]
    created = api.post(PATH, {"name": "Order to cash", "links": three_links(chain)})
    assert created.status_code == 201, created.json_body
    story = created.json_body
    assert set(story) == {"id", "name", "created_at", "links"}
    assert [link["position"] for link in story["links"]] == [1, 2, 3]
    origin, second, third = story["links"]
    assert set(origin) == {"id", "position", "role", "reconciliation_id", "reconciliation_name",
                           "shared_data_stream_id", "shared_data_stream_name", "side_a_streams", "side_b_streams"}
    assert (origin["role"], origin["reconciliation_id"], origin["reconciliation_name"],
            origin["shared_data_stream_id"], origin["shared_data_stream_name"]) == (
        "origin", r["orders"], "R orders", None, None)
    assert origin["side_a_streams"] == [{"id": s["orders"], "name": "Orders"}]
    assert origin["side_b_streams"] == [{"id": s["charges"], "name": "Charges"}]
    assert (second["role"], second["shared_data_stream_id"], second["shared_data_stream_name"]) == (
        "continuation", s["charges"], "Charges")
    assert (third["reconciliation_id"], third["shared_data_stream_id"]) == (r["payouts"], s["payouts"])
    assert api.get(f"{PATH}/{story['id']}").json_body == story


def test_renames_show_at_once(api, chain):
    story = api.post(PATH, {"name": "S", "links": three_links(chain)}).json_body
    assert api.patch(f"/v1/reconciliations/{chain['recons']['charges']}", {"name": "Charges vs payouts"}).status_code == 200
    assert api.patch("/v1/data_streams/charges", {"name": "Stripe charges"}).status_code == 200
    links = api.get(f"{PATH}/{story['id']}").json_body["links"]
    assert links[1]["reconciliation_name"] == "Charges vs payouts"
    assert links[1]["shared_data_stream_name"] == "Stripe charges"
    assert links[0]["side_b_streams"][0]["name"] == "Stripe charges"


def test_list_newest_first_with_cursor_paging(api, chain):
    ids = [api.post(PATH, {"name": f"S{i}", "links": three_links(chain)[1:2]}).json_body["id"] for i in range(3)]
    page = api.get(f"{PATH}?limit=2").json_body
    assert [s["id"] for s in page["data"]] == ids[::-1][:2] and page["limit"] == 2
    rest = api.get(f"{PATH}?limit=2&cursor={page['next_cursor']}").json_body
    assert [s["id"] for s in rest["data"]] == ids[:1] and rest["next_cursor"] is None
    assert api.get(f"{PATH}?cursor=garbage").status_code == 400


def test_patch_name_only_keeps_the_links_and_links_replace_the_chain(api, chain):
    r, s = chain["recons"], chain["streams"]
    story = api.post(PATH, {"name": "S", "links": three_links(chain)}).json_body
    renamed = api.patch(f"{PATH}/{story['id']}", {"name": "Renamed"})
    assert renamed.status_code == 200, renamed.json_body
    assert renamed.json_body["name"] == "Renamed" and renamed.json_body["links"] == story["links"]
    replaced = api.patch(f"{PATH}/{story['id']}", {"links": [
        {"reconciliation_id": str(r["payouts"]), "position": 1},
        {"reconciliation_id": str(r["other"]), "position": 2, "shared_data_stream_id": str(s["bank"])}]})
    assert replaced.status_code == 200, replaced.json_body
    assert [(link["reconciliation_id"], link["role"]) for link in replaced.json_body["links"]] == [
        (r["payouts"], "origin"), (r["other"], "continuation")]
    assert replaced.json_body["name"] == "Renamed"
    # The orders reconciliation is no longer in a story: it can go.
    assert api.delete(f"/v1/reconciliations/{r['orders']}").status_code == 204


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda links, c: links[0].update(position=4), "links[0].position"),
    (lambda links, c: links[0].update(position=2), "links[2].position"),
    (lambda links, c: links[2].update(shared_data_stream_id=c["streams"]["bank"]), "links[2].shared_data_stream_id"),
    (lambda links, c: links[2].pop("shared_data_stream_id"), "links[2].shared_data_stream_id"),
    (lambda links, c: links[1].update(shared_data_stream_id=c["streams"]["orders"]), "links[1].shared_data_stream_id"),
    (lambda links, c: links[1].update(role="continuation"), "links[1].role"),
    (lambda links, c: links[2].update(role="origin"), "links[2].role"),
    (lambda links, c: links[0].update(reconciliation_id=c["recons"]["orders"]), "links[1].reconciliation_id"),
    (lambda links, c: links[0].update(reconciliation_id=99999), "links[0].reconciliation_id"),
    (lambda links, c: links[0].update(reconciliation_id="12a"), "links[0].reconciliation_id"),
    (lambda links, c: links[0].update(shared_data_stream_id=424242), "links[0].shared_data_stream_id"),
    (lambda links, c: links[0].update(role="middle"), "links[0].role"),
])
def test_a_bad_chain_is_422_naming_the_link_field(api, chain, mutate, field):
    links = three_links(chain)
    mutate(links, chain)
    response = api.post(PATH, {"name": "S", "links": links})
    assert response.status_code == 422, response.json_body
    assert field in [e["field"] for e in response.json_body["errors"]], response.json_body


def test_empty_links_and_missing_name_are_422(api, chain):
    response = api.post(PATH, {"links": []})
    assert response.status_code == 422
    assert {e["field"] for e in response.json_body["errors"]} >= {"name", "links"}


def test_deletes_of_what_a_story_chains_are_409_naming_it(api, chain):
    r = chain["recons"]
    story = api.post(PATH, {"name": "Order to cash", "links": three_links(chain)}).json_body
    refused = api.delete(f"/v1/reconciliations/{r['charges']}")
    assert refused.status_code == 409
    assert f"story {story['id']} ('Order to cash')" in refused.json_body["message"]
    # Still there and listed: the delete took its mark back.
    assert api.get(f"/v1/reconciliations/{r['charges']}").status_code == 200
    assert r["charges"] in [x["id"] for x in api.get("/v1/reconciliations").json_body["data"]]
    # A shared stream no reconciliation uses any more is still held by the story.
    assert api.delete(f"/v1/reconciliations/{r['other']}").status_code == 204
    assert api.patch(f"/v1/reconciliations/{r['payouts']}", {"side_a_stream_keys": ["orders"]}).status_code == 200
    assert api.patch(f"/v1/reconciliations/{r['charges']}", {"side_b_stream_keys": ["bank"]}).status_code == 200
    refused = api.delete("/v1/data_streams/payouts")
    assert refused.status_code == 409, refused.json_body
    assert f"story {story['id']}" in refused.json_body["message"]
    assert api.get("/v1/data_streams/payouts").status_code == 200
    assert api.delete(f"{PATH}/{story['id']}").status_code == 204
    assert api.get(f"{PATH}/{story['id']}").status_code == 404
    assert api.delete("/v1/data_streams/payouts").status_code == 204
    assert api.delete(f"/v1/reconciliations/{r['charges']}").status_code == 204


def test_unknown_story_is_404(api):
    assert api.get(f"{PATH}/999").status_code == 404
    assert api.get(f"{PATH}/abc").status_code == 404
    assert api.patch(f"{PATH}/999", {"name": "x"}).status_code == 404
    assert api.delete(f"{PATH}/999").status_code == 404
