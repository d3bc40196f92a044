"""The web app's end-to-end helpers: a page in Debian's Chromium that fails on any console error (a CSP
violation is one), signing in as `make run`'s admin or as a person of a given role, and axe-core."""
from __future__ import annotations

import csv
import io
import os
import re
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from chalicelib.container import Container
from chalicelib.local.stack import StackInfo
from chalicelib.settings import Settings

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
WAIT_MS = 30_000  # a wait returns as soon as its state holds: the bound is for a loaded CI machine


@pytest.fixture
def page(chromium):
    """A fresh context; every console error (a CSP violation is one) and uncaught error is kept to fail on."""
    context = chromium.new_context()
    opened = context.new_page()
    opened.set_default_timeout(WAIT_MS)
    problems: list[str] = []
    opened.on("console", lambda message: problems.append(f"{message.text} at {message.location.get('url')}")
              if message.type == "error" and not expected(message) else None)
    opened.on("pageerror", lambda error: problems.append(str(error)))
    opened.problems = problems
    yield opened
    context.close()


def expected(message) -> bool:
    """A session route's 401 (no cookie yet, a wrong password) or 409 (an invitee's new password is
    asked for): the browser logs every 4xx it fetched."""
    return re.search(r"status of (401|409)\b", message.text) is not None and \
        re.search(r"/v1/session(/refresh)?$", message.location.get("url", "")) is not None


def printed(stack) -> tuple[str, str, str]:
    """The admin's email and password and the web app's URL, as `make run` printed them."""
    log = stack.log_path.read_text()
    [(email, password)] = re.findall(r"Admin sign-in \(local user pool\):\s+(\S+)\s+/\s+(\S+)", log)[-1:]
    [url] = re.findall(r"Web app \(sign in there as the admin\):\s+(\S+)", log)[-1:]
    return email, password, url


def main_nav(page):
    """The app's main navigation: a page's own links (a reconciliation named "Exceptions 1") stay out."""
    return page.get_by_role("navigation", name="Main")


def small_first_pages(page, *lists: str, size: int = 3) -> dict[str, list[str]]:
    """Route GET /v1/<list> for each of `lists` ("users", "data_streams"): the first request of each, which
    a picker makes with limit=200 and no cursor, is rewritten on its way to ask for `size` items only, so
    that the page has to follow next_cursor. Answers each list's queries as asked, in order, for
    `read_every_page` to check once the page has loaded. Nothing is asserted here: an AssertionError in a
    route handler leaves the request hanging and the test times out with an unrelated message."""
    asked: dict[str, list[str]] = {name: [] for name in lists}
    ends = tuple(f"/v1/{name}" for name in lists)

    def small_first_page(route):
        url = urlsplit(route.request.url)
        queries = asked[url.path.rsplit("/", 1)[1]]
        queries.append(url.query)
        if len(queries) == 1 and "limit=200" in url.query:
            route.continue_(url=route.request.url.replace("limit=200", f"limit={size}"))
        else:
            route.continue_()

    page.route(lambda url: urlsplit(url).path.endswith(ends), small_first_page)
    return asked


def read_every_page(asked: dict[str, list[str]]) -> None:
    """Each list of `small_first_pages` was first asked for 200 items with no cursor, then read on by
    its cursors."""
    for name, queries in asked.items():
        assert queries and "limit=200" in queries[0] and "cursor=" not in queries[0], (name, queries)
        assert len(queries) >= 2 and all("cursor=" in q for q in queries[1:]), (name, queries)


def sign_in(page, email: str, password: str) -> None:
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_role("button", name="Sign in").click()


