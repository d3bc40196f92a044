"""Agents' schedules on the real embedded AWS of the local stack (LocalStack, without the app):
its settings name the agent-run queue, the schedule group and the scheduler role; SES can send
from the agents' sender; a schedule put through the adapter is fired to the queue by the firer."""
from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from chalicelib.adapters.aws import AwsClients
from chalicelib.adapters.schedules import AgentSchedules
from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.schedule import Cadence, Schedule
from chalicelib.local.schedules import FIRED_FILE, ScheduleFirer
from chalicelib.local.stack import LocalStack
from chalicelib.settings import Settings


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    stack = LocalStack(Settings(data_dir=tmp_path_factory.mktemp("schedules") / "data"), log=lambda _: None)
    try:
        settings = stack.start()
        yield stack, settings, AwsClients(settings)
    finally:
        stack.stop()


def test_the_stack_settings_name_the_agent_resources_from_the_template(local):
    _, settings, aws = local
    assert (settings.agent_run_queue_name, settings.schedule_group_name) == ("recon-local-agent-runs", "recon-local")
    assert settings.scheduler_role_arn.startswith("arn:aws:iam::123456789012:role/")
    aws.sqs.get_queue_url(QueueName=settings.agent_run_queue_name)  # provisioned
    aws.client("scheduler").get_schedule_group(Name=settings.schedule_group_name)
    url = aws.sqs.get_queue_url(QueueName=settings.agent_run_queue_name)["QueueUrl"]
    attributes = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert json.loads(attributes["RedrivePolicy"])["maxReceiveCount"] == settings.agent_run_max_receives


def test_ses_sends_from_the_agents_sender(local):
    _, settings, aws = local
    ses = aws.client("ses")
    assert settings.mail_sender in ses.list_identities()["Identities"]
    sent = ses.send_raw_email(Source=settings.mail_sender, Destinations=["ops@example.com"],
                              RawMessage={"Data": f"From: {settings.mail_sender}\nTo: ops@example.com\n"
                                                  "Subject: proof\n\nbody\n"})
    assert sent["MessageId"]


def test_a_schedule_put_on_the_stack_is_fired_to_the_agent_run_queue(local):
    stack, settings, aws = local
    scheduler = aws.client("scheduler")
    schedules = AgentSchedules(scheduler, aws.sqs, settings.schedule_group_name, settings.scheduler_role_arn,
                               settings.agent_run_queue_name)
    now = datetime(2026, 11, 23, 13, 59, 50, tzinfo=UTC)
    agent = Agent(environment="local", id="5d1c7b0e-8f57-4f0a-9e0c-3a1b2c3d4e5f", name="Cash check",
                  schedule=Schedule(Cadence.DAILY, "America/New_York", 9, 0), created_at=now, updated_at=now)
    schedules.put(agent)
    clock = [now]
    firer = ScheduleFirer(scheduler, aws.sqs, settings.schedule_group_name, stack.data_dir / FIRED_FILE,
                          now=lambda: clock[0], log=lambda _: None)
    assert firer.check() == []
    clock[0] = datetime(2026, 11, 23, 14, 0, 5, tzinfo=UTC)
    assert len(firer.check()) == 1
    url = aws.sqs.get_queue_url(QueueName=settings.agent_run_queue_name)["QueueUrl"]
    [message] = aws.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    assert json.loads(message["Body"]) == {"environment": "local", "agent_id": agent.id, "trigger": "schedule",
                                           "scheduled_time": "2026-11-23T14:00:00Z"}
    schedules.remove("local", agent.id)
