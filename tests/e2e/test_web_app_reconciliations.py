"""The Reconciliations page in Debian's Chromium against the local stack: the list, a reconciliation's
rules edited (with the API's field errors), added, reordered and deleted by an admin, a rule and the
rule set dry run by a preparer, a run started and watched to its end, and the runs history paged.
Each action's effect is read back through the API; a viewer gets none of the controls and the API
refuses them; axe-core finds no serious violation in any state shown."""
from __future__ import annotations

import pytest

from tests.support.chromium import needs_chromium
from tests.support.web_app import (
    as_person,
    ingest,
    main_nav,
    printed,
    reconciliation_with_rule,
    role_token,
    screenshot,
    serious_violations,
    sign_in,
    signed_in,
    start_run,
    wait_run,
)

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]






def pairs(stack, bank: str, ledger: str, count: int, unmatched: int = 0) -> None:
    """`count` bank credits with a ledger debit of the same amount two days later, and `unmatched`
    bank credits without one."""
    ingest(stack, [{"date": "2026-11-02", "data_stream_key": bank, "amount": 10_000 + n, "direction": "credit",
                    "description": f"Payout {n}"} for n in range(count + unmatched)])
    ingest(stack, [{"date": "2026-11-04", "data_stream_key": ledger, "amount": 10_000 + n, "direction": "debit",
                    "description": f"Payout {n}"} for n in range(count)])










def rules_of(stack, reconciliation_id: int) -> list[dict]:
    return stack.request("GET", f"/reconciliations/{reconciliation_id}/rules").json()["data"]


def open_reconciliation(stack, page, reconciliation: dict, role: str = "admin"):
    signed_in(stack, page, role=role, hash_route=f"#/reconciliations/{reconciliation['id']}")
    page.get_by_role("heading", name=reconciliation["name"]).wait_for()
    page.get_by_role("heading", name="Rules").wait_for()
    return page


def rule_item(page, name: str):
    return page.locator("li.rule").filter(has=page.get_by_role("heading", name=name, exact=True))


def test_the_list_leads_to_a_reconciliation_whose_rule_an_admin_edits_past_the_apis_field_errors(stack, page):
    reconciliation, rule, bank, _ = reconciliation_with_rule(stack)
    signed_in(stack, page, hash_route="#/reconciliations")
    link = page.get_by_role("link", name=reconciliation["name"])
    link.wait_for()
    row = page.get_by_role("row").filter(has=link)
    assert bank.title() in row.inner_text() and "never run" in row.inner_text()
    assert serious_violations(page) == []

    link.click()
    page.get_by_role("heading", name=reconciliation["name"]).wait_for()
    item = rule_item(page, "Amount, 3 days")
    item.get_by_text("date within 3 days").wait_for()
    item.get_by_role("button", name="Edit Amount, 3 days").click()
    form = page.get_by_role("form", name="Edit “Amount, 3 days”")
    form.get_by_label("Rule name", exact=True).fill("")
    second = form.get_by_role("group", name="Condition 2")
    second.get_by_label("Days apart at most").fill("400")
    assert serious_violations(page) == []
    form.get_by_role("button", name="Save rule").click()

    summary = form.get_by_role("alert")
    summary.wait_for()
    assert "The rule was not saved" in summary.inner_text()
    name_error = form.locator(".field-error").filter(has_text="is required")
    name_error.wait_for()
    assert form.get_by_label("Rule name", exact=True).get_attribute("aria-invalid") == "true"
    days = second.get_by_label("Days apart at most")
    assert days.get_attribute("aria-invalid") == "true"
    described = page.locator(f"#{days.get_attribute('aria-describedby')}").inner_text()
    assert "days from 0 to 366" in described
    page.wait_for_function("() => document.activeElement?.classList.contains('error-summary')")
    assert serious_violations(page) == []
    unchanged = stack.request("GET", f"/reconciliation_rules/{rule['id']}").json()
    assert (unchanged["name"], unchanged["conditions"][1]["days"]) == ("Amount, 3 days", 3)

    form.get_by_label("Rule name", exact=True).fill("Amount, 5 days")
    days.fill("5")
    form.get_by_role("button", name="Save rule").click()
    page.get_by_role("status").filter(has_text="Saved the rule “Amount, 5 days”.").wait_for()
    page.wait_for_function("() => document.activeElement?.id === 'rules-title'")  # not lost with the form
    rule_item(page, "Amount, 5 days").get_by_text("date within 5 days").wait_for()
    saved = stack.request("GET", f"/reconciliation_rules/{rule['id']}").json()
    assert (saved["name"], saved["conditions"][1]["days"], saved["conditions"][0]) == (
        "Amount, 5 days", 5, {"field": "amount", "operator": "equals"})
    assert page.problems == [msg for msg in page.problems if "status of 422" in msg]


