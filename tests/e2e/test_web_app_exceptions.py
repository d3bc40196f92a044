"""The exception queue of the web app in Debian's Chromium against the local stack: real exceptions
left by a reconciliation run over records sent with POST /records/bulk; the queue's filters (kept in
the link), its count, orders and paging; on the detail, assign, status, comments with @mentions, and
an investigation followed until it ends and its suggestion accepted, each checked through the API
too; a viewer gets none of those controls and the API refuses them. axe-core runs on the queue and
the detail."""
from __future__ import annotations

import csv
import io
import re
import time
import uuid
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest
import requests

from chalicelib.adapters.dynamodb.reconciliation_exceptions import ExceptionRepository
from chalicelib.container import Container
from chalicelib.domain.reconciliation_exceptions import (
    ExceptionRecord,
    ExceptionStatus,
    ReconciliationException,
    RecordFilter,
    totals,
)
from chalicelib.local.stack import StackInfo
from chalicelib.services import investigations
from chalicelib.settings import Settings
from tests.support.chromium import needs_chromium
from tests.support.web_app import (
    held_dismissal,
    person,
    printed,
    read_every_page,
    screenshot,
    serious_violations,
    sign_in,
    small_first_pages,
    unexpected,
    wait_for,
)

pytestmark = [
    pytest.mark.xdist_group("web"),
    needs_chromium,
]


def day(n: int) -> str:
    return (date.today() - timedelta(days=n)).isoformat()


def _ingest(stack, items, timeout=60):
    summary = stack.request("POST", "/records/bulk", {"records": items})
    assert summary.status_code == 202, summary.text
    deadline = time.monotonic() + timeout
    while True:
        body = stack.request("GET", f"/bulk_requests/{summary.json()['id']}").json()
        if body["status"] == "completed":
            assert all(r["status"] == "successful" for r in body["results"]), body
            return [r["record_id"] for r in body["results"]]
        assert time.monotonic() < deadline, body
        time.sleep(0.2)


def world(stack) -> dict:
    """A reconciliation of a bank and a ledger whose run matched nothing (six days apart, the rule
    allows three): the bank's exception holds an ACME payout of 1,250.00; the ledger's holds its
    partner (debit, 1,250.00) and a stray 99.00, so the ledger's net is -1,349.00."""
    suffix = uuid.uuid4().hex[:8]
    bank, ledger = f"xbank-{suffix}", f"xledger-{suffix}"
    for key, name in ((bank, f"Bank {suffix}"), (ledger, f"Ledger {suffix}")):
        assert stack.request("POST", "/data_streams", {"key": key, "name": name}).status_code == 201
    reconciliation = stack.request("POST", "/reconciliations", {
        "name": f"Exceptions {suffix}", "run_type": "batch", "side_a_stream_keys": [bank],
        "side_b_stream_keys": [ledger]}).json()
    rule = stack.request("POST", f"/reconciliations/{reconciliation['id']}/rules", {
        "name": "Amount, 3 days", "conditions": [{"field": "amount", "operator": "equals"},
                                                 {"field": "date", "operator": "within", "days": 3}]})
    assert rule.status_code == 201, rule.text
    [payout] = _ingest(stack, [{"date": day(20), "data_stream_key": bank, "amount": 125000, "direction": "credit",
                                "description": "ACME PAYOUT", "metadata": {"reference": "INV-4411"}}])
    partner, _ = _ingest(stack, [
        {"date": day(14), "data_stream_key": ledger, "amount": 125000, "direction": "debit",
         "description": "Acme payout", "metadata": {"reference": "INV-4411"}},
        {"date": day(12), "data_stream_key": ledger, "amount": 9900, "direction": "debit", "description": "Fee"}])
    run = stack.request("POST", f"/reconciliations/{reconciliation['id']}/runs").json()
    wait_for(lambda: stack.request("GET", f"/reconciliations/{reconciliation['id']}/runs/{run['id']}").json()["status"]
          in ("completed", "failed"), "the run")
    rows = wait_for(lambda: (lambda d: d if len(d) == 2 else None)(stack.request(
        "GET", "/reconciliation_exceptions", params={"reconciliation_id": reconciliation["id"]}).json()["data"]),
        "both exceptions")
    by_stream = {r["data_stream_key"]: r for r in rows}
    return {"reconciliation": reconciliation, "bank": by_stream[bank], "ledger": by_stream[ledger],
            "payout": payout, "partner": partner, "suffix": suffix}


