"""The Stories page in Debian's Chromium against the local stack: a three-link story (orders ->
charges -> payouts -> bank, each link run) drawn as a chain with its leak (a charge whose payout
never came passed link 1 but not link 2), and the trace of a record entered by id and of one picked
from a stream, each checked against the API's own answer; an admin renames the story, a viewer gets
no control to and the API refuses them. axe-core finds no serious violation on any state."""
from __future__ import annotations

import uuid

import pytest
import requests

from tests.support.chromium import needs_chromium
from tests.support.stories import RECORD_DATE, order_to_cash
from tests.support.web_app import (
    person,
    screenshot,
    serious_violations,
    signed_in,
    token_of,
    wait_for,
)

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]


@pytest.fixture(scope="module")
def story(stack):
    return order_to_cash(stack, key_prefix="web-")


def test_a_viewer_sees_the_chain_where_it_leaks_and_traces_a_record_entered_or_picked(stack, page, story):
    name = stack.request("GET", f"/reconciliation_stories/{story['id']}").json()["name"]

    def leaks() -> bool:  # a link's figures catch up with its neighbours' runs within the sweeper's minute
        links = stack.request("GET", f"/reconciliation_stories/{story['id']}/summary").json()["links"]
        return [(link.get("from_previous_link") or {}).get("count", 0) for link in links] == [0, 1, 0]
    wait_for(leaks, "the story's leak in link 2 alone, what the page is to show", timeout=180)

    signed_in(stack, page, role="viewer", hash_route="#/stories")
    listed = page.get_by_role("row").filter(has=page.get_by_role("link", name=name))
    assert listed.inner_text().split("\t")[1:3] == [" → ".join(r["name"] for r in story["recons"]), "3"]
    assert serious_violations(page) == []
    page.get_by_role("link", name=name).click()
    page.get_by_role("heading", name=name, level=2).wait_for()
    steps = page.locator("ol.chain > li")
    steps.nth(2).locator(".chain-figures").wait_for()  # the summary's figures arrived
    assert steps.count() == 3
    assert [steps.nth(i).locator(".chain-title").inner_text() for i in range(3)] == [
        f"Link {n + 1} {recon['name']}" for n, recon in enumerate(story["recons"])]
    assert steps.locator(".chain-arrow").count() == 2  # an arrow joins each link to the one before
    assert steps.nth(1).locator(".chain-via").inner_text() == f"via Charges {story['suffix']}"
    assert steps.nth(2).locator(".chain-via").inner_text() == f"via Payouts {story['suffix']}"
    # The leak: charge 4 (40.00 USD) passed link 1 and is still open in link 2; link 3 leaks nothing.
    assert "chain-leaks" in steps.nth(1).get_attribute("class")
    assert "chain-leaks" not in steps.nth(2).get_attribute("class")
    assert steps.nth(1).locator("dd.leak").inner_text() == f"1 record of Charges {story['suffix']}: 40.00 USD credits"
    rows = page.get_by_role("table", name="Records matched in the previous link but still open in this one") \
        .locator("tbody tr")
    assert rows.nth(0).inner_text().split("\t") == [
        f"2. {story['recons'][1]['name']}", f"Charges {story['suffix']}", "1", "40.00 USD credits", RECORD_DATE]
    assert rows.nth(1).inner_text().split("\t")[2:4] == ["0", "nothing"]
    assert page.get_by_role("button", name="Rename").count() == 0  # a viewer gets no control
    assert serious_violations(page) == []

    # A record entered by id: order 4 goes to its charge, which breaks in link 2.
    page.get_by_label("Record id").fill(str(story["orders"][3]))
    page.get_by_role("button", name="Trace", exact=True).click()
    trace = page.locator(f".trace[data-record='{story['orders'][3]}']")
    trace.wait_for()
    api_trace = stack.request("GET", f"/reconciliation_stories/{story['id']}/trace",
                              params={"record_id": story["orders"][3]}).json()
    [start] = api_trace["hops"]
    first = trace.locator("ol.trace-hops > li.hop").first
    assert first.get_attribute("data-position") == "1"
    assert f"Match {start['match']['id']}, confirmed" in first.locator(".hop-what").first.inner_text()
    broken = first.locator("li.hop")
    assert (broken.count(), broken.get_attribute("data-position")) == (1, "2")
    assert "hop-unmatched" in broken.get_attribute("class")
    assert "Break: unmatched" in broken.locator(".hop-what").inner_text()
    assert broken.get_by_role("button", name=f"Trace record {story['charges'][3]}").is_visible()
    assert trace.locator(".trace-breaks li").inner_text() == f"Link 2: unmatched, 1 record {story['charges'][3]}"
    assert "record=" + str(story["orders"][3]) in page.evaluate("() => location.hash")
    assert serious_violations(page) == []

    # A record picked from the bank stream: the deposit goes back through the payout to three
    # charges and their orders, without a break.
    page.get_by_text("Pick a record").click()
    page.get_by_label("Stream").select_option(label=f"Bank {story['suffix']}")
    page.get_by_role("button", name=f"Trace record {story['deposit']}").click()
    trace = page.locator(f".trace[data-record='{story['deposit']}']")
    trace.wait_for()
    assert trace.locator(".trace-clean").inner_text() == "No break: every step of this record's path is matched."
    positions = trace.locator("li.hop").evaluate_all("hops => hops.map(h => h.dataset.position)")
    assert positions == ["3", "2", "1", "1", "1"]  # the tree, in order: link 3, its payout in 2, three orders
    payout_hop = trace.locator("li.hop[data-position='2']")
    assert "4 records: 120.00 USD credits" in payout_hop.locator(".hop-what").first.inner_text()
    shown = payout_hop.locator("table").first.locator("tbody tr td:first-child").all_inner_texts()
    assert set(map(int, shown)) == {story["payout"], *story["charges"][:3]}
    assert serious_violations(page) == []
    screenshot(page, "stories")

    # A record that does not exist: the service's answer, where the person looks.
    page.get_by_label("Record id").fill("999999999")
    page.get_by_role("button", name="Trace", exact=True).click()
    page.get_by_role("alert").filter(
        has_text="Could not trace record 999999999: record 999999999 not found").wait_for()
    assert page.locator(".trace").count() == 0
    # The browser logs the 404 it was answered; nothing else went wrong.
    assert [p for p in page.problems if not ("status of 404" in p and "record_id=999999999" in p)] == []


def test_an_admin_renames_a_story_and_a_viewer_may_not(stack, page, story):
    new_name = f"Orders to bank {uuid.uuid4().hex[:6]}"
    signed_in(stack, page, hash_route=f"#/stories/{story['id']}")
    page.get_by_label("Story name").fill(new_name)
    page.get_by_role("button", name="Rename").click()
    page.get_by_role("status").filter(has_text=f"Renamed to {new_name}.").wait_for()
    page.get_by_role("heading", name=new_name, level=2).wait_for()
    assert stack.request("GET", f"/reconciliation_stories/{story['id']}").json()["name"] == new_name
    assert serious_violations(page) == []
    assert page.problems == []

    viewer = token_of(stack, *person(stack, "viewer"))
    refused = requests.patch(f"{stack.url}/reconciliation_stories/{story['id']}", json={"name": "Not mine"},
                             headers={"Authorization": f"Bearer {viewer}"}, timeout=30)
    assert refused.status_code == 403, refused.text
    assert stack.request("GET", f"/reconciliation_stories/{story['id']}").json()["name"] == new_name
