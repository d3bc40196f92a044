"""Bulk actions in the web app (Chromium, local stack; docs/bulk-actions.md): the exception queue's
ticked rows, or every exception its filters match, moved to a status, assigned or commented in one
`POST /reconciliation_exceptions/bulk`, its progress read from `GET /bulk_actions/{id}` and each item
the service refused listed with its reason; the matches page's selection decided in one
`POST /reconciliation_matches/bulk`. Effects are read back through the API; axe-core on each state."""
from __future__ import annotations

import pytest

from tests.e2e.test_web_app_exceptions import me, shows, sign_in_as, world
from tests.e2e.test_web_app_matches import open_matches, proposed_matches, status_of
from tests.support.chromium import needs_chromium
from tests.support.web_app import screenshot, serious_violations, tab_to

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]


def bulk_requests(page) -> list[tuple[str, str]]:
    """(method, path after /v1/) of every request the page sends to a bulk route, as it sends them."""
    sent: list[tuple[str, str]] = []
    page.on("request", lambda r: sent.append((r.method, r.url.split("/v1/", 1)[-1]))
            if "/bulk" in r.url or "/confirm" in r.url else None)
    return sent


def test_a_preparer_moves_ticked_exceptions_then_every_filtered_one_and_sees_each_refusal(stack, page):
    made = world(stack)
    recon, bank, ledger = made["reconciliation"], made["bank"], made["ledger"]
    email, _ = sign_in_as(stack, page, "preparer", f"#/exceptions?reconciliation_id={recon['id']}")
    shows(page, "2 exceptions")
    sent = bulk_requests(page)

    # Keyboard: tick both rows with Space, choose the status action and its status, press the button.
    page.get_by_label(f"Select {bank['title']}").focus()
    page.keyboard.press("Space")
    page.get_by_label(f"Select {ledger['title']}").focus()
    page.keyboard.press("Space")
    page.get_by_label("The 2 selected on this page").wait_for()
    page.get_by_label("Action", exact=True).select_option("status")
    page.get_by_label("New status").select_option("dismissed")
    assert serious_violations(page) == []
    tab_to(page, "Change status: 2 exceptions")
    page.keyboard.press("Enter")
    done = page.get_by_test_id("bulk-status")
    done.filter(has_text="Done: 2 succeeded, 0 skipped, 0 failed of 2 exceptions.").wait_for()
    assert {stack.request("GET", f"/reconciliation_exceptions/{e['id']}").json()["status"] for e in (bank, ledger)} \
        == {"dismissed"}
    assert [m for m, p in sent if p.startswith("reconciliation_exceptions/bulk")] == ["POST"]
    shows(page, "2 exceptions")  # read again: the rows show their new status
    page.locator("table.exception-queue").get_by_text("dismissed").first.wait_for()
    assert serious_violations(page) == []

    # Every exception the filters match: a move the service refuses for each, with its reason listed.
    page.get_by_label("Every exception the filters match (2)").check()
    page.get_by_label("New status").select_option("investigating")
    page.get_by_role("button", name="Change status: 2 exceptions").click()
    done.filter(has_text="Done: 0 succeeded, 0 skipped, 2 failed of 2 exceptions.").wait_for()
    refused = page.get_by_role("list", name="Items not done").get_by_role("listitem")
    texts = sorted(item.inner_text() for item in refused.all())
    screenshot(page, "exceptions-bulk")
    assert texts == sorted(f"{e['title']}: failed: an exception that is dismissed cannot become investigating"
                           for e in (bank, ledger)), texts
    body = [r for r in sent if r[1].startswith("reconciliation_exceptions/bulk")]
    assert len(body) == 2
    assert serious_violations(page) == []

    # Assigned to themselves by the filter: the one with the filter "unassigned" shows no more.
    page.get_by_label("Action", exact=True).select_option("assign")
    page.get_by_label("Assign to").select_option("me")
    page.get_by_label("Every exception the filters match (2)").check()
    page.get_by_role("button", name="Assign: 2 exceptions").click()
    done.filter(has_text="Done: 2 succeeded, 0 skipped, 0 failed of 2 exceptions.").wait_for()
    mine = me(stack, email)["id"]
    for e in (bank, ledger):
        assignees = stack.request("GET", f"/reconciliation_exceptions/{e['id']}").json()["assignees"]
        assert [a["user_id"] for a in assignees] == [mine]
    assert page.problems == []


