"""An agent's schedule (domain/agents/schedule.py): the table's rules, the EventBridge Scheduler
expression, and next_run_at by the Scheduler's rules on both DST days, weekdays, weekly with
0 = Sunday, and a half-hour zone."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from chalicelib.domain.agents.schedule import Cadence, Schedule, check_schedule, next_run_at, schedule_expression
from chalicelib.domain.errors import ValidationFailed

NY = "America/New_York"  # 2026: summer time from Sunday 8 March 02:00 (to 03:00), to Sunday 1 November 02:00


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(("schedule", "after", "expected"), [
    # The spring-forward gap: 02:30 does not exist on 8 March, so that day is skipped.
    (Schedule(Cadence.DAILY, NY, 2, 30), "2026-03-07T12:00", "2026-03-09T06:30"),
    (Schedule(Cadence.DAILY, NY, 9, 0), "2026-03-07T15:00", "2026-03-08T13:00"),  # 09:00 EDT, an hour earlier in UTC
    (Schedule(Cadence.HOURLY, NY, minute=15), "2026-03-08T06:20", "2026-03-08T07:15"),  # 01:20 EST -> 03:15 EDT
    # The fall-back hour: 01:30 happens twice on 1 November and runs once, at the first.
    (Schedule(Cadence.DAILY, NY, 1, 30), "2026-11-01T04:00", "2026-11-01T05:30"),
    (Schedule(Cadence.DAILY, NY, 1, 30), "2026-11-01T05:30", "2026-11-02T06:30"),
    (Schedule(Cadence.HOURLY, NY, minute=15), "2026-11-01T05:20", "2026-11-01T07:15"),  # not 06:15 (01:15 again)
    (Schedule(Cadence.HOURLY, NY, minute=15), "2026-11-01T05:14", "2026-11-01T05:15"),
    # Weekdays: Friday evening goes to Monday.
    (Schedule(Cadence.WEEKDAYS, NY, 8, 0), "2026-11-20T14:00", "2026-11-23T13:00"),
    (Schedule(Cadence.WEEKDAYS, NY, 8, 0), "2026-11-23T12:59", "2026-11-23T13:00"),
    # Weekly: 0 is Sunday, 6 Saturday (2026-11-23 is a Monday).
    (Schedule(Cadence.WEEKLY, "UTC", 9, 0, 0), "2026-11-23T00:00", "2026-11-29T09:00"),
    (Schedule(Cadence.WEEKLY, "UTC", 9, 0, 6), "2026-11-23T00:00", "2026-11-28T09:00"),
    (Schedule(Cadence.WEEKLY, "UTC", 9, 0, 1), "2026-11-23T09:00", "2026-11-30T09:00"),  # just ran: a week on
    # A half-hour zone: hourly at minute 0 of Kolkata time is minute 30 of UTC.
    (Schedule(Cadence.HOURLY, "Asia/Kolkata", minute=0), "2026-11-23T00:10", "2026-11-23T00:30"),
    (Schedule(Cadence.DAILY, "Asia/Kolkata", 9, 0), "2026-11-23T00:00", "2026-11-23T03:30"),
    (Schedule(Cadence.DAILY, "Asia/Kolkata", 9, 0), "2026-11-23T03:30", "2026-11-24T03:30"),
])
def test_next_run_at_follows_the_schedulers_rules(schedule, after, expected):
    assert next_run_at(schedule, utc(after)) == utc(expected)


def test_a_manual_agent_never_runs_by_itself():
    assert next_run_at(Schedule(Cadence.MANUAL, NY), utc("2026-11-23T00:00")) is None
    assert schedule_expression(Schedule(Cadence.MANUAL, NY)) is None


@pytest.mark.parametrize(("schedule", "expression"), [
    (Schedule(Cadence.HOURLY, NY, minute=5), "cron(5 * * * ? *)"),
    (Schedule(Cadence.DAILY, NY, 8, 0), "cron(0 8 * * ? *)"),
    (Schedule(Cadence.WEEKDAYS, NY, 8, 30), "cron(30 8 ? * MON-FRI *)"),
    (Schedule(Cadence.WEEKLY, NY, 17, 45, 0), "cron(45 17 ? * SUN *)"),
    (Schedule(Cadence.WEEKLY, NY, 17, 45, 6), "cron(45 17 ? * SAT *)"),
])
def test_the_scheduler_expression_of_each_cadence(schedule, expression):
    assert schedule_expression(schedule) == expression


def test_a_valid_schedule_is_kept_with_the_fields_given():
    assert check_schedule("weekly", NY, 8, 0, 0) == Schedule(Cadence.WEEKLY, NY, 8, 0, 0)
    assert check_schedule("manual", "UTC") == Schedule(Cadence.MANUAL, "UTC")
    assert check_schedule("hourly", "Asia/Kolkata", minute=59) == Schedule(Cadence.HOURLY, "Asia/Kolkata", None, 59)


@pytest.mark.parametrize(("fields", "errors"), [
    ({"cadence": "daily", "timezone": NY, "minute": 0}, {"hour": "is required for cadence daily"}),
    ({"cadence": "weekly", "timezone": NY, "hour": 8, "minute": 0},
     {"day_of_week": "is required for cadence weekly"}),
    ({"cadence": "hourly", "timezone": NY}, {"minute": "is required for cadence hourly"}),
    ({"cadence": "daily", "timezone": NY, "hour": 24, "minute": 60},
     {"hour": "must be an integer from 0 to 23", "minute": "must be an integer from 0 to 59"}),
    ({"cadence": "weekly", "timezone": NY, "hour": 8, "minute": 0, "day_of_week": 7},
     {"day_of_week": "must be an integer from 0 to 6 (0 = Sunday)"}),
    ({"cadence": "daily", "timezone": NY, "hour": True, "minute": "5"},
     {"hour": "must be an integer from 0 to 23", "minute": "must be an integer from 0 to 59"}),
    ({"cadence": "monthly", "timezone": "Mars/Olympus"},
     {"cadence": "must be one of manual, hourly, daily, weekdays, weekly",
      "timezone": "must be an IANA timezone name, such as America/New_York or UTC"}),
    ({"cadence": "manual", "timezone": "../../etc/passwd"},
     {"timezone": "must be an IANA timezone name, such as America/New_York or UTC"}),
])
def test_a_schedule_that_breaks_the_table_is_422_naming_each_field(fields, errors):
    with pytest.raises(ValidationFailed) as refused:
        check_schedule(**fields)
    assert {e.field: e.message for e in refused.value.errors} == errors
