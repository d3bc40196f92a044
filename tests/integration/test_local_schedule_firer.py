"""The local stack's EventBridge Scheduler firer (chalicelib/local/schedules.py) on moto, with a
clock the test moves: a schedule's Input reaches its queue once per fire time that passes while
the firer runs, never before it, never twice (a restart included), and not after a delete."""
from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import boto3
import pytest
from chalice import Chalice

from chalicelib.adapters.schedules import AgentSchedules, schedule_name
from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.schedule import Cadence, Schedule
from chalicelib.local.runtime import LocalRuntime
from chalicelib.local.schedules import FIRED_FILE, ScheduleFirer

REGION = "us-east-1"
GROUP = "recon-test"
QUEUE = "recon-test-agent-runs"
ROLE = "arn:aws:iam::123456789012:role/recon-test-scheduler"
DAILY_AT_9 = Schedule(Cadence.DAILY, "America/New_York", 9, 0)  # 14:00 UTC in November


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


class Clock:
    def __init__(self, at: str) -> None:
        self.now = utc(at)

    def __call__(self) -> datetime:
        return self.now

    def set(self, at: str) -> None:
        self.now = utc(at)


def agent(agent_id: str, schedule: Schedule, environment: str = "acme") -> Agent:
    return Agent(environment=environment, id=agent_id, name=f"agent {agent_id}", schedule=schedule,
                 created_at=utc("2026-11-01T00:00"), updated_at=utc("2026-11-01T00:00"))


@pytest.fixture
def world(moto_aws, tmp_path):
    scheduler, sqs = boto3.client("scheduler", region_name=REGION), boto3.client("sqs", region_name=REGION)
    scheduler.create_schedule_group(Name=GROUP)
    url = sqs.create_queue(QueueName=QUEUE)["QueueUrl"]

    class World:
        schedules = AgentSchedules(scheduler, sqs, GROUP, ROLE, QUEUE)
        state = tmp_path / FIRED_FILE
        logged: list[str] = []

        def firer(self, clock: Clock) -> ScheduleFirer:
            return ScheduleFirer(scheduler, sqs, GROUP, self.state, now=clock, log=self.logged.append)

        def received(self) -> list[dict]:
            """The messages on the queue (taken off it)."""
            bodies = []
            while True:
                messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
                if not messages:
                    return bodies
                for message in messages:
                    bodies.append(json.loads(message["Body"]))
                    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    return World()


def test_a_daily_schedule_fires_once_when_its_time_passes_not_before_and_not_twice(world):
    world.schedules.put(agent("a1", DAILY_AT_9))
    clock = Clock("2026-11-23T13:50")
    firer = world.firer(clock)
    for at in ("2026-11-23T13:55", "2026-11-23T13:59:59"):
        clock.set(at)
        assert firer.check() == []
    clock.set("2026-11-23T14:00:10")
    [fired] = firer.check()
    assert (fired.at, fired.queue) == (utc("2026-11-23T14:00"), QUEUE)
    assert world.received() == [{"environment": "acme", "agent_id": "a1", "trigger": "schedule",
                                 "scheduled_time": "2026-11-23T14:00:00Z"}]
    for at in ("2026-11-23T14:00:25", "2026-11-23T20:00", "2026-11-24T13:59"):
        clock.set(at)
        assert firer.check() == []
    assert world.received() == []
    clock.set("2026-11-24T14:00:05")  # the next day's
    assert [f.at for f in firer.check()] == [utc("2026-11-24T14:00")]
    assert [m["scheduled_time"] for m in world.received()] == ["2026-11-24T14:00:00Z"]


def test_a_deleted_schedule_stops_firing(world):
    world.schedules.put(agent("a1", Schedule(Cadence.HOURLY, "UTC", minute=0)))
    world.schedules.put(agent("a2", Schedule(Cadence.HOURLY, "UTC", minute=0)))
    clock = Clock("2026-11-23T09:59")
    firer = world.firer(clock)
    clock.set("2026-11-23T10:00:01")
    assert len(firer.check()) == 2
    assert sorted(m["agent_id"] for m in world.received()) == ["a1", "a2"]
    world.schedules.remove("acme", "a1")
    clock.set("2026-11-23T11:00:01")
    firer.check()
    assert [m["agent_id"] for m in world.received()] == ["a2"]
    assert json.loads(world.state.read_text()).keys() == {schedule_name("acme", "a2")}