def token_of(stack, email: str, password: str) -> str:
    answer = requests.post(f"{stack.url}/session", json={"email": email, "password": password}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["id_token"]


def sign_in_as(stack, page, role: str, hash_route: str, name: str | None = None) -> tuple[str, str]:
    email, password = person(stack, role, name)
    _, _, url = printed(stack)
    page.goto(url)
    sign_in(page, email, password)
    page.get_by_role("heading", name="Overview").wait_for()
    page.evaluate("route => { location.hash = route; }", hash_route)
    return email, password


def me(stack, email: str) -> dict:
    users = stack.request("GET", "/users", params={"limit": 200}).json()["data"]
    return next(u for u in users if u["email"] == email)


def shows(page, text: str) -> None:
    """Wait until the queue's count says `text` for the filters of the current link (the count names
    the link it was computed for, so a count of the previous filters never passes)."""
    page.wait_for_function("text => { const c = document.querySelector('[data-testid=exception-count]');"
                           " return c !== null && c.dataset.for === location.hash && c.textContent.trim() === text; }",
                           arg=text)


def test_the_queue_filters_counts_sorts_and_keeps_its_filters_in_the_link(stack, page):
    made = world(stack)
    recon = made["reconciliation"]
    email, _ = sign_in_as(stack, page, "preparer", "#/exceptions")
    page.get_by_role("heading", name="Exceptions").wait_for()
    page.get_by_label("Reconciliation").select_option(label=recon["name"])
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "2 exceptions")
    assert f"reconciliation_id={recon['id']}" in page.evaluate("() => location.hash")
    # The form is made again for the new filters: focus goes to the count, not to the page's top.
    assert page.evaluate("() => document.activeElement.id") == "exc-count"
    table = page.locator("table.exception-queue")
    assert table.get_by_role("link", name=made["bank"]["title"]).is_visible()
    bank_row = table.locator("tr", has=page.get_by_role("link", name=made["bank"]["title"]))
    assert "1,250.00 USD" in bank_row.inner_text() and "unassigned" in bank_row.inner_text()
    ledger_row = table.locator("tr", has=page.get_by_role("link", name=made["ledger"]["title"]))
    assert "-1,349.00 USD" in ledger_row.inner_text()
    assert serious_violations(page) == []

    # Amounts are typed as decimals; the size of the net is compared, exactly.
    page.get_by_label("Amount from").fill("1,300.00")
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "1 exception")
    assert table.get_by_role("link", name=made["ledger"]["title"]).is_visible()
    assert "min=1%2C300.00" in page.evaluate("() => location.hash")
    page.reload()  # the filters are in the link: a reload keeps them (and the session its cookie)
    shows(page, "1 exception")
    assert page.get_by_label("Amount from").input_value() == "1,300.00"
    # The reconciliation's option comes with the list of reconciliations, read apart from the queue.
    page.wait_for_function("id => document.getElementById('exc-reconciliation_id')?.value === id", arg=str(recon["id"]))

    page.get_by_label("Amount from").fill("12.3.4")
    page.get_by_role("button", name="Apply filters").click()
    page.get_by_text("Type an amount such as 1,250.00").wait_for()
    assert page.get_by_label("Amount from").get_attribute("aria-invalid") == "true"
    page.get_by_label("Amount from").fill("")

    # Age: the oldest record's (bank 20 days, ledger 14); order: largest amount first.
    page.get_by_label("Older than (days)").fill("15")
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "1 exception")
    assert table.get_by_role("link", name=made["bank"]["title"]).is_visible()
    page.get_by_label("Older than (days)").fill("")
    page.get_by_label("Order").select_option("amount")
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "2 exceptions")
    assert "sort=amount" in page.evaluate("() => location.hash")
    titles = table.locator("tbody tr a[href^='#/exceptions/']").all_inner_texts()
    assert titles == [made["ledger"]["title"], made["bank"]["title"]]

    # Assignee: me, and unassigned.
    mine = me(stack, email)
    assert stack.request("POST", f"/reconciliation_exceptions/{made['bank']['id']}/assignees",
                         {"user_id": mine["id"]}).status_code == 201
    page.get_by_label("Assignee").select_option("me")
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "1 exception")
    assert table.get_by_role("link", name=made["bank"]["title"]).is_visible()
    page.get_by_label("Assignee").select_option("unassigned")
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "1 exception")
    assert table.get_by_role("link", name=made["ledger"]["title"]).is_visible()
    page.get_by_label("Assignee").select_option("")
    page.get_by_label("Status").select_option("resolved")
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "0 exceptions")
    page.get_by_text("No exception matches these filters.").wait_for()
    page.get_by_label("Status").select_option("open")
    page.get_by_label("Data stream").select_option(made["bank"]["data_stream_key"])
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "1 exception")
    screenshot(page, "exceptions")
    assert page.problems == []


