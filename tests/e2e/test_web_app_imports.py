"""The Imports page (#/imports) in Debian's Chromium against the local stack: a CSV dropped on the page
goes from the browser to its presigned upload URL (s3rver's CORS, the page's CSP connect-src), its
upload and import progress bars move to the end, and its failed rows show with line and reason (and are exported as CSV); a
larger import is cancelled while its rows land; a bank statement imports into a bank_feed stream whose
closing balance the streams table then shows; a viewer gets no import controls and the API refuses
them. Any console error (a CSP violation is one) fails a test; axe-core finds no serious violation."""
from __future__ import annotations

import re
import uuid
from datetime import date
from pathlib import Path

import pytest
import requests

from tests.support.camt_files import Entry, write_camt053
from tests.support.camt_files import Statement as CamtStatement
from tests.support.chromium import needs_chromium
from tests.support.statement_files import Bai2Account, Bai2Detail, Bai2Group, bai2_file
from tests.support.web_app import (
    downloaded_csv,
    person,
    read_every_page,
    screenshot,
    serious_violations,
    signed_in,
    small_first_pages,
    unexpected,
)

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]

STATEMENTS = Path(__file__).resolve().parents[1] / "data" / "statements"
NACHA = Path(__file__).resolve().parents[1] / "data" / "nacha"
BAD_ROWS = {51: ("bad-amount", "twelve"), 102: ("bad-date", "2026-13-45"), 203: ("no-amount", "")}


def new_stream(stack, **fields) -> dict:
    key = f"imp-{uuid.uuid4().hex[:8]}"
    created = stack.request("POST", "/data_streams", {"key": key, "name": f"Bank {key[-4:]}", **fields})
    assert created.status_code == 201, created.text
    return created.json()


def csv_with_bad_rows(rows: int) -> str:
    """`rows` data rows (line n + 1 of the file is row n); the lines of BAD_ROWS fail, each for its reason."""
    lines = ["date,amount,external_id,description"]
    for line in range(2, rows + 2):
        if line in BAD_ROWS:
            name, amount = BAD_ROWS[line]
            day = "2026-13-45" if name == "bad-date" else "2026-11-02"
            lines.append(f"{day},{'12.00' if name == 'bad-date' else amount},{name}-{line},row {line}")
        else:
            lines.append(f"2026-11-02,{line}.25,row-{uuid.uuid4().hex[:6]}-{line},row {line}")
    return "\n".join(lines) + "\n"


def drop(page, name: str, text: str, media_type: str = "text/csv") -> None:
    """Drop a file on the drop zone as a person's drag would: a drop event carrying a DataTransfer."""
    transfer = page.evaluate_handle(
        "([name, text, type]) => { const t = new DataTransfer(); t.items.add(new File([text], name, {type})); return t; }",
        [name, text, media_type])
    page.get_by_test_id("drop-zone").dispatch_event("drop", {"dataTransfer": transfer})


def progress_of(page, element_id: str) -> dict:
    return page.evaluate("id => { const p = document.getElementById(id); return p && {value: p.value, max: p.max, "
                         "determinate: p.hasAttribute('value')}; }", element_id)


CANCEL_MS = 180_000
LARGE_ROWS = 12_000


def import_status(page, status: str) -> None:
    page.get_by_test_id("import-status").filter(has_text=status).wait_for()


