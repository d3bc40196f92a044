"""parse_schedule_expression (domain/agents/schedule.py): the inverse of schedule_expression for
exactly the expressions it writes, and a ValueError for anything else."""
from __future__ import annotations

import pytest

from chalicelib.domain.agents.schedule import (
    Cadence,
    Schedule,
    parse_schedule_expression,
    schedule_expression,
)


def used_fields(schedule: Schedule) -> Schedule:
    """The schedule with only the fields its cadence uses (the others are kept on the agent, not
    written into the expression)."""
    return Schedule(schedule.cadence, schedule.timezone,
                    schedule.hour if schedule.cadence is not Cadence.HOURLY else None, schedule.minute,
                    schedule.day_of_week if schedule.cadence is Cadence.WEEKLY else None)


SCHEDULES = [
    Schedule(Cadence.HOURLY, "UTC", minute=0),
    Schedule(Cadence.HOURLY, "Asia/Kolkata", minute=59),
    Schedule(Cadence.HOURLY, "UTC", hour=7, minute=5, day_of_week=3),  # unused fields kept on the agent
    Schedule(Cadence.DAILY, "America/New_York", 0, 0),
    Schedule(Cadence.DAILY, "Europe/Paris", 23, 45),
    Schedule(Cadence.WEEKDAYS, "America/New_York", 8, 30),
    Schedule(Cadence.WEEKDAYS, "UTC", 17, 0, day_of_week=2),
    *(Schedule(Cadence.WEEKLY, "Australia/Sydney", 9, 15, day) for day in range(7)),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"{s.cadence}-{s.timezone}-{s.hour}-{s.minute}-"
                                                           f"{s.day_of_week}")
def test_every_cadence_round_trips(schedule):
    expression = schedule_expression(schedule)
    assert expression is not None
    parsed = parse_schedule_expression(expression, schedule.timezone)
    assert parsed == used_fields(schedule)
    assert schedule_expression(parsed) == expression


def test_the_day_names_are_the_schedulers_with_0_for_sunday():
    assert parse_schedule_expression("cron(0 9 ? * SUN *)", "UTC").day_of_week == 0
    assert parse_schedule_expression("cron(0 9 ? * SAT *)", "UTC").day_of_week == 6
    assert parse_schedule_expression("cron(0 9 ? * MON-FRI *)", "UTC").cadence is Cadence.WEEKDAYS


@pytest.mark.parametrize("expression", [
    "cron(5 * * * ? *",             # cut short
    "rate(1 hour)",
    "at(2026-11-01T09:00:00)",
    "cron(05 9 * * ? *)",           # a leading zero: not what schedule_expression writes
    "cron(0 09 * * ? *)",
    "cron(60 9 * * ? *)",           # out of range
    "cron(0 24 * * ? *)",
    "cron(0 9 ? * ? *)",            # `?` in both day fields
    "cron(0 9 * * MON-FRI *)",      # `*` where MON-FRI needs `?`
    "cron(0 9 ? * TUE-THU *)",      # a day range we never write
    "cron(0 9 ? * MON,WED *)",
    "cron(0 9 ? * 2 *)",            # a day by number
    "cron(5 * ? * MON-FRI *)",      # hourly on weekdays: not a cadence
    "cron(0 9 1 * ? *)",            # a day of the month
    "cron(0 9 * * ? 2026)",         # a year
    "cron(0/15 * * * ? *)",
    " cron(0 9 * * ? *)",
    "cron(0 9 * * ? *) ",
    "",
])
def test_anything_else_is_refused(expression):
    with pytest.raises(ValueError):
        parse_schedule_expression(expression, "UTC")


def test_a_timezone_not_ianas_is_refused():
    with pytest.raises(ValueError, match="timezone"):
        parse_schedule_expression("cron(0 9 * * ? *)", "Mars/Olympus_Mons")