def test_the_filter_lists_arriving_move_no_control_of_the_queue_filters(stack, page):
    """The people and the data streams fill their filters after the form is shown (requests of their
    own, every page of them), with names of any length, and the queue's own page lands after it too:
    "Apply filters" stays where it was as they land, so a click aimed at it then still applies the
    reconciliation chosen meanwhile (a long name widened its select, pushed the fields after it to
    the next line and the button a line down; the queue's table widened the page and moved it up)."""
    made = world(stack)
    recon = made["reconciliation"]
    long_name = f"The payments of the subsidiaries abroad, settled weekly {made['suffix']}"
    assert stack.request("POST", "/data_streams", {"key": f"xlong-{made['suffix']}", "name": long_name}).status_code == 201
    held = []
    patterns = ("**/v1/users?*", "**/v1/data_streams?*", "**/v1/reconciliation_exceptions*")
    for pattern in patterns:
        page.route(pattern, lambda route: held.append(route))
    sign_in_as(stack, page, "preparer", "#/exceptions", name=long_name)
    page.get_by_role("heading", name="Exceptions").wait_for()
    page.get_by_label("Reconciliation").select_option(label=recon["name"])
    apply = page.get_by_role("button", name="Apply filters")

    def asked() -> set[str]:
        return {path for route in held for path in ("/v1/users", "/v1/data_streams", "/v1/reconciliation_exceptions")
                if path in route.request.url}

    for _ in range(500):  # the form asks for both lists once it is shown, the queue for its page
        if len(asked()) == 3:
            break
        page.wait_for_timeout(20)
    assert len(asked()) == 3, f"the people, the data streams and the queue were not all asked for: {asked()}"
    before = apply.bounding_box()
    for route in held:  # a list's next pages, asked as these come in, join `held` and go on too
        route.continue_()
    for pattern in patterns:
        page.unroute(pattern)
    page.locator("#exc-stream option", has_text=long_name).wait_for(state="attached")
    page.locator("#exc-assignee option", has_text=long_name).wait_for(state="attached")
    page.locator("table.exception-queue").wait_for()
    assert apply.bounding_box() == before
    assert page.get_by_label("Reconciliation").input_value() == str(recon["id"])
    apply.click()
    shows(page, "2 exceptions")
    assert f"reconciliation_id={recon['id']}" in page.evaluate("() => location.hash")
    assert page.problems == []


def test_the_queue_pages_through_its_exceptions_fifty_at_a_time(stack, page):
    """120 exceptions of one reconciliation, written with the repository's item layout (as a
    refresh leaves them): three pages, a count of them all, and a reload on page 3 stays there."""
    suffix = uuid.uuid4().hex[:8]
    key = f"xpaged-{suffix}"
    assert stack.request("POST", "/data_streams", {"key": key, "name": f"Paged {suffix}"}).status_code == 201
    other = f"xpaged-other-{suffix}"
    stream = stack.request("POST", "/data_streams", {"key": other, "name": f"Other {suffix}"}).json()
    recon = stack.request("POST", "/reconciliations", {
        "name": f"Paged {suffix}", "run_type": "batch", "side_a_stream_keys": [key],
        "side_b_stream_keys": [other]}).json()
    container = Container(StackInfo(**stack.stack_info()).settings(Settings(local_mode=True)))
    now = datetime.now(UTC)
    items = []
    for n in range(120):
        exception_id = container.ports.exceptions.next_id("local")
        records = [ExceptionRecord(n, 1000 + n, "credit", day(5 + n % 30), "USD")]
        items.append(ExceptionRepository._to_item(ReconciliationException(
            environment="local", id=exception_id, reconciliation_id=recon["id"], data_stream_key=key,
            data_stream_id=stream["id"], title=f"Paged {n:03d}", description="", status=ExceptionStatus.DISMISSED,
            created_at=now, updated_at=now, opened_at=now, closed_at=now, totals=totals(records), currency="USD")))
    container.table.batch_write(puts=items)

    sign_in_as(stack, page, "viewer", f"#/exceptions?reconciliation={recon['id']}")
    shows(page, "120 exceptions")
    rows = page.locator("table.exception-queue tbody tr")
    assert rows.count() == 50 and rows.first.get_by_role("link").inner_text() == "Paged 119"  # newest first

    # While the next page loads (its answer held back here), the first page's rows and figures are not
    # shown as the next one's, and the pager is disabled.
    held = []
    page.route(lambda url: "/reconciliation_exceptions?" in url and "offset=50" in url, lambda route: held.append(route))
    page.get_by_role("button", name="Next").click()
    page.wait_for_function("() => document.querySelector('[data-testid=exception-count]').textContent.trim()"
                           " === 'Loading exceptions…'")
    assert rows.count() == 0 and page.get_by_text("1–50 of 120").count() == 0
    assert page.get_by_role("button", name="Next").is_disabled()
    assert page.get_by_role("button", name="Previous").is_disabled()
    page.wait_for_function("() => document.activeElement.id === 'exc-count'")
    assert len(held) == 1
    held[0].continue_()
    page.unroute_all()
    shows(page, "120 exceptions")
    page.get_by_text("51–100 of 120").wait_for()
    assert rows.first.get_by_role("link").inner_text() == "Paged 069" and "offset=50" in page.url
    page.get_by_role("button", name="Next").click()
    shows(page, "120 exceptions")
    page.get_by_text("101–120 of 120 · page 3 of 3").wait_for()
    assert rows.count() == 20 and page.get_by_role("button", name="Next").is_disabled()
    page.reload()
    shows(page, "120 exceptions")
    page.get_by_text("101–120 of 120 · page 3 of 3").wait_for()
    page.get_by_role("button", name="Previous").click()
    shows(page, "120 exceptions")
    page.get_by_text("51–100 of 120").wait_for()

    # A link past the last page offers the first one, not "0–10000 of 120".
    page.evaluate("route => { location.hash = route; }", f"#/exceptions?reconciliation_id={recon['id']}&offset=10000")
    shows(page, "120 exceptions")
    page.get_by_role("link", name="Go to the first page").click()
    shows(page, "120 exceptions")
    page.get_by_text("1–50 of 120").wait_for()
    assert "offset" not in page.evaluate("() => location.hash")
    assert page.problems == []