def test_an_admin_adds_a_proposing_rule_moves_it_first_and_deletes_it(stack, page):
    reconciliation, first, _, _ = reconciliation_with_rule(stack)
    open_reconciliation(stack, page, reconciliation)
    page.get_by_role("button", name="Add rule").click()
    form = page.get_by_role("form", name="New rule")
    form.get_by_label("Rule name", exact=True).fill("Reference and amount")
    assert form.get_by_label("Priority (lower runs first)").input_value() == "2"
    form.get_by_label("Confirm its matches").uncheck()
    form.get_by_role("button", name="Add condition").click()
    second = form.get_by_role("group", name="Condition 2")
    second.get_by_label("Field", exact=True).fill("external_id")
    second.get_by_label("Operator", exact=True).select_option("equals")
    second.get_by_label("case").check()
    form.get_by_role("button", name="Add the rule").click()
    page.get_by_role("status").filter(has_text="Added the rule “Reference and amount”.").wait_for()

    [before, added] = rules_of(stack, reconciliation["id"])
    assert before["id"] == first["id"]
    assert (added["name"], added["priority"], added["auto_confirm"], added["conditions"]) == (
        "Reference and amount", 2, False,
        [{"field": "amount", "operator": "equals"}, {"field": "external_id", "operator": "equals", "normalize": ["case"]}])
    item = rule_item(page, "Reference and amount")
    item.get_by_text("proposes its matches").wait_for()
    assert item.get_by_role("button", name="Move down Reference and amount").get_attribute("aria-disabled") == "true"

    item.get_by_role("button", name="Move up Reference and amount").click()
    page.get_by_role("status").filter(has_text="Moved “Reference and amount” up").wait_for()
    page.wait_for_function("() => document.querySelector('li.rule h3')?.textContent === 'Reference and amount'")
    assert [(r["id"], r["priority"]) for r in rules_of(stack, reconciliation["id"])] == [(added["id"], 1), (first["id"], 2)]
    assert serious_violations(page) == []

    # Deleting asks first; Cancel keeps the rule.
    rule_item(page, "Reference and amount").get_by_role("button", name="Delete Reference and amount").click()
    question = page.get_by_role("group", name="Delete the rule “Reference and amount”?")
    page.wait_for_function("() => document.activeElement?.textContent === 'Yes, delete'")
    question.get_by_role("button", name="Cancel").click()
    question.wait_for(state="detached")
    assert len(rules_of(stack, reconciliation["id"])) == 2
    rule_item(page, "Reference and amount").get_by_role("button", name="Delete Reference and amount").click()
    question.get_by_role("button", name="Yes, delete").click()
    page.get_by_role("status").filter(has_text="Deleted the rule “Reference and amount”.").wait_for()
    rule_item(page, "Reference and amount").wait_for(state="detached")
    assert [r["id"] for r in rules_of(stack, reconciliation["id"])] == [first["id"]]
    assert stack.request("GET", f"/reconciliation_rules/{added['id']}").status_code == 404
    assert page.problems == []