def test_the_filter_choice_takes_the_service_level_filters_and_nothing_ticked_sends_nothing(stack, page):
    made = world(stack)
    recon, bank = made["reconciliation"], made["bank"]
    severity = stack.request("GET", f"/reconciliation_exceptions/{bank['id']}").json()["severity"]
    queue = f"/reconciliation_exceptions?reconciliation_id={recon['id']}&severity={severity}"
    listed = stack.request("GET", queue).json()["data"]
    sign_in_as(stack, page, "preparer", f"#{queue.replace('/reconciliation_exceptions', '/exceptions')}")
    page.wait_for_function("() => document.querySelector('[data-testid=exception-count]')?.dataset.for === location.hash")
    sent = bulk_requests(page)
    # The severity filter is a bulk filter too: every exception it keeps, as the queue lists them.
    page.get_by_label(f"Every exception the filters match ({len(listed)})").check()
    page.get_by_label("Action", exact=True).select_option("status")
    page.get_by_label("New status").select_option("open")
    page.get_by_role("button", name=f"Change status: {len(listed)} exception").click()
    page.get_by_test_id("bulk-status").filter(
        has_text=f"Done: 0 succeeded, {len(listed)} skipped, 0 failed of {len(listed)} exception").wait_for()
    assert [m for m, p in sent if p.startswith("reconciliation_exceptions/bulk")] == ["POST"]
    page.get_by_label("The 0 selected on this page").check()
    page.get_by_label("Action", exact=True).select_option("assign")
    # Nothing ticked: nothing is sent, and the page says why.
    page.get_by_role("button", name="Assign: 0 exceptions").click()
    page.get_by_role("alert").filter(has_text="Tick the exceptions to act on first.").wait_for()
    assert serious_violations(page) == []

    # A comment on the one ticked row; an empty comment is said before anything is sent.
    bank = made["bank"]
    page.evaluate("route => { location.hash = route; }", f"#/exceptions?reconciliation_id={recon['id']}")
    shows(page, "2 exceptions")
    page.get_by_label(f"Select {bank['title']}").check()
    page.get_by_label("Action", exact=True).select_option("comment")
    page.get_by_role("button", name="Comment: 1 exception").click()
    page.get_by_role("alert").filter(has_text="Write the comment first.").wait_for()
    page.get_by_label("Comment", exact=True).fill("Waiting for the bank statement")
    page.get_by_role("button", name="Comment: 1 exception").click()
    page.get_by_test_id("bulk-status").filter(has_text="Done: 1 succeeded, 0 skipped, 0 failed of 1 exception.").wait_for()
    comments = stack.request("GET", f"/reconciliation_exceptions/{bank['id']}").json()["comments"]
    assert [c["body"] for c in comments] == ["Waiting for the bank statement"]
    assert serious_violations(page) == []
    assert page.problems == []


def test_a_viewer_gets_no_bulk_controls(stack, page):
    made = world(stack)
    sign_in_as(stack, page, "viewer", f"#/exceptions?reconciliation_id={made['reconciliation']['id']}")
    shows(page, "2 exceptions")
    assert page.get_by_role("heading", name="Work many at once").count() == 0
    assert page.get_by_label(f"Select {made['bank']['title']}").count() == 0


def test_a_selection_of_matches_is_decided_in_one_bulk_action_with_each_outcome(stack, page):
    reconciliation, matches = proposed_matches(stack, 3)
    ids = [m["id"] for m in matches]
    sent = bulk_requests(page)
    open_matches(stack, page, reconciliation)
    for match_id in ids:
        page.get_by_label(f"Select match {match_id}").check()
    assert stack.request("POST", f"/reconciliation_matches/{ids[2]}/confirm").status_code == 200  # someone else
    page.get_by_role("button", name="Confirm selected").click()
    page.get_by_role("status").filter(has_text="3 of 3 matches confirmed.").wait_for()
    outcomes = page.get_by_role("region", name="Decided: 3 of 3")
    assert [item.inner_text() for item in outcomes.get_by_role("listitem").all()] == [
        f"Match {ids[0]}: confirmed", f"Match {ids[1]}: confirmed", f"Match {ids[2]}: confirmed (already confirmed)"]
    assert [status_of(stack, i) for i in ids] == ["confirmed"] * 3
    assert [r for r in sent if r[1].startswith("reconciliation_matches")] == [("POST", "reconciliation_matches/bulk")]
    assert serious_violations(page) == []
    assert page.problems == []


def test_every_proposed_match_of_a_reconciliation_is_confirmed_in_one_bulk_action(stack, page):
    reconciliation, matches = proposed_matches(stack, 3)
    sent = bulk_requests(page)
    open_matches(stack, page, reconciliation)
    page.get_by_role("button", name="Confirm all proposed").click()  # asks first
    question = page.get_by_role("group", name="Confirm every proposed match of this reconciliation, on every page?")
    assert serious_violations(page) == []
    question.get_by_role("button", name="Yes, confirm all").click()
    page.get_by_role("status").filter(has_text="3 of 3 matches confirmed.").wait_for()
    page.get_by_text("No proposed matches.").wait_for()
    assert [status_of(stack, m["id"]) for m in matches] == ["confirmed"] * 3
    assert [r for r in sent if r[1].startswith("reconciliation_matches")] == [("POST", "reconciliation_matches/bulk")]
    assert serious_violations(page) == []
    assert page.problems == []