def test_an_exception_in_several_currencies_shows_no_net_amount(stack, page):
    """Records in USD and EUR (the exception's currency null): no sum of the two is shown as money."""
    suffix = uuid.uuid4().hex[:8]
    key = f"xmixed-{suffix}"
    stream = stack.request("POST", "/data_streams", {"key": key, "name": f"Mixed {suffix}"}).json()
    other = f"xmixed-other-{suffix}"
    assert stack.request("POST", "/data_streams", {"key": other, "name": f"Other {suffix}"}).status_code == 201
    recon = stack.request("POST", "/reconciliations", {
        "name": f"Mixed {suffix}", "run_type": "batch", "side_a_stream_keys": [key],
        "side_b_stream_keys": [other]}).json()
    container = Container(StackInfo(**stack.stack_info()).settings(Settings(local_mode=True)))
    now = datetime.now(UTC)
    records = [ExceptionRecord(1, 1000, "credit", day(5), "USD"), ExceptionRecord(2, 700, "debit", day(6), "EUR")]
    exception_id = container.ports.exceptions.next_id("local")
    container.table.batch_write(puts=[ExceptionRepository._to_item(ReconciliationException(
        environment="local", id=exception_id, reconciliation_id=recon["id"], data_stream_key=key,
        data_stream_id=stream["id"], title=f"Mixed {suffix}", description="", status=ExceptionStatus.OPEN,
        created_at=now, updated_at=now, opened_at=now, totals=totals(records), currency=None))])

    sign_in_as(stack, page, "viewer", f"#/exceptions?reconciliation_id={recon['id']}")
    shows(page, "1 exception")
    row = page.locator("table.exception-queue tbody tr")
    assert row.get_by_text("several currencies").count() == 2 and "3.00" not in row.inner_text()
    # The side panel's read of the other side fails: the page says so (not "no open exception").
    page.route(lambda url: "status=investigating" in url and "data_stream_key=" in url,
               lambda route: route.fulfill(status=500, json={"message": "Internal error"}))
    row.get_by_role("link", name=f"Mixed {suffix}").click()
    aggregates = page.get_by_label("Aggregates", exact=True)
    aggregates.wait_for()
    assert "several currencies" in aggregates.inner_text() and "3.00" not in aggregates.inner_text()
    page.locator("section.side").nth(1).get_by_text("Could not load this side's exceptions").wait_for()
    assert page.get_by_text("No open exception on this side.").count() == 0
    assert serious_violations(page) == []
    assert unexpected(page.problems, 500) == []


