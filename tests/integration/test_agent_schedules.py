"""Agents' EventBridge Scheduler schedules (adapters/schedules.py) on moto: what a put stores,
read back; a manual or inactive agent has none; a put or a remove again changes nothing."""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import boto3
import pytest

from chalicelib.adapters.schedules import AgentSchedules, schedule_name
from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.schedule import Cadence, Schedule

REGION = "us-east-1"
GROUP = "recon-test"
QUEUE = "recon-test-agent-runs"
ROLE = "arn:aws:iam::123456789012:role/recon-test-scheduler"
NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)
AGENT_ID = "0b6f3a8e-3c1d-4a57-9d0e-6f1e2a3b4c5d"


def agent(schedule: Schedule, environment: str = "acme", agent_id: str = AGENT_ID, **fields) -> Agent:
    return Agent(environment=environment, id=agent_id, name="Daily cash check", schedule=schedule, created_at=NOW,
                 updated_at=NOW, **fields)


@pytest.fixture
def aws(moto_aws):
    scheduler, sqs = boto3.client("scheduler", region_name=REGION), boto3.client("sqs", region_name=REGION)
    scheduler.create_schedule_group(Name=GROUP)
    url = sqs.create_queue(QueueName=QUEUE)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return scheduler, sqs, arn


@pytest.fixture
def schedules(aws):
    scheduler, sqs, _ = aws
    return AgentSchedules(scheduler, sqs, GROUP, ROLE, QUEUE)


