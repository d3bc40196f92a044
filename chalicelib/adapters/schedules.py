"""Agents' EventBridge Scheduler schedules: one per scheduled agent, in the stage's schedule group,
sending `{environment, agent_id, trigger: "schedule", scheduled_time}` to the agent-run queue at
each fire time.

Every call is idempotent (an at-least-once retry of a put or a remove changes nothing), and a
put writes the whole schedule from the agent, so the schedule is what the agent that was put
says. Give it the agent as it is stored now: a put of an older copy would write that copy back.
"""
from __future__ import annotations

import hashlib
import json
from functools import cached_property
from typing import TypedDict

from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.schedule import schedule_expression

MAX_DESCRIPTION = 512  # the Scheduler's limit on a schedule's description
# A context attribute: the Scheduler writes the fire time in its place ("2026-11-23T14:00:00Z")
# each time it sends, so that the worker can tell a retry of one firing from the next firing.
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"


class StoredSchedule(TypedDict):
    name: str
    arn: str
    expression: str
    timezone: str
    state: str
    target_arn: str
    role_arn: str
    input: str  # the JSON text the Scheduler sends as the message body
    description: str


def schedule_name(environment: str, agent_id: str) -> str:
    """`agent-<id>-<12 hex digits of the environment>`: 55 characters for a UUID, within the
    Scheduler's 64 (names are [0-9a-zA-Z-_.]+). The environment is in the name, hashed (it may
    be 64 characters long itself), so that two environments never share a schedule."""
    digest = hashlib.blake2b(environment.encode(), digest_size=6).hexdigest()
    return f"agent-{agent_id}-{digest}"


def schedule_input(environment: str, agent_id: str) -> str:
    """The message a firing sends (services/agent_runs.handle_message reads it)."""
    return json.dumps({"environment": environment, "agent_id": agent_id, "trigger": "schedule",
                       "scheduled_time": SCHEDULED_TIME}, separators=(",", ":"))


def stored_schedule(response: dict) -> StoredSchedule:
    """What GetSchedule answered, as read back by tests and the local stack's firer."""
    target = response["Target"]
    return StoredSchedule(name=response["Name"], arn=response["Arn"], expression=response["ScheduleExpression"],
                          timezone=response.get("ScheduleExpressionTimezone") or "UTC",
                          state=response.get("State") or "ENABLED", target_arn=target["Arn"],
                          role_arn=target.get("RoleArn", ""), input=target.get("Input", ""),
                          description=response.get("Description") or "")


class AgentSchedules:
    def __init__(self, scheduler, sqs, group_name: str, role_arn: str, queue_name: str) -> None:
        self._scheduler = scheduler
        self._sqs = sqs
        self._group = group_name
        self._role_arn = role_arn
        self._queue_name = queue_name

    @cached_property
    def _queue_arn(self) -> str:
        url = self._sqs.get_queue_url(QueueName=self._queue_name)["QueueUrl"]
        return self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

    def put(self, agent: Agent) -> None:
        """The agent's schedule as the agent says: created or replaced when it is scheduled
        (active and not manual), deleted when it is not."""
        if not agent.scheduled:
            self.remove(agent.environment, agent.id)
            return
        expression = schedule_expression(agent.schedule)
        assert expression is not None  # a scheduled agent's cadence is not manual
        description = f'Agent "{agent.name}" ({agent.id}) of environment {agent.environment}'
        schedule = {
            "Name": schedule_name(agent.environment, agent.id), "GroupName": self._group,
            "Description": description[:MAX_DESCRIPTION],
            "ScheduleExpression": expression, "ScheduleExpressionTimezone": agent.schedule.timezone,
            "FlexibleTimeWindow": {"Mode": "OFF"}, "State": "ENABLED",
            "Target": {"Arn": self._queue_arn, "RoleArn": self._role_arn,
                       "Input": schedule_input(agent.environment, agent.id)},
        }
        # UpdateSchedule replaces every field, so an update is the whole schedule again. Most puts
        # find the schedule there; one created between our two calls is updated after all.
        exceptions = self._scheduler.exceptions
        try:
            self._scheduler.update_schedule(**schedule)
            return
        except exceptions.ResourceNotFoundException:
            pass
        try:
            self._scheduler.create_schedule(**schedule)
        except exceptions.ConflictException:
            self._scheduler.update_schedule(**schedule)

    def remove(self, environment: str, agent_id: str) -> None:
        """Delete the agent's schedule; one that is not there is already removed."""
        try:
            self._scheduler.delete_schedule(Name=schedule_name(environment, agent_id), GroupName=self._group)
        except self._scheduler.exceptions.ResourceNotFoundException:
            pass

    def read(self, environment: str, agent_id: str) -> StoredSchedule | None:
        """The stored schedule of the agent, or None when it has none."""
        try:
            response = self._scheduler.get_schedule(Name=schedule_name(environment, agent_id), GroupName=self._group)
        except self._scheduler.exceptions.ResourceNotFoundException:
            return None
        return stored_schedule(response)