def test_a_preparer_assigns_rows_of_the_queue_to_themselves_in_place(stack, page):
    """"Assign to me" on the queue's rows: one unassigned and one assigned to someone else each offer
    it (its name the visible words, then the exception's title: axe's label-in-name), reached with Tab from the row's link and pressed with Enter; the row
    shows the assignment without a reload and offers it no more; the API has it."""
    made = world(stack)
    bank, ledger = made["bank"], made["ledger"]
    other_email, _ = person(stack, "preparer", name=f"Someone {made['suffix']}")
    other = me(stack, other_email)
    assert stack.request("POST", f"/reconciliation_exceptions/{bank['id']}/assignees",
                         {"user_id": other["id"]}).status_code == 201
    email, _ = sign_in_as(stack, page, "preparer", f"#/exceptions?reconciliation_id={made['reconciliation']['id']}",
                          name=f"Preparer {made['suffix']}")
    mine = me(stack, email)
    shows(page, "2 exceptions")
    table = page.locator("table.exception-queue")
    bank_row = table.locator("tr", has=page.get_by_role("link", name=bank["title"]))
    ledger_row = table.locator("tr", has=page.get_by_role("link", name=ledger["title"]))
    assert f"Someone {made['suffix']}" in bank_row.inner_text()
    assign_bank = page.get_by_role("button", name=f"Assign to me: {bank['title']}", exact=True)
    assign_ledger = page.get_by_role("button", name=f"Assign to me: {ledger['title']}", exact=True)
    assert assign_bank.is_visible() and assign_ledger.is_visible()
    assert serious_violations(page) == []

    # Keyboard: Tab from the row's link reaches its button, Enter presses it.
    ledger_row.get_by_role("link", name=ledger["title"]).focus()
    page.keyboard.press("Tab")
    assert assign_ledger.evaluate("button => button === document.activeElement")
    requests_made = []
    page.on("request", lambda r: requests_made.append(r.url) if "/reconciliation_exceptions?" in r.url else None)
    page.keyboard.press("Enter")
    ledger_row.get_by_text(f"Preparer {made['suffix']}").wait_for()
    page.get_by_test_id("queue-said").filter(has_text=f"Assigned {ledger['title']} to you.").wait_for()
    assert assign_ledger.count() == 0
    assert page.evaluate("() => document.activeElement.dataset.testid") == f"assignees-{ledger['id']}"
    assert requests_made == []  # in place: the queue was not read again
    detail = stack.request("GET", f"/reconciliation_exceptions/{ledger['id']}").json()
    assert [a["user_id"] for a in detail["assignees"]] == [mine["id"]]

    # Beside someone else; its answer held back while the person moves on: focus stays where they went.
    held = []
    page.route(lambda url: url.endswith(f"/reconciliation_exceptions/{bank['id']}/assignees"),
               lambda route: held.append(route))
    assign_bank.click()
    page.get_by_role("button", name=f"Assigning…: {bank['title']}", exact=True).wait_for()
    ledger_link = ledger_row.get_by_role("link", name=ledger["title"])
    ledger_link.focus()
    deadline = time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        page.wait_for_timeout(50)  # the held request reaches its handler as Playwright's events are read
    assert len(held) == 1, held
    held[0].continue_()
    bank_row.get_by_text(f"Someone {made['suffix']}, Preparer {made['suffix']}").wait_for()
    assert assign_bank.count() == 0
    page.get_by_test_id("queue-said").filter(has_text=f"Assigned {bank['title']} to you.").wait_for()
    assert ledger_link.evaluate("link => link === document.activeElement")
    detail = stack.request("GET", f"/reconciliation_exceptions/{bank['id']}").json()
    assert sorted(a["user_id"] for a in detail["assignees"]) == sorted([other["id"], mine["id"]])
    assert serious_violations(page) == []

    # Other filters: what was said of the rows before is said no more.
    page.evaluate("() => { location.hash += '&sort=oldest'; }")
    shows(page, "2 exceptions")
    page.wait_for_function("() => document.querySelector('[data-testid=queue-said]').textContent === ''")

    page.reload()  # what the API has is what the queue shows, and my rows offer nothing more
    shows(page, "2 exceptions")
    assert page.get_by_role("button", name=re.compile(r"^Assign to me: ")).count() == 0
    assert page.problems == []


def test_a_viewer_gets_no_assign_to_me_on_the_queue_and_the_api_refuses_it(stack, page):
    made = world(stack)
    email, password = sign_in_as(stack, page, "viewer", f"#/exceptions?reconciliation_id={made['reconciliation']['id']}")
    shows(page, "2 exceptions")
    page.get_by_role("link", name=made["ledger"]["title"]).wait_for()
    assert page.get_by_role("button", name=re.compile(r"^Assign to me: ")).count() == 0
    assert serious_violations(page) == []
    viewer = me(stack, email)
    refused = stack.request("POST", f"/reconciliation_exceptions/{made['ledger']['id']}/assignees",
                            {"user_id": viewer["id"]}, key=None,
                            headers={"Authorization": f"Bearer {token_of(stack, email, password)}"})
    assert refused.status_code == 403, refused.text
    assert stack.request("GET", f"/reconciliation_exceptions/{made['ledger']['id']}").json()["assignees"] == []
    assert page.problems == []


def test_the_queues_filters_offer_every_page_of_reconciliations_streams_and_people(stack, page):
    """The filter selects follow each list's next_cursor to its end: the first request of each list
    is made to ask for 3 items only (rewritten on its way), and the world's reconciliation, its bank
    stream and a person made before three newer ones each are on a later page, yet offered."""
    made = world(stack)
    suffix = made["suffix"]
    assignee_email, _ = person(stack, "preparer", name=f"Paged person {suffix}")
    assignee = me(stack, assignee_email)
    for n in range(3):  # newer than each of the three: they fill the first page (newest first)
        person(stack, "viewer", name=f"Newer {suffix} {n}")
        assert stack.request("POST", "/data_streams", {"key": f"xnewer-{suffix}-{n}",
                                                        "name": f"Newer {suffix} {n}"}).status_code == 201
        assert stack.request("POST", "/reconciliations", {
            "name": f"Newer {suffix} {n}", "run_type": "batch", "side_a_stream_keys": [f"xnewer-{suffix}-{n}"],
            "side_b_stream_keys": [made["ledger"]["data_stream_key"]]}).status_code == 201
    assert stack.request("POST", f"/reconciliation_exceptions/{made['bank']['id']}/assignees",
                         {"user_id": assignee["id"]}).status_code == 201

    asked = small_first_pages(page, "users", "data_streams", "reconciliations")
    sign_in_as(stack, page, "viewer", "#/exceptions")
    shows_any = "c => c !== null && c.dataset.for === location.hash && / exceptions?$/.test(c.textContent.trim())"
    page.wait_for_function(f"() => ({shows_any})(document.querySelector('[data-testid=exception-count]'))")
    for select, value in (("Reconciliation", str(made["reconciliation"]["id"])),
                          ("Data stream", made["bank"]["data_stream_key"]), ("Assignee", str(assignee["id"]))):
        page.wait_for_function("([label, value]) => [...document.getElementById(label).options]"
                               ".some(o => o.value === value)",
                               arg=[{"Reconciliation": "exc-reconciliation_id", "Data stream": "exc-stream",
                                     "Assignee": "exc-assignee"}[select], value])
        page.get_by_label(select).select_option(value)
    read_every_page(asked)
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "1 exception")
    page.locator("table.exception-queue").get_by_role("link", name=made["bank"]["title"]).wait_for()
    assert page.problems == []


