"""The web app's Settings page (admins only) in Debian's Chromium against the local stack: users
and roles, API keys (the secret shown once), webhook endpoints with their delivery log and a failed
delivery retried, the audit trail with its verification and its export. Each action's effect is read back through
the API; axe-core finds no serious or critical violation in any section; a viewer gets no Settings,
and the API refuses them the admin routes."""
from __future__ import annotations

import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from chalicelib.domain.events import EVENT_TYPES
from tests.support.chromium import needs_chromium
from tests.support.web_app import (
    downloaded_csv,
    main_nav,
    person,
    printed,
    screenshot,
    serious_violations,
    signed_in,
    token_of,
    unexpected,
)

pytestmark = [
    pytest.mark.xdist_group("web"),
    needs_chromium,
]

WEB = Path(__file__).resolve().parents[2] / "chalicelib" / "web"






def users_by_email(stack) -> dict[str, dict]:
    found: dict[str, dict] = {}
    cursor = None
    while True:
        page = stack.request("GET", "/users", params={"limit": 100, **({"cursor": cursor} if cursor else {})}).json()
        found.update({u["email"]: u for u in page["data"]})
        cursor = page["next_cursor"]
        if not cursor:
            return found


def wait_until(check, timeout: float = 60, what: str = "the state"):
    """Polls `check` (the API's view) until it answers something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what} did not come"
        time.sleep(0.25)


# Users and roles -------------------------------------------------------------------------------

def test_an_admin_invites_a_person_changes_their_role_deactivates_and_re_enables_them(stack, page):
    signed_in(stack, page, hash_route="#/settings/users")
    page.get_by_role("heading", name="Users and roles").wait_for()
    page.get_by_role("table").wait_for()
    assert page.get_by_role("navigation", name="Settings sections").get_by_role("link", name="Users and roles", exact=True).get_attribute("aria-current") == "page"
    assert serious_violations(page) == []

    # A refused field is told beside it (422), and read with it.
    page.get_by_label("Email").fill("not-an-email")
    page.get_by_role("button", name="Invite").click()
    error = page.locator("#invite-email-error")
    error.wait_for()
    assert error.inner_text() == "must be an email address"
    assert page.get_by_label("Email").get_attribute("aria-invalid") == "true"
    assert page.get_by_label("Email").get_attribute("aria-describedby") == "invite-email-error"
    assert serious_violations(page) == []

    suffix = uuid.uuid4().hex[:8]
    email, name = f"invitee-{suffix}@recon.local", f"Ines {suffix}"
    page.get_by_label("Email").fill(email)
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Role", exact=True).select_option("preparer")
    page.get_by_role("button", name="Invite").click()
    page.get_by_role("status").filter(has_text=f"Invited {email} as preparer").wait_for()
    assert not error.is_visible()
    row = page.get_by_role("row").filter(has_text=email)
    row.wait_for()
    invited = users_by_email(stack)[email]
    assert (invited["name"], invited["role"], invited["status"]) == (name, "preparer", "invited")

    # The same email again with another role: the service refuses it (409), the page says why.
    page.get_by_label("Email").fill(email)
    page.get_by_label("Role", exact=True).select_option("admin")
    page.get_by_role("button", name="Invite").click()
    refused = page.get_by_role("alert").filter(has_text=f"{email} is already user {invited['id']}")
    refused.wait_for()
    assert users_by_email(stack)[email]["role"] == "preparer"
    page.get_by_label("Email").fill("")  # editing the form again: the alert about the last try goes
    refused.wait_for(state="detached")

    role = page.get_by_label(f"Role of {name}")
    role.select_option("approver")
    page.get_by_role("status").filter(has_text=f"{name} is now approver").wait_for()
    assert users_by_email(stack)[email]["role"] == "approver"
    assert page.get_by_label(f"Role of {name}").input_value() == "approver"

    # Deactivating asks first (by keyboard: the focus goes to the question's Yes, then stays in the row).
    page.get_by_role("button", name=f"Deactivate {name}").focus()
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.activeElement?.textContent === 'Yes, deactivate'")
    assert users_by_email(stack)[email]["status"] != "deactivated"  # only asked so far
    page.keyboard.press("Enter")
    page.get_by_role("status").filter(has_text=f"{name} is deactivated").wait_for()
    assert users_by_email(stack)[email]["status"] == "deactivated"
    row.get_by_text("deactivated", exact=True).wait_for()
    page.wait_for_function("label => document.activeElement?.getAttribute('aria-label') === label",
                           arg=f"Re-enable {name}")

    page.get_by_role("button", name=f"Re-enable {name}").click()
    page.get_by_role("status").filter(has_text=f"{name} can sign in again").wait_for()
    assert users_by_email(stack)[email]["status"] != "deactivated"
    page.get_by_role("button", name=f"Deactivate {name}").wait_for()

    # The admin's own row offers no change (the service refuses one's own role or status anyway).
    admin_email = printed(stack)[0]
    assert serious_violations(page) == []
    screenshot(page, "settings-users")
    own = page.get_by_role("row").filter(has_text=admin_email)
    pages = page.get_by_role("navigation", name="Users pages")
    while not own.count():  # the first page unless many users were invited since: page on until it shows
        following = pages.get_by_role("button", name="Next")
        assert not following.is_disabled(), f"{admin_email} is on no page of the users"
        first = page.locator("tbody tr td:nth-child(2)").first.inner_text()
        following.click()
        page.wait_for_function("first => document.querySelector('tbody tr td:nth-child(2)')?.textContent !== first",
                               arg=first)
    assert own.get_by_text("(you)").is_visible()
    assert own.get_by_role("combobox").count() == 0 and own.get_by_role("button").count() == 0
    assert unexpected(page.problems, 409, 422) == []


def test_the_users_list_pages_through_every_user(stack, page):
    suffix = uuid.uuid4().hex[:6]
    for n in range(26):  # more than a page of 25
        invited = stack.request("POST", "/users", {"email": f"pager-{suffix}-{n}@recon.local", "role": "viewer"})
        assert invited.status_code == 201, invited.text
    everyone = users_by_email(stack)
    signed_in(stack, page, hash_route="#/settings/users")
    pages = page.get_by_role("navigation", name="Users pages")
    seen: list[str] = []
    while True:
        page.locator("tbody tr").first.wait_for()
        shown = page.locator("tbody tr td:nth-child(2)").all_inner_texts()
        seen += shown
        following = pages.get_by_role("button", name="Next")
        if following.is_disabled():
            break
        following.click()
        page.wait_for_function("first => document.querySelector('tbody tr td:nth-child(2)')?.textContent !== first",
                               arg=shown[0])
    assert len(seen) > 25 and len(seen) == len(set(seen))
    assert set(everyone) <= set(seen)
    pages.get_by_role("button", name="Previous").click()
    page.wait_for_function("last => document.querySelector('tbody tr td:nth-child(2)')?.textContent !== last",
                           arg=seen[-len(shown)])
    assert unexpected(page.problems) == []


# API keys --------------------------------------------------------------------------------------

def test_a_new_api_key_is_shown_once_works_with_its_access_and_is_revoked_after_a_confirmation(stack, page):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    signed_in(stack, page, hash_route="#/settings/keys")
    page.get_by_role("heading", name="API keys").wait_for()
    page.get_by_role("table").wait_for()
    assert serious_violations(page) == []

    label = f"ledger export {uuid.uuid4().hex[:6]}"
    page.get_by_label("Label").fill(label)
    page.get_by_label("Read only").check()
    page.get_by_role("button", name="Create key").click()
    secret_field = page.locator("#new-key-secret")
    secret_field.wait_for()
    secret = secret_field.input_value()
    assert secret.startswith("rk_")
    assert page.get_by_text("This is the only time it is shown").is_visible()
    page.wait_for_function("() => document.activeElement?.id === 'new-key-secret'")  # where the person goes
    [key] = [k for k in stack.request("GET", "/api_keys").json()["data"] if k["label"] == label]
    assert key["access"] == "read_only" and key["revoked_at"] is None and "secret" not in key
    page.get_by_role("cell", name=label).wait_for()
    assert serious_violations(page) == []

    page.get_by_role("button", name="Copy").click()
    page.get_by_text("Copied to the clipboard.").wait_for()
    assert page.evaluate("() => navigator.clipboard.readText()") == secret

    # The key works, as a viewer: reads yes, writes no.
    assert stack.request("GET", "/reconciliations", key=secret).status_code == 200
    assert stack.request("POST", "/data_streams", {"key": f"k-{uuid.uuid4().hex[:6]}", "name": "x"},
                         key=secret).status_code == 403

    # Never again: away and back, the page has no secret, nor does the API's list.
    page.get_by_role("navigation", name="Settings sections").get_by_role("link", name="Users and roles", exact=True).click()
    page.get_by_role("heading", name="Users and roles").wait_for()
    page.get_by_role("navigation", name="Settings sections").get_by_role("link", name="API keys", exact=True).click()
    page.get_by_role("cell", name=label).wait_for()
    assert secret not in page.content() and secret_field.count() == 0
    assert secret not in stack.request("GET", "/api_keys").text

    # Revoking asks first; Cancel leaves the key as it was.
    row = page.get_by_role("row").filter(has_text=label)
    row.get_by_role("button", name=f"Revoke key {key['id']}").click()
    confirm = row.get_by_role("group", name=re.compile(f"Revoke key {key['id']}"))
    confirm.wait_for()
    page.wait_for_function("() => document.activeElement?.textContent === 'Yes, revoke'")
    assert serious_violations(page) == []
    confirm.get_by_role("button", name="Cancel").click()
    page.wait_for_function("name => document.activeElement?.textContent === name", arg=f"Revoke key {key['id']}")
    assert stack.request("GET", "/reconciliations", key=secret).status_code == 200

    row.get_by_role("button", name=f"Revoke key {key['id']}").click()
    row.get_by_role("button", name="Yes, revoke").click()
    page.get_by_role("status").filter(has_text=f"Key {key['id']} is revoked").wait_for()
    [revoked] = [k for k in stack.request("GET", "/api_keys").json()["data"] if k["id"] == key["id"]]
    assert revoked["revoked_at"] is not None
    assert stack.request("GET", "/reconciliations", key=secret).status_code == 401
    row.get_by_role("button").first.wait_for(state="detached")  # the list read again: nothing to revoke
    assert unexpected(page.problems) == []


# Webhook endpoints -----------------------------------------------------------------------------

class FlakyReceiver:
    """A webhook receiver on loopback that answers 500 until it is told to recover, then 200."""

    def __init__(self) -> None:
        self.failing = True
        self.answers: list[int] = []
        self.times: list[float] = []  # when each answer was given (time.monotonic)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers["content-length"]))
                status = 500 if receiver.failing else 200
                receiver.answers.append(status)
                receiver.times.append(time.monotonic())
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"down for maintenance" if status == 500 else b"ok")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def stop(self) -> None:
        self.server.shutdown()


@pytest.fixture
def flaky():
    running = FlakyReceiver()
    yield running
    running.stop()


def deliveries_of(stack, endpoint_id: int) -> list[dict]:
    return stack.request("GET", f"/webhook_endpoints/{endpoint_id}/deliveries").json()["data"]


def test_an_endpoint_is_added_with_its_secret_shown_once_and_its_failed_delivery_retried(stack, page, flaky):
    signed_in(stack, page, hash_route="#/settings/webhooks")
    page.get_by_role("heading", name="Webhook endpoints").wait_for()
    page.get_by_role("heading", name="Add an endpoint").wait_for()
    assert serious_violations(page) == []

    # No event chosen: the service says so beside the events (422).
    page.get_by_label("URL").fill(flaky.url)
    page.get_by_label("All events, present and future").uncheck()
    page.get_by_role("button", name="Add endpoint").click()
    page.locator("#endpoint-events-error").wait_for()
    assert serious_violations(page) == []

    description = f"ledger hook {uuid.uuid4().hex[:6]}"
    page.get_by_label("Description").fill(description)
    page.get_by_label("bulk_request.completed").check()
    page.get_by_role("button", name="Add endpoint").click()
    secret_field = page.locator("#new-endpoint-secret")
    secret_field.wait_for()
    secret = secret_field.input_value()
    assert secret.startswith("whsec_")
    [endpoint] = [e for e in stack.request("GET", "/webhook_endpoints", params={"limit": 100}).json()["data"]
                  if e["description"] == description]
    assert (endpoint["url"], endpoint["events"], endpoint["active"]) == (flaky.url, ["bulk_request.completed"], True)
    assert serious_violations(page) == []

    # An event for it: the receiver refuses twice (the first attempt and the automatic one 5 s later);
    # the next automatic attempt is a minute away, so the retry below is the page's.
    stream = f"hook-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/data_streams", {"key": stream, "name": stream}).status_code == 201
    bulk = stack.request("POST", "/records/bulk", {"records": [
        {"data_stream_key": stream, "amount": 4200, "date": "2026-11-02", "direction": "credit"}]})
    assert bulk.status_code in (200, 201, 202), bulk.text
    [delivery] = wait_until(lambda: [d for d in deliveries_of(stack, endpoint["id"])
                                     if d["attempts"] >= 2 and d["status"] == "pending"],
                            timeout=90, what="two failed attempts")
    assert delivery["last_status_code"] == 500 and delivery["event_type"] == "bulk_request.completed"

    page.get_by_role("cell", name=description).wait_for()  # the list, refreshed after the creation
    page.get_by_role("link", name=re.compile(f"Delivery log of endpoint {endpoint['id']},")).click()
    page.get_by_role("heading", name=f"Deliveries to {flaky.url}").wait_for()
    assert secret not in page.content()  # shown once: gone with the list it was shown on
    row = page.get_by_role("row").filter(has_text=delivery["event_id"])
    row.get_by_text("pending", exact=True).wait_for()
    assert "500" in row.inner_text() and row.get_by_role("cell").nth(2).inner_text() == str(delivery["attempts"])
    assert serious_violations(page) == []
    screenshot(page, "settings-webhooks")

    # The receiver recovers as the page's retry leaves the browser: an automatic attempt before it
    # (should the test be slow) still fails, so the 200 is the page's retry's.
    pressed: list[float] = []

    def recover(route):
        pressed.append(time.monotonic())
        flaky.failing = False
        route.continue_()

    page.route(f"**/v1/webhook_endpoints/{endpoint['id']}/deliveries/{delivery['id']}/retry", recover)
    row.get_by_role("button", name=f"Retry delivery {delivery['id']} (bulk_request.completed)").click()
    page.get_by_role("status").filter(has_text=f"Delivery {delivery['id']} (bulk_request.completed) is being sent "
                                               "again").wait_for()
    done = wait_until(lambda: [d for d in deliveries_of(stack, endpoint["id"])
                               if d["id"] == delivery["id"] and d["status"] == "succeeded"], what="the retry")
    assert done[0]["last_status_code"] == 200 and done[0]["attempts"] == len(flaky.answers)
    assert flaky.answers[:2] == [500, 500] and flaky.answers.count(200) == 1 and flaky.answers[-1] == 200
    assert flaky.times[-1] >= pressed[0]  # answered after the page's retry was sent
    page.get_by_role("button", name="Refresh the log").click()
    page.get_by_role("row").filter(has_text=delivery["event_id"]).get_by_text("succeeded", exact=True).wait_for()
    assert page.get_by_role("button", name=re.compile("^Retry delivery")).count() == 0
    assert unexpected(page.problems, 422) == []


def test_the_delivery_log_pages_through_every_delivery(stack, page, flaky):
    flaky.failing = False
    endpoint = stack.request("POST", "/webhook_endpoints", {"url": flaky.url, "events": ["bulk_request.completed"]})
    assert endpoint.status_code == 201, endpoint.text
    endpoint_id = endpoint.json()["id"]
    stream = f"pages-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/data_streams", {"key": stream, "name": stream}).status_code == 201
    for n in range(21):  # a page of 20 and one more
        sent = stack.request("POST", "/records/bulk", {"records": [
            {"data_stream_key": stream, "amount": 100 + n, "date": "2026-11-02", "direction": "credit"}]})
        assert sent.status_code in (200, 201, 202), sent.text

    def all_made() -> list[dict]:
        found = stack.request("GET", f"/webhook_endpoints/{endpoint_id}/deliveries", params={"limit": 100}).json()
        return found["data"] if len(found["data"]) == 21 else []

    made = {d["event_id"] for d in wait_until(all_made, timeout=120, what="21 deliveries")}
    signed_in(stack, page, hash_route=f"#/settings/webhooks/{endpoint_id}")
    pages = page.get_by_role("navigation", name="Deliveries pages")
    first_cell = "tbody tr td:nth-child(1) code"
    page.locator(first_cell).first.wait_for()
    first = page.locator(first_cell).all_inner_texts()
    assert len(first) == 20
    pages.get_by_role("button", name="Next").click()
    pages.get_by_text("Page 2").wait_for()
    page.wait_for_function("before => document.querySelector('tbody tr td:nth-child(1) code')?.textContent !== before",
                           arg=first[0])
    second = page.locator(first_cell).all_inner_texts()
    assert set(first) | set(second) == made and len(first) + len(second) == 21
    assert pages.get_by_role("button", name="Next").is_disabled()
    assert unexpected(page.problems) == []


def test_the_event_types_offered_are_the_services():
    source = (WEB / "settings-webhooks.js").read_text()
    listed = re.search(r"export const EVENT_TYPES = \[(.*?)\];", source, re.S).group(1)
    assert re.findall(r'"([a-z_.]+)"', listed) == list(EVENT_TYPES)


# Audit trail -----------------------------------------------------------------------------------

def test_the_audit_trail_pages_filters_by_actor_and_is_verified(stack, page):
    for n in range(30):  # more than a page of the trail
        stack.request("POST", "/data_streams", {"key": f"audit-{uuid.uuid4().hex[:8]}", "name": f"audited {n}"})
    signed_in(stack, page, hash_route="#/settings/audit")
    page.get_by_role("heading", name="Audit trail").wait_for()
    page.get_by_role("table").wait_for()
    head = stack.request("GET", "/audit_events", params={"limit": 1}).json()["data"][0]["seq"]
    shown = [int(s) for s in page.locator("tbody tr td:nth-child(1)").all_inner_texts()]
    assert shown == list(range(shown[0], shown[0] - 25, -1)) and shown[0] <= head  # newest first, dense
    assert serious_violations(page) == []

    # The next page is the API's next page.
    page.get_by_role("navigation", name="Audit trail pages").get_by_role("button", name="Next").click()
    page.get_by_role("navigation", name="Audit trail pages").get_by_text("Page 2").wait_for()
    page.wait_for_function("last => Number(document.querySelector('tbody tr td')?.textContent) < last",
                           arg=shown[-1] + 1)
    second = [int(s) for s in page.locator("tbody tr td:nth-child(1)").all_inner_texts()]
    assert second[0] == shown[-1] - 1 and second == sorted(second, reverse=True)

    # By actor: the key the stack's requests were sent with.
    key_actor = stack.request("GET", "/audit_events", params={"limit": 1}).json()["data"][0]["actor"]
    page.get_by_label("Actor").fill(key_actor)
    page.get_by_role("button", name="Filter", exact=True).click()
    page.wait_for_function("() => location.hash.includes('actor=')")
    expected = stack.request("GET", "/audit_events", params={"actor": key_actor, "limit": 25}).json()["data"]
    page.get_by_role("navigation", name="Audit trail pages").get_by_text("Page 1").wait_for()
    page.wait_for_function("actor => [...document.querySelectorAll('tbody tr td:nth-child(3)')]"
                           ".every(td => td.textContent === actor)", arg=key_actor)
    actors = set(page.locator("tbody tr td:nth-child(3)").all_inner_texts())
    assert actors == {key_actor}
    assert [int(s) for s in page.locator("tbody tr td:nth-child(1)").all_inner_texts()][:5] == \
        [e["seq"] for e in expected][:5]

    # A filter the service refuses is told beside its field.
    page.get_by_label("Actor").fill("nobody")
    page.get_by_role("button", name="Filter", exact=True).click()
    page.locator("#audit-actor-error").wait_for()
    assert page.get_by_label("Actor").get_attribute("aria-invalid") == "true"
    page.get_by_role("button", name="Clear filters").click()
    page.wait_for_function("() => location.hash === '#/settings/audit' && "
                           "document.getElementById('audit-actor')?.value === ''")
    page.get_by_role("table").wait_for()

    page.get_by_role("button", name="Verify the audit trail").click()
    verdict = page.get_by_test_id("audit-verdict")
    verdict.wait_for()
    report = stack.request("GET", "/audit_events/verify").json()
    assert report["intact"] is True
    text = verdict.inner_text()
    assert text.startswith("Intact:"), text
    checked = int(re.search(r"(\d+) entries checked", text).group(1))
    assert 0 < checked <= report["head_seq"]
    page.get_by_role("status").filter(has_text="The audit trail is intact.").wait_for()
    assert serious_violations(page) == []
    screenshot(page, "settings-audit")
    assert unexpected(page.problems, 422) == []


def test_a_broken_chain_is_reported_with_where_it_breaks(stack, page):
    """How the page shows a break: the service's answer for a chain broken at entry 7 (the stack's own
    chain stays intact; breaking it would break every other test's verification)."""
    signed_in(stack, page, hash_route="#/settings/audit")
    page.get_by_role("table").wait_for()
    page.route("**/v1/audit_events/verify*", lambda route: route.fulfill(json={
        "intact": False, "checked": 6, "from_seq": 1, "last_checked_seq": 6, "head_seq": 40, "head_hash": "ab" * 32,
        "complete": True, "next_from_seq": None,
        "first_break": {"seq": 7, "id": 7, "reason": "hash_mismatch", "message": "entry 7's hash does not match"}}))
    page.get_by_role("button", name="Verify the audit trail").click()
    verdict = page.get_by_test_id("audit-verdict")
    verdict.wait_for()
    assert "Broken at entry 7 (hash_mismatch): entry 7's hash does not match" in verdict.inner_text()
    page.get_by_role("status").filter(has_text="The audit trail is broken.").wait_for()
    assert serious_violations(page) == []
    assert unexpected(page.problems) == []


