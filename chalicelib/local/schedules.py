"""EventBridge Scheduler, emulated for the local stack: the embedded AWS (moto) stores schedules
but never fires them, so this reads the group's schedules every few seconds and sends a schedule's
Target Input (its context attributes, such as the scheduled time, written in) to its target queue
when one of its fire times has passed, as the Scheduler would.

The rule (what `make run` does about time it was not running):
- only fire times that fall due while this firer runs are fired: its window starts when it is
  built, so a restart does not fire what was missed while the stack was down;
- each schedule fires at most once per check, at the latest fire time in the window: fire times
  missed while the process was suspended (a laptop asleep) become one run, not a burst;
- the last fire time of each schedule is kept in a JSON file under the data directory and no fire
  time at or before it is sent again, so neither a restart nor a clock set back fires twice.
A crash between a send and its record does not send it again: the next start's window begins
after it.
"""
from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from chalicelib.adapters.schedules import stored_schedule
from chalicelib.domain.agents.schedule import next_run_at, parse_schedule_expression

FIRED_FILE = "schedules-fired.json"
CHECK_SECONDS = 15.0


@dataclass(frozen=True)
class Fired:
    schedule: str  # its name
    at: datetime   # the fire time (UTC) it was sent for
    queue: str


def latest_fire_time(expression: str, timezone: str, after: datetime, until: datetime) -> datetime | None:
    """The last fire time in (after, until], by the Scheduler's own rules (next_run_at); None if
    there is none. ValueError for an expression that is not an agent's."""
    schedule = parse_schedule_expression(expression, timezone)
    latest = None
    at = next_run_at(schedule, after)
    while at is not None and at <= until:
        latest, at = at, next_run_at(schedule, at)
    return latest


def with_context(body: str, schedule_arn: str, due: datetime) -> str:
    """The Input with the Scheduler's context attributes written in, as it sends them."""
    for keyword, value in (("schedule-arn", schedule_arn), ("scheduled-time", f"{due:%Y-%m-%dT%H:%M:%SZ}"),
                           ("execution-id", uuid.uuid4().hex[:16]), ("attempt-number", "1")):
        body = body.replace(f"<aws.scheduler.{keyword}>", value)
    return body


class ScheduleFirer:
    def __init__(self, scheduler, sqs, group_name: str, state_path: Path,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC), log: Callable[[str], None] = print) -> None:
        self._scheduler = scheduler
        self._sqs = sqs
        self._group = group_name
        self._path = state_path
        self._now = now
        self._log = log
        self._since = now()  # what fell due before this firer existed is not fired
        self._fired = self._load()  # schedule name -> the last fire time sent
        self._checked: dict[str, datetime] = {}  # schedule name -> the time it was checked up to
        self._refused: set[tuple[str, str]] = set()  # (name, expression) already logged as not ours

    def check(self) -> list[Fired]:
        """Send every schedule whose fire time passed since it was last checked; what was sent.
        A schedule that fails (its send, say) is tried again at the next check, from where it was."""
        now = self._now()
        since, self._since = self._since, max(self._since, now)
        fired = []
        names = [s["Name"] for page in self._scheduler.get_paginator("list_schedules").paginate(GroupName=self._group)
                 for s in page["Schedules"]]
        for name in names:
            # One first seen now (just made) starts at the last check, not at the firer's start:
            # a schedule made at 10:00 for 09:00 does not fire at once.
            start = self._checked.setdefault(name, since)
            try:
                sent = self._fire(name, start, now)
            except Exception as error:
                self._log(f"schedule {name}: {error!r}; tried again at the next check")
                continue
            self._checked[name] = max(start, now)
            if sent:
                fired.append(sent)
        # A deleted schedule is forgotten: one of that name made again starts afresh.
        self._checked = {name: at for name, at in self._checked.items() if name in names}
        kept = {name: at for name, at in self._fired.items() if name in names}
        if fired or kept != self._fired:
            self._fired = kept
            self._save()
        return fired

    def _fire(self, name: str, start: datetime, now: datetime) -> Fired | None:
        try:
            stored = stored_schedule(self._scheduler.get_schedule(Name=name, GroupName=self._group))
        except self._scheduler.exceptions.ResourceNotFoundException:
            return None  # deleted since the listing
        if stored["state"] != "ENABLED":
            return None
        after = max(start, self._fired[name]) if name in self._fired else start
        try:
            due = latest_fire_time(stored["expression"], stored["timezone"], after, now)
        except ValueError as error:
            if (name, stored["expression"]) not in self._refused:
                self._refused.add((name, stored["expression"]))
                self._log(f"schedule {name}: not fired locally: {error}")
            return None
        if due is None:
            return None
        arn = stored["target_arn"]
        if not arn.startswith("arn:aws:sqs:"):
            self._log(f"schedule {name}: its target {arn} is not a queue; the local stack fires queues only")
            return None
        queue = arn.rsplit(":", 1)[-1]
        url = self._sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        self._sqs.send_message(QueueUrl=url, MessageBody=with_context(stored["input"], stored["arn"], due))
        self._fired[name] = due
        return Fired(name, due, queue)

    def run(self, stopping, interval_seconds: float = CHECK_SECONDS) -> None:
        """Check every `interval_seconds` until `stopping` (a threading.Event) is set."""
        while not stopping.wait(interval_seconds):
            try:
                for fired in self.check():
                    self._log(f"schedule {fired.schedule}: fired for {fired.at:%Y-%m-%d %H:%M}Z to {fired.queue}")
            except Exception as error:  # keep firing; the failure is logged and the next check retries
                self._log(f"schedules: {error!r}")

    def _load(self) -> dict[str, datetime]:
        try:
            saved = json.loads(self._path.read_text())
            return {name: datetime.fromisoformat(at) for name, at in saved.items()}
        except FileNotFoundError:
            return {}
        except (ValueError, AttributeError) as error:  # a damaged file: the window alone guards
            self._log(f"schedules: {self._path} unreadable ({error!r}); starting without it")
            return {}

    def _save(self) -> None:
        temporary = self._path.with_suffix(".tmp")
        temporary.write_text(json.dumps({name: at.isoformat() for name, at in sorted(self._fired.items())}, indent=1))
        os.replace(temporary, self._path)  # whole or not at all, should the process die mid-write
