"""The web app in Debian's Chromium against the local stack, as the finance team would use it: the
admin `make run` prints signs in at the URL it prints, sees the overview, reloads and stays signed in
(the session cookie), signs out; a wrong password gets its message. Any CSP violation or script error on
the page fails the test, and axe-core finds no serious or critical accessibility violation (injected by
page.evaluate: a script tag would be refused by the very CSP under test)."""
from __future__ import annotations

import re
import uuid

import pytest
import requests

from chalicelib.container import Container
from chalicelib.local.stack import StackInfo
from chalicelib.settings import Settings
from tests.support.chromium import needs_chromium
from tests.support.web_app import main_nav, printed, serious_violations, sign_in

pytestmark = [
    pytest.mark.xdist_group("web"),
    needs_chromium,
]


def test_the_admin_signs_in_sees_the_overview_stays_signed_in_and_signs_out(stack, page):
    email, password, url = printed(stack)
    assert url == f"{stack.url}/app"
    created = stack.request("POST", "/data_streams", {"key": "web-bank", "name": "Bank"})
    assert created.status_code in (201, 409), created.text
    stack.request("POST", "/data_streams", {"key": "web-ledger", "name": "Ledger"})
    stack.request("POST", "/reconciliations", {"name": "Web bank to ledger", "run_type": "batch",
                                               "side_a_stream_keys": ["web-bank"],
                                               "side_b_stream_keys": ["web-ledger"]})

    page.goto(url)
    page.get_by_role("heading", name="Sign in").wait_for()
    assert serious_violations(page) == []
    sign_in(page, email, password)
    page.get_by_role("heading", name="Overview").wait_for()
    page.get_by_role("cell", name="Web bank to ledger").first.wait_for()
    header = page.locator("header").inner_text()
    assert "Local admin" in header and "admin" in header and re.search(r"signed in until \d\d:\d\d", header)
    assert main_nav(page).get_by_role("link", name="Settings", exact=True).is_visible()  # an admin's navigation
    assert serious_violations(page) == []
    assert password not in page.content()

    [cookie] = page.context.cookies()  # kept though the local stack is plain http: loopback counts as secure
    assert (cookie["name"], cookie["path"], cookie["httpOnly"], cookie["secure"], cookie["sameSite"]) == (
        "recon_refresh", "/v1/session", True, True, "Strict")
    page.reload()  # the tokens were in memory only: the HttpOnly cookie brings the session back
    page.get_by_role("heading", name="Overview").wait_for()
    assert "refresh" not in page.evaluate("document.cookie")  # no script can read it

    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("heading", name="Sign in").wait_for()
    page.reload()  # signed out for good: the cookie is gone and its token revoked
    page.get_by_role("heading", name="Sign in").wait_for()
    assert page.problems == []


def test_a_wrong_password_is_told_without_saying_whether_the_email_exists(stack, page):
    email, _, url = printed(stack)
    page.goto(url)
    sign_in(page, email, "Not-the-passw0rd")
    alert = page.get_by_role("alert")
    alert.filter(has_text="Sign-in failed").wait_for()
    assert alert.inner_text() == "Sign-in failed: the email or password is not right."
    assert page.problems == []
    assert page.get_by_role("heading", name="Sign in").is_visible()


def test_a_session_signed_out_elsewhere_ends_with_a_banner_at_its_next_refresh(stack, page):
    """The page refreshes its tokens a minute before they expire (the page's clock is run forward to
    then); once the person signed out everywhere from another client, that refresh fails and the page
    says the session has ended."""
    import requests

    email, password, url = printed(stack)
    page.clock.install()
    page.goto(url)
    sign_in(page, email, password)
    page.get_by_role("heading", name="Overview").wait_for()

    elsewhere = requests.post(f"{stack.url}/session", json={"email": email, "password": password}, timeout=30)
    assert elsewhere.status_code == 200, elsewhere.text
    origin = re.match(r"https?://[^/]+", stack.url).group(0)
    signed_out = requests.delete(f"{stack.url}/session", timeout=30, headers={
        "Origin": origin, "Content-Type": "application/json",
        "Authorization": f"Bearer {elsewhere.json()['access_token']}"})
    assert signed_out.status_code == 204, signed_out.text

    page.clock.fast_forward("01:00:00")
    page.get_by_text("Your session has ended. Sign in again to go on.").wait_for()
    assert page.get_by_role("heading", name="Sign in").is_visible()
    assert page.problems == []


def refreshes(response) -> bool:
    return response.url.endswith("/v1/session/refresh") and response.request.method == "POST"


