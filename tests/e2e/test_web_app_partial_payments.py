"""Partial payments in Debian's Chromium against the local stack (issue 37, docs/partial-payments.md):
on an exception's page a preparer picks an invoice of 10.00 and a payment of 4.00 by keyboard and
matches them by hand with the invoice's share; shares that do not balance are refused with the
API's message and nothing is matched; a share that is no amount is marked before sending. Once
matched, the invoice shows 4.00 allocated and 6.00 remaining with a link to the match holding its
share, and the match shows the share it takes. A viewer gets no match form. Each effect is read
back through the API; axe-core finds no serious violation in each state."""
from __future__ import annotations

import re

import pytest

from tests.support.chromium import needs_chromium
from tests.support.web_app import invoice_paid_in_parts, screenshot, serious_violations, signed_in, unexpected, wait_for

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]


def record(stack, record_id: int) -> dict:
    return stack.request("GET", f"/records/{record_id}").json()


def pick(page, record_id: int) -> None:
    """Tick a record's box with the keyboard (the first table showing it)."""
    box = page.get_by_role("checkbox", name=f"Pick record {record_id} to match by hand").first
    box.focus()
    page.keyboard.press("Space")
    assert box.is_checked()


def test_a_preparer_matches_part_of_an_invoice_and_sees_what_it_has_left(stack, page):
    world = invoice_paid_in_parts(stack)
    invoice, first = world["invoice"], world["first"]
    signed_in(stack, page, role="preparer", hash_route=f"#/exceptions/{world['ledger']['id']}")
    form_section = page.get_by_role("region", name="Match by hand")
    form_section.get_by_text("No record ticked yet.").wait_for()
    page.get_by_role("checkbox", name=f"Pick record {first} to match by hand").wait_for()
    assert serious_violations(page) == []

    pick(page, invoice)
    pick(page, first)
    form = page.get_by_role("form", name="Match the ticked records")
    rows = form.locator("tbody tr")
    assert [int(r.get_attribute("data-record-id")) for r in rows.all()] == [invoice, first]
    share = form.get_by_label(f"Share of record {invoice} (USD)")

    share.fill("4.005")  # three decimals: not a USD amount, refused before anything is sent
    share.press("Enter")
    assert share.get_attribute("aria-invalid") == "true"
    described = page.locator(f"#{share.get_attribute('aria-describedby')}").inner_text()
    assert described == "is not an amount of USD with at most 2 decimals"
    assert record(stack, invoice)["allocations"] == []

    share.fill("5.00")  # 5.00 of the invoice against a payment of 4.00: the sides do not balance
    share.press("Enter")
    alert = form.get_by_role("alert")
    alert.wait_for()
    assert alert.inner_text().startswith("Not matched:")
    refused = stack.request("POST", "/reconciliation_matches", {  # what the service says to the same request
        "reconciliation_id": world["reconciliation"]["id"], "record_ids": [invoice, first],
        "allocations": [{"record_id": invoice, "amount": 500}]})
    assert refused.status_code == 422, refused.text
    [error] = refused.json()["errors"]
    assert alert.inner_text().split() == f"Not matched: {error['field']}: {error['message']}".split()
    page.wait_for_function("() => document.activeElement?.id === 'manual-match-problem'")
    assert serious_violations(page) == []
    screenshot(page, "manual-match-refused")
    assert record(stack, invoice)["allocations"] == [] and record(stack, first)["status"] == "unreconciled"

    share.fill("4.00")
    share.press("Enter")
    outcome = page.get_by_test_id("manual-match-outcome")
    outcome.filter(has_text="Matched: match").wait_for()
    match_id = int(re.search(r"match (\d+)", outcome.inner_text()).group(1))
    match = stack.request("GET", f"/reconciliation_matches/{match_id}").json()
    assert match["allocations"] == [{"record_id": invoice, "amount": 400}]
    assert sorted(r["id"] for r in match["records"]) == sorted([invoice, first])
    stored = record(stack, invoice)
    assert stored["allocations"] == [{"reconciliation_id": world["reconciliation"]["id"], "amount_allocated": 400,
                                      "amount_remaining": 600,
                                      "shares": [{"reconciliation_match_id": match_id, "amount": 400}]}]
    form_section.get_by_text("No record ticked yet.").wait_for()

    # The invoice, still open in its exception, shows what it has left and the match holding its share.
    paid = page.get_by_test_id(f"part-paid-{invoice}").first
    paid.wait_for()
    assert paid.locator("[data-amount='allocated']").inner_text() == "4.00 USD"
    assert paid.locator("[data-amount='remaining']").inner_text() == "6.00 USD"
    assert serious_violations(page) == []
    link = paid.get_by_role("link", name=f"Match {match_id}, holding 4.00 USD")
    link.focus()
    page.keyboard.press("Enter")

    shares = page.get_by_role("region", name="Shares this match takes")
    shares.wait_for()
    assert shares.locator(f"li[data-record-id='{invoice}']").inner_text() == f"Record {invoice}: 4.00 USD of 10.00 USD"
    in_match = page.get_by_test_id(f"part-paid-{invoice}")
    assert in_match.locator("[data-amount='remaining']").inner_text() == "6.00 USD"
    screenshot(page, "match-shares")
    assert serious_violations(page) == []
    assert unexpected(page.problems, 422) == []


