"""The sweep of work that can stop moving: imports (services/ingestion/sweeper.py), runs
(reconciliation_runs.py), investigations (investigations.py), bulk actions (bulk_actions.py) and
exports (exports.py), the last two judged alike as queued work (`queued_verdict`). Each kind says what a stuck item
of its own needs (SweptKind); the loop, the held end and the claim of a restart are here, once."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, Literal, Protocol, TypeVar

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import NotFound
from chalicelib.domain.events import Event
from chalicelib.domain.executions import resume_label
from chalicelib.observability import logger
from chalicelib.services.events import deciding, finish_decisions
from chalicelib.services.ports import Ports


class Swept(Protocol):
    """An item the sweeper looks after: an ingestion job, a run, an investigation."""
    @property
    def environment(self) -> str: ...
    @property
    def id(self) -> int: ...
    @property
    def finished(self) -> bool: ...


class Restartable(Swept, Protocol):
    @property
    def restarts(self) -> int: ...


Item = TypeVar("Item", bound=Swept)

RESTART: Literal["restart"] = "restart"


@dataclass(frozen=True)
class GiveUp:
    """What the sweep decides for a stuck item no restart will help: it ends failed, saying why, and
    is counted under `outcome` (a run with a cancel requested ends cancelled, and counts as such)."""
    reason: str
    details: dict[str, object] | None = None
    outcome: str = "failed"


# What a stuck item needs: a restart, or an end (GiveUp); None: it moves, or may still wait.
Verdict = Literal["restart"] | GiveUp | None


@dataclass(frozen=True)
class SweptKind(Generic[Item]):
    """One kind of work, as the sweep sees it."""
    decisions: str  # the kind of the ends it decides on (events.deciding)
    noun: str  # in the log: "sweeping a job failed", with its `job_id`
    outcomes: tuple[str, ...]  # the counts `sweep` returns (with `errors`), all of them even when 0
    active: Callable[[Ports], Iterable[Item]]
    judge: Callable[[Ports, Item, datetime], Verdict]
    give_up: Callable[[Ports, Item, GiveUp], object]
    # An end the sweep decided on and whose sweeper died, finished (see events.finish_decisions).
    finish_if_ended: Callable[[Ports, str, int], Event | None]
    # Starts the item again: its outcome ("restarted", "started"), or None when not claimed.
    restart: Callable[[Ports, Item], str | None] | None = None


def sweep(ports: Ports, kind: SweptKind[Item], now: datetime | None = None) -> dict[str, int]:
    """Finish the ends dead sweepers left, then restart or end each active item that is stuck:
    one item's trouble stops no other: it is logged and counted in `errors` (the sweeper then fails,
    so that it shows in the function's metrics)."""
    now = now or utc_now()
    counts = dict.fromkeys((*kind.outcomes, "errors"), 0)
    finish_decisions(ports, kind.decisions, lambda environment, entity_id: kind.finish_if_ended(
        ports, environment, entity_id), now)
    for item in kind.active(ports):
        try:
            outcome = _sweep_one(ports, kind, item, now)
        except Exception:
            logger.exception(f"sweeping a {kind.noun} failed",
                             extra={"environment": item.environment, f"{kind.noun}_id": item.id})
            outcome = "errors"
        if outcome:
            counts[outcome] += 1
    return counts


def _sweep_one(ports: Ports, kind: SweptKind[Item], item: Item, now: datetime) -> str | None:
    verdict = kind.judge(ports, item, now)
    if verdict is None:
        return None
    if isinstance(verdict, GiveUp):
        with deciding(ports, kind.decisions, item.environment, item.id):
            kind.give_up(ports, item, verdict)
        return verdict.outcome
    assert kind.restart is not None, f"a {kind.noun} is never restarted"
    return kind.restart(ports, item)  # None: it moved meanwhile, or another sweeper restarted it


def ended(get: Callable[[str, int], Item], environment: str, entity_id: int) -> Item | None:
    """For a kind's `finish_if_ended`: the item as stored if it has ended; None when it has not,
    or is gone (`get` raised NotFound)."""
    try:
        item = get(environment, entity_id)
    except NotFound:
        return None
    return item if item.finished else None


# Queued work (bulk actions, exports: a message on the bulk queue, worked by a 15-minute function that
# notes its progress every few seconds or every chunk):
LOST_START_AFTER = timedelta(minutes=5)  # pending this long since created or re-sent: its message was lost
# Processing with no progress noted this long: no worker is on it (one lives 15 minutes at most). A
# worker killed before its last delivery would be delivered again only after the queue's visibility
# timeout (90 minutes); the sweeper re-sends it sooner; one killed on its last delivery, never.
STUCK_AFTER = timedelta(minutes=16)
MAX_QUEUED_RESTARTS = 3


def queued_verdict(*, pending: bool, created_at: datetime, last_progress_at: datetime | None, restarts: int,
                   now: datetime, max_restarts: int = MAX_QUEUED_RESTARTS) -> Verdict:
    """What a queued item not finished needs: None while it is younger than LOST_START_AFTER
    (pending) or moved within STUCK_AFTER (processing); else a restart (its message sent again),
    or, after `max_restarts` of them, its end, saying why."""
    seen = last_progress_at or created_at
    if now - seen <= (LOST_START_AFTER if pending else STUCK_AFTER):
        return None
    if restarts >= max_restarts:
        if pending:
            return GiveUp(f"never started: its message was sent {restarts + 1} times and no worker took it up")
        return GiveUp(f"no progress for over {STUCK_AFTER.total_seconds() / 60:g} minutes; {restarts} restarts "
                      "did not help (its worker stopped each time: a crash, or Lambda's 15-minute limit)",
                      {"restarts": restarts, "last_progress_at": str(last_progress_at)})
    return RESTART


def resend_queued(count_restart: Callable[..., bool], item: Restartable, *, noun: str, pending: bool,
                  send: Callable[[], None], progress: dict[str, object]) -> str | None:
    """The restart of a queued item `queued_verdict` asked for: one claimed restart, then its message
    sent again; "started" for a lost first message (`pending`), "restarted" for a worker that died,
    None when not claimed (it moved meanwhile, or another sweeper restarted it)."""
    if claim_restart(count_restart, item) is None:
        return None
    logger.warning(f"restarting a stuck {noun}", extra={
        "environment": item.environment, f"{noun}_id": item.id, "restarts": item.restarts + 1, **progress})
    send()
    return "started" if pending else "restarted"


def claim_restart(count_restart: Callable[..., bool], item: Restartable,
                  resumed_at: datetime | None = None) -> int | str | None:
    """Claim one restart of `item` through its store's `count_restart`; the attempt part of the
    name of its new execution, or None when not claimed (it moved meanwhile, or someone else
    restarted it). Counted against its restarts, unless it is a resume (`resumed_at`) after the
    process that ran it died, which says nothing of the item."""
    if not count_restart(item, counted=resumed_at is None):
        return None
    return item.restarts + 1 if resumed_at is None else resume_label(resumed_at)