def test_a_reorder_that_fails_half_way_is_put_back_and_said(stack, page):
    reconciliation, first, _, _ = reconciliation_with_rule(stack)
    second = stack.request("POST", f"/reconciliations/{reconciliation['id']}/rules", {
        "name": "Amount only", "priority": 2, "conditions": [{"field": "amount", "operator": "equals"}]}).json()
    before = [(r["id"], r["priority"]) for r in rules_of(stack, reconciliation["id"])]
    assert before == [(first["id"], 1), (second["id"], 2)]
    open_reconciliation(stack, page, reconciliation)
    # The swap's second PATCH (the other rule to the moved one's priority) is refused once, as a
    # concurrent edit would be: the first PATCH (the moved rule parked) must be undone.
    refused: list[str] = []

    def once(route):
        if route.request.method == "PATCH" and not refused:
            refused.append(route.request.post_data or "")
            route.fulfill(status=409, content_type="application/json",
                          body='{"message": "the rule was changed meanwhile"}')
        else:
            route.continue_()

    page.route(f"**/v1/reconciliation_rules/{first['id']}", once)
    rule_item(page, "Amount only").get_by_role("button", name="Move up Amount only").click()
    alert = page.get_by_role("alert").filter(has_text="Could not move “Amount only”")
    alert.wait_for()
    assert refused == ['{"priority":2}']
    assert "the rule was changed meanwhile" in alert.inner_text()
    assert "put back: the rules are in their former order" in alert.inner_text()
    assert [(r["id"], r["priority"]) for r in rules_of(stack, reconciliation["id"])] == before
    page.wait_for_function("() => [...document.querySelectorAll('li.rule .rule-facts')].map(p => p.textContent)"
                           ".join('|').match(/Priority 1 .*\\|Priority 2 /)")
    assert page.locator("li.rule h3").all_inner_texts() == ["Amount, 3 days", "Amount only"]

    # Then it goes through.
    rule_item(page, "Amount only").get_by_role("button", name="Move up Amount only").click()
    page.get_by_role("status").filter(has_text="Moved “Amount only” up").wait_for()
    assert [(r["id"], r["priority"]) for r in rules_of(stack, reconciliation["id"])] == [(second["id"], 1), (first["id"], 2)]

    # A tolerance past 2^53 minor units would be rounded on its way: the page refuses it beside the field.
    rule_item(page, "Amount only").get_by_role("button", name="Edit Amount only").click()
    form = page.get_by_role("form", name="Edit “Amount only”")
    condition = form.get_by_role("group", name="Condition 1")
    condition.get_by_label("Operator", exact=True).select_option("within")
    condition.get_by_label("Tolerance (minor units)").fill("9007199254740993")
    form.get_by_role("button", name="Save rule").click()
    tolerance = condition.get_by_label("Tolerance (minor units)")
    page.wait_for_function("() => document.activeElement?.classList.contains('error-summary')")
    assert tolerance.get_attribute("aria-invalid") == "true"
    assert "too large" in page.locator(f"#{tolerance.get_attribute('aria-describedby')}").inner_text()
    assert stack.request("GET", f"/reconciliation_rules/{second['id']}").json()["conditions"] == [
        {"field": "amount", "operator": "equals"}]
    assert [p for p in page.problems if "status of 409" not in p] == []


