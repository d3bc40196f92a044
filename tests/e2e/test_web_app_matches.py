"""The Matches page in Debian's Chromium against the local stack: the proposed matches of a rule
that proposes (auto_confirm false) rather than confirms, filtered by reconciliation and status,
confirmed or rejected one at a time or as a selection (one bulk action, in order; its progress read
until it ends), each outcome listed; a match's records with their amounts and dates. Effects
are read back through the API; viewers and preparers get no decision controls and the API refuses
them; the list exported as CSV; axe-core finds no serious violation in any state shown."""
from __future__ import annotations

import pytest

from tests.support.chromium import needs_chromium
from tests.support.web_app import (
    as_person,
    downloaded_csv,
    ingest,
    read_every_page,
    reconciliation_with_rule,
    role_token,
    screenshot,
    serious_violations,
    signed_in,
    small_first_pages,
    start_run,
    wait_run,
)

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]

PROPOSING = {"name": "Amount and date, proposed", "priority": 1, "auto_confirm": False,
             "conditions": [{"field": "amount", "operator": "equals"}, {"field": "date", "operator": "within", "days": 3}]}


def proposed_matches(stack, count: int, currency: str = "USD") -> tuple[dict, list[dict]]:
    """A reconciliation whose rule proposes, `count` bank/ledger pairs, and a run's proposed matches
    (newest first, as the page lists them)."""
    reconciliation, _, bank, ledger = reconciliation_with_rule(stack, PROPOSING)
    ingest(stack, [{"date": "2026-11-02", "data_stream_key": bank, "amount": 123_400 + n, "direction": "credit",
                    "currency": currency, "description": f"Payout {n}"} for n in range(count)])
    ingest(stack, [{"date": "2026-11-04", "data_stream_key": ledger, "amount": 123_400 + n, "direction": "debit",
                    "currency": currency, "description": f"Invoice {n}"} for n in range(count)])
    run = wait_run(stack, reconciliation["id"], start_run(stack, reconciliation["id"])["id"])
    assert (run["status"], run["matched_records"]) == ("completed", 2 * count), run
    matches = stack.request("GET", "/reconciliation_matches",
                            params={"reconciliation_id": reconciliation["id"], "limit": 100}).json()["data"]
    assert len(matches) == count and {m["status"] for m in matches} == {"proposed"}
    return reconciliation, matches


def status_of(stack, match_id: int) -> str:
    answer = stack.request("GET", f"/reconciliation_matches/{match_id}")
    return "rejected" if answer.status_code == 404 else answer.json()["status"]


def open_matches(stack, page, reconciliation: dict, role: str = "approver", status: str = "proposed"):
    signed_in(stack, page, role=role, hash_route=f"#/matches?reconciliation_id={reconciliation['id']}&status={status}")
    page.get_by_role("table", name="Matches, newest first").wait_for()
    return page


def row(page, match_id: int):
    return page.locator(f"table.matches tbody tr[data-match-id='{match_id}']")


def shown_ids(page) -> list[int]:
    return [int(r.get_attribute("data-match-id")) for r in page.locator("table.matches tbody tr").all()]


def test_an_approver_confirms_and_rejects_proposed_matches_one_at_a_time(stack, page):
    reconciliation, matches = proposed_matches(stack, 3)
    open_matches(stack, page, reconciliation)
    assert shown_ids(page) == [m["id"] for m in matches]
    # The reconciliation's option comes with the list of reconciliations, read apart from the matches.
    page.wait_for_function("id => document.getElementById('match-reconciliation')?.value === id",
                           arg=str(reconciliation["id"]))
    assert page.get_by_label("Status").input_value() == "proposed"
    assert serious_violations(page) == []

    first, second, third = (m["id"] for m in matches)
    page.get_by_role("button", name=f"Confirm match {first}").click()
    page.get_by_role("status").filter(has_text="1 of 1 match confirmed.").wait_for()
    row(page, first).wait_for(state="detached")  # no longer proposed
    assert status_of(stack, first) == "confirmed"

    page.get_by_role("button", name=f"Reject match {second}").click()
    page.get_by_role("status").filter(has_text="1 of 1 match rejected.").wait_for()
    row(page, second).wait_for(state="detached")
    assert status_of(stack, second) == "rejected"
    assert status_of(stack, third) == "proposed"
    records = stack.request("GET", "/records", params={"reconciliation_match_id": first}).json()["data"]
    assert {r["status"] for r in records} == {"reconciled"}

    page.get_by_label("Status").select_option("confirmed")
    row(page, first).wait_for()
    assert shown_ids(page) == [first]
    assert "confirmed" in row(page, first).inner_text()
    assert page.get_by_role("button", name=f"Confirm match {first}").count() == 0  # nothing left to decide
    page.get_by_label("Status").select_option("all")
    row(page, third).wait_for()
    assert shown_ids(page) == [first, third]
    assert serious_violations(page) == []
    assert page.problems == []


