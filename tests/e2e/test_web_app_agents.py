"""The Agents page in Debian's Chromium against a local stack of this module's own, whose model is a
scripted OpenAI-compatible server (as tests/e2e/test_agents_local.py does) and whose browser agent
logs in to a small portal served on loopback (as test_browser_agents_local.py does): an admin edits
an agent, attaches and removes an input file, runs it now and reads the run's steps, its file and
its mail; a browser agent's run that waits for a verification code takes it on the page and
completes; a viewer gets none of the controls and the API refuses each of them. Every effect is
checked through the API; axe-core finds no serious violation on any state."""
from __future__ import annotations

import uuid

import pytest
import requests

from chalicelib.local.launcher import StackProcess
from tests.e2e.test_browser_agents_local import PASSWORD, USERNAME, create_agent, wait_for_run
from tests.support.chromium import needs_chromium
from tests.support.model_servers import ScriptedChatServer
from tests.support.portal import TestPortal
from tests.support.web_app import (
    expected,
    person,
    printed,
    screenshot,
    serious_violations,
    sign_in,
    signed_in,
    token_of,
    without_refusals,
)

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]
READING = {"Sign out", "Previous", "Next"}  # the buttons a viewer gets: signing out and paging


@pytest.fixture(scope="module")
def model():
    with ScriptedChatServer() as server:
        yield server


@pytest.fixture(scope="module")
def portal():
    with TestPortal(username=USERNAME, password=PASSWORD) as served:
        yield served


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model):
    running = StackProcess(tmp_path_factory.mktemp("web-agents") / "data", api_key="rk_web-agents-e2e",
                           extra_env={"OPENAI_BASE_URL": model.base_url, "RECON_DEFAULT_MODEL": "scripted"})
    running.start()
    assert running.request("POST", "/data_streams", {"key": "bank", "name": "Operating account"}).status_code == 201
    yield running
    running.stop()


def post(stack, path, body=None):
    response = stack.request("POST", path, body)
    assert response.status_code in (201, 202), response.text
    return response.json()


def get(stack, path):
    response = stack.request("GET", path)
    assert response.status_code == 200, response.text
    return response.json()




def same_object(url: str, other: str) -> bool:
    return url.split("?")[0] == other.split("?")[0]