def test_a_preparer_dry_runs_a_rule_and_the_rule_set_but_may_not_edit_rules(stack, page):
    reconciliation, first, bank, ledger = reconciliation_with_rule(stack)
    second = stack.request("POST", f"/reconciliations/{reconciliation['id']}/rules", {
        "name": "Amount, 10 days", "priority": 2, "auto_confirm": False,
        "conditions": [{"field": "amount", "operator": "equals"}, {"field": "date", "operator": "within", "days": 10}]}).json()
    pairs(stack, bank, ledger, 6, unmatched=2)
    ingest(stack, [{"date": "2026-11-10", "data_stream_key": ledger, "amount": 10_006, "direction": "debit"}])  # 8 days on
    expected = {r["id"]: stack.request("POST", f"/reconciliation_rules/{r['id']}/dry_run").json() for r in (first, second)}
    assert (expected[first["id"]]["matches"], expected[second["id"]]["matches"]) == (6, 1)

    open_reconciliation(stack, page, reconciliation, role="preparer")
    assert page.get_by_role("button", name="Start run").is_visible()
    for absent in ("Add rule", "Edit Amount, 3 days", "Delete Amount, 3 days", "Move up Amount, 10 days"):
        assert page.get_by_role("button", name=absent).count() == 0
    item = rule_item(page, "Amount, 10 days")
    item.get_by_role("button", name="Dry run Amount, 10 days").click()
    result = page.get_by_test_id(f"dry-run-{second['id']}")
    result.wait_for()
    assert result.locator("[data-count=matches]").inner_text() == "1"
    assert result.locator("[data-count=matched_records]").inner_text() == "2"
    assert result.locator("[data-count=taken_by_earlier_rules]").inner_text() == "12"
    sample = result.get_by_role("table", name="A sample of 1 of the 1 matches")
    assert "proposed" in sample.inner_text()
    [match] = expected[second["id"]]["sample"]
    assert ", ".join(map(str, match["side_b_record_ids"])) in sample.inner_text()
    assert serious_violations(page) == []

    page.get_by_role("button", name="Dry run all rules").click()
    table = page.get_by_role("table", name="What each active rule would match, in priority order")
    table.locator("tfoot").wait_for()
    rows = [row.inner_text().split("\t") for row in table.locator("tbody tr").all()]
    assert [(r[0], r[1], r[3]) for r in rows] == [("Amount, 3 days", "6", "12"), ("Amount, 10 days", "1", "2")]
    assert table.locator("tfoot").inner_text().split("\t")[:4] == ["All rules", "7", "1", "14"]
    page.get_by_role("status").filter(has_text="Dry run of 2 active rules: 14 records would match.").wait_for()
    screenshot(page, "reconciliations")
    assert serious_violations(page) == []
    # A dry run writes nothing: no match was made.
    assert stack.request("GET", "/reconciliation_matches", params={"reconciliation_id": reconciliation["id"]}).json()["data"] == []

    preparer = role_token(stack, "preparer")
    assert as_person(stack, preparer, "POST", f"/reconciliation_rules/{first['id']}/dry_run").status_code == 200
    refused = as_person(stack, preparer, "PATCH", f"/reconciliation_rules/{first['id']}", {"name": "Mine"})
    assert refused.status_code == 403, refused.text
    assert as_person(stack, preparer, "POST", f"/reconciliations/{reconciliation['id']}/rules",
                     {"name": "Mine", "conditions": [{"field": "amount", "operator": "equals"}]}).status_code == 403
    assert page.problems == []


