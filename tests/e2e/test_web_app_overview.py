"""The overview in Chromium against the local stack: a reconciliation's last run and match rate, its open
exceptions with what they amount to (a link to the queue filtered to them), what changed since yesterday,
and an import in progress."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from tests.support.chromium import needs_chromium
from tests.support.web_app import (
    ingest,
    post,
    reconciliation_with_rule,
    screenshot,
    serious_violations,
    signed_in,
    start_run,
    wait_run,
)

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]


def day(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


def test_the_overview_shows_runs_open_exceptions_changes_and_imports(stack, page):
    reconciliation, _, bank, ledger = reconciliation_with_rule(stack)
    ingest(stack, [
        {"data_stream_key": bank, "amount": 12_345, "direction": "credit", "date": day(30), "external_id": "a1"},
        {"data_stream_key": bank, "amount": 500, "direction": "credit", "date": day(10), "external_id": "a2"},
        {"data_stream_key": ledger, "amount": 500, "direction": "debit", "date": day(10), "external_id": "b1"},
        {"data_stream_key": ledger, "amount": 99_900, "direction": "debit", "date": day(20), "external_id": "b2"}])
    run = wait_run(stack, reconciliation["id"], start_run(stack, reconciliation["id"])["id"])
    assert run["status"] == "completed" and run["matched_records"] == 2
    filename = f"waiting-{uuid.uuid4().hex[:6]}.csv"
    waiting = post(stack, f"/data_streams/{bank}/file_imports", {"filename": filename, "format": "csv"})

    signed_in(stack, page, role="viewer")
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=reconciliation["name"], exact=True))
    row.get_by_role("link", name="2 exceptions").wait_for()
    cells = row.get_by_role("cell").all_inner_texts()
    assert cells[1] == "completed" and cells[4] == "50.0%"  # 2 of the 4 records matched
    assert "1,122.45 USD" in cells[6]  # 123.45 + 999.00, the two sides' exceptions
    assert "1 run completed" in cells[7] and "2 exceptions opened" in cells[7]
    page.get_by_role("link", name=f"{filename} into {bank}").wait_for()
    assert page.get_by_role("progressbar", name=f"{filename} into {bank}: rows done").count() == 1
    assert serious_violations(page) == []
    screenshot(page, "overview")

    row.get_by_role("link", name="2 exceptions").click()
    page.get_by_role("heading", name="Exceptions").wait_for()
    page.wait_for_function("id => location.hash.includes(`reconciliation_id=${id}`)", arg=reconciliation["id"])
    # The queue applies the link's filter: as many as the overview counted, and only this reconciliation's.
    page.wait_for_function("() => { const c = document.querySelector('[data-testid=exception-count]');"
                           " return c !== null && c.dataset.for === location.hash && c.textContent.trim() === '2 exceptions'; }")
    rows = page.locator("table.exception-queue tbody tr")
    assert rows.count() == 2
    assert all(f"· {reconciliation['name']} ·" in " ".join(text.split()) for text in rows.all_inner_texts())
    stack.request("POST", f"/file_imports/{waiting['id']}/cancel")
    assert page.problems == []


def test_the_overview_is_not_read_again_while_the_tab_is_hidden(stack, page):
    """The 10 s poll skips its turns while document.hidden, and reads again once the tab shows."""
    page.clock.install()
    reads: list[str] = []
    page.on("request", lambda request: reads.append(request.url) if request.url.endswith("/v1/overview") else None)
    signed_in(stack, page, role="viewer")
    page.get_by_role("heading", name="Imports in progress").wait_for()
    first = len(reads)
    page.evaluate("() => Object.defineProperty(document, 'hidden', {configurable: true, get: () => true})")
    page.clock.run_for(35_000)  # three turns of the poll
    assert len(reads) == first
    page.evaluate("() => Object.defineProperty(document, 'hidden', {configurable: true, get: () => false})")
    with page.expect_request(lambda request: request.url.endswith("/v1/overview")):
        page.clock.run_for(11_000)
    assert page.problems == []