def test_a_preparer_assigns_changes_status_and_comments_with_mentions(stack, page):
    made = world(stack)
    bank = made["bank"]
    other_email, _ = person(stack, "viewer", name=f"Mentioned {made['suffix']}")
    other = me(stack, other_email)
    email, _ = sign_in_as(stack, page, "preparer", f"#/exceptions?reconciliation={made['reconciliation']['id']}")
    page.get_by_role("link", name=bank["title"]).click()
    page.get_by_role("heading", level=2, name=re.compile(re.escape(bank["title"]))).wait_for()
    mine = me(stack, email)

    # Side by side: the bank's record on side A, the ledger's open exception and its two on side B.
    side_a = page.locator("section.side").nth(0)
    side_b = page.locator("section.side").nth(1)
    side_a.get_by_text("ACME PAYOUT").wait_for()
    side_b.get_by_text("Fee").wait_for()
    assert "1,250.00 USD" in side_a.inner_text() and "-1,349.00 USD" in side_b.inner_text()
    assert serious_violations(page) == []

    page.get_by_role("button", name="Assign to me").click()
    page.get_by_role("status").filter(has_text="Assigned to you.").wait_for()
    assert page.evaluate("() => document.activeElement.dataset.testid") == "exception-status-line"
    page.get_by_label("Assign to").select_option(str(other["id"]))
    page.get_by_role("button", name="Assign", exact=True).click()
    page.get_by_role("button", name=f"Unassign Mentioned {made['suffix']}").wait_for()
    detail = stack.request("GET", f"/reconciliation_exceptions/{bank['id']}").json()
    assert sorted(a["user_id"] for a in detail["assignees"]) == sorted([mine["id"], other["id"]])
    page.get_by_role("button", name=f"Unassign Mentioned {made['suffix']}").click()
    page.get_by_role("status").filter(has_text=f"Unassigned Mentioned {made['suffix']}.").wait_for()
    assert page.evaluate("() => document.activeElement.dataset.testid") == "exception-status-line"
    detail = stack.request("GET", f"/reconciliation_exceptions/{bank['id']}").json()
    assert [a["user_id"] for a in detail["assignees"]] == [mine["id"]]

    page.get_by_label("Change status to").select_option("dismissed")
    page.get_by_role("button", name="Change status").click()
    page.get_by_role("status").filter(has_text="Status changed to dismissed.").wait_for()
    assert stack.request("GET", f"/reconciliation_exceptions/{bank['id']}").json()["status"] == "dismissed"
    page.get_by_label("Change status to").select_option("open")
    page.get_by_role("button", name="Change status").click()
    page.get_by_role("status").filter(has_text="Status changed to open.").wait_for()

    handle = other_email.split("@")[0]
    page.get_by_label("Comment", exact=True).fill("Looks like a timing difference, ")
    page.get_by_label("Mention").select_option(str(other["id"]))
    page.get_by_role("button", name="Insert mention").click()
    page.get_by_text(f"Will mention: Mentioned {made['suffix']}.").wait_for()
    assert page.get_by_label("Comment", exact=True).input_value().endswith(f"@{handle} ")
    page.get_by_label("Comment", exact=True).press_sequentially("please check @nobody-here")
    page.get_by_role("button", name="Post comment").click()
    page.get_by_role("alert").filter(has_text="No user is @nobody-here.").wait_for()
    page.get_by_label("Comment", exact=True).fill(f"Looks like a timing difference, @{handle} please check.")
    page.get_by_role("button", name="Post comment").click()
    page.get_by_role("status").filter(has_text="Comment posted.").wait_for()
    page.locator("ol.comments").get_by_text(f"Mentions: Mentioned {made['suffix']}").wait_for()
    [comment] = stack.request("GET", f"/reconciliation_exceptions/{bank['id']}").json()["comments"][-1:]
    assert (comment["mentions"], comment["author_idp_id"]) == ([other["id"]], mine["idp_user_id"])
    screenshot(page, "exception-detail")
    assert page.problems == []


def test_a_dismissal_held_for_approval_says_so_and_changes_nothing(stack, page):
    """The reconciliation's approval policy holds dismissals above 0.00: the service answers 202 with
    a pending approval, and the page says the dismissal waits for an approver, not that it was done."""
    bank = held_dismissal(stack, page)["bank"]
    said = page.get_by_test_id("exception-status-line")
    said.filter(has_text="Sent for approval: approval ").wait_for()
    assert "Nothing has changed yet." in said.inner_text() and "Status changed" not in said.inner_text()
    approval_id = int(re.search(r"approval (\d+)", said.inner_text()).group(1))
    approval = stack.request("GET", f"/approvals/{approval_id}").json()
    assert (approval["status"], approval["action"], approval["target_id"]) == ("pending", "dismissal", bank["id"])
    assert stack.request("GET", f"/reconciliation_exceptions/{bank['id']}").json()["status"] == "open"
    assert serious_violations(page) == []
    assert page.problems == []


