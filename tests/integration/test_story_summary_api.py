"""GET /reconciliation_stories/{id}/summary over the API, in-process on moto, after real runs:
orders -> charges -> payouts, where two charges passed the first link and were never paid out."""
from tests.integration.conftest import record

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}


def usd(count, credits, oldest=None):
    money = {"currency": "USD", "count": count, "credits": credits, "debits": 0, "decimal_places": 2}
    return {**money, "oldest_date": oldest} if oldest else money


def test_the_summary_shows_each_link_and_where_the_chain_leaks(api, ingest):
    streams = {key: api.post("/v1/data_streams", {"key": key, "name": key.title()}).json_body
               for key in ("orders", "charges", "payouts")}
    recons = [api.post("/v1/reconciliations", {"name": name, "run_type": "batch", "side_a_stream_keys": [a],
                                               "side_b_stream_keys": [b],
                                               "exception_after_days": 3}).json_body
              for name, a, b in (("Orders to charges", "orders", "charges"), ("Charges to payouts", "charges",
                                                                                 "payouts"))]
    for recon in recons:
        assert api.post(f"/v1/reconciliations/{recon['id']}/rules", RULE).status_code == 201
    ingest(record("orders", 1, 1000, "2026-11-02"), record("orders", 2, 2500, "2026-11-03"),
           record("orders", 3, 400, "2026-11-04"), record("orders", 4, 99, "2026-11-05"))
    ingest(record("charges", 1, 1000, "2026-11-02"), record("charges", 2, 2500, "2026-11-03"),
           record("charges", 3, 400, "2026-11-04"))
    ingest(record("payouts", 1, 1000, "2026-11-06"))
    story = api.post("/v1/reconciliation_stories", {"name": "Order to cash", "links": [
        {"reconciliation_id": recons[0]["id"], "position": 1},
        {"reconciliation_id": recons[1]["id"], "position": 2, "shared_data_stream_id": streams["charges"]["id"]}],
    }).json_body
    before = api.get(f"/v1/reconciliation_stories/{story['id']}/summary").json_body
    assert [link["computed_at"] for link in before["links"]] == [None, None]  # nothing ran yet
    runs = [api.post(f"/v1/reconciliations/{recon['id']}/runs").json_body for recon in recons]

    response = api.get(f"/v1/reconciliation_stories/{story['id']}/summary")

    assert response.status_code == 200, response.json_body
    summary = response.json_body
    assert (summary["story_id"], summary["name"]) == (story["id"], "Order to cash")
    origin, continuation = summary["links"]
    assert origin["link"] == story["links"][0]
    assert origin["side_a"] == {"matched": [usd(3, 3900)], "unmatched": [usd(1, 99, "2026-11-05")]}
    assert origin["side_b"] == {"matched": [usd(3, 3900)], "unmatched": []}
    assert origin["from_previous_link"] is None
    assert [(s["data_stream"]["name"], s["side"]) for s in origin["data_streams"]] == [("Orders", "a"),
                                                                                       ("Charges", "b")]
    assert origin["last_run"]["id"] == runs[0]["id"] and origin["last_run"]["status"] == "completed"
    assert continuation["side_a"] == {"matched": [usd(1, 1000)], "unmatched": [usd(2, 2900, "2026-11-03")]}
    assert continuation["side_b"] == {"matched": [usd(1, 1000)], "unmatched": []}
    assert continuation["from_previous_link"] == {
        "data_stream": {"id": streams["charges"]["id"], "name": "Charges"}, "count": 2,
        "totals": [usd(2, 2900, "2026-11-03")], "oldest_date": "2026-11-03"}
    [exception] = continuation["open_exceptions"]
    assert exception["data_stream_key"] == "charges" and exception["aggregates"]["record_count"] == 2
    assert [e["data_stream_key"] for e in origin["open_exceptions"]] == ["orders"]
    assert continuation["computed_at"] and not continuation["refresh_pending"]
    # The first link's run came before the second's, which asked it for a refresh (its tally of
    # the shared stream depends on the second's matches): the sweeper does it within a minute.
    assert origin["refresh_pending"]


def test_the_summary_of_an_unknown_story_is_not_found(api):
    response = api.get("/v1/reconciliation_stories/999/summary")
    assert response.status_code == 404
    assert api.get("/v1/reconciliation_stories/abc/summary").status_code == 404