def test_a_restart_neither_fires_again_nor_fires_what_was_missed_while_down(world):
    world.schedules.put(agent("a1", DAILY_AT_9))
    clock = Clock("2026-11-23T13:59")
    first = world.firer(clock)
    clock.set("2026-11-23T14:00:03")
    assert len(first.check()) == 1
    world.received()
    # Restarted with the clock set back a minute: the fire time is in the window again, and the
    # file of last fire times alone keeps it from firing twice.
    clock.set("2026-11-23T13:59:30")
    again = world.firer(clock)
    clock.set("2026-11-23T14:00:30")
    assert again.check() == [] and world.received() == []
    # Down over the next day's 09:00, up at 10:00 New York: that run is not caught up.
    clock.set("2026-11-24T15:00")
    later = world.firer(clock)
    clock.set("2026-11-24T15:00:15")
    assert later.check() == [] and world.received() == []
    clock.set("2026-11-25T14:00:01")  # what falls due while it runs still fires
    assert len(later.check()) == 1 and len(world.received()) == 1


def test_a_schedule_made_after_its_time_today_does_not_fire_at_once(world):
    clock = Clock("2026-11-23T13:00")
    firer = world.firer(clock)
    clock.set("2026-11-23T15:00")
    assert firer.check() == []
    world.schedules.put(agent("a1", DAILY_AT_9))  # made at 10:00 New York, for 09:00
    clock.set("2026-11-23T15:00:15")
    assert firer.check() == [] and world.received() == []


def test_fire_times_missed_while_suspended_become_one_run(world):
    world.schedules.put(agent("a1", Schedule(Cadence.HOURLY, "UTC", minute=30)))
    clock = Clock("2026-11-23T08:00")
    firer = world.firer(clock)
    clock.set("2026-11-23T08:00:15")
    assert firer.check() == []
    clock.set("2026-11-23T13:00")  # asleep since 08:00:15: 08:30 to 12:30 passed
    assert [f.at for f in firer.check()] == [utc("2026-11-23T12:30")]
    assert len(world.received()) == 1


def test_the_schedulers_dst_rule_holds_a_spring_forward_gap_is_skipped(world):
    world.schedules.put(agent("a1", Schedule(Cadence.DAILY, "America/New_York", 2, 30)))
    clock = Clock("2026-03-08T06:00")  # 01:00 EST on the spring-forward day: 02:30 never comes
    firer = world.firer(clock)
    for at in ("2026-03-08T07:00", "2026-03-08T08:00", "2026-03-09T06:29"):
        clock.set(at)
        assert firer.check() == []
    clock.set("2026-03-09T06:30:01")  # 02:30 EDT the next day
    assert [f.at for f in firer.check()] == [utc("2026-03-09T06:30")]


def test_a_disabled_or_foreign_schedule_is_not_fired(world):
    scheduler = boto3.client("scheduler", region_name=REGION)
    world.schedules.put(agent("a1", Schedule(Cadence.HOURLY, "UTC", minute=0)))
    stored = scheduler.get_schedule(Name=schedule_name("acme", "a1"), GroupName=GROUP)
    scheduler.update_schedule(Name=stored["Name"], GroupName=GROUP, ScheduleExpression=stored["ScheduleExpression"],
                              FlexibleTimeWindow={"Mode": "OFF"}, Target=stored["Target"], State="DISABLED")
    scheduler.create_schedule(Name="someone-elses", GroupName=GROUP, ScheduleExpression="rate(5 minutes)",
                              FlexibleTimeWindow={"Mode": "OFF"}, Target=stored["Target"])
    clock = Clock("2026-11-23T09:59")
    firer = world.firer(clock)
    clock.set("2026-11-23T10:00:01")
    assert firer.check() == [] and world.received() == []
    assert any("someone-elses" in line for line in world.logged)


def test_the_runtime_fires_schedules_until_it_stops(world):
    world.schedules.put(agent("a1", Schedule(Cadence.HOURLY, "UTC", minute=0)))
    clock = Clock("2026-11-23T09:59:59")
    runtime = LocalRuntime(Chalice("test"), boto3.client("sqs", region_name=REGION), REGION)
    firer = world.firer(clock)
    clock.set("2026-11-23T10:00:01")
    runtime.fire_schedules(firer, interval_seconds=0.05)
    deadline = time.monotonic() + 10
    while not world.state.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    runtime.stop()
    assert [m["agent_id"] for m in world.received()] == ["a1"]
    clock.set("2026-11-23T11:00:01")
    time.sleep(0.2)  # stopped: no check runs any more
    assert world.received() == []