def test_an_investigation_shows_its_progress_and_its_suggestion_is_accepted(stack, page):
    made = world(stack)
    bank = made["bank"]
    sign_in_as(stack, page, "preparer", f"#/exceptions/{bank['id']}")
    page.get_by_role("button", name="Start an investigation").click()
    page.get_by_role("status").filter(has_text="Investigation started.").wait_for()
    suggestion = page.get_by_test_id("suggestion")  # read again each second until the run ends
    suggestion.wait_for()
    assert "Confidence" in suggestion.inner_text()
    suggestion.get_by_role("cell", name="Acme payout").wait_for()  # the suggested ledger record
    investigation = stack.request("GET", f"/reconciliation_exceptions/{bank['id']}").json()["investigation"]
    assert investigation["status"] == "completed" and investigation["suggested_record_ids"] == [made["partner"]]
    assert investigation["recommendation_text"] in suggestion.inner_text()
    page.get_by_role("button", name="Accept the suggestion").click()
    page.get_by_role("status").filter(has_text="Suggestion accepted").wait_for()
    assert page.evaluate("() => document.activeElement.dataset.testid") == "exception-status-line"
    suggestion.get_by_text(re.compile(r"Accepted: match \d+\.")).wait_for()
    detail = stack.request("GET", f"/reconciliation_exceptions/{bank['id']}").json()
    assert detail["status"] == "resolved" and detail["investigation"]["accepted_match_id"] is not None
    match = stack.request("GET", f"/reconciliation_matches/{detail['investigation']['accepted_match_id']}").json()
    assert sorted(r["id"] for r in match["records"]) == sorted([made["payout"], made["partner"]])
    assert serious_violations(page) == []
    assert page.problems == []


def test_an_investigation_in_progress_is_shown_until_it_ends(stack, page):
    """The page polls: an investigation still pending when the detail loads shows its progress bar,
    then its outcome, without a reload."""
    made = world(stack)
    bank = made["bank"]
    container = Container(StackInfo(**stack.stack_info()).settings(Settings(local_mode=True)))

    class Held:  # the investigation's message is kept back: it stays pending until the test sends it
        def send(self, message):
            self.message = message

    held_queue = Held()
    held = investigations.start(replace(container.ports, investigation_queue=held_queue), "local", bank["id"],
                                RecordFilter())
    sign_in_as(stack, page, "preparer", f"#/exceptions/{bank['id']}")
    page.get_by_role("progressbar", name="Investigation progress").wait_for()
    page.get_by_text(f"Investigation {held.id} is pending…").wait_for()
    assert page.get_by_role("button", name="Investigate again").is_disabled()
    container.ports.investigation_queue.send(held_queue.message)
    page.get_by_test_id("suggestion").wait_for()
    assert page.get_by_role("progressbar").count() == 0
    assert page.problems == []


def test_a_viewer_sees_no_controls_and_the_api_refuses_them(stack, page):
    made = world(stack)
    bank = made["bank"]
    email, password = sign_in_as(stack, page, "viewer", f"#/exceptions/{bank['id']}")
    page.get_by_role("heading", level=2, name=re.compile(re.escape(bank["title"]))).wait_for()
    page.locator("section.side").nth(0).get_by_text("ACME PAYOUT").wait_for()
    for name in ("Assign to me", "Change status", "Post comment", "Start an investigation", "Assign"):
        assert page.get_by_role("button", name=name, exact=True).count() == 0, name
    assert page.get_by_label("Comment", exact=True).count() == 0
    assert serious_violations(page) == []

    headers = {"Authorization": f"Bearer {token_of(stack, email, password)}"}
    base = f"/reconciliation_exceptions/{bank['id']}"
    viewer = me(stack, email)
    assert stack.request("GET", base, key=None, headers=headers).status_code == 200
    for method, path, body in (("PATCH", base, {"status": "dismissed"}),
                               ("POST", f"{base}/assignees", {"user_id": viewer["id"]}),
                               ("POST", f"{base}/comments", {"body": "hello"}),
                               ("POST", f"{base}/investigations", None)):
        refused = stack.request(method, path, body, key=None, headers=headers)
        assert refused.status_code == 403, (method, path, refused.text)
    detail = stack.request("GET", base).json()
    assert (detail["status"], detail["assignees"], detail["comments"], detail["investigation"]) == ("open", [], [], None)
    assert page.problems == []


