"""The Rates page in Debian's Chromium against the local stack (issue 37, docs/currencies.md): an
admin creates a rate stream (a key the service refuses is marked on its field); a preparer imports a
CSV file of rates by keyboard and reads each row's result and the stream's pairs with the dates they
cover; a file with a bad row is refused whole, each refused row named, and nothing is stored; an
import that replaces a rate says what it was; a viewer reads without forms. Every effect is read back
through the API; axe-core finds no serious violation in each state."""
from __future__ import annotations

import uuid

import pytest

from tests.support.chromium import needs_chromium
from tests.support.web_app import (
    ingest,
    main_nav,
    reconciliation_with_rule,
    screenshot,
    serious_violations,
    signed_in,
    start_run,
    unexpected,
    wait_for,
    wait_run,
)

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]

RATES = "date,base,quote,rate\n2026-03-02,EUR,USD,1.0842\n2026-03-03,EUR,USD,1.0850\n2026-03-02,USD,JPY,150.12\n"


def rates_of(stack, key: str) -> list[dict]:
    return stack.request("GET", f"/rate_streams/{key}/rates").json()["data"]


def open_rates(stack, page, role: str):
    signed_in(stack, page, role=role)
    main_nav(page).get_by_role("link", name="Rates", exact=True).click()
    page.get_by_role("heading", name="Rate streams").wait_for()
    return page


def stream_row(page, key: str):
    return page.locator(f"table.rate-streams tr[data-key='{key}']")


def test_an_admin_creates_a_rate_stream_and_a_bad_key_is_marked(stack, page):
    key = f"ecb-{uuid.uuid4().hex[:8]}"
    open_rates(stack, page, "admin")
    form = page.get_by_role("form", name="Create a rate stream")
    form.get_by_label("Key").fill("Not A Key")
    form.get_by_label("Name").fill("ECB reference rates")
    form.get_by_label("Name").press("Enter")
    field = form.get_by_label("Key")
    page.wait_for_function("() => document.getElementById('rate-stream-key')?.getAttribute('aria-invalid') === 'true'")
    assert page.locator("#rate-stream-key-error").inner_text()
    assert serious_violations(page) == []

    field.fill(key)
    form.get_by_role("button", name="Create rate stream").focus()
    page.keyboard.press("Enter")
    page.get_by_role("status").filter(has_text=f"Rate stream “ECB reference rates” ({key}) created.").wait_for()
    stored = stack.request("GET", f"/rate_streams/{key}").json()
    assert (stored["name"], stored["rates_count"]) == ("ECB reference rates", 0)
    stream_row(page, key).get_by_text("No rates yet.").wait_for()
    assert serious_violations(page) == []
    assert unexpected(page.problems, 422) == []


def test_a_preparer_imports_rates_and_a_bad_file_stores_nothing(stack, page):
    key = f"ecb-{uuid.uuid4().hex[:8]}"
    made = stack.request("POST", "/rate_streams", {"key": key, "name": f"Rates {key}"})
    assert made.status_code == 201, made.text
    open_rates(stack, page, "preparer")
    assert page.get_by_role("form", name="Create a rate stream").count() == 0  # an admin's
    form = page.get_by_role("form", name="Import rates")
    form.get_by_label("Rate stream").select_option(key)
    form.get_by_label("CSV file").set_input_files(files=[{"name": "rates.csv", "mimeType": "text/csv",
                                                          "buffer": RATES.encode()}])
    page.wait_for_function("() => document.getElementById('rates-csv')?.value.startsWith('date,base')")
    form.get_by_role("button", name="Import rates").focus()
    page.keyboard.press("Enter")
    outcome = page.get_by_test_id("rates-import-outcome")
    outcome.get_by_text(f"Imported 3 rows into Rates {key}: 3 created, 0 replaced, 0 unchanged.").wait_for()
    assert [(r["date"], r["base"], r["quote"], r["rate"]) for r in rates_of(stack, key)] == [
        ("2026-03-02", "EUR", "USD", "1.0842"), ("2026-03-03", "EUR", "USD", "1.085"), ("2026-03-02", "USD", "JPY", "150.12")]
    pairs = stream_row(page, key).locator("ul.pairs li")
    pairs.first.wait_for()
    assert pairs.all_inner_texts() == ["EUR/USD: 2026-03-02 to 2026-03-03 (2 rates, latest 1.085)",
                                       "USD/JPY: 2026-03-02 (1 rate, latest 150.12)"]
    screenshot(page, "rates")
    assert serious_violations(page) == []

    # One bad row: the whole file is refused, the row named, nothing stored.
    csv = form.get_by_label("CSV text")
    csv.fill("date,base,quote,rate\n2026-03-04,EUR,USD,1.0900\n2026-03-04,GBP,USD,1e3\n")
    form.get_by_role("button", name="Import rates").focus()
    page.keyboard.press("Enter")
    alert = outcome.get_by_role("alert")
    alert.wait_for()
    refused = stack.request("POST", f"/rate_streams/{key}/rates", {"csv": csv.input_value()})
    assert refused.status_code == 422, refused.text
    fields = [e["field"] for e in refused.json()["errors"]]
    assert [li.get_attribute("data-field") for li in alert.locator("li").all()] == fields
    assert any(f.startswith("csv.rows[2]") for f in fields)
    assert alert.locator("li").first.inner_text().startswith("Row 2, ")
    assert alert.inner_text().startswith("Nothing was imported")
    assert len(rates_of(stack, key)) == 3
    assert serious_violations(page) == []

    # A day and pair already held is replaced, and the result says the rate it had.
    csv.fill("date,base,quote,rate\n2026-03-03,EUR,USD,1.0861\n2026-03-02,USD,JPY,150.12\n")
    form.get_by_role("button", name="Import rates").press("Enter")
    outcome.get_by_text(f"Imported 2 rows into Rates {key}: 0 created, 1 replaced, 1 unchanged.").wait_for()
    replaced = outcome.locator("tr[data-row='1']").inner_text().split("\t")
    assert replaced[-2:] == ["replaced", "1.085"]
    stream_row(page, key).get_by_text("EUR/USD: 2026-03-02 to 2026-03-03 (2 rates, latest 1.0861)").wait_for()
    assert serious_violations(page) == []
    assert unexpected(page.problems, 422) == []


