"""Four-eyes approvals and period closes in the web app (Debian's Chromium, local stack): a manual
match held by a reconciliation's policy shows pending on the Approvals page (and in the navigation's
count), a second person approves it by keyboard and the match it made is there; a rejection asks
for a reason; the requester sees why they cannot decide their own request; an approval decided
meanwhile is refused with the service's reason and shown as it now is; on a reconciliation's page an
admin sets its approval policy, closes a period, exports its report and reopens it. Each effect is
read back through the API; axe-core finds no serious or critical violation in any state."""
from __future__ import annotations

import re

import pytest

from tests.e2e.test_web_app_exceptions import day, sign_in_as, world
from tests.support.chromium import needs_chromium
from tests.support.web_app import (
    as_person,
    downloaded_csv,
    held_dismissal,
    main_nav,
    person,
    printed,
    screenshot,
    serious_violations,
    sign_in,
    signed_in,
    tab_to,
    token_of,
    unexpected,
)

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]


def hold(stack, made: dict, action: str, role: str = "preparer", name: str | None = None) -> tuple[dict, tuple]:
    """The reconciliation's policy holds `action` at any amount; a new person of `role` asks for it
    (a manual match of the ACME payout and its ledger partner, or the bank exception's dismissal): the
    service answers 202 with the pending approval. Answers (approval, (email, password))."""
    recon = made["reconciliation"]
    policy = stack.request("PUT", f"/reconciliations/{recon['id']}/approval_policy", {"actions": [action], "threshold": 0})
    assert policy.status_code == 200, policy.text
    who = person(stack, role, name or f"{role.title()} {made['suffix']}")
    token = token_of(stack, *who)
    if action == "manual_match":
        asked = as_person(stack, token, "POST", "/reconciliation_matches",
                          {"reconciliation_id": recon["id"], "record_ids": [made["payout"], made["partner"]]})
    else:
        asked = as_person(stack, token, "PATCH", f"/reconciliation_exceptions/{made['bank']['id']}", {"status": "dismissed"})
    assert asked.status_code == 202, asked.text
    approval = asked.json()
    assert approval["status"] == "pending"
    return approval, who


def row(page, approval_id: int):
    return page.locator(f"tr[data-approval-id='{approval_id}']")


def detail_heading(page, approval_id: int):
    return page.get_by_role("heading", level=2, name=re.compile(rf"^Approval {approval_id}: "))


def test_the_pending_count_arriving_moves_no_link_of_the_navigation(stack, page):
    """The count of pending approvals comes after the page (its own request): a link to the right of
    Approvals stays where it was, so a click aimed at it as the count lands still lands on it."""
    made = world(stack)
    hold(stack, made, "manual_match")
    held = []
    pattern = "**/v1/approvals?status=pending*"
    page.route(pattern, lambda route: held.append(route))
    sign_in_as(stack, page, "approver", "#/overview")
    rates = main_nav(page).get_by_role("link", name="Rates", exact=True)
    for _ in range(500):  # the header asks for the count once it is shown
        if held:
            break
        page.wait_for_timeout(20)
    assert held, "the count was not asked for"
    before = rates.bounding_box()
    for route in held:
        route.continue_()
    page.unroute(pattern)
    main_nav(page).get_by_test_id("pending-approvals").wait_for()
    assert rates.bounding_box() == before
    rates.click()
    page.get_by_role("heading", name="Rate streams").wait_for()


def test_a_held_match_shows_pending_and_a_second_person_approves_it_by_keyboard(stack, page):
    made = world(stack)
    approval, _ = hold(stack, made, "manual_match", name=f"Pat {made['suffix']}")
    sign_in_as(stack, page, "approver", "#/approvals")
    page.get_by_role("heading", level=1, name="Approvals").wait_for()

    # Pending ones are listed first: what, on what, how much, by whom and until when.
    listed = row(page, approval["id"])
    listed.wait_for()
    assert listed.get_attribute("data-status") == "pending"
    text = listed.inner_text()
    assert "1,250.00 USD" in text and f"Pat {made['suffix']}" in text, text
    assert listed.get_by_role("link", name=made["reconciliation"]["name"]).get_attribute("href") == \
        f"#/reconciliations/{made['reconciliation']['id']}"
    badge = main_nav(page).get_by_test_id("pending-approvals")
    badge.wait_for()
    assert re.fullmatch(r", \d+\+? pending", badge.text_content()) and badge.text_content() != ", 0 pending"
    assert serious_violations(page) == []
    screenshot(page, "approvals")

    listed.get_by_role("link", name=approval["description"]).click()
    detail_heading(page, approval["id"]).wait_for()
    assert "Pending" in page.get_by_test_id("approval-status").inner_text()
    assert page.get_by_text("Expires", exact=True).is_visible()
    assert serious_violations(page) == []

    # By keyboard: from the page's heading, Tab to Approve and press Enter.
    tab_to(page, "Approve")
    page.keyboard.press("Enter")
    outcome = page.get_by_test_id("approval-outcome")
    outcome.filter(has_text="Approved: the action ran.").wait_for()
    page.wait_for_function("() => document.activeElement?.dataset.testid === 'approval-outcome'")
    done = stack.request("GET", f"/approvals/{approval['id']}").json()
    assert done["status"] == "approved", done
    match_id = done["result"]["reconciliation_match_id"]
    assert f"It made match {match_id}." in outcome.inner_text()
    assert page.get_by_role("button", name="Approve").count() == 0
    assert stack.request("GET", f"/reconciliation_matches/{match_id}").json()["status"] == "confirmed"
    assert serious_violations(page) == []

    # The effect is on its page: the match the approval made, with both records.
    page.get_by_role("main").get_by_role("link", name=f"Match {match_id}").first.click()
    page.get_by_role("heading", level=1, name="Matches").wait_for()
    page.get_by_role("cell", name="ACME PAYOUT", exact=True).wait_for()
    assert page.get_by_role("cell", name="Acme payout", exact=True).is_visible()
    assert page.problems == []


def test_a_rejection_asks_for_a_reason_by_keyboard_and_changes_nothing(stack, page):
    made = world(stack)
    approval, _ = hold(stack, made, "dismissal")
    sign_in_as(stack, page, "approver", f"#/approvals/{approval['id']}")
    detail_heading(page, approval["id"]).wait_for()
    assert page.get_by_role("link", name=f"Exception {made['bank']['id']}").get_attribute("href") == \
        f"#/exceptions/{made['bank']['id']}"

    # Reject asks first, with a labelled reason; Escape cancels and the focus returns to Reject.
    tab_to(page, f"Reject approval {approval['id']}")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.activeElement?.id === 'reject-reason'")
    assert page.get_by_label("Reason for rejecting").is_visible()
    page.keyboard.press("Escape")
    page.wait_for_function("label => document.activeElement?.getAttribute('aria-label') === label",
                           arg=f"Reject approval {approval['id']}")
    assert page.get_by_label("Reason for rejecting").count() == 0

    # Without a reason, Yes is refused beside the field (nothing sent); with one, it is rejected.
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.activeElement?.id === 'reject-reason'")
    page.keyboard.press("Tab")
    page.wait_for_function("() => document.activeElement?.textContent === 'Yes, reject'")
    page.keyboard.press("Enter")
    page.get_by_text("Give a reason: the requester reads it.").wait_for()
    page.wait_for_function("() => document.activeElement?.id === 'reject-reason'")
    assert page.get_by_label("Reason for rejecting").get_attribute("aria-invalid") == "true"
    assert serious_violations(page) == []
    screenshot(page, "approval-detail")
    assert stack.request("GET", f"/approvals/{approval['id']}").json()["status"] == "pending"
    reason = f"Not ours to dismiss: the payout is due {made['suffix']}"
    page.keyboard.type(reason)
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.get_by_test_id("approval-outcome").filter(has_text="Rejected: nothing of the action was done.").wait_for()
    assert page.get_by_test_id("rejection-reason").inner_text() == reason
    decided = stack.request("GET", f"/approvals/{approval['id']}").json()
    assert (decided["status"], decided["rejection_reason"]) == ("rejected", reason)
    assert stack.request("GET", f"/reconciliation_exceptions/{made['bank']['id']}").json()["status"] == "open"
    assert serious_violations(page) == []
    assert page.problems == []