def test_an_approver_decides_a_selection_in_one_bulk_action_with_each_outcome_listed(stack, page):
    reconciliation, matches = proposed_matches(stack, 5)
    ids = [m["id"] for m in matches]
    open_matches(stack, page, reconciliation)
    for match_id in ids[:3]:
        page.get_by_label(f"Select match {match_id}").check()
    page.get_by_text("3 selected").wait_for()
    screenshot(page, "matches")
    assert serious_violations(page) == []
    # Someone else rejects one of the selection before the approver presses the button.
    assert stack.request("DELETE", f"/reconciliation_matches/{ids[1]}").status_code == 204
    page.get_by_role("button", name="Confirm selected").click()

    page.get_by_role("status").filter(has_text="2 of 3 matches confirmed.").wait_for()
    outcomes = page.get_by_role("region", name="Decided: 2 of 3")
    assert [item.inner_text() for item in outcomes.get_by_role("listitem").all()] == [
        f"Match {ids[0]}: confirmed",
        f"Match {ids[1]}: not confirmed: reconciliation match {ids[1]} not found",
        f"Match {ids[2]}: confirmed"]
    assert [status_of(stack, i) for i in ids] == ["confirmed", "rejected", "confirmed", "proposed", "proposed"]
    page.wait_for_function("n => document.querySelectorAll('table.matches tbody tr').length === n", arg=2)
    assert serious_violations(page) == []

    members = [r["id"] for i in ids[3:] for r in stack.request("GET", f"/reconciliation_matches/{i}").json()["records"]]
    page.get_by_label("Select all proposed matches on this page").check()
    assert page.get_by_label(f"Select match {ids[3]}").is_checked() and page.get_by_label(f"Select match {ids[4]}").is_checked()
    page.get_by_role("button", name="Reject selected").click()  # asks first; Cancel rejects nothing
    question = page.get_by_role("group", name="Reject 2 matches? Their records are open again.")
    question.get_by_role("button", name="Cancel").click()
    question.wait_for(state="detached")
    assert [status_of(stack, i) for i in ids[3:]] == ["proposed", "proposed"]
    page.get_by_role("button", name="Reject selected").click()
    question.get_by_role("button", name="Yes, reject").click()
    page.get_by_role("status").filter(has_text="2 of 2 matches rejected.").wait_for()
    page.get_by_text("No proposed matches.").wait_for()
    assert [status_of(stack, i) for i in ids[3:]] == ["rejected", "rejected"]
    assert {stack.request("GET", f"/records/{r}").json()["status"] for r in members} == {"unreconciled"}  # open again
    assert page.problems == [p for p in page.problems if "status of 404" in p]