def admin_token(stack) -> str:
    email, password, _ = printed(stack)
    answer = requests.post(f"{stack.url}/session", json={"email": email, "password": password}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["id_token"]


def person(stack, role: str, name: str | None = None) -> tuple[str, str]:
    """A new user of the local environment with `role` and a password of their own: (email, password)."""
    email = f"{role}-{uuid.uuid4().hex[:8]}@recon.local"
    invited = requests.post(f"{stack.url}/users", json={"email": email, "name": name or f"{role.title()} person",
                                                        "role": role},
                            headers={"Authorization": f"Bearer {admin_token(stack)}"}, timeout=30)
    assert invited.status_code == 201, invited.text
    password = f"Own-Passw0rd-{uuid.uuid4().hex[:6]}"
    services = Container(StackInfo(**stack.stack_info()).settings(Settings(data_dir=stack.data_dir)))
    services.aws.client("cognito-idp").admin_set_user_password(
        UserPoolId=services.settings.user_pool_id, Username=email, Password=password, Permanent=True)
    return email, password


def signed_in(stack, page, role: str = "admin", hash_route: str = "#/overview"):
    """The page signed in (as the printed admin, or as a new person of `role`) at `hash_route`."""
    email, password, url = printed(stack)
    if role != "admin":
        email, password = person(stack, role)
    page.goto(url)
    sign_in(page, email, password)
    page.get_by_role("heading", name="Overview").wait_for()
    if hash_route != "#/overview":
        page.evaluate("route => { location.hash = route; }", hash_route)
    return page


def held_dismissal(stack, page) -> dict:
    """A new world (tests/e2e/test_web_app_exceptions.py `world`) whose reconciliation's approval policy
    holds every dismissal (threshold 0), and a preparer on its bank exception's page who has just
    asked to dismiss it: the dismissal is held for an approver. The world, for what the test checks."""
    from tests.e2e.test_web_app_exceptions import sign_in_as, world  # that module imports this one

    made = world(stack)
    bank = made["bank"]
    policy = stack.request("PUT", f"/reconciliations/{made['reconciliation']['id']}/approval_policy",
                           {"actions": ["dismissal"], "threshold": 0})
    assert policy.status_code == 200, policy.text
    sign_in_as(stack, page, "preparer", f"#/exceptions/{bank['id']}")
    page.get_by_role("heading", level=2, name=re.compile(re.escape(bank["title"]))).wait_for()
    page.get_by_label("Change status to").select_option("dismissed")
    page.get_by_role("button", name="Change status").click()
    return made


def serious_violations(page) -> list[str]:
    page.evaluate(AXE.read_text())
    found = page.evaluate("async () => (await axe.run()).violations"
                          ".filter(v => ['serious', 'critical'].includes(v.impact))"
                          ".map(v => `${v.id}: ${v.nodes.map(n => n.target).join(' ')}`)")
    return list(found)


def screenshot(page, name: str) -> None:
    """The page as docs/screenshots/<name>.png, when `make screenshots` runs the tests (WEB_SCREENSHOTS
    names the folder); an ordinary test run writes nothing into the repository."""
    folder = os.environ.get("WEB_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


# Shared by the pages' tests: a person's token, a call as them, the console errors a test did not
# provoke, and the reconciliation data most pages start from. ------------------------------------

def token_of(stack, email: str, password: str) -> str:
    """The id token of a person signed in with their password (POST /session)."""
    answer = requests.post(f"{stack.url}/session", json={"email": email, "password": password}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["id_token"]


def role_token(stack, role: str) -> str:
    """The id token of a new person of `role`."""
    return token_of(stack, *person(stack, role))


def as_person(stack, token: str, method: str, path: str, body=None):
    return stack.request(method, path, body, key=None, headers={"Authorization": f"Bearer {token}"})


def unexpected(problems: list[str], *statuses: int) -> list[str]:
    """The page's console errors but the 4xx answers a test provoked on purpose (the browser logs each)."""
    provoked = "|".join(str(s) for s in statuses) or "none"
    return [p for p in problems if not re.search(rf"status of ({provoked})\b", p)]


def without_refusals(problems: list[str], status: str, url_part: str) -> list[str]:
    """The problems but the browser's own log of a refusal the test asked for at `url_part`."""
    return [p for p in problems if not (f"status of {status}" in p and url_part in p)]


def post(stack, path: str, body) -> dict:
    response = stack.request("POST", path, body)
    assert response.status_code in (201, 202), response.text
    return response.json()


def ingest(stack, items: list[dict], timeout: float = 60) -> list[int]:
    """The records ingested (POST /records/bulk, a thousand at a time), each successful: their ids."""
    ids: list[int] = []
    for start in range(0, len(items), 1000):
        summary = post(stack, "/records/bulk", {"records": items[start:start + 1000]})
        deadline = time.monotonic() + timeout
        while True:
            body = stack.request("GET", f"/bulk_requests/{summary['id']}").json()
            if body["status"] == "completed":
                assert all(r["status"] == "successful" for r in body["results"]), body["results"]
                ids += [r["record_id"] for r in body["results"]]
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.2)
    return ids


def reconciliation_with_rule(stack, rule: dict | None = None, run_type: str = "batch") -> tuple[dict, dict, str, str]:
    """Two new streams, a reconciliation of them and its first rule: (reconciliation, rule, bank, ledger)."""
    suffix = uuid.uuid4().hex[:8]
    bank, ledger = f"bank-{suffix}", f"ledger-{suffix}"
    for key in (bank, ledger):
        post(stack, "/data_streams", {"key": key, "name": key.title()})
    reconciliation = post(stack, "/reconciliations", {"name": f"Bank to ledger {suffix}", "run_type": run_type,
                                                      "side_a_stream_keys": [bank], "side_b_stream_keys": [ledger]})
    added = post(stack, f"/reconciliations/{reconciliation['id']}/rules", rule or {
        "name": "Amount, 3 days", "priority": 1,
        "conditions": [{"field": "amount", "operator": "equals"}, {"field": "date", "operator": "within", "days": 3}]})
    return reconciliation, added, bank, ledger


def start_run(stack, reconciliation_id: int, timeout: float = 30) -> dict:
    """A run started; the reconciliation lets its last run go a moment after the run says it ended (409 until then)."""
    deadline = time.monotonic() + timeout
    while True:
        started = stack.request("POST", f"/reconciliations/{reconciliation_id}/runs")
        if started.status_code == 202:
            return started.json()
        assert started.status_code == 409 and time.monotonic() < deadline, started.text
        time.sleep(0.2)


def wait_run(stack, reconciliation_id: int, run_id: int, timeout: float = 60) -> dict:
    """The run once it ended (completed, failed or cancelled)."""
    deadline = time.monotonic() + timeout
    while True:
        run = stack.request("GET", f"/reconciliations/{reconciliation_id}/runs/{run_id}").json()
        if run["status"] in ("completed", "failed", "cancelled"):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.2)


def downloaded_csv(group, stem: str) -> tuple[int, list[dict]]:
    """Export the group's list as CSV, wait for its download link, and read the file it links to."""
    group.get_by_role("button", name="Export", exact=True).click()
    link = group.get_by_role("link", name=re.compile(rf"^Download {stem}-\d+\.csv$"))
    link.wait_for(timeout=60_000)
    answer = requests.get(link.get_attribute("href"), timeout=30)
    assert answer.status_code == 200, answer.text
    export_id = int(re.search(rf"{stem}-(\d+)\.csv", link.inner_text()).group(1))
    return export_id, list(csv.DictReader(io.StringIO(answer.content.decode("utf-8"))))


def tab_to(page, name: str, presses: int = 60) -> None:
    """Press Tab, as a keyboard user does, until the focused control is named `name` (its aria-label,
    else its text); fails after `presses` presses."""
    for _ in range(presses):
        page.keyboard.press("Tab")
        focused = page.evaluate("() => { const e = document.activeElement;"
                                " return e ? (e.getAttribute('aria-label') || e.textContent || '').trim() : ''; }")
        if focused == name:
            return
    raise AssertionError(f"{name!r} was not reached with {presses} presses of Tab")


def wait_for(check, what: str, timeout: float = 60):
    """`check()`'s answer once it is truthy; fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def invoice_paid_in_parts(stack) -> dict:
    """A reconciliation of a bank (side A) and a ledger (side B) whose run matched nothing: an invoice of
    10.00 USD on the ledger, and two payments of 4.00 and 6.00 on the bank, a day after it (the rule,
    amount equals within 3 days, wants one payment of the whole). Answers the reconciliation, its rule,
    both exceptions and the record ids (invoice, first, second)."""
    reconciliation, rule, bank, ledger = reconciliation_with_rule(stack)
    [invoice] = ingest(stack, [{"date": "2026-10-01", "data_stream_key": ledger, "amount": 1000, "currency": "USD",
                                "direction": "credit", "description": f"Invoice {ledger}"}])
    first, second = ingest(stack, [
        {"date": "2026-10-02", "data_stream_key": bank, "amount": 400, "currency": "USD", "direction": "credit",
         "description": "Part payment 1"},
        {"date": "2026-10-02", "data_stream_key": bank, "amount": 600, "currency": "USD", "direction": "credit",
         "description": "Part payment 2"}])
    run = wait_run(stack, reconciliation["id"], start_run(stack, reconciliation["id"])["id"])
    assert (run["status"], run["matched_records"]) == ("completed", 0), run
    rows = wait_for(lambda: (lambda d: d if len(d) == 2 else None)(stack.request(
        "GET", "/reconciliation_exceptions", params={"reconciliation_id": reconciliation["id"]}).json()["data"]),
        "both exceptions")
    by_stream = {r["data_stream_key"]: r for r in rows}
    return {"reconciliation": reconciliation, "rule": rule, "bank": by_stream[bank], "ledger": by_stream[ledger],
            "invoice": invoice, "first": first, "second": second}