def test_a_preparer_starts_a_run_and_watches_its_progress_until_it_completes(stack, page):
    reconciliation, _, bank, ledger = reconciliation_with_rule(stack)
    pairs(stack, bank, ledger, 400, unmatched=100)
    open_reconciliation(stack, page, reconciliation, role="preparer")
    page.get_by_text("No runs yet.").wait_for()

    page.get_by_role("button", name="Start run").click()
    progress = page.locator(".run-progress")
    progress.wait_for()
    run_id = int(progress.get_attribute("data-run-id"))
    # Every state the page shows, as it shows it: [progress value, processed, matched, status].
    page.evaluate("""() => {
        window.seen = [];
        const note = () => {
            const box = document.querySelector('.run-progress');
            const counts = box.querySelector('.run-counts').textContent.match(/(\\d+) of \\d+ records processed, (\\d+) matched/);
            window.seen.push([box.querySelector('progress').value, +counts[1], +counts[2], box.dataset.status]);
        };
        note();
        new MutationObserver(note).observe(document.querySelector('.run-progress'),
                                           {subtree: true, childList: true, characterData: true, attributes: true});
    }""")
    bar = page.get_by_label(f"Run {run_id} progress")
    assert bar.evaluate("element => element.tagName") == "PROGRESS"
    assert page.get_by_role("button", name="Start run").get_attribute("aria-disabled") == "true"  # one at a time
    page.get_by_role("table", name="Runs, newest first").locator(f"tr[data-run-id='{run_id}']").wait_for()  # listed
    page.wait_for_function("id => document.getElementById(`run-${id}-progress`)?.value > 0", arg=run_id,
                           timeout=120_000)
    screenshot(page, "run-progress")
    assert serious_violations(page) == []

    page.wait_for_function("() => document.querySelector('.run-progress')?.dataset.status === 'completed'",
                           timeout=120_000)
    run = stack.request("GET", f"/reconciliations/{reconciliation['id']}/runs/{run_id}").json()
    assert (run["status"], run["total_records"], run["matched_records"]) == ("completed", 900, 800)
    assert page.locator(f"#run-{run_id}-counts").inner_text() == (
        f"Run {run_id} completed: 900 of 900 records processed, 800 matched (88.8%)")
    # The live region speaks of the status only (the counts are beside the bar, not read at each change).
    said = page.get_by_role("status").filter(has_text=f"Run {run_id} completed")
    assert said.inner_text() == f"Run {run_id} completed: 800 of 900 records matched."
    assert bar.evaluate("element => element.value") == 100
    seen = page.evaluate("() => window.seen")
    # A fast run may go from pending to completed between two reads: the status only moves forward.
    order = ["pending", "running", "completed"]
    assert seen[-1] == [100, 900, 800, "completed"], seen
    assert [order.index(state[3]) for state in seen] == sorted(order.index(state[3]) for state in seen), seen
    for column in range(3):  # the bar and the counts only move forward
        assert [state[column] for state in seen] == sorted(state[column] for state in seen), seen
    # When the page asked for the run, by the browser's own clock (ms): at most once a second.
    polls = page.evaluate("() => performance.getEntriesByType('resource')"
                          ".filter(e => /\\/runs\\/\\d+$/.test(e.name)).map(e => e.startTime)")
    assert len(polls) >= 2, polls
    assert all(later - earlier >= 1000 for earlier, later in zip(polls, polls[1:])), polls
    history = page.get_by_role("table", name="Runs, newest first")
    history.locator(f"tr[data-run-id='{run_id}']").filter(has_text="completed").wait_for()
    assert "800" in history.locator(f"tr[data-run-id='{run_id}']").inner_text()
    assert page.get_by_role("button", name="Start run").get_attribute("aria-disabled") is None
    assert serious_violations(page) == []
    assert page.problems == []


def test_a_preparer_cancels_the_run_they_watch(stack, page):
    # The run must be going when Cancel is pressed, and have a step left that reads the cancel: a run
    # still pending when its cancel comes ends at once, without the notice below, and a persist call
    # writes up to four chunks of 2,000 records before the next reads it. 5,000 pairs are five chunks,
    # two persist calls: the first takes seconds after the page shows the run running. A cancel that
    # came too late is refused (409), or the run completes, and either fails the test.
    reconciliation, _, bank, ledger = reconciliation_with_rule(stack)
    pairs(stack, bank, ledger, 5000)
    open_reconciliation(stack, page, reconciliation, role="preparer")
    page.get_by_role("button", name="Start run").click()
    page.wait_for_function("() => document.querySelector('.run-progress')?.dataset.status === 'running'",
                           timeout=60_000)
    page.get_by_role("button", name="Cancel run").click()
    page.get_by_text("Cancellation asked for; the run stops at its next step.").wait_for()
    page.wait_for_function("() => document.querySelector('.run-progress')?.dataset.status === 'cancelled'",
                           timeout=120_000)
    [run] = stack.request("GET", f"/reconciliations/{reconciliation['id']}/runs").json()["data"]
    assert run["status"] == "cancelled" and run["cancellation_requested_at"]
    page.get_by_role("status").filter(has_text=f"Run {run['id']} cancelled").wait_for()
    page.get_by_role("table", name="Runs, newest first").locator(f"tr[data-run-id='{run['id']}']").filter(
        has_text="cancelled").wait_for()
    assert page.problems == []