def test_a_matchs_records_show_their_amounts_and_dates_and_it_is_confirmed_or_rejected_there(stack, page):
    reconciliation, matches = proposed_matches(stack, 2, currency="JPY")
    newest, older = matches
    open_matches(stack, page, reconciliation)
    page.get_by_role("link", name=f"Match {newest['id']}", exact=True).click()
    page.get_by_role("heading", name=f"Match {newest['id']}").wait_for()
    detail = stack.request("GET", f"/reconciliation_matches/{newest['id']}").json()
    side_a = page.get_by_role("table", name="The match's records: Side A")
    side_b = page.get_by_role("table", name="The match's records: Side B")
    [record_a] = [r for r in detail["records"] if r["side"] == "a"]
    [record_b] = [r for r in detail["records"] if r["side"] == "b"]
    assert record_a["decimal_places"] == 0  # yen have no minor unit
    cells_a = side_a.locator(f"tr[data-record-id='{record_a['id']}'] td").all_inner_texts()
    assert cells_a[:5] == [str(record_a["id"]), record_a["data_stream_key"], "2026-11-02",
                           f"{record_a['amount']:,} JPY", "credit"]
    cells_b = side_b.locator(f"tr[data-record-id='{record_b['id']}'] td").all_inner_texts()
    assert cells_b[2:4] == ["2026-11-04", f"{record_b['amount']:,} JPY"]
    amount = side_a.locator(".money")
    assert amount.get_attribute("title") == f"{record_a['amount']} minor units"
    assert page.get_by_test_id("match-status").inner_text() == "proposed"
    assert serious_violations(page) == []

    page.get_by_role("button", name="Confirm match").click()
    page.get_by_role("status").filter(has_text=f"Match {newest['id']} confirmed.").wait_for()
    page.wait_for_function("() => document.querySelector('[data-testid=match-status]')?.textContent === 'confirmed'")
    assert status_of(stack, newest["id"]) == "confirmed"
    assert page.get_by_role("button", name="Reject match").count() == 0

    older_records = [r["id"] for r in stack.request("GET", f"/reconciliation_matches/{older['id']}").json()["records"]]
    page.evaluate("id => { location.hash = `#/matches/${id}`; }", older["id"])
    page.get_by_role("heading", name=f"Match {older['id']}").wait_for()
    page.get_by_role("button", name="Reject match").click()
    page.get_by_role("status").filter(has_text=f"Match {older['id']} rejected: its records are open again.").wait_for()
    assert status_of(stack, older["id"]) == "rejected"
    assert [stack.request("GET", f"/records/{r}").json()["status"] for r in older_records] == ["unreconciled"] * 2
    assert [r["status"] for r in stack.request("GET", f"/reconciliation_matches/{newest['id']}").json()["records"]] == [
        "reconciled", "reconciled"]
    assert serious_violations(page) == []
    assert page.problems == []


def test_the_list_follows_the_chosen_reconciliation(stack, page):
    first, first_matches = proposed_matches(stack, 1)
    second, second_matches = proposed_matches(stack, 2)
    open_matches(stack, page, first)
    assert shown_ids(page) == [first_matches[0]["id"]]
    page.get_by_label("Reconciliation").select_option(str(second["id"]))
    row(page, second_matches[0]["id"]).wait_for()
    assert shown_ids(page) == [m["id"] for m in second_matches]
    assert f"reconciliation_id={second['id']}" in page.url
    assert page.problems == []


@pytest.mark.parametrize("role", ["viewer", "preparer"])
def test_below_an_approver_there_are_no_decisions_and_the_api_refuses_them(stack, page, role):
    reconciliation, matches = proposed_matches(stack, 1)
    [match] = matches
    open_matches(stack, page, reconciliation, role=role)
    row(page, match["id"]).wait_for()
    for absent in ("Confirm", "Reject", "Confirm selected", "Reject selected"):
        assert page.get_by_role("button").filter(has_text=absent).count() == 0, absent
    assert page.get_by_role("checkbox").count() == 0
    page.get_by_role("link", name=f"Match {match['id']}", exact=True).click()
    page.get_by_role("heading", name=f"Match {match['id']}").wait_for()
    page.get_by_role("table", name="The match's records: Side A").wait_for()
    assert page.get_by_role("button").filter(has_text="match").count() == 0
    assert serious_violations(page) == []

    token = role_token(stack, role)
    assert as_person(stack, token, "GET", f"/reconciliation_matches/{match['id']}").status_code == 200
    assert as_person(stack, token, "POST", f"/reconciliation_matches/{match['id']}/confirm").status_code == 403
    assert as_person(stack, token, "DELETE", f"/reconciliation_matches/{match['id']}").status_code == 403
    assert status_of(stack, match["id"]) == "proposed"
    assert page.problems == []


def test_a_match_of_more_than_a_hundred_records_pages_them(stack, page):
    """A match made by hand of 100 bank credits and the one ledger debit they add up to: the API gives
    its record count instead of its records, and the page reads them a hundred at a time."""
    reconciliation, _, bank, ledger = reconciliation_with_rule(stack, PROPOSING)
    credits = ingest(stack, [{"date": "2026-11-02", "data_stream_key": bank, "amount": 250, "direction": "credit"}
                             for _ in range(100)])
    [debit] = ingest(stack, [{"date": "2026-11-02", "data_stream_key": ledger, "amount": 25_000, "direction": "debit"}])
    made = stack.request("POST", "/reconciliation_matches", {"reconciliation_id": reconciliation["id"],
                                                             "record_ids": credits + [debit]})
    assert made.status_code == 201, made.text
    match = made.json()
    assert (match["records"], match["record_count"]) == (None, 101)

    signed_in(stack, page, role="viewer", hash_route=f"#/matches/{match['id']}")
    page.get_by_text("101 records.").wait_for()
    table = page.get_by_role("table", name="The match's records: Records")
    table.locator("tbody tr").nth(99).wait_for()
    expected = {**{c: "2.50 USD" for c in credits}, debit: "250.00 USD"}

    def amounts() -> dict[int, str]:
        return {int(r.get_attribute("data-record-id")): r.locator("td").nth(3).inner_text()
                for r in table.locator("tbody tr").all()}

    first = amounts()
    assert len(first) == 100
    pager = page.get_by_role("navigation", name="Records pages")
    pager.get_by_role("button", name="Next").click()
    page.wait_for_function("() => document.querySelectorAll('table.match-records tbody tr').length === 1")
    second = amounts()
    assert {**first, **second} == expected
    assert serious_violations(page) == []
    assert page.problems == []