# Who sees Settings -----------------------------------------------------------------------------

def test_a_viewer_gets_no_settings_and_the_api_refuses_them_the_admin_routes(stack, page):
    email, password = person(stack, "viewer")
    token = token_of(stack, email, password)
    as_viewer = {"Authorization": f"Bearer {token}"}

    def call(method, path, body=None):
        return requests.request(method, f"{stack.url}{path}", json=body, headers=as_viewer, timeout=30)

    for method, path, body in [
            ("POST", "/users", {"email": f"x-{uuid.uuid4().hex[:6]}@recon.local", "role": "viewer"}),
            ("PATCH", "/users/1", {"role": "admin"}),
            ("GET", "/api_keys", None),
            ("POST", "/api_keys", {"access": "full"}),
            ("POST", "/webhook_endpoints", {"url": "https://hooks.example.com/x", "events": ["*"]}),
            ("POST", "/webhook_endpoints/1/deliveries/1/retry", None)]:
        refused = call(method, path, body)
        assert refused.status_code == 403, (method, path, refused.text)
        assert "needs the admin role" in refused.json()["message"]
    # The audit trail and its verification are a reader's (docs/users.md): a viewer may read them.
    assert call("GET", "/audit_events").status_code == 200
    assert call("GET", "/audit_events/verify").status_code == 200

    page.goto(printed(stack)[2])
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()
    assert main_nav(page).get_by_role("link", name="Settings", exact=True).count() == 0
    page.evaluate("() => { location.hash = '#/settings/keys'; }")
    page.wait_for_function("() => location.hash === '#/settings/keys'")
    page.get_by_role("heading", name="Overview").wait_for()
    assert page.get_by_role("heading", name="API keys").count() == 0
    assert page.get_by_role("button", name="Create key").count() == 0
    assert unexpected(page.problems) == []


def test_an_admin_exports_the_filtered_audit_trail(stack, page):
    key = f"audited-export-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/data_streams", {"key": key, "name": "Audited export"}).status_code == 201
    recent = stack.request("GET", "/audit_events", params={"limit": 50}).json()["data"]
    entry = next(e for e in recent if e["resource_id"] == key)
    filters = {"resource_type": entry["resource_type"], "resource_id": key}
    expected = stack.request("GET", "/audit_events", params={**filters, "limit": 100}).json()["data"]
    signed_in(stack, page, "admin", f"#/settings/audit?resource_type={entry['resource_type']}&resource_id={key}")
    page.get_by_role("heading", name="Audit trail").wait_for()
    page.get_by_role("table").wait_for()
    group = page.get_by_role("group", name="Export the filtered audit trail")
    export_id, rows = downloaded_csv(group, "audit_events")
    assert [int(r["seq"]) for r in rows] == [e["seq"] for e in expected] and len(rows) >= 1
    assert {r["resource_id"] for r in rows} == {key}
    assert stack.request("GET", f"/exports/{export_id}").json()["filters"] == filters
    assert serious_violations(page) == []
    assert page.problems == []
