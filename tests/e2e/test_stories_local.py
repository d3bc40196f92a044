"""A three-link story on the local stack, over HTTP: orders -> charges -> payouts -> bank, each
link run by the local run state machine, then its summary and traces, with a charge whose payout
never came (a break in the middle link)."""
from tests.support.stories import RECORD_DATE, order_to_cash
from tests.support.web_app import wait_for


def test_a_three_link_story_summarised_and_traced_end_to_end(stack):
    story = order_to_cash(stack)
    streams, orders, charges = story["streams"], story["orders"], story["charges"]
    payout, deposit = story["payout"], story["deposit"]

    def settled():
        """The summary once every link's figures are computed and none waits for a refresh (a run of a
        neighbouring link changes what a link's figures count: they catch up after it)."""
        summary = stack.request("GET", f"/reconciliation_stories/{story['id']}/summary").json()
        links = summary["links"]
        return summary if all(link["computed_at"] and not link["refresh_pending"] for link in links) else None

    summary = wait_for(settled, "every link's figures computed, no refresh pending", timeout=180)

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
