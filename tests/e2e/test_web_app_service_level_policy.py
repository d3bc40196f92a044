"""A reconciliation's service-level policy and aging on its page (Chromium, local stack;
docs/service-levels.md): the defaults read, an approver edits the policy by keyboard (an amount that is
no amount marked before sending, the API's 422 shown in its words), the aging counts follow it, and the
policy is reset to the defaults; a viewer reads without controls. Effects read back through the API;
axe-core on each state."""
from __future__ import annotations

import pytest

from tests.e2e.test_web_app_exceptions import sign_in_as, world
from tests.support.chromium import needs_chromium
from tests.support.web_app import screenshot, serious_violations, tab_to

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]


def policy_of(stack, recon_id: int) -> dict:
    return stack.request("GET", f"/reconciliations/{recon_id}/service_levels").json()


def test_an_approver_edits_the_policy_and_the_aging_follows_then_resets_it(stack, page):
    made = world(stack)  # bank: 1,250.00, 20 days old; ledger: -1,349.00, 14 days old (both 7 to 30 days)
    recon = made["reconciliation"]
    sign_in_as(stack, page, "approver", f"#/reconciliations/{recon['id']}")
    section = page.get_by_role("region", name="Service levels")
    section.get_by_test_id("sla-source").filter(has_text="The defaults").wait_for()
    thresholds = section.get_by_test_id("sla-thresholds")
    assert "1,000.00" in thresholds.get_by_role("row", name="Amount, Any other currency").inner_text()
    assert section.get_by_test_id("sla-due").inner_text() == \
        "Due after opening: low 14 days, medium 5 days, high 2 days, critical 8 hours."
    aging = page.get_by_role("region", name="Aging of open exceptions")
    aging.get_by_test_id("aging-summary").filter(has_text="2 open or investigating exceptions, none overdue.").wait_for()
    bucket = aging.get_by_test_id("aging-buckets").get_by_role("link", name="2")
    assert f"reconciliation_id={recon['id']}" in bucket.get_attribute("href") and "age=7_30d" in bucket.get_attribute("href")
    assert aging.get_by_test_id("aging-severities").get_by_role("link", name="2").get_attribute("href").endswith("severity=medium")
    amounts = aging.get_by_test_id("aging-amounts").get_by_role("cell")
    assert amounts.nth(3).inner_text() == "2,599.00 USD" and amounts.nth(0).inner_text() == "—"  # 1,250.00 + 1,349.00
    assert serious_violations(page) == []

    # Keyboard: open the form (the focus goes to its first field), add USD with a bad amount first.
    tab_to(page, "Edit the service levels")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.activeElement?.id === 'sla-places'")
    section.get_by_role("button", name="Add a currency").click()
    page.locator("#sla-currency-1").fill("USD")
    page.get_by_label("USD high amount").fill("1,300.005")
    page.get_by_label("high due").fill("24")
    page.get_by_label("low due").fill("0")
    section.get_by_role("button", name="Save the service levels").click()
    section.get_by_role("alert").filter(
        has_text="USD, high: type an amount with at most 2 decimal places, such as 1,000.00.").wait_for()
    assert policy_of(stack, recon["id"])["default"] is True  # nothing sent
    page.get_by_label("USD high amount").fill("1,300.00")
    section.get_by_role("button", name="Save the service levels").click()
    refusal = section.get_by_role("alert").filter(has_text="Could not save the service levels")
    refusal.wait_for()
    assert "due_in_hours.low" in refusal.inner_text()  # the API's own words, naming the field
    low = page.get_by_label("low due")
    assert low.get_attribute("aria-invalid") == "true"  # and its message under the field, tied to it
    assert page.locator(f"#{low.get_attribute('aria-describedby')}").inner_text() in refusal.inner_text()
    page.wait_for_function("() => document.activeElement?.id === 'sla-refusal'")
    assert serious_violations(page) == []
    assert policy_of(stack, recon["id"])["default"] is True
    page.get_by_label("low due").fill("240")
    section.get_by_role("button", name="Save the service levels").click()
    section.get_by_test_id("sla-source").filter(has_text="own policy (version 1)").wait_for()
    saved = policy_of(stack, recon["id"])
    assert saved["amount_thresholds"]["USD"]["high"] == 130_000 and saved["due_in_hours"] == {
        "low": 240, "medium": 120, "high": 24, "critical": 8}
    assert "1,300.00 USD" in thresholds.get_by_role("row", name="Amount, USD").inner_text()
    assert serious_violations(page) == []

    screenshot(page, "reconciliation-service-levels")

    # The aging is read again on reload: the ledger's 1,349.00 is high now.
    page.reload()  # the session is kept, and so is the address
    severities = page.get_by_role("region", name="Aging of open exceptions").get_by_test_id("aging-severities")
    severities.get_by_role("link", name="1").first.wait_for()
    assert [link.get_attribute("href").rsplit("=", 1)[-1] for link in severities.get_by_role("link").all()] == \
        ["medium", "high"]

    section.get_by_role("button", name="Reset to the defaults").click()
    section.get_by_role("button", name="Yes, reset").click()
    section.get_by_role("status").filter(has_text="back to the defaults").wait_for()
    section.get_by_test_id("sla-source").filter(has_text="The defaults").wait_for()
    assert policy_of(stack, recon["id"])["default"] is True
    assert serious_violations(page) == []
    assert page.problems == [p for p in page.problems if "status of 422" in p]


def test_a_viewer_reads_the_policy_and_aging_without_controls(stack, page):
    made = world(stack)
    recon = made["reconciliation"]
    assert stack.request("PUT", f"/reconciliations/{recon['id']}/service_levels", {
        "amount_thresholds": {"USD": {"critical": 100_000}},
        "due_in_hours": {"low": 240, "medium": 72, "high": 24, "critical": 4}}).status_code == 200
    sign_in_as(stack, page, "viewer", f"#/reconciliations/{recon['id']}")
    section = page.get_by_role("region", name="Service levels")
    section.get_by_test_id("sla-source").filter(has_text="own policy").wait_for()
    assert "1,000.00 USD" in section.get_by_role("row", name="Amount, USD").inner_text()
    aging = page.get_by_role("region", name="Aging of open exceptions")
    critical = aging.get_by_test_id("aging-severities").get_by_role("link", name="2")
    critical.wait_for()
    assert critical.get_attribute("href").endswith("severity=critical")
    assert section.get_by_role("button").count() == 0
    assert serious_violations(page) == []
    assert page.problems == []