def test_an_admin_edits_an_agent_runs_it_and_reads_its_steps_files_and_mail(stack, model, page):
    name = f"Payout watch {uuid.uuid4().hex[:6]}"
    agent = post(stack, "/agents", {"name": name, "instructions": "Write the large payouts as a CSV file.",
                                    "delivery_enabled": True, "delivery_recipients": ["treasury@acme.test"],
                                    "delivery_file_pattern": "*.csv"})
    signed_in(stack, page, hash_route="#/agents")
    listed = page.get_by_role("row").filter(has=page.get_by_role("link", name=name))
    assert listed.inner_text().split("\t")[1:3] == ["llm", "Manual: runs when started"]
    assert serious_violations(page) == []
    page.get_by_role("link", name=name).click()
    page.get_by_role("heading", name=name, level=2).wait_for()
    page.get_by_text("No runs yet.").wait_for()
    assert serious_violations(page) == []

    # Edit: a daily schedule in Paris and a description.
    page.get_by_label("Description").fill("Large payouts, every morning")
    page.get_by_label("Cadence").select_option("daily")
    page.get_by_label("Hour (0–23)").fill("7")
    page.get_by_label("Minute (0–59)").fill("30")
    page.get_by_label("Time zone").fill("Europe/Paris")
    page.get_by_role("button", name="Save").click()
    page.get_by_role("status").filter(has_text=f"Saved {name}.").wait_for()
    saved = get(stack, f"/agents/{agent['id']}")
    assert (saved["description"], saved["cadence"], saved["hour"], saved["minute"], saved["timezone"]) == (
        "Large payouts, every morning", "daily", 7, 30, "Europe/Paris")
    assert saved["instructions"] == agent["instructions"] and saved["delivery_recipients"] == ["treasury@acme.test"]
    assert saved["next_run_at"] is not None
    page.get_by_text("Daily at 07:30 (Europe/Paris)").first.wait_for()

    # A weekly schedule without its hour is refused, the field named; nothing changes.
    page.get_by_label("Cadence").select_option("weekly")
    page.get_by_label("Day of the week").select_option("Friday")
    page.get_by_label("Hour (0–23)").fill("")
    page.get_by_role("button", name="Save").click()
    refused = page.get_by_role("alert").filter(has_text="Could not save the agent")
    refused.wait_for()
    assert "hour:" in refused.inner_text()
    assert get(stack, f"/agents/{agent['id']}")["cadence"] == "daily"
    page.get_by_label("Hour (0–23)").fill("6")
    page.get_by_role("button", name="Save").click()
    page.get_by_role("status").filter(has_text=f"Saved {name}.").wait_for()
    assert refused.count() == 0
    saved = get(stack, f"/agents/{agent['id']}")
    assert (saved["cadence"], saved["day_of_week"], saved["hour"], saved["minute"]) == ("weekly", 5, 6, 30)
    page.get_by_text("Fridays at 06:30 (Europe/Paris)").first.wait_for()

    # An input file attached from the page, then removed.
    page.get_by_label("Attach a file (at most 3.5 MB)").set_input_files(
        files=[{"name": "rates.csv", "mimeType": "text/csv", "buffer": b"usd,1\neur,2\n"}])
    page.get_by_role("status").filter(has_text="Attached rates.csv.").wait_for()
    [attached] = get(stack, f"/agents/{agent['id']}")["input_files"]
    assert (attached["filename"], attached["byte_size"], attached["content_type"]) == ("rates.csv", 12, "text/csv")
    href = page.get_by_role("link", name="rates.csv").get_attribute("href")
    assert same_object(href, attached["url"])  # presigned anew at each answer: the object's address is the same
    assert requests.get(href, timeout=10).content == b"usd,1\neur,2\n"
    # Removing asks first; Cancel keeps the file.
    page.get_by_role("button", name="Remove rates.csv").click()
    question = page.get_by_role("group", name="Remove rates.csv? Runs no longer read it.")
    question.get_by_role("button", name="Cancel").click()
    question.wait_for(state="detached")
    assert len(get(stack, f"/agents/{agent['id']}")["input_files"]) == 1
    page.get_by_role("button", name="Remove rates.csv").click()
    page.get_by_role("button", name="Yes, remove").click()
    page.get_by_role("status").filter(has_text="Removed rates.csv.").wait_for()
    assert get(stack, f"/agents/{agent['id']}")["input_files"] == []
    page.get_by_text("No input files.").wait_for()
    # A file past what one request carries (base64 in a 5 MiB body) is refused before it is read or sent.
    page.get_by_label("Attach a file (at most 3.5 MB)").set_input_files(
        files=[{"name": "big.csv", "mimeType": "text/csv", "buffer": b"x" * (3_670_016 + 1)}])
    page.get_by_role("alert").filter(has_text="big.csv is 3670017 bytes; at most 3670016 bytes (3.5 MB) can be attached here").wait_for()
    assert get(stack, f"/agents/{agent['id']}")["input_files"] == []

    # Run now: the scripted model writes a CSV, which is mailed.
    model.add(
        model.tool_calls(("w", "write_output_file", {"filename": "large.csv",
                                                     "content": "external_id,amount\nb0,25000000\n"})),
        model.text("One payout over 1,000.00; mailed large.csv."))
    page.get_by_role("button", name="Run now").dblclick()  # a double click starts one run
    started = page.get_by_role("status").filter(has_text="started")
    started.wait_for()
    run_id = int(started.inner_text().split()[1].rstrip(":"))
    row = page.get_by_role("table", name="Runs, newest first").locator("tbody tr").first
    row.get_by_text("completed").wait_for()  # the page polls while the run goes
    run = get(stack, f"/agents/{agent['id']}/runs/{run_id}")
    assert (run["status"], run["trigger"]) == ("completed", "manual")
    assert [r["id"] for r in get(stack, f"/agents/{agent['id']}/runs")["data"]] == [run_id]
    assert row.inner_text().split("\t")[:3] == [f"Run {run_id}", "completed", "manual"]
    assert row.inner_text().split("\t")[-3:] == ["2", "1", "1 sent"]  # steps, files, mail
    assert serious_violations(page) == []
    screenshot(page, "agents")

    row.get_by_role("link", name=f"Run {run_id}").click()
    page.get_by_role("heading", name=f"Run {run_id}", level=2).wait_for()
    steps = page.locator("ol.run-steps > li")
    assert steps.evaluate_all("steps => steps.map(s => s.dataset.step)") == [
        step["name"] for step in run["steps"]] == ["write_output_file", "final_answer"]
    assert "large.csv" in steps.nth(0).locator("pre").first.inner_text()
    assert steps.nth(1).locator("pre").inner_text() == "One payout over 1,000.00; mailed large.csv."
    [output] = run["output_files"]
    file_link = page.get_by_role("table", name="Files the run wrote").get_by_role("link", name="large.csv")
    href = file_link.get_attribute("href")
    assert same_object(href, output["url"])
    assert requests.get(href, timeout=10).text == "external_id,amount\nb0,25000000\n"
    [delivery] = run["deliveries"]
    mail = page.get_by_role("table", name="Messages the run sent").locator("tbody tr")
    assert mail.inner_text().split("\t")[:2] == ["treasury@acme.test", "sent"] == [
        delivery["recipient"], delivery["status"]]
    assert serious_violations(page) == []
    assert without_refusals(page.problems, "422", f"/agents/{agent['id']}") == []