def test_the_rest_of_the_invoice_is_matched_with_the_second_payment(stack, page):
    world = invoice_paid_in_parts(stack)
    invoice, first, second = world["invoice"], world["first"], world["second"]
    made = stack.request("POST", "/reconciliation_matches", {
        "reconciliation_id": world["reconciliation"]["id"], "record_ids": [invoice, first],
        "allocations": [{"record_id": invoice, "amount": 400}]})
    assert made.status_code == 201, made.text
    signed_in(stack, page, role="preparer", hash_route=f"#/exceptions/{world['ledger']['id']}")
    page.get_by_test_id(f"part-paid-{invoice}").first.wait_for()
    pick(page, invoice)
    pick(page, second)
    form = page.get_by_role("form", name="Match the ticked records")
    left = form.locator(f"tr[data-record-id='{invoice}'] td.number").nth(1)
    assert left.inner_text() == "6.00 USD"  # what it has left here
    form.get_by_role("button", name="Match 2 records").press("Enter")  # empty share: all it has left
    page.get_by_test_id("manual-match-outcome").filter(has_text="Matched: match").wait_for()
    wait_for(lambda: record(stack, invoice)["status"] == "reconciled", "the invoice reconciled")
    assert serious_violations(page) == []
    assert unexpected(page.problems) == []


def test_a_viewer_reads_the_part_paid_invoice_without_a_match_form(stack, page):
    world = invoice_paid_in_parts(stack)
    invoice, first = world["invoice"], world["first"]
    made = stack.request("POST", "/reconciliation_matches", {
        "reconciliation_id": world["reconciliation"]["id"], "record_ids": [invoice, first],
        "allocations": [{"record_id": invoice, "amount": 400}]})
    assert made.status_code == 201, made.text
    signed_in(stack, page, role="viewer", hash_route=f"#/exceptions/{world['ledger']['id']}")
    paid = page.get_by_test_id(f"part-paid-{invoice}").first
    paid.wait_for()
    assert paid.locator("[data-amount='remaining']").inner_text() == "6.00 USD"
    assert page.get_by_role("region", name="Match by hand").count() == 0
    assert page.get_by_role("checkbox").count() == 0
    assert serious_violations(page) == []
    assert unexpected(page.problems) == []


def test_a_partial_match_held_for_approval_links_to_it_with_its_shares(stack, page):
    world = invoice_paid_in_parts(stack)
    invoice, first = world["invoice"], world["first"]
    policy = stack.request("PUT", f"/reconciliations/{world['reconciliation']['id']}/approval_policy",
                           {"actions": ["manual_match"], "threshold": 0})
    assert policy.status_code == 200, policy.text
    signed_in(stack, page, role="preparer", hash_route=f"#/exceptions/{world['ledger']['id']}")
    page.get_by_role("checkbox", name=f"Pick record {first} to match by hand").wait_for()
    pick(page, invoice)
    pick(page, first)
    form = page.get_by_role("form", name="Match the ticked records")
    share = form.get_by_label(f"Share of record {invoice} (USD)")
    share.fill("4.00")
    share.press("Enter")
    outcome = page.get_by_test_id("manual-match-outcome")
    outcome.filter(has_text="Sent for approval: approval").wait_for()
    approval_id = int(re.search(r"approval (\d+) waits", outcome.inner_text()).group(1))
    approval = stack.request("GET", f"/approvals/{approval_id}").json()
    assert (approval["status"], approval["action"], approval["params"]["allocations"]) == (
        "pending", "manual_match", [[invoice, 400]])
    assert record(stack, invoice)["allocations"] == []  # nothing is matched until it is approved
    assert serious_violations(page) == []
    outcome.get_by_role("link", name=f"Open approval {approval_id}").press("Enter")
    shares = page.locator(".approval-shares").first
    shares.filter(has_text="4.00 USD").wait_for()  # the record's currency and places, read from the record
    assert shares.inner_text() == f"; in part: record {invoice} 4.00 USD"
    assert serious_violations(page) == []
    assert unexpected(page.problems) == []
