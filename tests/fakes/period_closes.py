"""Period closes, as `adapters/dynamodb/period_closes.py` keeps them: the closes, and each
reconciliation's periods closed now, replaced only at the version they were read at."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from chalicelib.domain.errors import NotFound
from chalicelib.domain.period_closes import ClosedPeriod, ClosedPeriodsChanged, CloseStatus, PeriodClose
from tests.fakes._support import stored_time
from tests.fakes.records import FakeRecordStore


class FakePeriodCloseRepository:
    def __init__(self, store: FakeRecordStore | None = None) -> None:
        self.store = store or FakeRecordStore()  # where owed events' marks are kept (the outbox)
        self.closes: dict[tuple[str, int], PeriodClose] = {}
        self.closed: dict[tuple[str, int], tuple[list[ClosedPeriod], int]] = {}
        self.closing: dict[tuple[str, int], tuple[datetime, int]] = {}
        self.writers: dict[tuple[str, int], dict[str, datetime]] = {}
        self.held: dict[tuple[str, int], dict[int, datetime]] = {}
        self.held_chunks: dict[tuple[str, int], dict[tuple[int, int], datetime]] = {}

    def closed_periods(self, environment: str, reconciliation_ids: Iterable[int]) -> dict[int, list[ClosedPeriod]]:
        return {rid: list(self.closed.get((environment, rid), ([], 0))[0]) for rid in set(reconciliation_ids)}

    def closed_version(self, environment: str, reconciliation_id: int) -> tuple[list[ClosedPeriod], int]:
        closed, version = self.closed.get((environment, reconciliation_id), ([], 0))
        return list(closed), version

    def set_closed(self, environment: str, reconciliation_id: int, closed: list[ClosedPeriod], version: int,
                   pending_event: str | None = None) -> None:
        if self.closed.get((environment, reconciliation_id), ([], 0))[1] != version:
            raise ClosedPeriodsChanged()
        self.closed[(environment, reconciliation_id)] = (list(closed), version + 1)
        self.store.owe(environment, "closed_periods", (reconciliation_id,), pending_event)

    # The closing fence, as adapters/dynamodb/period_closes.py keeps it on the closed periods' item
    def enter_fence(self, environment: str, reconciliation_id: int, token: str, expires_at: datetime,
                    stale_before: datetime) -> list[ClosedPeriod] | None:
        since = self.closing.get((environment, reconciliation_id))
        if since is not None and since[0] >= stale_before:
            return None
        self.writers.setdefault((environment, reconciliation_id), {})[token] = expires_at
        return self.closed_version(environment, reconciliation_id)[0]

    def fence_up(self, environment: str, reconciliation_id: int, stale_before: datetime) -> bool:
        since = self.closing.get((environment, reconciliation_id))
        return since is not None and since[0] >= stale_before

    def leave_fence(self, environment: str, reconciliation_id: int, token: str) -> None:
        self.writers.get((environment, reconciliation_id), {}).pop(token, None)

    def mark_closing(self, environment: str, reconciliation_id: int, close_id: int, version: int,
                     now: datetime) -> None:
        if self.closed_version(environment, reconciliation_id)[1] != version:
            raise ClosedPeriodsChanged()
        self.closing[(environment, reconciliation_id)] = (now, close_id)
        writers = self.writers.get((environment, reconciliation_id), {})
        for token in sorted(t for t, end in writers.items() if end <= now)[:50]:  # expired: swept, as the adapter
            del writers[token]

    def clear_closing(self, environment: str, reconciliation_id: int, close_id: int) -> None:
        if self.closing.get((environment, reconciliation_id), (None, None))[1] == close_id:
            del self.closing[(environment, reconciliation_id)]

    def live_writers(self, environment: str, reconciliation_id: int, now: datetime) -> int:
        return sum(1 for end in self.writers.get((environment, reconciliation_id), {}).values() if end > now)

    def hold_match(self, environment: str, reconciliation_id: int, match_id: int, since: datetime) -> None:
        self.held.setdefault((environment, reconciliation_id), {})[match_id] = since

    def let_go_match(self, environment: str, reconciliation_id: int, match_id: int) -> None:
        self.held.get((environment, reconciliation_id), {}).pop(match_id, None)

    def held_matches(self, environment: str, reconciliation_id: int) -> list[int]:
        return sorted(self.held.get((environment, reconciliation_id), {}))

    def hold_run_chunk(self, environment: str, reconciliation_id: int, run_id: int, chunk: int,
                       since: datetime) -> None:
        self.held_chunks.setdefault((environment, reconciliation_id), {})[(run_id, chunk)] = since

    def let_go_run_chunk(self, environment: str, reconciliation_id: int, run_id: int, chunk: int) -> None:
        self.held_chunks.get((environment, reconciliation_id), {}).pop((run_id, chunk), None)

    def held_run_chunks(self, environment: str, reconciliation_id: int) -> list[tuple[int, int]]:
        return sorted(self.held_chunks.get((environment, reconciliation_id), {}))

    def add(self, close: PeriodClose) -> None:
        self.closes[(close.environment, close.id)] = replace(close, closed_at=stored_time(close.closed_at))

    def remove(self, close: PeriodClose) -> None:
        self.closes.pop((close.environment, close.id), None)

    def find(self, environment: str, close_id: int) -> PeriodClose | None:
        return self.closes.get((environment, close_id))

    def get(self, environment: str, close_id: int) -> PeriodClose:
        found = self.find(environment, close_id)
        if found is None:
            raise NotFound(f"period close {close_id} not found")
        return found

    def of_reconciliation(self, environment: str, reconciliation_id: int) -> list[PeriodClose]:
        return sorted((c for (env, _), c in self.closes.items()
                       if env == environment and c.reconciliation_id == reconciliation_id), key=lambda c: -c.id)

    def mark_reopened(self, close: PeriodClose) -> PeriodClose:
        stored = self.get(close.environment, close.id)
        if stored.status is CloseStatus.CLOSED:
            stored = replace(stored, status=CloseStatus.REOPENED, reopened_by=close.reopened_by,
                             reopened_at=stored_time(close.reopened_at), reopen_reason=close.reopen_reason)
            self.closes[(close.environment, close.id)] = stored
        return stored
