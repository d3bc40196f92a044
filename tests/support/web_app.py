"""The web app's end-to-end helpers: a page in Debian's Chromium that fails on any console error (a CSP
violation is one), signing in as `make run`'s admin or as a person of a given role, and axe-core."""
from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

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
