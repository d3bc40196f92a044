"""A three-link story on the local stack, over HTTP: orders -> charges -> payouts -> bank, each
link run by the local run state machine, then its summary and traces, with a charge whose payout
never came (a break in the middle link)."""
import time
import uuid
from datetime import date

RECORD_DATE = date.today().isoformat()  # recent: nothing ages into an exception


def _post(stack, path, body):
    response = stack.request("POST", path, body)
    assert response.status_code in (201, 202), response.json()
    return response.json()


def _ingest(stack, items, timeout=60):
    summary = _post(stack, "/records/bulk", {"records": items})
    deadline = time.monotonic() + timeout
    while True:
        body = stack.request("GET", f"/bulk_requests/{summary['id']}").json()
        if body["status"] == "completed":
            assert all(r["status"] == "successful" for r in body["results"]), body["results"]
            return [r["record_id"] for r in body["results"]]
        assert time.monotonic() < deadline, body
        time.sleep(0.2)


def _run(stack, reconciliation_id, timeout=60):
    run = _post(stack, f"/reconciliations/{reconciliation_id}/runs", None)
    deadline = time.monotonic() + timeout
    while run["status"] not in ("completed", "failed"):
        assert time.monotonic() < deadline, run
        time.sleep(0.2)
        run = stack.request("GET", f"/reconciliations/{reconciliation_id}/runs/{run['id']}").json()
    assert run["status"] == "completed", run


def _item(stream, n, amount, **metadata):
    return {"data_stream_key": stream, "external_id": f"{stream}-{n}", "amount": amount, "date": RECORD_DATE,
            "direction": "credit", "currency": "USD", "metadata": metadata}


def test_a_three_link_story_summarised_and_traced_end_to_end(stack):
    suffix = uuid.uuid4().hex[:6]
    keys = {name: f"{name}-{suffix}" for name in ("orders", "charges", "payouts", "bank")}
    streams = {name: _post(stack, "/data_streams", {"key": key, "name": f"{name.title()} {suffix}"})
               for name, key in keys.items()}
    recons = [_post(stack, "/reconciliations", {"name": f"{a} to {b} {suffix}", "run_type": "batch",
                                                "side_a_stream_keys": [keys[a]], "side_b_stream_keys": [keys[b]]})
              for a, b in (("orders", "charges"), ("charges", "payouts"), ("payouts", "bank"))]
    rules = [{"conditions": [{"field": "metadata.order", "operator": "equals"}]},
             {"cardinality": "many_to_one", "group_by": {"side_a": ["metadata.payout"]},
              "conditions": [{"field": "metadata.payout", "operator": "equals"},
                             {"field": "amount", "operator": "equals"}]},
             {"conditions": [{"field": "amount", "operator": "equals"}]}]
    for recon, rule in zip(recons, rules, strict=True):
        _post(stack, f"/reconciliations/{recon['id']}/rules", {"name": "By reference", "priority": 1, **rule})
    orders = _ingest(stack, [_item(keys["orders"], n, 1000 * n, order=f"o{n}") for n in (1, 2, 3, 4)])
    # Charge 4 is paid out in p2, which never arrives: it passes the first link and stops in the second.
    charges = _ingest(stack, [_item(keys["charges"], n, 1000 * n, order=f"o{n}", payout="p1" if n < 4 else "p2")
                              for n in (1, 2, 3, 4)])
    [payout] = _ingest(stack, [_item(keys["payouts"], 1, 6000, payout="p1")])
    [deposit] = _ingest(stack, [_item(keys["bank"], 1, 6000)])
    story = _post(stack, "/reconciliation_stories", {"name": f"Order to cash {suffix}", "links": [
        {"reconciliation_id": recons[0]["id"], "position": 1},
        {"reconciliation_id": recons[1]["id"], "position": 2, "shared_data_stream_id": streams["charges"]["id"]},
        {"reconciliation_id": recons[2]["id"], "position": 3, "shared_data_stream_id": streams["payouts"]["id"]}]})
    for recon in recons:
        _run(stack, recon["id"])

    summary = stack.request("GET", f"/reconciliation_stories/{story['id']}/summary").json()

    def usd(count, credits):
        return {"currency": "USD", "count": count, "credits": credits, "debits": 0, "decimal_places": 2}

    first, middle, last = summary["links"]
    assert [m["count"] for m in first["side_a"]["matched"] + first["side_b"]["matched"]] == [4, 4]
    assert first["side_a"]["unmatched"] == first["side_b"]["unmatched"] == []
    assert middle["side_a"]["matched"] == [usd(3, 6000)]
    assert middle["side_a"]["unmatched"] == [{**usd(1, 4000), "oldest_date": RECORD_DATE}]
    assert middle["from_previous_link"]["count"] == 1  # the leak: charge 4 passed link 1, not link 2
    assert middle["from_previous_link"]["data_stream"]["id"] == streams["charges"]["id"]
    assert last["side_a"]["matched"] == last["side_b"]["matched"] == [usd(1, 6000)]
    assert last["from_previous_link"]["count"] == 0
    assert all(link["last_run"]["status"] == "completed" for link in summary["links"])

    # The deposit goes back through the payout to its three charges and their orders: no break.
    traced = stack.request("GET", f"/reconciliation_stories/{story['id']}/trace",
                           params={"record_id": deposit}).json()
    [start] = traced["hops"]
    assert start["link"]["position"] == 3 and {r["id"] for r in start["records"]["data"]} == {deposit, payout}
    [payout_hop] = start["next"]
    assert payout_hop["link"]["position"] == 2 and payout_hop["records"]["count"] == 4
    assert {r["id"] for r in payout_hop["records"]["data"]} == {payout, *charges[:3]}
    order_hops = payout_hop["next"]
    assert [h["link"]["position"] for h in order_hops] == [1, 1, 1]
    assert {r["id"] for h in order_hops for r in h["records"]["data"]} == {*orders[:3], *charges[:3]}
    assert traced["breaks"] == []

    # Order 4 goes forward to its charge, which breaks in the middle link.
    traced = stack.request("GET", f"/reconciliation_stories/{story['id']}/trace",
                           params={"record_id": orders[3]}).json()
    [start] = traced["hops"]
    assert start["link"]["position"] == 1 and start["match"]["status"] == "confirmed"
    [broken] = start["next"]
    assert (broken["link"]["position"], broken["direction"], broken["match"]) == (2, "downstream", None)
    assert broken["break"]["reason"] == "unmatched" and broken["records"]["data"][0]["id"] == charges[3]
    assert [(b["link_position"], b["reason"], b["record_ids"]) for b in traced["breaks"]] == [
        (2, "unmatched", [charges[3]])]