def test_a_filter_chosen_while_a_list_still_loads_is_kept_when_the_list_arrives(stack, page):
    """The people list of the Assignee filter answers after the person chose a status and typed an
    amount: drawing the form again with the list must not put the applied values back."""
    made = world(stack)
    held = []
    page.route("**/v1/users?*", lambda route: held.append(route))
    sign_in_as(stack, page, "viewer", f"#/exceptions?reconciliation={made['reconciliation']['id']}")
    page.wait_for_function("() => document.getElementById('exc-status') !== null")
    page.wait_for_function("() => document.getElementById('exc-assignee').options.length === 3")  # no people yet
    page.get_by_label("Status").select_option("resolved")
    page.get_by_label("Amount from").fill("1")
    assert held, "the people list was not asked for"
    for route in held:
        route.continue_()
    page.unroute("**/v1/users?*")
    page.wait_for_function("() => document.getElementById('exc-assignee').options.length > 3")
    assert page.get_by_label("Status").input_value() == "resolved"
    assert page.get_by_label("Amount from").input_value() == "1"
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "0 exceptions")
    assert "status=resolved" in page.url and "min=1" in page.url


def test_filters_applied_before_their_lists_arrive_stay_in_the_link(stack, page):
    """The reconciliations and data streams lists have not answered when the person applies another
    filter: the link's reconciliation and stream are kept (each shown as an option of its own), not
    dropped for "All"."""
    made = world(stack)
    recon, bank = made["reconciliation"], made["bank"]
    held = []
    lists = ("**/v1/reconciliations?*", "**/v1/data_streams?*")
    for pattern in lists:
        page.route(pattern, lambda route: held.append(route))
    sign_in_as(stack, page, "viewer",
               f"#/exceptions?reconciliation_id={recon['id']}&stream={bank['data_stream_key']}")
    shows(page, "1 exception")
    assert page.get_by_label("Reconciliation").input_value() == str(recon["id"])
    assert page.get_by_label("Data stream").input_value() == bank["data_stream_key"]
    page.get_by_label("Status").select_option("open")
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "1 exception")
    applied = page.evaluate("() => location.hash")
    assert f"reconciliation_id={recon['id']}" in applied and f"stream={bank['data_stream_key']}" in applied
    assert held, "the lists were not asked for"
    for route in held:
        route.continue_()
    for pattern in lists:
        page.unroute(pattern)
    page.get_by_label("Reconciliation").locator("option", has_text=recon["name"]).wait_for(state="attached")
    assert page.get_by_label("Reconciliation").input_value() == str(recon["id"])
    assert page.get_by_label("Reconciliation").locator(f"option[value='{recon['id']}']").count() == 1
    assert page.problems == []


def test_the_filtered_queue_is_exported_as_csv_and_downloaded(stack, page):
    """Issue 35's exports: the queue filtered to one reconciliation, exported as CSV (POST /exports
    with the queue's filters, the job read until it ends), and its download link's file holds
    exactly the queue's rows for that filter, in the queue's order."""
    made = world(stack)
    other = world(stack)  # a second reconciliation's exceptions, which the filter must leave out
    recon = made["reconciliation"]
    sign_in_as(stack, page, "viewer", "#/exceptions")
    page.get_by_role("heading", name="Exceptions").wait_for()
    page.get_by_label("Reconciliation").select_option(label=recon["name"])
    page.get_by_role("button", name="Apply filters").click()
    shows(page, "2 exceptions")
    shown = page.locator("table.exception-queue tbody tr a[href^='#/exceptions/']").all_inner_texts()
    assert sorted(shown) == sorted([made["bank"]["title"], made["ledger"]["title"]])

    export = page.get_by_role("group", name="Export the filtered exceptions")
    assert export.get_by_label("Format").input_value() == "csv"
    export.get_by_label("Format").focus()  # keyboard: the select, then the button
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.textContent") == "Export"
    page.keyboard.press("Enter")
    link = export.get_by_role("link", name=re.compile(r"^Download exceptions-\d+\.csv$"))
    link.wait_for(timeout=60_000)
    assert export.get_by_role("status").inner_text() == "Export ready: 2 rows."
    assert serious_violations(page) == []

    export_id = int(re.search(r"exceptions-(\d+)\.csv", link.inner_text()).group(1))
    job = stack.request("GET", f"/exports/{export_id}").json()
    assert job["kind"] == "exceptions" and job["format"] == "csv" and job["status"] == "completed"
    assert job["filters"] == {"reconciliation_id": recon["id"]}, job["filters"]
    answer = requests.get(link.get_attribute("href"), timeout=30)
    assert answer.status_code == 200, answer.text
    rows = list(csv.DictReader(io.StringIO(answer.content.decode("utf-8"))))
    queue = stack.request("GET", "/reconciliation_exceptions",
                          params={"reconciliation_id": recon["id"], "limit": 100}).json()["data"]
    assert [(int(r["id"]), r["title"]) for r in rows] == [(e["id"], e["title"]) for e in queue]
    assert {int(r["id"]) for r in rows} == {made["bank"]["id"], made["ledger"]["id"]}
    assert not {int(r["id"]) for r in rows} & {other["bank"]["id"], other["ledger"]["id"]}
    assert [r["title"] for r in rows] == shown  # the queue's order
    assert {r["reconciliation_id"] for r in rows} == {str(recon["id"])}
    assert page.problems == []
