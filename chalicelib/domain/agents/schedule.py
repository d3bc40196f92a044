"""An agent's schedule: its cadence fields checked as the API's table says, the EventBridge
Scheduler expression that fires it, and when it runs next, by the Scheduler's own rules.

EventBridge Scheduler evaluates a cron expression in the schedule's timezone: a local time that
does not exist (the spring-forward gap) is skipped that day, and one that happens twice (the
fall-back hour) fires once, at its first occurrence. `next_run_at` follows the same rules, so
the time we show is the time the Scheduler fires; hourly runs at the minute of local time (in a
half-hour zone such as Asia/Kolkata that is not the minute of UTC).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from chalicelib.domain.errors import FieldError, ValidationFailed

DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")  # day_of_week 0..6, as the Scheduler names them


class Cadence(StrEnum):
    MANUAL = "manual"
    HOURLY = "hourly"
    DAILY = "daily"
    WEEKDAYS = "weekdays"
    WEEKLY = "weekly"


NEEDS_HOUR = (Cadence.DAILY, Cadence.WEEKDAYS, Cadence.WEEKLY)


@dataclass(frozen=True)
class Schedule:
    cadence: Cadence
    timezone: str
    hour: int | None = None
    minute: int | None = None
    day_of_week: int | None = None  # 0 = Sunday

    @property
    def scheduled(self) -> bool:
        return self.cadence is not Cadence.MANUAL


@cache
def _zones() -> frozenset[str]:
    return frozenset(available_timezones())


def _int_in(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def check_schedule(cadence: Any, timezone: Any, hour: Any = None, minute: Any = None,
                   day_of_week: Any = None) -> Schedule:
    """The schedule, or a 422 naming every field that breaks the table's rules: `hour` 0-23 for
    daily, weekdays and weekly; `minute` 0-59 for every cadence but manual; `day_of_week` 0-6
    (0 = Sunday) for weekly; `timezone` an IANA name. A field a cadence does not use may be given
    (it is kept, and checked when present), so that switching cadence back keeps it."""
    errors: list[FieldError] = []
    try:
        kind = Cadence(cadence)
    except ValueError:
        errors.append(FieldError("cadence", f"must be one of {', '.join(c.value for c in Cadence)}"))
        kind = None
    if not (isinstance(timezone, str) and timezone in _zones()):
        errors.append(FieldError("timezone", "must be an IANA timezone name, such as America/New_York or UTC"))
    for name, value, low, high, required in (
            ("hour", hour, 0, 23, kind in NEEDS_HOUR),
            ("minute", minute, 0, 59, kind is not None and kind is not Cadence.MANUAL),
            ("day_of_week", day_of_week, 0, 6, kind is Cadence.WEEKLY)):
        if value is None:
            if required:
                errors.append(FieldError(name, f"is required for cadence {kind.value if kind else cadence}"))
        elif not _int_in(value, low, high):
            errors.append(FieldError(name, f"must be an integer from {low} to {high}"
                                     + (" (0 = Sunday)" if name == "day_of_week" else "")))
    if errors or kind is None:
        raise ValidationFailed(errors)
    return Schedule(kind, timezone, hour, minute, day_of_week)


def schedule_expression(schedule: Schedule) -> str | None:
    """The EventBridge Scheduler cron expression (evaluated in `schedule.timezone`); None for manual."""
    minute, hour = schedule.minute, schedule.hour
    match schedule.cadence:
        case Cadence.HOURLY:
            return f"cron({minute} * * * ? *)"
        case Cadence.DAILY:
            return f"cron({minute} {hour} * * ? *)"
        case Cadence.WEEKDAYS:
            return f"cron({minute} {hour} ? * MON-FRI *)"
        case Cadence.WEEKLY:
            assert schedule.day_of_week is not None
            return f"cron({minute} {hour} ? * {DAY_NAMES[schedule.day_of_week]} *)"
    return None


# The fields of the forms schedule_expression writes; parse_schedule_expression checks the rest.
_EXPRESSION = re.compile(r"cron\((\d{1,2}) (\d{1,2}|\*) [?*] \* ([A-Z?*-]+) \*\)")


def parse_schedule_expression(expression: str, timezone: str) -> Schedule:
    """The schedule `schedule_expression` wrote `expression` for (its cadence and only the fields
    that cadence uses); ValueError for any other expression, or a timezone not IANA's. The local
    stack reads schedules back from its embedded Scheduler with it."""
    if timezone not in _zones():
        raise ValueError(f"not an IANA timezone: {timezone!r}")
    match = _EXPRESSION.fullmatch(expression)
    if match is None:
        raise ValueError(f"not an agent's schedule expression: {expression!r}")
    minute_text, hour_text, day_text = match.groups()
    minute, hour = int(minute_text), None if hour_text == "*" else int(hour_text)
    if hour is None:
        schedule = Schedule(Cadence.HOURLY, timezone, minute=minute)
    elif day_text == "?":
        schedule = Schedule(Cadence.DAILY, timezone, hour, minute)
    elif day_text == "MON-FRI":
        schedule = Schedule(Cadence.WEEKDAYS, timezone, hour, minute)
    elif day_text in DAY_NAMES:
        schedule = Schedule(Cadence.WEEKLY, timezone, hour, minute, DAY_NAMES.index(day_text))
    else:
        raise ValueError(f"not an agent's schedule expression: {expression!r}")
    # Exactly the text schedule_expression writes, in range: no leading zeros, no `?` where a `*`
    # goes, no 24 o'clock. Anything else was not written by us, and is not guessed at.
    if minute > 59 or (hour is not None and hour > 23) or schedule_expression(schedule) != expression:
        raise ValueError(f"not an agent's schedule expression: {expression!r}")
    return schedule


def next_run_at(schedule: Schedule, after: datetime) -> datetime | None:
    """The first time (UTC) after `after` the schedule fires; None for manual."""
    if not schedule.scheduled:
        return None
    zone = ZoneInfo(schedule.timezone)
    for local in _local_times(schedule, after.astimezone(zone).replace(tzinfo=None)):
        fired = _fires_at(local, zone)
        if fired is not None and fired > after:
            return fired
    raise AssertionError(f"no run found for {schedule}")  # every cadence fires within 8 days


def _fires_at(local: datetime, zone: ZoneInfo) -> datetime | None:
    """When a wall-clock time fires in UTC: None in the spring-forward gap (it does not exist),
    the first occurrence when the fall-back hour repeats it."""
    first = local.replace(tzinfo=zone, fold=0)
    if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != local:
        return None
    return first.astimezone(UTC)


def _local_times(schedule: Schedule, start: datetime) -> Iterator[datetime]:
    """The schedule's wall-clock times in order, from a little before `start` (naive local time)."""
    minute = schedule.minute or 0
    if schedule.cadence is Cadence.HOURLY:
        first = start.replace(minute=minute, second=0, microsecond=0) - timedelta(hours=2)
        yield from (first + timedelta(hours=n) for n in range(24 * 3))
        return
    at = time(schedule.hour or 0, minute)
    for n in range(-1, 9):
        day = start.date() + timedelta(days=n)
        if _runs_on(schedule, day):
            yield datetime.combine(day, at)


def _runs_on(schedule: Schedule, day: date) -> bool:
    if schedule.cadence is Cadence.WEEKDAYS:
        return day.weekday() < 5
    if schedule.cadence is Cadence.WEEKLY:
        return day.isoweekday() % 7 == schedule.day_of_week
    return True
