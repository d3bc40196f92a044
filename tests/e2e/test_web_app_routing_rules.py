"""A reconciliation's routing rules on its page (Chromium, local stack; docs/service-levels.md): an
approver adds one by keyboard (a rule the API refuses first, its 422 shown in its words), edits it to
chosen people, has a bad position refused, and deletes it; a viewer reads the rules without controls.
Effects read back through the API; axe-core on each state."""
from __future__ import annotations

import uuid

import pytest

from tests.e2e.test_web_app_exceptions import me, sign_in_as, world
from tests.support.chromium import needs_chromium
from tests.support.web_app import screenshot, serious_violations, tab_to

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]


def rules_of(stack, recon_id: int) -> list[dict]:
    return stack.request("GET", f"/reconciliations/{recon_id}/routing_rules").json()["data"]


def test_an_approver_adds_edits_and_deletes_a_routing_rule(stack, page):
    made = world(stack)
    recon, bank_key = made["reconciliation"], made["bank"]["data_stream_key"]
    who = f"Router {uuid.uuid4().hex[:6]}"
    email, _ = sign_in_as(stack, page, "approver", f"#/reconciliations/{recon['id']}", name=who)
    section = page.get_by_role("region", name="Exception routing")
    section.get_by_test_id("routing-empty").wait_for()
    assert serious_violations(page) == []

    tab_to(page, "Add a routing rule")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.activeElement?.id === 'routing-name'")
    section.get_by_label("Chosen people").check()  # and nobody chosen, and no name: the API refuses both
    section.get_by_role("button", name="Add the rule").click()
    refusal = section.get_by_role("alert").filter(has_text="Could not add the routing rule")
    refusal.wait_for()
    said = refusal.inner_text()
    assert "name" in said and "team" in said, said
    assert section.get_by_label("Name", exact=True).get_attribute("aria-invalid") == "true"
    assert page.locator("#routing-team-error").is_visible()
    assert rules_of(stack, recon["id"]) == []
    assert serious_violations(page) == []

    name = f"Big ones {uuid.uuid4().hex[:6]}"
    section.get_by_label("Name", exact=True).fill(name)
    section.get_by_label("Everyone with a role").check()
    section.get_by_label("Role", exact=True).select_option("approver")
    section.get_by_label("Strategy").select_option("least_loaded")
    section.get_by_label("Only the stream").select_option(bank_key)
    section.get_by_label("Only the severity").select_option("high")
    section.get_by_label("Name", exact=True).focus()
    page.keyboard.press("Enter")  # submits the form
    row = section.get_by_role("row").filter(has_text=name)
    row.wait_for()
    assert "Least loaded" in row.inner_text() and "every approver" in row.inner_text()
    assert f"stream {bank_key}, high severity" in row.inner_text()
    [rule] = rules_of(stack, recon["id"])
    assert (rule["name"], rule["strategy"], rule["team"]["role"], rule["data_stream_key"], rule["severity"],
            rule["position"], rule["enabled"]) == (name, "least_loaded", "approver", bank_key, "high", 0, True)
    assert serious_violations(page) == []

    screenshot(page, "reconciliation-routing-rules")

    # Edited: to the approver alone, any stream; a position that is no number is refused by the API.
    section.get_by_role("button", name=f"Edit {name}").click()
    section.get_by_label("Chosen people").check()
    section.get_by_label(who).check()
    section.get_by_label("Only the stream").select_option("")
    section.get_by_label("Position", exact=True).fill("first")
    section.get_by_role("button", name="Save the rule").click()
    refusal = section.get_by_role("alert").filter(has_text="Could not save the routing rule")
    refusal.wait_for()
    assert "position" in refusal.inner_text()
    assert section.get_by_label("Position", exact=True).get_attribute("aria-invalid") == "true"
    assert rules_of(stack, recon["id"])[0]["version"] == rule["version"]  # nothing changed
    section.get_by_label("Position", exact=True).fill("3")
    section.get_by_role("button", name="Save the rule").click()
    section.get_by_role("cell", name=who, exact=True).wait_for()
    [edited] = rules_of(stack, recon["id"])
    assert edited["team"]["user_ids"] == [me(stack, email)["id"]] and edited["data_stream_key"] is None
    assert edited["position"] == 3
    assert serious_violations(page) == []

    section.get_by_role("button", name=f"Delete {name}").click()
    section.get_by_role("button", name="Yes, delete").click()
    section.get_by_role("status").filter(has_text=f"Deleted the routing rule {name}.").wait_for()
    section.get_by_test_id("routing-empty").wait_for()
    assert rules_of(stack, recon["id"]) == []
    assert serious_violations(page) == []
    assert page.problems == [p for p in page.problems if "status of 422" in p]


def test_a_viewer_reads_the_routing_rules_without_controls(stack, page):
    made = world(stack)
    recon = made["reconciliation"]
    name = f"Preparers in turn {uuid.uuid4().hex[:6]}"
    added = stack.request("POST", f"/reconciliations/{recon['id']}/routing_rules", {
        "name": name, "strategy": "round_robin", "team": {"role": "preparer"}})
    assert added.status_code == 201, added.text
    sign_in_as(stack, page, "viewer", f"#/reconciliations/{recon['id']}")
    section = page.get_by_role("region", name="Exception routing")
    row = section.get_by_role("row").filter(has_text=name)
    row.wait_for()
    assert "Round robin" in row.inner_text() and "every preparer" in row.inner_text()
    assert "any stream, any severity" in row.inner_text()
    assert section.get_by_role("button").count() == 0
    assert serious_violations(page) == []
    assert page.problems == []
