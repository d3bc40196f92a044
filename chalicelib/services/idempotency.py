"""The service side of an Idempotency-Key on a request that creates queued work (POST /records/bulk,
POST /exports, the bulk actions' routes), once for all three: the key is bound to the id the new
work would take, unless it is bound already; the same key with another body is 409; with the same
body, the work it names is the answer (queued again while still pending: its first message may
have been lost). The API checks the header itself (api/idempotency)."""
from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Protocol, TypeVar

from chalicelib.domain.errors import Conflict

PENDING = "pending"  # the status of queued work not yet taken up: an ingestion job's, an export's, a bulk action's


class Queued(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def status(self) -> Enum: ...


Work = TypeVar("Work", bound=Queued)


def claim_id(environment: str, idempotency_key: str | None, digest: str, *, next_id: Callable[[], int],
             claim: Callable[[str, str, int, str], tuple[int, str]], find: Callable[[str, int], Work | None],
             send_again: Callable[[int], None]) -> tuple[int, Work | None]:
    """(the id the work takes, None) for new work: create it under that id; or (its id, the work)
    a repeat of the same key and body names, which is the answer. `next_id` takes a fresh id;
    `claim(environment, key, id, digest)` binds the key (the id and digest it is bound to);
    `find(environment, id)` reads the work; `send_again(id)` queues it again while it is pending."""
    work_id = next_id()
    if not idempotency_key:
        return work_id, None
    work_id, bound = claim(environment, idempotency_key, work_id, digest)
    if bound != digest:
        raise Conflict(f"Idempotency-Key '{idempotency_key}' was already used with a different body")
    existing = find(environment, work_id)
    if existing is not None and existing.status.value == PENDING:
        send_again(work_id)  # the first send may have been lost
    return work_id, existing