def test_the_reconciliation_picker_holds_every_page_of_reconciliations(stack, page):
    """The picker reads every page of GET /reconciliations (following next_cursor): its first request is
    made to ask for 3 only (rewritten on its way), and a reconciliation made before three newer ones, on
    a later page, is offered by its name."""
    older, _, bank, ledger = reconciliation_with_rule(stack)
    for n in range(3):
        created = stack.request("POST", "/reconciliations", {"name": f"{older['name']} newer {n}", "run_type": "batch",
                                                              "side_a_stream_keys": [bank], "side_b_stream_keys": [ledger]})
        assert created.status_code == 201, created.text
    asked = small_first_pages(page, "reconciliations")
    signed_in(stack, page, role="viewer", hash_route="#/matches")
    page.get_by_label("Reconciliation").select_option(label=older["name"])
    page.wait_for_function("id => new URLSearchParams(location.hash.split('?')[1]).get('reconciliation_id') === id",
                           arg=str(older["id"]))
    read_every_page(asked)
    assert page.problems == []


def test_the_matches_page_exports_its_reconciliations_matches_of_a_status(stack, page):
    """The list's Export: a CSV of exactly the listed matches (the page's reconciliation and status)."""
    reconciliation, listed = proposed_matches(stack, 3)
    open_matches(stack, page, reconciliation, role="viewer")
    group = page.get_by_role("group", name="Export these matches")
    export_id, rows = downloaded_csv(group, "matches")
    assert [int(r["id"]) for r in rows] == [m["id"] for m in listed]
    assert {r["status"] for r in rows} == {"proposed"}
    job = stack.request("GET", f"/exports/{export_id}").json()
    assert job["filters"] == {"reconciliation_id": reconciliation["id"], "status": "proposed"}, job
    assert group.get_by_role("status").inner_text() == "Export ready: 3 rows."
    assert serious_violations(page) == []
    assert page.problems == []


def test_an_export_the_service_refuses_says_why(stack, page):
    """A reconciliation that does not exist: the service refuses the export (404), and the page says so."""
    signed_in(stack, page, "viewer", "#/matches?reconciliation_id=999999999&status=proposed")
    group = page.get_by_role("group", name="Export these matches")
    group.get_by_role("button", name="Export", exact=True).click()
    problem = group.get_by_role("alert")
    problem.wait_for()
    assert problem.inner_text().startswith("Could not start the export: ")
    assert "reconciliation" in problem.inner_text().lower()
    assert group.get_by_role("button", name="Export", exact=True).get_attribute("aria-disabled") == "false"
    assert serious_violations(page) == []


def test_a_matchs_records_are_exported_from_its_page(stack, page):
    """A match's records (an export of kind records, filtered by the match): the records its page lists."""
    reconciliation, [match, *_] = proposed_matches(stack, 2)
    records = stack.request("GET", "/records", params={"reconciliation_match_id": match["id"], "limit": 100}).json()["data"]
    assert len(records) == 2
    signed_in(stack, page, "viewer", f"#/matches/{match['id']}")
    page.locator("table.match-records").first.wait_for()
    group = page.get_by_role("group", name="Export the match's records")
    export_id, rows = downloaded_csv(group, "records")
    assert sorted(int(r["id"]) for r in rows) == sorted(r["id"] for r in records)
    assert sorted(int(r["amount_minor"]) for r in rows) == sorted(r["amount"] for r in records)
    assert stack.request("GET", f"/exports/{export_id}").json()["filters"] == {"reconciliation_match_id": match["id"]}
    assert serious_violations(page) == []
    assert page.problems == []