def token_of(stack, email: str, password: str) -> str:
    answer = requests.post(f"{stack.url}/session", json={"email": email, "password": password}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["id_token"]


def test_a_dropped_csv_uploads_lands_and_shows_its_failed_rows_with_line_and_reason(stack, page):
    stream = new_stream(stack)
    text = csv_with_bad_rows(600)
    signed_in(stack, page, role="preparer", hash_route="#/imports")
    page.get_by_role("heading", name="Import a file").wait_for()
    assert serious_violations(page) == []

    drop(page, "november.csv", text)
    page.get_by_text("november.csv ·").wait_for()
    assert page.get_by_label("File to import").evaluate("input => input.files[0].name") == "november.csv"
    assert page.get_by_label("Format", exact=True).input_value() == "csv"  # from the file's name
    page.get_by_label("Data stream", exact=True).select_option(stream["key"])
    page.get_by_label("Date format").select_option("YYYY-MM-DD")
    page.get_by_role("button", name="Import", exact=True).click()

    # The upload's bar ends at the file's size in bytes (XMLHttpRequest's upload progress), the import's
    # at its row count; then the import has ended.
    page.wait_for_function("() => { const p = document.getElementById('upload-progress'); "
                           "return p && p.max > 1 && p.value === p.max; }")
    assert progress_of(page, "upload-progress")["max"] == len(text.encode())
    import_status(page, "completed")
    bar = progress_of(page, "import-progress")
    assert bar == {"value": 600, "max": 600, "determinate": True}
    assert page.get_by_test_id("import-rows").inner_text() == "600 of 600 rows"

    failed = page.get_by_role("table", name="Rows of november.csv that failed, with their line and reason")
    failed.wait_for()
    rows = failed.locator("tbody tr")
    assert rows.count() == 3
    shown = [[cell.strip() for cell in rows.nth(i).locator("td").all_inner_texts()] for i in range(3)]
    assert [(int(line), external_id) for line, external_id, _ in shown] == [
        (line, f"{name}-{line}") for line, (name, _) in sorted(BAD_ROWS.items())]
    assert all(reason for _, _, reason in shown)

    # The same as the API says: the import, and its failed rows' lines and reasons.
    [job] = stack.request("GET", f"/data_streams/{stream['key']}/file_imports").json()["data"]
    assert (job["status"], job["successful_items"], job["failed_items"], job["filename"]) == (
        "completed", 597, 3, "november.csv")
    results = stack.request("GET", f"/file_imports/{job['id']}/results?status=failed").json()["data"]
    assert [[str(r["line"]), r["external_id"], r["error"]] for r in results] == shown
    assert stack.request("GET", f"/data_streams/{stream['key']}").json()["records_count"] == 597
    # The failed rows exported whole (an export of kind file_import_results): the rows the page shows.
    export_id, exported = downloaded_csv(page.get_by_role("group", name="Export the failed rows"), "file_import_results")
    assert [[r["line"], r["external_id"], r["error"]] for r in exported] == shown
    assert {r["status"] for r in exported} == {"failed"}
    assert stack.request("GET", f"/exports/{export_id}").json()["filters"] == {
        "file_import_id": job["id"], "status": "failed"}

    # The stream's imports are listed under the streams, this one with its counts.
    listed = page.get_by_role("table", name=f"Imports of {stream['name']}, newest first")
    listed.get_by_role("cell", name="november.csv").wait_for()
    page.get_by_role("row", name=stream["name"]).get_by_role("cell", name="597").wait_for()
    assert serious_violations(page) == []
    screenshot(page, "imports")
    assert page.problems == []


def test_a_larger_import_is_cancelled_while_its_rows_land_and_its_bar_moves_meanwhile(stack, page, tmp_path):
    stream = new_stream(stack)
    big = tmp_path / "large.csv"
    big.write_text("date,amount,external_id\n" + "".join(f"2026-11-03,{n}.10,big-{n}\n" for n in range(LARGE_ROWS)))
    signed_in(stack, page, role="preparer", hash_route="#/imports")
    page.get_by_label("File to import").set_input_files(str(big))  # the drop zone's input, as a keyboard user
    page.get_by_label("Data stream", exact=True).select_option(stream["key"])
    page.get_by_role("button", name="Import", exact=True).click()

    # Each value the import's bar takes while the rows land, as the page shows them.
    page.evaluate("() => { window.seen = []; window.watcher = setInterval(() => { const p = "
                  "document.getElementById('import-progress'); if (p && p.hasAttribute('value') && "
                  "window.seen[window.seen.length - 1] !== p.value) window.seen.push(p.value); }, 50); }")
    page.wait_for_function("() => window.seen.filter(v => v > 0).length >= 2")
    page.get_by_role("button", name="Cancel import").click()
    page.get_by_role("button", name="Cancelling…").wait_for()
    # The job stops at its next heartbeat, then gives each row it did not reach its result (failed:
    # not processed), a chunk at a time: a while on a busy machine.
    page.get_by_test_id("import-status").filter(has_text="cancelled").wait_for(timeout=CANCEL_MS)
    seen = page.evaluate("() => window.seen")
    assert len({v for v in seen if v > 0}) >= 2 and seen == sorted(seen)  # it moved, forward only

    [job] = stack.request("GET", f"/data_streams/{stream['key']}/file_imports").json()["data"]
    assert job["status"] == "cancelled" and job["cancellation_requested_at"]
    assert 0 < job["successful_items"] < LARGE_ROWS and job["processed_items"] == LARGE_ROWS
    assert page.get_by_test_id("import-rows").inner_text() == f"{LARGE_ROWS:,} of {LARGE_ROWS:,} rows"
    assert page.get_by_role("button", name="Cancel import").count() == 0
    assert serious_violations(page) == []
    assert page.problems == []


def test_a_bank_statement_lands_in_its_bank_feed_stream_whose_balance_the_page_shows(stack, page, tmp_path):
    account = str(uuid.uuid4().int)[:9]  # the fixture's account, renumbered: this environment is shared
    statement = tmp_path / "morning.bai2"
    statement.write_text((STATEMENTS / "bai2" / "funds_types.bai2").read_text().replace("777000999", account))
    stream = new_stream(stack, type="bank_feed", bank_account_id=account)
    signed_in(stack, page, role="preparer", hash_route="#/imports")
    page.get_by_label("File to import").set_input_files(str(statement))
    assert page.get_by_label("Format", exact=True).input_value() == "bai2"
    assert page.get_by_label("Date format").count() == 0  # CSV options only for a CSV
    page.get_by_label("Data stream", exact=True).select_option(stream["key"])
    page.get_by_role("button", name="Import", exact=True).click()
    import_status(page, "completed")

    # The statement's closing booked balance (015: 100000 minor units, USD) of 2026-03-01.
    # In the streams table (the watched import's "Statement accounts" names the stream too).
    row = page.get_by_role("table", name="Data streams with their records and latest balance").get_by_role(
        "row", name=stream["name"])
    row.get_by_text("1,000.00 USD").wait_for()
    assert "on 2026-03-01" in row.inner_text()
    latest = stack.request("GET", f"/data_streams/{stream['key']}").json()["latest_balance"]
    assert (latest["closing_booked"], latest["currency"], latest["date"]) == (100000, "USD", "2026-03-01")
    assert page.get_by_test_id("import-rows").inner_text() == "7 of 7 rows"
    # The import into the stream names its stream and account among the statement's accounts.
    routed = page.get_by_role("table", name="Streams the statement was routed to, with their account")
    routed.get_by_role("cell", name=account, exact=True).wait_for()
    assert routed.locator("tbody tr").count() == 1 and stream["name"] in routed.inner_text()
    # The stream's statement days (the balances route) under its imports: opening and closing booked
    # (010 and 015: 1,000.00 USD each) and closing available as the API has it.
    days = page.get_by_role("table", name=f"Statement days of {stream['name']}, newest first")
    days.get_by_role("cell", name="2026-03-01").wait_for()
    [day] = stack.request("GET", f"/data_streams/{stream['key']}/balances").json()["data"]
    cells = [c.strip() for c in days.locator("tbody tr").first.locator("td").all_inner_texts()]
    assert cells == [day["date"], "1,000.00 USD", "1,000.00 USD",
                     "—" if (held := day["closing_available"]) is None else f"{held // 100:,}.{held % 100:02d} USD", "—"]
    assert serious_violations(page) == []

    # A link to the import (#/imports/<id>) opens the page with it shown, after a reload too.
    [job] = stack.request("GET", f"/data_streams/{stream['key']}/file_imports").json()["data"]
    page.evaluate("route => { location.hash = route; }", f"#/imports/{job['id']}")
    page.reload()
    page.get_by_role("heading", name=f"Import {job['id']}: morning.bai2").wait_for()
    import_status(page, "completed")
    assert page.problems == []


def test_a_statement_routed_by_account_shows_its_streams_their_accounts_and_the_accounts_left_out(stack, page):
    """A BAI2 file of three accounts dropped with "Each account to its bank feed stream" (POST
    /file_imports): two bank_feed streams hold two of them, the third is nobody's. The page shows the
    import's progress to the end, each stream it was routed to with its account and what it got, and
    the account left out, as the API has them. Then a camt.053 statement of an account nobody holds
    fails, and the page names the account."""
    first, second, nobody = (str(uuid.uuid4().int)[:9] for _ in range(3))
    operating = new_stream(stack, type="bank_feed", bank_account_id=first)
    reserve = new_stream(stack, type="bank_feed", bank_account_id=second)
    data = bai2_file([Bai2Group(date(2026, 3, 1), [
        Bai2Account(first, [Bai2Detail("195", 15000, bank_reference=f"R1-{first}", text="Wire from Acme"),
                            Bai2Detail("475", 2500, bank_reference=f"R2-{first}", text="Check paid")]),
        Bai2Account(second, [Bai2Detail("195", 10000, bank_reference=f"R3-{second}", text="Sweep in")]),
        Bai2Account(nobody, [Bai2Detail("195", 700, bank_reference=f"R4-{nobody}", text="Not ours")])])])
    signed_in(stack, page, role="preparer", hash_route="#/imports")
    page.get_by_role("heading", name="Import a file").wait_for()
    drop(page, "routed.bai2", data.decode(), "application/octet-stream")
    assert page.get_by_label("Format", exact=True).input_value() == "bai2"
    page.get_by_label("Data stream", exact=True).select_option(label="Each account to its bank feed stream")
    page.get_by_role("button", name="Import", exact=True).click()
    heading = page.get_by_role("heading", name=re.compile(r"^Import \d+: routed\.bai2$"))
    heading.wait_for()
    job_id = int(re.match(r"Import (\d+):", heading.inner_text()).group(1))
    import_status(page, "completed")
    job = stack.request("GET", f"/file_imports/{job_id}").json()
    assert job["status"] == "completed" and job["error_details"]["accounts_not_imported"] == [nobody], job
    assert sorted(job["data_stream_ids"]) == sorted([operating["id"], reserve["id"]])
    assert page.get_by_test_id("import-rows").inner_text() == f"{job['processed_items']} of {job['total_items']} rows"
    assert job["total_items"] == 3

    routed = page.get_by_role("table", name="Streams the statement was routed to, with their account")
    for stream, account, records, net in ((operating, first, "2", "125.00 USD"), (reserve, second, "1", "100.00 USD")):
        row = routed.get_by_role("row", name=re.compile(re.escape(stream["name"])))
        row.get_by_role("cell", name=net).wait_for()
        cells = [c.strip() for c in row.locator("td").all_inner_texts()]
        assert cells[1:] == [account, records, net, "2026-03-01"], cells
        written = stack.request("GET", "/records", params={"file_import_id": job_id, "data_stream_key": stream["key"]})
        assert len(written.json()["data"]) == int(records), written.text
    assert routed.locator("tbody tr").count() == 2
    assert page.get_by_test_id("accounts-not-imported").get_by_role("listitem").all_inner_texts() == [nobody]
    assert serious_violations(page) == []

    # Nobody holds the account of this one: it fails, writes nothing, and the page says which account.
    iban = f"XX{uuid.uuid4().int % 10**18:018d}"
    day = date(2026, 3, 2)
    camt = write_camt053([CamtStatement(f"STMT-{iban[-6:]}", iban, "EUR", 100000, day,
                                        [Entry(5000, "CRDT", day, account_servicer_ref=f"AS-{iban[-6:]}")],
                                        other_account=True)])
    drop(page, "unknown.xml", camt.decode(), "application/xml")
    assert page.get_by_label("Format", exact=True).input_value() == "camt053"
    page.get_by_label("Data stream", exact=True).select_option(label="Each account to its bank feed stream")
    page.get_by_role("button", name="Import", exact=True).click()
    page.get_by_role("heading", name=re.compile(r"^Import \d+: unknown\.xml$")).wait_for()
    import_status(page, "failed")
    left = page.get_by_test_id("accounts-not-imported")
    left.get_by_role("listitem").first.wait_for()
    failed_id = int(re.match(r"Import (\d+):", page.get_by_role("heading", name=re.compile("unknown.xml")).inner_text()).group(1))
    failed = stack.request("GET", f"/file_imports/{failed_id}").json()
    assert failed["status"] == "failed" and failed["data_stream_ids"] == []
    assert left.get_by_role("listitem").all_inner_texts() == failed["error_details"]["accounts_not_imported"]
    assert page.get_by_text(failed["error_message"]).is_visible()
    assert serious_violations(page) == []

    # An account's control total one cent off: refused (the default), and the page says where, under a
    # visible title (an aria-label on its <dl> would name nothing).
    text = bai2_file([Bai2Group(date(2026, 3, 3), [
        Bai2Account(first, [Bai2Detail("195", 4200, bank_reference=f"R5-{first}", text="Wire")])])]).decode()
    broken = re.sub(r"^49,(-?\d+),", lambda m: f"49,{int(m.group(1)) + 1},", text, count=1, flags=re.M)
    assert broken != text
    drop(page, "broken.bai2", broken, "application/octet-stream")
    page.get_by_label("Data stream", exact=True).select_option(label="Each account to its bank feed stream")
    page.get_by_role("button", name="Import", exact=True).click()
    page.get_by_role("heading", name=re.compile(r"^Import \d+: broken\.bai2$")).wait_for()
    import_status(page, "failed")
    where = page.get_by_test_id("where-refused")
    where.get_by_text("Where the file was refused", exact=True).wait_for()
    refused_id = int(re.match(r"Import (\d+):", page.get_by_role("heading", name=re.compile("broken.bai2")).inner_text()).group(1))
    details = stack.request("GET", f"/file_imports/{refused_id}").json()["error_details"]
    assert details.get("line") is not None, details
    assert where.locator("dt", has_text="Line").locator("xpath=following-sibling::dd[1]").inner_text() == str(details["line"])
    assert serious_violations(page) == []
    assert page.problems == []


def test_the_stream_picker_and_the_streams_table_hold_every_page_of_streams(stack, page):
    """The page reads every page of GET /data_streams (following next_cursor): its first request is made
    to ask for 3 streams only (rewritten on its way), and a stream made before three newer ones, on a
    later page, is offered and listed."""
    older = new_stream(stack)
    for _ in range(3):
        new_stream(stack)
    asked = small_first_pages(page, "data_streams")
    signed_in(stack, page, role="preparer", hash_route="#/imports")
    page.get_by_role("heading", name="Import a file").wait_for()
    page.get_by_label("Data stream", exact=True).select_option(older["key"])
    streams = page.get_by_role("table", name="Data streams with their records and latest balance")
    streams.get_by_role("cell", name=older["key"], exact=True).wait_for()
    read_every_page(asked)
    assert page.problems == []


def test_a_nacha_file_is_taken_for_nacha_by_its_name_and_its_entries_land(stack, page):
    stream = new_stream(stack)
    signed_in(stack, page, role="preparer", hash_route="#/imports")
    page.get_by_label("File to import").set_input_files(str(NACHA / "ccd_addenda.ach"))
    assert page.get_by_label("Format", exact=True).input_value() == "nacha"
    page.get_by_label("Data stream", exact=True).select_option(stream["key"])
    page.get_by_role("button", name="Import", exact=True).click()
    import_status(page, "completed")
    assert page.get_by_test_id("import-rows").inner_text() == "2 of 2 rows"
    [job] = stack.request("GET", f"/data_streams/{stream['key']}/file_imports").json()["data"]
    assert (job["source"], job["filename"], job["successful_items"]) == ("nacha", "ccd_addenda.ach", 2)
    records = stack.request("GET", f"/file_imports/{job['id']}/records").json()["data"]
    assert {r["metadata"]["sec_code"] for r in records} == {"CCD"}
    assert page.problems == []


def test_a_viewer_sees_streams_and_imports_but_cannot_import_or_cancel(stack, page):
    stream = new_stream(stack)
    created = stack.request("POST", f"/data_streams/{stream['key']}/file_imports",
                            {"filename": "waiting.csv", "format": "csv"}).json()  # pending: cancellable
    email, password = person(stack, "viewer")
    signed_in_as_viewer = signed_in_with(stack, page, email, password)
    signed_in_as_viewer.get_by_role("heading", name="Data streams").wait_for()
    assert page.get_by_role("heading", name="Import a file").count() == 0
    assert page.get_by_label("File to import").count() == 0
    page.get_by_role("button", name=f"Imports of {stream['name']}").click()
    page.get_by_role("button", name=f"Show import {created['id']}").click()
    import_status(page, "pending")
    assert page.get_by_role("button", name="Cancel import").count() == 0
    assert serious_violations(page) == []

    # The API refuses what the page does not offer.
    bearer = {"Authorization": f"Bearer {token_of(stack, email, password)}"}
    refused = requests.post(f"{stack.url}/data_streams/{stream['key']}/file_imports", headers=bearer,
                            json={"filename": "x.csv", "format": "csv"}, timeout=30)
    assert refused.status_code == 403, refused.text
    cancel = requests.post(f"{stack.url}/file_imports/{created['id']}/cancel", headers=bearer, timeout=30)
    assert cancel.status_code == 403, cancel.text
    assert stack.request("GET", f"/file_imports/{created['id']}").json()["status"] == "pending"
    assert page.problems == []


def signed_in_with(stack, page, email: str, password: str):
    from tests.support.web_app import printed, sign_in

    page.goto(printed(stack)[2])
    sign_in(page, email, password)
    page.get_by_role("heading", name="Overview").wait_for()
    page.evaluate("route => { location.hash = route; }", "#/imports")
    return page


def test_a_failed_upload_cancels_its_import_instead_of_leaving_it_pending(stack, page):
    """The bucket refuses the PUT (page.route answers 503 for it): the import waiting for that file is
    cancelled at once, on the page and in the API, instead of staying pending until it times out."""
    stream = new_stream(stack)
    failed_puts: list[str] = []

    def refuse(route):
        if route.request.method == "PUT":
            failed_puts.append(route.request.url)
            route.fulfill(status=503, body="SlowDown", headers={"Access-Control-Allow-Origin": "*"})
        else:
            route.continue_()

    page.route(lambda url: "X-Amz-Signature=" in url, refuse)  # the presigned upload URL only
    signed_in(stack, page, role="preparer", hash_route="#/imports")
    page.get_by_role("heading", name="Import a file").wait_for()
    drop(page, "refused.csv", csv_with_bad_rows(5))
    page.get_by_label("Data stream", exact=True).select_option(stream["key"])
    page.get_by_label("Date format").select_option("YYYY-MM-DD")
    page.get_by_role("button", name="Import", exact=True).click()

    page.get_by_text("Upload failed: the bucket refused the file (HTTP 503); the import is cancelled").wait_for()
    import_status(page, "cancelled")
    assert len(failed_puts) == 1
    [job] = stack.request("GET", f"/data_streams/{stream['key']}/file_imports").json()["data"]
    assert (job["filename"], job["status"]) == ("refused.csv", "cancelled")
    assert page.get_by_role("button", name="Cancel import").count() == 0
    assert serious_violations(page) == []
    assert unexpected(page.problems, 503) == []
