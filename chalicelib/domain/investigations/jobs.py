"""An investigation as a job: its statuses, the moves between them, and what it found. The
search itself is the engine in `domain/investigations/`.

    pending -> running -> completed
       |          |
       +----------+--> failed
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class InvestigationStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


ALLOWED_MOVES: dict[InvestigationStatus, frozenset[InvestigationStatus]] = {
    InvestigationStatus.PENDING: frozenset({InvestigationStatus.RUNNING, InvestigationStatus.FAILED}),
    InvestigationStatus.RUNNING: frozenset({InvestigationStatus.COMPLETED, InvestigationStatus.FAILED}),
    InvestigationStatus.COMPLETED: frozenset(),
    InvestigationStatus.FAILED: frozenset(),
}

FINISHED = frozenset({InvestigationStatus.COMPLETED, InvestigationStatus.FAILED})


def sources_of(target: InvestigationStatus) -> tuple[InvestigationStatus, ...]:
    return tuple(s for s, targets in ALLOWED_MOVES.items() if target in targets)


@dataclass(frozen=True)
class Investigation:
    environment: str
    id: int
    exception_id: int
    reconciliation_id: int
    status: InvestigationStatus
    created_at: datetime
    filter_params: dict[str, Any] = field(default_factory=dict)
    completed_at: datetime | None = None
    candidate_records_searched: int = 0
    suggested_record_ids: tuple[int, ...] = ()
    # The exception's records the suggestion answers (what an accept matches them with), and the
    # difference of that match when suggested (None: suggested before it was stated).
    target_record_ids: tuple[int, ...] = ()
    suggested_difference: int | None = None
    confidence_score: float | None = None
    recommendation_text: str | None = None
    error_message: str | None = None
    accepted_match_id: int | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED
