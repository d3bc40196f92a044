"""Bulk actions: one action of a person (or a machine) on many exceptions or proposed matches at
once, by ids or by a filter, run asynchronously with a result per item.

Each item goes through the same use case as its single-item route (services/bulk_actions.py), so
the status table, the conditional writes, the events and the audit entry of each item are that
route's. What the caller's role may not do is refused per item (`refusal`), with the role the
single-item route needs (api/route_roles.py).

Status table:

    pending -> processing -> completed
       |           |
       +-----------+--> failed

Items are worked a chunk at a time; a chunk's results are stored once (the first write wins) and
counted once (the chunk joins `done_chunks` in the same conditional write that adds its counts),
so a redelivered message re-runs at most the chunk it died in, whose items the single actions'
own conditional writes make no-ops (`skipped`: already so).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from chalicelib.domain.clock import optional_iso, utc_now
from chalicelib.domain.events import Event, make_event
from chalicelib.domain.status_machine import StatusMachine
from chalicelib.domain.users import Role

MAX_IDS = 1_000  # ids named in one request
MAX_FILTERED = 10_000  # items a filter may select; more is refused (422) before anything is done
CHUNK_ITEMS = 100  # items per chunk: one batch read and one results item each


class BulkTarget(StrEnum):
    EXCEPTIONS = "reconciliation_exception"
    MATCHES = "reconciliation_match"


class BulkActionKind(StrEnum):
    ASSIGN = "assign"
    STATUS = "status"
    COMMENT = "comment"
    CONFIRM = "confirm"
    REJECT = "reject"


ACTIONS_OF: dict[BulkTarget, tuple[BulkActionKind, ...]] = {
    BulkTarget.EXCEPTIONS: (BulkActionKind.ASSIGN, BulkActionKind.STATUS, BulkActionKind.COMMENT),
    BulkTarget.MATCHES: (BulkActionKind.CONFIRM, BulkActionKind.REJECT),
}

# The role each item needs: that of the single-item route doing the same (api/route_roles.py):
# PATCH/assignees/comments of an exception are a preparer's; confirm and DELETE of a match an approver's.
ROLE_NEEDED: dict[BulkActionKind, Role] = {
    BulkActionKind.ASSIGN: Role.PREPARER,
    BulkActionKind.STATUS: Role.PREPARER,
    BulkActionKind.COMMENT: Role.PREPARER,
    BulkActionKind.CONFIRM: Role.APPROVER,
    BulkActionKind.REJECT: Role.APPROVER,
}

# The audit action of each item: the single-item route's (api/audit_trail.py ROUTE_ACTIONS).
AUDIT_ACTION: dict[BulkActionKind, str] = {
    BulkActionKind.ASSIGN: "reconciliation_exception.assigned",
    BulkActionKind.STATUS: "reconciliation_exception.updated",
    BulkActionKind.COMMENT: "reconciliation_exception.commented",
    BulkActionKind.CONFIRM: "reconciliation_match.confirmed",
    BulkActionKind.REJECT: "reconciliation_match.deleted",
}

_VERB = {BulkActionKind.ASSIGN: "assigning an exception", BulkActionKind.STATUS: "changing an exception's status",
         BulkActionKind.COMMENT: "commenting on an exception", BulkActionKind.CONFIRM: "confirming a match",
         BulkActionKind.REJECT: "rejecting a match"}


def refusal(role: Role, action: BulkActionKind) -> str | None:
    """Why `role` may not do `action` to an item (the message of its failed result), or None."""
    needed = ROLE_NEEDED[action]
    if role.allows(needed):
        return None
    return f"forbidden: {_VERB[action]} needs the {needed.value} role or above; yours is {role.value}"


class BulkStatus(StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"


BULK_STATUSES = StatusMachine({  # completed and failed are finished
    BulkStatus.PENDING: {BulkStatus.PROCESSING, BulkStatus.COMPLETED, BulkStatus.FAILED},
    BulkStatus.PROCESSING: {BulkStatus.COMPLETED, BulkStatus.FAILED},
})


class ItemStatus(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"  # nothing to do: the item is already so (a retry of an applied item is one too)


@dataclass(frozen=True)
class ItemResult:
    index: int
    id: int
    status: ItemStatus
    error: str | None = None


@dataclass(frozen=True)
class ItemMark:
    """An item whose change began (its mark is written before the change): `result` once it ended.
    A mark with no result is an item whose change is under way: its `owner` (one delivery) may
    still be working it, so it is finished by another only once its lease lapsed (`lapsed`), and
    then by one delivery (the mark's owner is swapped conditionally). `owner` and `claimed_at` say
    who works it and since when; marks compare on what was done (index, id, result)."""
    index: int
    id: int
    result: ItemResult | None = None
    owner: str | None = field(default=None, compare=False)
    claimed_at: datetime | None = field(default=None, compare=False)

    def lapsed(self, now: datetime, lease: timedelta) -> bool:
        """No live worker may hold it: claimed more than `lease` ago (or never said when)."""
        return self.result is None and (self.claimed_at is None or now - self.claimed_at >= lease)


@dataclass(frozen=True)
class BulkAction:
    environment: str
    id: int
    target: BulkTarget
    action: BulkActionKind
    params: dict[str, Any]  # the action's own fields: assignee, status, comment body and author, mentions
    status: BulkStatus
    total_items: int
    created_at: datetime
    actor: str  # who asked: user:<id> or api_key:<id>; each item's audit entry and events name them
    role: Role  # the caller's role when asked; a user's is read again when the work starts
    user_id: int | None = None
    selection: dict[str, Any] = field(default_factory=dict)  # {"ids": n} or {"filter": {...}}: what was asked
    idempotency_key: str | None = None
    body_hash: str | None = None
    done_chunks: frozenset[int] = frozenset()
    succeeded_items: int = 0
    failed_items: int = 0
    skipped_items: int = 0
    first_comment_id: int | None = None  # a comment action's block of comment ids (one per item, fixed once)
    started_at: datetime | None = None
    completed_at: datetime | None = None
    error: str | None = None
    last_progress_at: datetime | None = None  # its start, each chunk counted, a restart claimed
    restarts: int = 0  # the sweeper's re-sends of its message (a lost start, a worker that died)

    @property
    def processed_items(self) -> int:
        return self.succeeded_items + self.failed_items + self.skipped_items

    @property
    def progress(self) -> int:
        if self.status is BulkStatus.COMPLETED or self.total_items == 0:
            return 100 if self.status is BulkStatus.COMPLETED else 0
        return min(100, self.processed_items * 100 // self.total_items)

    @property
    def finished(self) -> bool:
        return self.status in BULK_STATUSES.finished

    @property
    def chunk_count(self) -> int:
        return -(-self.total_items // CHUNK_ITEMS)

    def comment_id(self, index: int) -> int:
        """The id of the comment item `index` writes: the same on every retry, so a comment is made once."""
        if self.first_comment_id is None:
            raise ValueError(f"bulk action {self.id} has no comment ids reserved")
        return self.first_comment_id + index


def bulk_action_completed(action: BulkAction) -> Event:
    """`bulk_action.completed` when a bulk action ends, a failed one too (its status says which),
    with its counts; the per-item results are read from GET /v1/bulk_actions/{id}."""
    return make_event(action.environment, "bulk_action.completed", f"bulk action {action.id}",
                      action.completed_at or utc_now(), {
                          "id": action.id, "url": f"/v1/bulk_actions/{action.id}", "target": action.target.value,
                          "action": action.action.value, "status": action.status.value,
                          "total_items": action.total_items, "succeeded_items": action.succeeded_items,
                          "failed_items": action.failed_items, "skipped_items": action.skipped_items,
                          "error": action.error, "actor": action.actor,
                          "completed_at": optional_iso(action.completed_at)})


def chunk_range(chunk: int, total: int) -> range:
    return range(chunk * CHUNK_ITEMS, min(total, (chunk + 1) * CHUNK_ITEMS))


def counts(results: list[ItemResult]) -> tuple[int, int, int]:
    """(succeeded, failed, skipped) of a chunk's results."""
    return (sum(r.status is ItemStatus.SUCCEEDED for r in results),
            sum(r.status is ItemStatus.FAILED for r in results),
            sum(r.status is ItemStatus.SKIPPED for r in results))


def check_ids(ids: list[int]) -> list[str]:
    """Problems of a list of ids (as messages), none when it is fine: 1 to MAX_IDS, no repeats."""
    if not ids or len(ids) > MAX_IDS:
        return [f"must hold 1 to {MAX_IDS} ids"]
    seen: set[int] = set()
    for n, item_id in enumerate(ids):
        if item_id in seen:
            return [f"ids[{n}]: {item_id} is repeated"]
        seen.add(item_id)
    return []


def over_cap(found: int, what: str) -> str | None:
    """The message of a filter that selects too many items, or None."""
    if found <= MAX_FILTERED:
        return None
    return (f"the filter selects more than {MAX_FILTERED} {what}; a bulk action takes at most {MAX_FILTERED}: "
            "narrow the filter")