def test_the_requester_sees_why_they_cannot_decide_their_own_request(stack, page):
    made = world(stack)
    approval, (email, password) = hold(stack, made, "manual_match", role="approver")
    _, _, url = printed(stack)
    page.goto(url)
    sign_in(page, email, password)
    page.get_by_role("heading", name="Overview").wait_for()
    page.evaluate("route => { location.hash = route; }", "#/approvals")
    listed = row(page, approval["id"])
    listed.wait_for()
    assert "yours: another approver decides it" in listed.inner_text()
    listed.get_by_role("link", name=approval["description"]).click()
    detail_heading(page, approval["id"]).wait_for()
    assert "another approver or admin must decide it (four eyes)" in page.get_by_test_id("four-eyes").inner_text()
    assert page.get_by_role("button", name="Approve").count() == 0
    assert page.get_by_role("button", name=re.compile("^Reject")).count() == 0
    assert serious_violations(page) == []
    # The API refuses it too.
    refused = as_person(stack, token_of(stack, email, password), "POST", f"/approvals/{approval['id']}/approve")
    assert refused.status_code == 403, refused.text
    assert stack.request("GET", f"/approvals/{approval['id']}").json()["status"] == "pending"
    assert page.problems == []

    # A viewer reads it, is told who decides it, and gets no button either (the API refuses them too).
    page.get_by_role("button", name="Sign out").click()
    viewer = person(stack, "viewer")
    sign_in(page, *viewer)  # back where the page was: the approval
    detail_heading(page, approval["id"]).wait_for()
    assert page.get_by_test_id("who").inner_text() == "Viewer person"
    assert "An approver or admin decides it" in page.get_by_test_id("four-eyes").inner_text()
    assert page.get_by_role("button", name="Approve").count() == 0
    assert serious_violations(page) == []
    assert as_person(stack, token_of(stack, *viewer), "POST", f"/approvals/{approval['id']}/approve").status_code == 403
    assert page.problems == []


def test_an_approval_decided_meanwhile_is_refused_and_shown_as_it_now_is(stack, page):
    made = world(stack)
    approval, _ = hold(stack, made, "dismissal")
    other = token_of(stack, *person(stack, "approver"))  # before the page: it reads a pending one again every 15 s
    sign_in_as(stack, page, "approver", f"#/approvals/{approval['id']}")
    detail_heading(page, approval["id"]).wait_for()
    approved = as_person(stack, other, "POST", f"/approvals/{approval['id']}/approve")
    assert approved.status_code == 200 and approved.json()["status"] == "approved", approved.text
    page.get_by_role("button", name="Approve").click()
    alert = page.get_by_role("alert").filter(has_text="Could not decide the approval")
    alert.wait_for()
    assert f"approval {approval['id']} is approved" in alert.inner_text()
    page.get_by_test_id("approval-status").filter(has_text="Approved").wait_for()
    assert page.get_by_role("button", name="Approve").count() == 0
    assert serious_violations(page) == []
    assert unexpected(page.problems, 409) == []


def test_an_admin_sets_the_policy_closes_a_period_exports_its_report_and_reopens_it(stack, page):
    made = world(stack)  # records dated 20, 14 and 12 days ago, none matched
    recon = made["reconciliation"]
    signed_in(stack, page, "admin", f"#/reconciliations/{recon['id']}")
    page.get_by_role("heading", level=2, name=recon["name"]).wait_for()
    policy = page.get_by_role("region", name="Approval policy")
    policy.get_by_test_id("policy-summary").filter(has_text="No action waits").wait_for()

    # The policy, edited by the admin.
    policy.get_by_role("button", name="Edit the approval policy").click()
    form = page.get_by_role("form", name="Edit the approval policy")
    form.get_by_label("Manual match").check()
    form.get_by_label("Dismiss or resolve an exception").check()
    form.get_by_label("Threshold", exact=True).fill("oops")
    form.get_by_role("button", name="Save the approval policy").click()
    form.get_by_text("an amount with at most 2 decimal places").wait_for()
    assert serious_violations(page) == []
    form.get_by_label("Threshold", exact=True).fill("1,000.00")
    form.get_by_label("Expires after (minutes)").fill("120")
    form.get_by_role("button", name="Save the approval policy").click()
    summary = policy.get_by_test_id("policy-summary")
    summary.filter(has_text="1,000.00").wait_for()
    assert "2 hours" in policy.inner_text() and "Manual match" in policy.inner_text()
    saved = stack.request("GET", f"/reconciliations/{recon['id']}/approval_policy").json()
    assert (sorted(saved["actions"]), saved["threshold"], saved["expires_after_minutes"]) == (
        ["dismissal", "manual_match"], 100000, 120)

    # A period closed with its sign-off: listed with what was open at close.
    closes = page.get_by_role("region", name="Period closes")
    close_form = closes.get_by_role("form", name="Close a period")
    close_form.get_by_label("Period start").fill(day(30))
    close_form.get_by_label("Period end").fill(day(10))
    close_form.get_by_label("Sign-off note").fill("Timing: the ACME payout posts next week")
    close_form.get_by_role("button", name="Close the period").click()
    title = f"{day(30)} to {day(10)}"
    closes.get_by_role("status").filter(has_text=f"Closed the period {title}").wait_for()
    [close] = stack.request("GET", f"/reconciliations/{recon['id']}/period_closes").json()["data"]
    assert (close["status"], close["note"]) == ("closed", "Timing: the ACME payout posts next week")
    card = page.locator(f"article[data-close-id='{close['id']}']")
    card.wait_for()
    assert card.get_attribute("data-status") == "closed"
    for exception in (made["bank"], made["ledger"]):
        assert card.get_by_role("link", name=exception["title"]).get_attribute("href") == f"#/exceptions/{exception['id']}"
    assert "1,250.00 USD" in card.inner_text()
    assert serious_violations(page) == []
    screenshot(page, "period-closes")

    # Its report, with the export controls.
    _, rows = downloaded_csv(card.get_by_role("group", name=f"Close report, period {title}"), "period_close_report")
    assert {r["line"] for r in rows} == {"exception", "unmatched"}
    assert {int(r["exception_id"]) for r in rows if r["line"] == "exception"} == {made["bank"]["id"], made["ledger"]["id"]}

    # Reopened by the admin, with a reason.
    card.get_by_role("button", name=f"Reopen the period {title}").click()
    page.wait_for_function("id => document.activeElement?.id === id", arg=f"reopen-{close['id']}-reason")
    card.get_by_role("button", name="Yes, reopen").click()
    card.get_by_text("Give a reason: it is kept on the close and in the audit trail.").wait_for()
    card.get_by_label("Reason for reopening").fill("The bank's late fee for the period arrived")
    assert serious_violations(page) == []
    card.get_by_role("button", name="Yes, reopen").click()
    closes.get_by_role("status").filter(has_text=f"Reopened the period {title}").wait_for()
    page.locator(f"article[data-close-id='{close['id']}'][data-status='reopened']").wait_for()
    assert card.get_by_test_id(f"reopen-reason-{close['id']}").inner_text() == "The bank's late fee for the period arrived"
    reopened = stack.request("GET", f"/reconciliations/{recon['id']}/period_closes/{close['id']}").json()
    assert (reopened["status"], reopened["reopen_reason"]) == ("reopened", "The bank's late fee for the period arrived")
    assert card.get_by_role("button", name=re.compile("^Reopen")).count() == 0
    assert serious_violations(page) == []
    assert page.problems == []


def test_an_approver_closes_but_neither_edits_the_policy_nor_reopens(stack, page):
    made = world(stack)
    recon = made["reconciliation"]
    made_close = stack.request("POST", f"/reconciliations/{recon['id']}/period_closes", {
        "period_start": day(30), "period_end": day(25), "note": "Nothing open in these days"})
    assert made_close.status_code == 201, made_close.text
    sign_in_as(stack, page, "approver", f"#/reconciliations/{recon['id']}")
    card = page.locator(f"article[data-close-id='{made_close.json()['id']}']")
    card.wait_for()
    assert page.get_by_role("form", name="Close a period").is_visible()
    assert page.get_by_role("button", name="Edit the approval policy").count() == 0
    assert card.get_by_role("button", name=re.compile("^Reopen")).count() == 0
    assert serious_violations(page) == []
    assert page.problems == []


def test_a_dismissal_held_on_the_exception_page_links_to_its_pending_approval(stack, page):
    bank = held_dismissal(stack, page)["bank"]
    link = page.get_by_role("link", name=re.compile(r"^Open approval \d+$"))
    link.wait_for()
    approval_id = int(link.inner_text().rsplit(" ", 1)[1])
    link.click()
    detail_heading(page, approval_id).wait_for()
    assert "Pending" in page.get_by_test_id("approval-status").inner_text()
    assert page.get_by_role("link", name=f"Exception {bank['id']}").is_visible()
    assert "another approver or admin must decide it" in page.get_by_test_id("four-eyes").inner_text()
    assert serious_violations(page) == []
    assert stack.request("GET", f"/reconciliation_exceptions/{bank['id']}").json()["status"] == "open"
    assert page.problems == []