def test_a_timed_refresh_the_service_cannot_do_is_tried_again_and_the_page_stays_signed_in(stack, page):
    """The page's clock is run forward to the refresh a minute before expiry: the service answers it
    503 once (the pool busy), the page keeps the session and tries again 5 s later, and that real
    refresh succeeds: still signed in, until a later time."""
    email, password, url = printed(stack)
    busy = {"left": 1}

    def once_busy(route):
        if busy["left"]:
            busy["left"] -= 1
            return route.fulfill(status=503, headers={"Retry-After": "5"},
                                 json={"message": "the identity provider cannot be reached; try again"})
        return route.continue_()

    page.clock.install()
    page.goto(url)
    sign_in(page, email, password)
    page.get_by_role("heading", name="Overview").wait_for()
    page.wait_for_function("() => document.activeElement?.tagName === 'H1'")
    page.evaluate("location.hash = '#/settings'")  # the admin's other page: its heading takes the focus
    page.wait_for_function("() => document.activeElement?.textContent === 'Settings'")
    page.route("**/v1/session/refresh", once_busy)
    until = page.locator("header time").get_attribute("datetime")

    with page.expect_response(refreshes) as first:
        page.clock.fast_forward("59:00")
    assert first.value.status == 503
    with page.expect_response(refreshes) as second:
        page.clock.fast_forward("00:05")
    assert second.value.status == 200
    page.wait_for_function("before => document.querySelector('header time')?.getAttribute('datetime') > before",
                           arg=until)
    assert page.get_by_role("heading", name="Settings").is_visible()
    assert not page.get_by_text("Your session has ended").is_visible()
    assert [problem for problem in page.problems if "status of 503" not in problem] == []


def test_a_sign_out_the_provider_did_not_take_is_told(stack, page):
    """The service could clear the cookie but not tell the pool (503): the page is signed out and
    says that other sessions may stay signed in."""
    email, password, url = printed(stack)
    page.goto(url)
    sign_in(page, email, password)
    page.get_by_role("heading", name="Overview").wait_for()
    message = ("this browser is signed out, but the identity provider could not be told: "
               "sessions elsewhere stay signed in until they expire; sign out again later")
    page.route("**/v1/session", lambda route: route.fulfill(status=503, json={"message": message})
               if route.request.method == "DELETE" else route.continue_())
    page.get_by_role("button", name="Sign out").click()
    page.get_by_text(f"Signed out here, but not everywhere: {message}.").wait_for()
    assert page.get_by_role("heading", name="Sign in").is_visible()
    assert [problem for problem in page.problems if "status of 503" not in problem] == []


def test_an_invited_viewer_chooses_a_password_and_sees_no_settings(stack, page):
    """An admin invites a viewer; the pool's temporary password (set here, as the invitation mail
    would carry one) asks for a password of their own, then they are in, without the admin's Settings."""
    admin_email, admin_password, url = printed(stack)
    admin = requests.post(f"{stack.url}/session", json={"email": admin_email, "password": admin_password}, timeout=30)
    assert admin.status_code == 200, admin.text
    email = f"viewer-{uuid.uuid4().hex[:8]}@recon.local"
    invited = requests.post(f"{stack.url}/users", json={"email": email, "name": "Vera Viewer", "role": "viewer"},
                            headers={"Authorization": f"Bearer {admin.json()['id_token']}"}, timeout=30)
    assert invited.status_code == 201, invited.text
    services = Container(StackInfo(**stack.stack_info()).settings(Settings(data_dir=stack.data_dir)))
    services.aws.client("cognito-idp").admin_set_user_password(
        UserPoolId=services.settings.user_pool_id, Username=email, Password="Temporary-Passw0rd", Permanent=False)

    page.goto(url)
    sign_in(page, email, "Temporary-Passw0rd")
    page.wait_for_function("() => document.activeElement?.id === 'new_password'")  # where they type next
    page.keyboard.type("Vera-own-Passw0rd")
    page.get_by_role("button", name="Set password and sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()
    page.wait_for_function("() => document.activeElement?.textContent === 'Overview'")  # the new page's heading
    assert "Vera Viewer · viewer" in page.locator("header").inner_text()
    assert main_nav(page).get_by_role("link", name="Overview", exact=True).is_visible()
    assert main_nav(page).get_by_role("link", name="Settings", exact=True).count() == 0
    assert page.problems == []


def test_the_app_works_at_its_address_with_a_trailing_slash(stack, page):
    """/v1/app/ serves the same page; its base (/v1/) keeps every module, style and API call where it is."""
    email, password, url = printed(stack)
    page.goto(f"{url}/")
    sign_in(page, email, password)
    page.get_by_role("heading", name="Overview").wait_for()
    main_nav(page).get_by_role("link", name="Exceptions", exact=True).click()
    page.get_by_role("heading", name="Exceptions").wait_for()
    assert page.problems == []