def test_the_runs_history_pages_ten_runs_at_a_time(stack, page):
    reconciliation, _, bank, ledger = reconciliation_with_rule(stack)
    pairs(stack, bank, ledger, 1)
    ran = []
    for _ in range(11):
        ran.append(wait_run(stack, reconciliation["id"], start_run(stack, reconciliation["id"])["id"])["id"])
    open_reconciliation(stack, page, reconciliation, role="viewer")
    history = page.get_by_role("table", name="Runs, newest first")
    history.locator(f"tr[data-run-id='{ran[-1]}']").wait_for()
    assert [int(r.get_attribute("data-run-id")) for r in history.locator("tbody tr").all()] == ran[::-1][:10]
    pager = page.get_by_role("navigation", name="Runs pages")
    pager.get_by_role("button", name="Next").click()
    history.locator(f"tr[data-run-id='{ran[0]}']").wait_for()
    assert [int(r.get_attribute("data-run-id")) for r in history.locator("tbody tr").all()] == [ran[0]]
    assert pager.get_by_role("button", name="Next").is_disabled()
    pager.get_by_role("button", name="Previous").click()
    history.locator(f"tr[data-run-id='{ran[-1]}']").wait_for()
    assert serious_violations(page) == []
    assert page.problems == []


def test_a_viewer_sees_the_rules_and_runs_without_controls_and_the_api_refuses_them(stack, page):
    reconciliation, rule, _, _ = reconciliation_with_rule(stack)
    open_reconciliation(stack, page, reconciliation, role="viewer")
    rule_item(page, "Amount, 3 days").get_by_text("amount equals").wait_for()
    page.get_by_role("heading", name="Runs history").wait_for()
    assert page.get_by_role("button").filter(has_text="Start run").count() == 0
    assert page.get_by_role("button").filter(has_text="Dry run").count() == 0
    for absent in ("Edit", "Add rule", "Delete", "Move up", "Move down", "Cancel run"):
        assert page.get_by_role("button").filter(has_text=absent).count() == 0, absent
    assert serious_violations(page) == []

    viewer = role_token(stack, "viewer")
    assert as_person(stack, viewer, "GET", f"/reconciliations/{reconciliation['id']}/rules").status_code == 200
    assert as_person(stack, viewer, "POST", f"/reconciliations/{reconciliation['id']}/runs").status_code == 403
    assert as_person(stack, viewer, "POST", f"/reconciliation_rules/{rule['id']}/dry_run").status_code == 403
    assert as_person(stack, viewer, "PATCH", f"/reconciliation_rules/{rule['id']}", {"name": "x"}).status_code == 403
    assert as_person(stack, viewer, "DELETE", f"/reconciliation_rules/{rule['id']}").status_code == 403
    assert stack.request("GET", f"/reconciliations/{reconciliation['id']}/runs").json()["data"] == []
    assert page.problems == []


def test_the_admin_reaches_the_page_from_the_navigation(stack, page):
    email, password, url = printed(stack)
    reconciliation, _, _, _ = reconciliation_with_rule(stack)
    page.goto(url)
    sign_in(page, email, password)
    main_nav(page).get_by_role("link", name="Reconciliations", exact=True).click()
    page.get_by_role("heading", name="Reconciliations").wait_for()
    page.get_by_role("link", name=reconciliation["name"]).wait_for()
    assert page.problems == []
