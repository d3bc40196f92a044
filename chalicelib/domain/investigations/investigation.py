"""An investigation: its statuses, the moves between them, and what it found. The
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

from chalicelib.domain.status_machine import StatusMachine


class InvestigationStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


INVESTIGATION_STATUSES = StatusMachine({  # completed and failed are finished
    InvestigationStatus.PENDING: {InvestigationStatus.RUNNING, InvestigationStatus.FAILED},
    InvestigationStatus.RUNNING: {InvestigationStatus.COMPLETED, InvestigationStatus.FAILED},
})


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
        return self.status in INVESTIGATION_STATUSES.finished