def test_a_viewer_reads_rate_streams_without_forms(stack, page):
    key = f"ecb-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/rate_streams", {"key": key, "name": f"Rates {key}"}).status_code == 201
    imported = stack.request("POST", f"/rate_streams/{key}/rates", {"csv": RATES})
    assert imported.status_code == 200, imported.text
    open_rates(stack, page, "viewer")
    stream_row(page, key).get_by_text("USD/JPY: 2026-03-02 (1 rate, latest 150.12)").wait_for()
    assert page.get_by_role("form", name="Import rates").count() == 0
    assert page.get_by_role("form", name="Create a rate stream").count() == 0
    assert serious_violations(page) == []
    assert unexpected(page.problems) == []


def test_a_rule_that_converts_says_so_in_the_rules_list(stack, page):
    key = f"ecb-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/rate_streams", {"key": key, "name": f"Rates {key}"}).status_code == 201
    reconciliation, rule, _, _ = reconciliation_with_rule(stack, {
        "name": "EUR bank to USD ledger", "priority": 1,
        "conditions": [{"field": "amount", "operator": "within", "tolerance": 1},
                       {"field": "date", "operator": "within", "days": 2}],
        "conversion": {"rate_stream_key": key, "side": "side_a", "to_currency": "USD", "max_days_back": 5}})
    signed_in(stack, page, role="viewer", hash_route=f"#/reconciliations/{reconciliation['id']}")
    item = page.locator(f"li.rule[data-rule-id='{rule['id']}']")
    item.locator(".rule-conversion").wait_for()
    assert item.locator(".rule-conversion").inner_text() == (
        f"Converts side A into USD at the rates of “{key}” (at most 5 days back) before comparing")
    assert serious_violations(page) == []
    assert unexpected(page.problems) == []


def test_a_match_across_currencies_and_a_near_miss_say_the_rate_they_used(stack, page):
    key = f"ecb-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/rate_streams", {"key": key, "name": f"Rates {key}"}).status_code == 201
    assert stack.request("POST", f"/rate_streams/{key}/rates", {"csv": RATES}).status_code == 200
    reconciliation, rule, bank, ledger = reconciliation_with_rule(stack, {
        "name": "EUR bank to USD ledger", "priority": 1,
        "conditions": [{"field": "amount", "operator": "within", "tolerance": 1},
                       {"field": "date", "operator": "within", "days": 2}],
        "conversion": {"rate_stream_key": key, "side": "side_a", "to_currency": "USD"}})
    paid, stray = ingest(stack, [
        {"date": "2026-03-02", "data_stream_key": bank, "amount": 10000, "currency": "EUR", "direction": "credit",
         "description": "Payout"},
        {"date": "2026-03-02", "data_stream_key": bank, "amount": 5000, "currency": "EUR", "direction": "credit",
         "description": "Refund"}])
    ingest(stack, [
        {"date": "2026-03-03", "data_stream_key": ledger, "amount": 10842, "currency": "USD", "direction": "credit",
         "description": "Invoice"},
        {"date": "2026-03-03", "data_stream_key": ledger, "amount": 6000, "currency": "USD", "direction": "credit",
         "description": "Other invoice"}])
    run = wait_run(stack, reconciliation["id"], start_run(stack, reconciliation["id"])["id"])
    assert (run["status"], run["matched_records"]) == ("completed", 2), run
    [match] = stack.request("GET", "/reconciliation_matches",
                            params={"reconciliation_id": reconciliation["id"]}).json()["data"]
    [note] = match["differences"]["conversions"]
    assert (note["record_id"], note["converted_amount"], note["rate"]) == (paid, "108.42", "1.0842")

    signed_in(stack, page, role="viewer", hash_route=f"#/matches/{match['id']}")
    shown = page.get_by_test_id("match-conversions")
    shown.wait_for()
    assert shown.locator("li").all_inner_texts() == [
        f"Converted (record {paid}): 100.00 EUR at EUR/USD 1.0842 of 2026-03-02 = 108.42 USD"]
    assert serious_violations(page) == []

    exceptions = wait_for(lambda: (lambda d: d if len(d) == 2 else None)(stack.request(
        "GET", "/reconciliation_exceptions", params={"reconciliation_id": reconciliation["id"]}).json()["data"]),
        "both exceptions")
    [on_bank] = [e for e in exceptions if e["data_stream_key"] == bank]
    page.evaluate("route => { location.hash = route; }", f"#/exceptions/{on_bank['id']}")
    article = page.get_by_role("article", name=f"Record {stray}")
    article.locator("ul.conversions li").first.wait_for()
    assert article.locator("ul.conversions li").all_inner_texts() == [
        "Converted (this record): 50.00 EUR at EUR/USD 1.0842 of 2026-03-02 = 54.21 USD"]
    assert serious_violations(page) == []
    assert unexpected(page.problems) == []