@pytest.mark.parametrize(("schedule", "expression"), [
    (Schedule(Cadence.HOURLY, "Asia/Kolkata", minute=0), "cron(0 * * * ? *)"),
    (Schedule(Cadence.DAILY, "America/New_York", 9, 30), "cron(30 9 * * ? *)"),
    (Schedule(Cadence.WEEKDAYS, "Europe/Paris", 7, 5), "cron(5 7 ? * MON-FRI *)"),
    (Schedule(Cadence.WEEKLY, "UTC", 18, 0, 0), "cron(0 18 ? * SUN *)"),
    (Schedule(Cadence.WEEKLY, "UTC", 18, 0, 6), "cron(0 18 ? * SAT *)"),
])
def test_a_scheduled_agent_gets_one_schedule_that_sends_its_run_to_the_queue(aws, schedules, schedule, expression):
    scheduler, _, queue_arn = aws
    schedules.put(agent(schedule))
    stored = schedules.read("acme", AGENT_ID)
    assert stored is not None
    assert (stored["expression"], stored["timezone"], stored["state"]) == (expression, schedule.timezone, "ENABLED")
    assert (stored["target_arn"], stored["role_arn"]) == (queue_arn, ROLE)
    # The Scheduler writes the fire time in place of its context attribute at each firing.
    assert json.loads(stored["input"]) == {"environment": "acme", "agent_id": AGENT_ID, "trigger": "schedule",
                                           "scheduled_time": "<aws.scheduler.scheduled-time>"}
    assert stored["arn"].endswith(f":schedule/{GROUP}/{stored['name']}")
    assert "Daily cash check" in stored["description"] and AGENT_ID in stored["description"]
    raw = scheduler.get_schedule(Name=schedule_name("acme", AGENT_ID), GroupName=GROUP)
    assert raw["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert [s["Name"] for s in scheduler.list_schedules(GroupName=GROUP)["Schedules"]] == [stored["name"]]


def test_a_manual_agent_has_no_schedule_and_switching_to_manual_deletes_it(aws, schedules):
    scheduler = aws[0]
    schedules.put(agent(Schedule(Cadence.MANUAL, "UTC")))
    assert schedules.read("acme", AGENT_ID) is None
    daily = agent(Schedule(Cadence.DAILY, "UTC", 9, 0))
    schedules.put(daily)
    assert schedules.read("acme", AGENT_ID) is not None
    schedules.put(replace(daily, schedule=Schedule(Cadence.MANUAL, "UTC", 9, 0)))
    assert schedules.read("acme", AGENT_ID) is None
    assert scheduler.list_schedules(GroupName=GROUP)["Schedules"] == []


def test_an_inactive_agent_has_no_schedule_and_reactivating_it_makes_it_again(schedules):
    daily = agent(Schedule(Cadence.DAILY, "UTC", 9, 0))
    schedules.put(daily)
    schedules.put(replace(daily, active=False))
    assert schedules.read("acme", AGENT_ID) is None
    schedules.put(replace(daily, active=False))  # a retry of the same put
    assert schedules.read("acme", AGENT_ID) is None
    schedules.put(daily)
    assert schedules.read("acme", AGENT_ID)["expression"] == "cron(0 9 * * ? *)"


def test_changing_the_hour_or_timezone_updates_the_one_schedule(aws, schedules):
    scheduler = aws[0]
    daily = agent(Schedule(Cadence.DAILY, "UTC", 9, 0))
    schedules.put(daily)
    schedules.put(replace(daily, schedule=Schedule(Cadence.DAILY, "America/Chicago", 17, 45)))
    stored = schedules.read("acme", AGENT_ID)
    assert (stored["expression"], stored["timezone"]) == ("cron(45 17 * * ? *)", "America/Chicago")
    schedules.put(replace(daily, schedule=Schedule(Cadence.WEEKDAYS, "America/Chicago", 17, 45)))
    assert schedules.read("acme", AGENT_ID)["expression"] == "cron(45 17 ? * MON-FRI *)"
    assert len(scheduler.list_schedules(GroupName=GROUP)["Schedules"]) == 1


def test_a_put_again_is_harmless(aws, schedules):
    scheduler = aws[0]
    weekly = agent(Schedule(Cadence.WEEKLY, "UTC", 6, 15, 3))
    schedules.put(weekly)
    first = schedules.read("acme", AGENT_ID)
    schedules.put(weekly)
    assert schedules.read("acme", AGENT_ID) == first
    assert len(scheduler.list_schedules(GroupName=GROUP)["Schedules"]) == 1


def test_a_put_that_finds_the_schedule_made_meanwhile_updates_it(aws):
    """UpdateSchedule found nothing, then another put created it before our CreateSchedule: the
    Conflict ends in an update, not an error."""
    scheduler, sqs, _ = aws
    real_update = scheduler.update_schedule
    calls = []

    def update_after_a_racing_create(**arguments):
        calls.append(arguments["ScheduleExpression"])
        if len(calls) == 1:
            scheduler.create_schedule(**{**arguments, "ScheduleExpression": "cron(0 1 * * ? *)"})
            raise scheduler.exceptions.ResourceNotFoundException(
                {"Error": {"Code": "ResourceNotFoundException", "Message": "gone"}}, "UpdateSchedule")
        return real_update(**arguments)

    scheduler.update_schedule = update_after_a_racing_create
    schedules = AgentSchedules(scheduler, sqs, GROUP, ROLE, QUEUE)
    schedules.put(agent(Schedule(Cadence.DAILY, "UTC", 9, 0)))
    assert calls == ["cron(0 9 * * ? *)", "cron(0 9 * * ? *)"]
    assert schedules.read("acme", AGENT_ID)["expression"] == "cron(0 9 * * ? *)"


def test_remove_deletes_and_is_idempotent(schedules):
    schedules.put(agent(Schedule(Cadence.HOURLY, "UTC", minute=10)))
    schedules.remove("acme", AGENT_ID)
    assert schedules.read("acme", AGENT_ID) is None
    schedules.remove("acme", AGENT_ID)
    schedules.remove("acme", "never-was")


def test_each_agent_and_environment_has_its_own_schedule_within_the_name_limit(aws, schedules):
    long_environment = "e" * 64
    other_id = "9f8e7d6c-5b4a-4321-8fed-cba987654321"
    for environment, agent_id in (("acme", AGENT_ID), ("globex", AGENT_ID), ("acme", other_id),
                                  (long_environment, AGENT_ID)):
        schedules.put(agent(Schedule(Cadence.DAILY, "UTC", 9, 0), environment, agent_id))
    names = [s["Name"] for s in aws[0].list_schedules(GroupName=GROUP)["Schedules"]]
    assert len(set(names)) == 4
    assert all(len(n) <= 64 for n in names)
    schedules.remove("globex", AGENT_ID)
    assert schedules.read("globex", AGENT_ID) is None and schedules.read("acme", AGENT_ID) is not None


def test_the_queue_arn_is_looked_up_once(aws):
    scheduler, sqs, queue_arn = aws
    lookups = []
    real = sqs.get_queue_attributes

    def counted(**arguments):
        lookups.append(arguments)
        return real(**arguments)

    sqs.get_queue_attributes = counted
    schedules = AgentSchedules(scheduler, sqs, GROUP, ROLE, QUEUE)
    for hour in (1, 2, 3):
        schedules.put(agent(Schedule(Cadence.DAILY, "UTC", hour, 0)))
    assert len(lookups) == 1 and schedules.read("acme", AGENT_ID)["target_arn"] == queue_arn
