"""The exception queue's service levels in the web app (Chromium, local stack): each row's severity
and due time, and the severity, due and age filters kept in the link (docs/service-levels.md)."""
from __future__ import annotations

import pytest

from tests.e2e.test_web_app_exceptions import shows, sign_in_as, world
from tests.support.chromium import needs_chromium
from tests.support.web_app import serious_violations

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]


def test_the_queue_shows_severity_and_due_and_filters_on_them(stack, page):
    made = world(stack)  # bank: 1,250.00 USD, 20 days old; ledger: -1,349.00 USD, 14 days old
    recon = made["reconciliation"]
    policy = stack.request("PUT", f"/reconciliations/{recon['id']}/service_levels", {
        "amount_thresholds": {"USD": {"high": 130_000}}, "age_thresholds": {"medium": 7},
        "due_in_hours": {"low": 240, "medium": 72, "high": 24, "critical": 4}})
    assert policy.status_code == 200, policy.text
    sign_in_as(stack, page, "viewer", f"#/exceptions?reconciliation_id={recon['id']}")
    shows(page, "2 exceptions")
    table = page.locator("table.exception-queue")
    ledger_due = page.get_by_test_id(f"due-{made['ledger']['id']}")
    assert ledger_due.inner_text().startswith("high") and "overdue" not in ledger_due.inner_text()
    assert page.get_by_test_id(f"due-{made['bank']['id']}").inner_text().startswith("medium")

    page.get_by_label("Severity").select_option("high")
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "1 exception")
    assert table.get_by_role("link", name=made["ledger"]["title"]).is_visible()
    assert "severity=high" in page.evaluate("() => location.hash")
    page.get_by_label("Severity").select_option("")
    page.get_by_label("Due", exact=True).select_option("true")
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "0 exceptions")
    page.get_by_label("Due", exact=True).select_option("")
    page.get_by_label("Age", exact=True).select_option("7_30d")
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "2 exceptions")
    assert "age=7_30d" in page.evaluate("() => location.hash")
    assert serious_violations(page) == []
    assert page.problems == []
