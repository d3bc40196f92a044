"""Browser agents end to end on the local stack, over HTTP and the operator's command line, with a
real headless Chromium against a small portal served by the test on loopback: a first run asks for
a verification code and completes once it is posted, importing the export into the stream; the next
run reuses the saved browser context (no code asked); a wrong password, a changed selector and a
code never given each fail saying which step, with a screenshot kept; the login never shows up
in a response, the command line's output or the stack's log."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import date, timedelta

import pytest

from chalicelib.local.launcher import ROOT, StackProcess
from tests.support.portal import PORTAL_SETTINGS, TestPortal

pytestmark = pytest.mark.xdist_group("browser")

USERNAME, PASSWORD = "treasury-bot@acme.test", "s3cret-Portal-pw!"
CODE_WAIT_SECONDS = 10


@pytest.fixture(scope="module")
def portal():
    with TestPortal(username=USERNAME, password=PASSWORD) as served:
        yield served


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = StackProcess(tmp_path_factory.mktemp("browser") / "data", api_key="rk_browser-e2e", extra_env={
        "RECON_BROWSER_STEP_TIMEOUT_SECONDS": "4", "RECON_BROWSER_DOWNLOAD_TIMEOUT_SECONDS": "4",
        "RECON_VERIFICATION_TIMEOUT_SECONDS": str(CODE_WAIT_SECONDS)})
    running.start()
    assert running.request("POST", "/data_streams", {"key": "bank", "name": "Operating account"}).status_code == 201
    yield running
    running.stop()


def cli(stack, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chalicelib.cli", *args], cwd=ROOT, env=stack.env, input=stdin,
                          capture_output=True, text=True, timeout=60)


def create_agent(stack, tmp_path, portal, settings=None, name="Bank portal", login=(USERNAME, PASSWORD)) -> str:
    settings_file = tmp_path / f"{name}.json"
    settings_file.write_text(json.dumps(settings or PORTAL_SETTINGS))
    made = cli(stack, "agents", "create-browser", "--environment", "local", "--name", name, "--automation",
               "portal_export", "--portal-url", portal.url, "--settings", str(settings_file))
    assert made.returncode == 0, made.stderr
    agent_id = made.stdout.strip()
    stored = cli(stack, "agents", "set-credentials", agent_id, stdin=f"{login[0]}\n{login[1]}\n")
    assert stored.returncode == 0, stored.stderr
    assert USERNAME not in stored.stdout + stored.stderr and PASSWORD not in stored.stdout + stored.stderr
    return agent_id


def run(stack, agent_id: str) -> dict:
    started = stack.request("POST", f"/agents/{agent_id}/runs")
    assert started.status_code == 202, started.text
    return started.json()


def wait_for_run(stack, agent_id: str, run_id: int, statuses: tuple[str, ...], timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = stack.request("GET", f"/agents/{agent_id}/runs/{run_id}").json()
        if body["status"] in statuses:
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.2)


def assert_no_login_in(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text and USERNAME not in text


def test_a_first_run_asks_for_a_code_completes_once_it_is_posted_and_the_next_reuses_the_session(
        stack, portal, tmp_path):
    agent_id = create_agent(stack, tmp_path, portal)
    agent = stack.request("GET", f"/agents/{agent_id}").json()
    assert (agent["kind"], agent["instructions"], agent["model"]) == ("browser", "", None)
    assert agent["browser"]["has_credentials"] is True and agent["browser"]["has_browser_context"] is False
    assert agent["browser"]["settings"] == PORTAL_SETTINGS and agent["browser"]["portal_url"] == portal.url
    assert stack.request("POST", f"/agents/{agent_id}/verification", {"code": "424242"}).status_code == 409

    first = run(stack, agent_id)
    waiting = wait_for_run(stack, agent_id, first["id"], ("waiting_for_verification", "completed", "failed"))
    assert waiting["status"] == "waiting_for_verification", waiting
    flagged = stack.request("GET", f"/agents/{agent_id}").json()["browser"]
    assert (flagged["needs_verification"], flagged["verification_reason"]) == (True, "code_requested")
    assert flagged["verification_required_at"] is not None

    posted = stack.request("POST", f"/agents/{agent_id}/verification", {"code": portal.code})
    assert posted.status_code == 202, posted.text
    done = wait_for_run(stack, agent_id, first["id"], ("completed", "failed"))
    assert done["status"] == "completed", done
    assert done["file_import_id"] is not None
    assert portal.last_export_query.get("from") == (date.today() - timedelta(days=1)).isoformat()
    imported = wait_for_import(stack, done["file_import_id"])
    assert imported["status"] == "completed" and imported["successful_items"] == len(portal.rows)
    records = stack.request("GET", "/records?data_stream_key=bank").json()["data"]
    assert sorted(r["external_id"] for r in records) == sorted(row["external_id"] for row in portal.rows)
    after = stack.request("GET", f"/agents/{agent_id}").json()["browser"]
    assert (after["needs_verification"], after["has_browser_context"]) == (False, True)

    codes, logins = portal.codes_sent, portal.logins
    second = run(stack, agent_id)
    again = wait_for_run(stack, agent_id, second["id"], ("completed", "failed", "waiting_for_verification"))
    assert again["status"] == "completed", again
    assert (portal.codes_sent, portal.logins) == (codes, logins)  # the saved context was still logged in

    portal.expire_sessions()
    third = run(stack, agent_id)
    relogged = wait_for_run(stack, agent_id, third["id"], ("completed", "failed", "waiting_for_verification"))
    assert relogged["status"] == "completed", relogged
    assert (portal.codes_sent, portal.logins) == (codes, logins + 1)  # logged in again, the device trusted

    shown = json.dumps([stack.request("GET", f"/agents/{agent_id}").json(),
                        stack.request("GET", f"/agents/{agent_id}/runs").json()])
    assert_no_login_in(shown, stack.log_path.read_text())


def wait_for_import(stack, job_id: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = stack.request("GET", f"/file_imports/{job_id}").json()
        if body["status"] in ("completed", "failed", "cancelled"):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.2)


def failed_run(stack, agent_id: str) -> dict:
    started = run(stack, agent_id)
    return wait_for_run(stack, agent_id, started["id"], ("completed", "failed", "waiting_for_verification"))


def screenshot_of(stack, run: dict) -> bytes:
    shots = [f for f in run["output_files"] if f["filename"].startswith("screenshot-")]
    assert len(shots) == 1 and shots[0]["content_type"] == "image/png", run["output_files"]
    body = stack.session.get(shots[0]["url"], timeout=30).content
    assert body.startswith(b"\x89PNG")
    return body


def test_a_wrong_password_fails_at_log_in_with_a_screenshot_and_no_login_anywhere(stack, portal, tmp_path):
    agent_id = create_agent(stack, tmp_path, portal, name="Wrong password", login=(USERNAME, "not-the-password"))
    failed = failed_run(stack, agent_id)
    assert failed["status"] == "failed", failed
    assert failed["error_message"].startswith("step log_in failed:"), failed
    screenshot_of(stack, failed)
    shown = json.dumps([failed, stack.request("GET", f"/agents/{agent_id}").json()]) + stack.log_path.read_text()
    assert "not-the-password" not in shown and USERNAME not in shown


def test_a_selector_that_no_longer_matches_fails_naming_the_step_with_a_screenshot(stack, portal, tmp_path):
    moved = {**PORTAL_SETTINGS, "export": {**PORTAL_SETTINGS["export"], "download_selector": "#export-xlsx"}}
    agent_id = create_agent(stack, tmp_path, portal, settings=moved, name="Changed portal")
    first = failed_run(stack, agent_id)
    if first["status"] == "waiting_for_verification":  # a new browser context: the portal asks first
        assert stack.request("POST", f"/agents/{agent_id}/verification", {"code": portal.code}).status_code == 202
        first = wait_for_run(stack, agent_id, first["id"], ("completed", "failed"))
    assert first["status"] == "failed", first
    assert first["error_message"].startswith("step download failed:") and "#export-xlsx" in first["error_message"]
    screenshot_of(stack, first)


def test_a_code_never_given_fails_the_run_and_clears_the_flag(stack, portal, tmp_path):
    agent_id = create_agent(stack, tmp_path, portal, name="Nobody answers")
    started = run(stack, agent_id)
    assert wait_for_run(stack, agent_id, started["id"], ("waiting_for_verification", "failed", "completed"))[
        "status"] == "waiting_for_verification"
    failed = wait_for_run(stack, agent_id, started["id"], ("failed", "completed"), timeout=CODE_WAIT_SECONDS + 30)
    assert failed["status"] == "failed" and "no verification code was given" in failed["error_message"], failed
    assert stack.request("GET", f"/agents/{agent_id}").json()["browser"]["needs_verification"] is False


def test_a_rejected_code_fails_the_run_and_leaves_the_agent_asking_for_one(stack, portal, tmp_path):
    agent_id = create_agent(stack, tmp_path, portal, name="Fat fingers")
    started = run(stack, agent_id)
    wait_for_run(stack, agent_id, started["id"], ("waiting_for_verification",))
    assert stack.request("POST", f"/agents/{agent_id}/verification", {"code": "000000"}).status_code == 202
    failed = wait_for_run(stack, agent_id, started["id"], ("failed", "completed"))
    assert failed["status"] == "failed" and failed["error_message"].startswith("step enter_code failed:"), failed
    browser = stack.request("GET", f"/agents/{agent_id}").json()["browser"]
    assert (browser["needs_verification"], browser["verification_reason"]) == (True, "code_requested")
    screenshot_of(stack, failed)


def test_the_api_never_creates_or_converts_a_browser_agent_and_patches_only_what_may_change(stack, portal, tmp_path):
    refused = stack.request("POST", "/agents", {"name": "sneaky", "kind": "browser"})
    assert refused.status_code == 422 and "operator" in refused.text
    agent_id = create_agent(stack, tmp_path, portal, name="Patched")
    patched = stack.request("PATCH", f"/agents/{agent_id}", {"cadence": "daily", "hour": 6, "minute": 15,
                                                             "active": False, "delivery_enabled": True,
                                                             "delivery_recipients": ["ops@acme.test"]})
    assert patched.status_code == 200, patched.text
    assert (patched.json()["cadence"], patched.json()["active"]) == ("daily", False)
    for body in ({"kind": "llm"}, {"instructions": "do something else"}, {"handles_file_drops": True}):
        assert stack.request("PATCH", f"/agents/{agent_id}", body).status_code == 422, body


def test_bad_settings_are_refused_by_the_command_line_naming_the_field(stack, portal, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**PORTAL_SETTINGS, "data_stream_key": "nowhere",
                               "export": {**PORTAL_SETTINGS["export"], "steps": [{"fill": "#d"}]}}))
    made = cli(stack, "agents", "create-browser", "--environment", "local", "--name", "Bad", "--automation",
               "portal_export", "--portal-url", portal.url, "--settings", str(bad))
    assert made.returncode == 1
    assert "settings.data_stream_key" in made.stderr and "settings.export.steps[0].value" in made.stderr