def test_a_browser_agents_run_waiting_for_a_code_takes_it_here_and_a_viewer_gets_no_control(
        stack, portal, page, tmp_path):
    agent_id = create_agent(stack, tmp_path, portal, name=f"Bank portal {uuid.uuid4().hex[:6]}")
    name = get(stack, f"/agents/{agent_id}")["name"]
    signed_in(stack, page, hash_route=f"#/agents/{agent_id}")
    page.get_by_role("heading", name=name, level=2).wait_for()
    page.get_by_role("button", name="Run now").click()
    page.get_by_role("heading", name="Verification code needed").wait_for()  # the page polls the run
    [started] = get(stack, f"/agents/{agent_id}/runs")["data"]
    # The service raises the agent's flag a moment before it saves the run as waiting.
    waiting = wait_for_run(stack, agent_id, started["id"], ("waiting_for_verification", "completed", "failed"))
    assert waiting["status"] == "waiting_for_verification", waiting
    assert get(stack, f"/agents/{agent_id}")["browser"]["needs_verification"] is True
    assert serious_violations(page) == []

    # Meanwhile a viewer sees that a code is asked for but gets no field to give it, nor any other
    # control of an agent; the API refuses each of them.
    reader = post(stack, "/agents", {"name": f"Read only {uuid.uuid4().hex[:6]}", "instructions": "Nothing."})
    email, password = person(stack, "viewer")
    viewer = page.context.browser.new_context().new_page()
    problems: list[str] = []  # as the page fixture keeps them (a CSP violation is a console error)
    viewer.on("console", lambda m: problems.append(m.text) if m.type == "error" and not expected(m) else None)
    viewer.on("pageerror", lambda error: problems.append(str(error)))
    try:
        viewer.goto(printed(stack)[2])
        sign_in(viewer, email, password)
        viewer.get_by_role("heading", name="Overview").wait_for()
        viewer.evaluate("route => { location.hash = route; }", "#/agents")
        viewer.get_by_role("link", name="a verification code").first.wait_for()
        viewer.get_by_role("link", name=name).click()
        viewer.get_by_text("An admin enters it here.").wait_for()
        assert viewer.get_by_label("Verification code", exact=True).count() == 0
        assert set(viewer.get_by_role("button").all_inner_texts()) <= READING  # no Run now, Send code, Save, Remove
        viewer.evaluate("route => { location.hash = route; }", f"#/agents/{reader['id']}")
        viewer.get_by_role("heading", name=reader["name"], level=2).wait_for()
        viewer.get_by_text("No runs yet.").wait_for()
        assert set(viewer.get_by_role("button").all_inner_texts()) <= READING
        assert viewer.get_by_role("textbox").count() == 0 and viewer.locator("input[type=file]").count() == 0
        assert viewer.locator("dl.fields").inner_text().startswith("Description")  # the settings, to read
        assert serious_violations(viewer) == []
        assert problems == []
    finally:
        viewer.context.close()
    token = {"Authorization": f"Bearer {token_of(stack, email, password)}"}
    for agent, method, path, body in (
            (reader, "PATCH", "", {"name": "Mine now"}), (reader, "POST", "/runs", None),
            (reader, "POST", "/files", {"filename": "a.txt", "content_base64": "aGk="}), (reader, "DELETE", "", None),
            ({"id": agent_id}, "POST", "/verification", {"code": portal.code})):
        refused = requests.request(method, f"{stack.url}/agents/{agent['id']}{path}", json=body, headers=token,
                                   timeout=30)
        assert refused.status_code == 403, (method, path, refused.text)
    after = get(stack, f"/agents/{reader['id']}")
    assert (after["name"], after["input_files"], after["last_run_at"]) == (reader["name"], [], None)
    assert get(stack, f"/agents/{reader['id']}/runs")["data"] == []
    assert get(stack, f"/agents/{agent_id}/runs/{waiting['id']}")["status"] == "waiting_for_verification"

    # The run's own page takes the code too; it goes on and imports the portal's export.
    page.get_by_role("link", name=f"Run {waiting['id']}").click()
    page.get_by_role("heading", name=f"Run {waiting['id']}", level=2).wait_for()
    page.get_by_label("Verification code", exact=True).fill(portal.code)
    page.get_by_role("button", name="Send code").click()
    page.get_by_role("status").filter(has_text=f"Code given: run {waiting['id']} is running again.").wait_for()
    page.locator(".run-line").get_by_text("completed").wait_for()
    done = wait_for_run(stack, agent_id, waiting["id"], ("completed", "failed"))
    assert done["status"] == "completed", done
    assert get(stack, f"/agents/{agent_id}")["browser"]["needs_verification"] is False
    assert page.get_by_role("heading", name="Verification code needed").count() == 0
    steps = page.locator("ol.run-steps > li").evaluate_all("steps => steps.map(s => s.dataset.step)")
    assert steps == [step["name"] for step in done["steps"]] and "enter_code" in steps
    page.get_by_role("link", name=f"file import {done['file_import_id']}").wait_for()
    assert serious_violations(page) == []

    # A browser agent's form offers only what may change of one (no instructions, model or file drops).
    page.get_by_role("link", name=name).click()
    page.get_by_role("heading", name=name, level=2).wait_for()
    assert page.get_by_label("Instructions").count() == page.get_by_label("Model").count() == 0
    page.get_by_label("Description").fill("The bank's export, every weekday")
    page.get_by_label("Cadence").select_option("weekdays")
    page.get_by_label("Hour (0–23)").fill("6")
    page.get_by_label("Minute (0–59)").fill("5")
    page.get_by_role("button", name="Save").click()
    page.get_by_role("status").filter(has_text=f"Saved {name}.").wait_for()
    saved = get(stack, f"/agents/{agent_id}")
    assert (saved["description"], saved["cadence"], saved["hour"], saved["minute"], saved["kind"]) == (
        "The bank's export, every weekday", "weekdays", 6, 5, "browser")
    assert USERNAME not in page.content() and PASSWORD not in page.content()
    assert page.problems == []
