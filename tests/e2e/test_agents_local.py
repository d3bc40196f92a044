"""Agents end to end on the local stack, over HTTP, with a scripted OpenAI-compatible server as
the model: a run that queries the records with `sql`, writes a CSV and mails it (the local outbox
keeps the .eml), its file downloadable by its URL; an input file uploaded by its upload URL; the
schedule an agent gets, read back from the embedded Scheduler."""
from __future__ import annotations

import base64
import email
import json
import time
from datetime import date
from email import policy

import boto3
import pytest
import requests

from chalicelib.local.launcher import StackProcess
from tests.support.model_servers import ScriptedChatServer

TODAY = date.today().isoformat()


@pytest.fixture(scope="module")
def model():
    with ScriptedChatServer() as server:
        yield server


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model):
    running = StackProcess(tmp_path_factory.mktemp("agents") / "data", api_key="rk_agents-e2e",
                           extra_env={"OPENAI_BASE_URL": model.base_url, "RECON_DEFAULT_MODEL": "scripted"})
    running.start()
    yield running
    running.stop()


def post(stack, path, body=None, status=(201, 202)):
    response = stack.request("POST", path, body)
    assert response.status_code in status, response.text
    return response.json()


def wait_for(stack, path, done, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        body = stack.request("GET", path).json()
        if done(body):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.2)


def test_a_run_queries_writes_a_file_and_mails_it(stack, model):
    post(stack, "/data_streams", {"key": "bank", "name": "Operating account"})
    bulk = post(stack, "/records/bulk", {"records": [
        {"data_stream_key": "bank", "external_id": f"b{i}", "amount": amount, "date": TODAY, "direction": "credit"}
        for i, amount in enumerate((250_000_00, 99_00, 1_500_00))]})
    wait_for(stack, f"/bulk_requests/{bulk['id']}", lambda b: b["status"] == "completed")
    agent = post(stack, "/agents", {
        "name": "Payout watch", "instructions": "List the bank records over 1,000.00 as a CSV file.",
        "delivery_enabled": True, "delivery_recipients": ["treasury@acme.test"], "delivery_file_pattern": "*.csv",
        "mentions": [{"type": "data_stream", "id": "bank", "label": "Operating account"}]})
    model.add(
        model.tool_calls(("q", "sql", {"query": "SELECT external_id, amount FROM records "
                                                "WHERE amount > 100000 ORDER BY amount DESC"})),
        model.tool_calls(("w", "write_output_file", {"filename": "large.csv",
                                                     "content": "external_id,amount\nb0,25000000\nb2,150000\n"})),
        model.text("Two records over 1,000.00; mailed large.csv."))
    first = len(model.requests)

    run = post(stack, f"/agents/{agent['id']}/runs")
    run = wait_for(stack, f"/agents/{agent['id']}/runs/{run['id']}",
                   lambda r: r["status"] in ("completed", "failed"))

    assert run["status"] == "completed", run
    assert "data stream `bank`" in model.requests[first].body["messages"][-1]["content"]
    table = model.tool_results(first + 1)[0]["content"]
    assert "25000000" in table and "150000" in table and "9900" not in table
    [output] = run["output_files"]
    assert requests.get(output["url"], timeout=10).text == "external_id,amount\nb0,25000000\nb2,150000\n"
    [delivery] = run["deliveries"]
    assert (delivery["recipient"], delivery["status"]) == ("treasury@acme.test", "sent")
    [eml] = (stack.data_dir / "outbox").glob("*.eml")
    message = email.message_from_bytes(eml.read_bytes(), policy=policy.default)
    assert message["To"] == "treasury@acme.test"
    [attachment] = message.iter_attachments()
    assert attachment.get_filename() == "large.csv" and "b0,25000000" in attachment.get_content()


def test_an_input_file_uploaded_by_its_url_is_sized_once_it_lands(stack):
    agent = post(stack, "/agents", {"name": "Reader"})
    created = post(stack, f"/agents/{agent['id']}/files", {"filename": "rates.csv", "content_type": "text/csv"})
    assert created["byte_size"] is None
    put = requests.put(created["upload_url"], data=b"usd,1\neur,2\n", headers={"Content-Type": "text/csv"},
                       timeout=10)
    assert put.status_code == 200, put.text
    [listed] = stack.request("GET", f"/agents/{agent['id']}").json()["input_files"]
    assert (listed["filename"], listed["byte_size"]) == ("rates.csv", 12)
    inline = post(stack, f"/agents/{agent['id']}/files", {"filename": "a.txt",
                                                           "content_base64": base64.b64encode(b"hi").decode()})
    assert requests.get(inline["url"], timeout=10).content == b"hi"


def test_an_agents_schedule_is_stored_in_the_embedded_scheduler(stack):
    agent = post(stack, "/agents", {"name": "Weekly", "cadence": "weekly", "day_of_week": 1, "hour": 7,
                                    "minute": 30, "timezone": "Asia/Kolkata"})
    info = stack.stack_info()
    scheduler = boto3.client("scheduler", endpoint_url=info["aws_endpoint"], region_name="us-east-1",
                             aws_access_key_id="local", aws_secret_access_key="local")
    [stored] = [s for s in scheduler.list_schedules(GroupName=info["schedule_group_name"])["Schedules"]]
    schedule = scheduler.get_schedule(GroupName=info["schedule_group_name"], Name=stored["Name"])
    assert (schedule["ScheduleExpression"], schedule["ScheduleExpressionTimezone"]) == (
        "cron(30 7 ? * MON *)", "Asia/Kolkata")
    assert schedule["Target"]["Arn"].endswith(":" + info["agent_run_queue_name"])
    assert json.loads(schedule["Target"]["Input"])["agent_id"] == agent["id"]
    assert stack.request("PATCH", f"/agents/{agent['id']}", {"active": False}).status_code == 200
    assert scheduler.list_schedules(GroupName=info["schedule_group_name"])["Schedules"] == []
