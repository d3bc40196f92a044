"""Reconciliations: which data streams each side pairs, and the rules about their sides and
about the usage items that keep a stream in use from being deleted."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from chalicelib.domain.errors import Conflict, FieldError, NotFound, ValidationFailed, shown

MAX_NAME = 200
MAX_STREAMS_PER_SIDE = 20
MAX_EXCEPTION_AFTER_DAYS = 365
DEFAULT_EXCEPTION_AFTER_DAYS = 3
SIDE_A, SIDE_B = "side_a_stream_keys", "side_b_stream_keys"
# A usage item whose reconciliation does not use its stream (a create or an edit that crashed
# part-way, or one still in flight) stops holding the stream after this long.
STALE_USAGE_AGE = timedelta(minutes=2)


class RunType(StrEnum):
    CONTINUOUS = "continuous"
    BATCH = "batch"


class ReconciliationRunning(Conflict):
    """The reconciliation has a pending or running run; it cannot be changed or deleted meanwhile."""


def change_refused(reconciliation_id: int, stored: Reconciliation | None) -> Conflict | NotFound:
    """Why a conditional change of the reconciliation was refused, from what is stored now (for
    the message only: the write's condition decided)."""
    if stored is None or stored.deleting:
        return NotFound(f"reconciliation {reconciliation_id} not found")
    if stored.current_run_id is not None:
        return ReconciliationRunning(
            f"reconciliation {reconciliation_id} has a run in progress (run {stored.current_run_id}); "
            "retry when it has finished")
    return Conflict(f"reconciliation {reconciliation_id} changed while it was being updated; retry")


@dataclass(frozen=True)
class Reconciliation:
    environment: str
    id: int
    name: str
    run_type: RunType
    side_a_stream_keys: tuple[str, ...]
    side_b_stream_keys: tuple[str, ...]
    exception_after_days: int
    created_at: datetime
    updated_at: datetime
    current_run_id: int | None = None  # set and cleared by the runs
    last_run_id: int | None = None
    # None: a refresh is due at the sweeper's next minute (requested after a person's match,
    # unmatch or confirm, or never refreshed). Every request raises the count, so a refresh
    # that read an older count leaves the request in place (see services/reconciliation_exceptions.refresh).
    exceptions_refreshed_at: datetime | None = None
    exceptions_refresh_requests: int = 0
    deleting: bool = False
    version: int = 1
    # Streams an edit took out whose follow-up (adoptions forgotten, the records this reconciliation
    # alone left partially reconciled reconciled: services/reconciliations.finish_leaving) is not
    # done yet: written with the edit, taken off once done, so a crash in between loses nothing.
    leaving_stream_keys: frozenset[str] = frozenset()

    @property
    def exceptions_refresh_pending(self) -> bool:
        return self.exceptions_refreshed_at is None

    @property
    def stream_keys(self) -> tuple[str, ...]:
        return self.side_a_stream_keys + self.side_b_stream_keys

    def uses(self, stream_key: str) -> bool:
        return stream_key in self.stream_keys

    def changed(self, now: datetime, *, name: str | None = None, run_type: RunType | None = None,
                side_a: Sequence[str] | None = None, side_b: Sequence[str] | None = None,
                exception_after_days: int | None = None) -> Reconciliation:
        """This reconciliation with a PATCH applied (None leaves a field unchanged), sides checked again."""
        new_a = self.side_a_stream_keys if side_a is None else tuple(side_a)
        new_b = self.side_b_stream_keys if side_b is None else tuple(side_b)
        check_sides(new_a, new_b, overlap_field=SIDE_A if side_b is None else SIDE_B)
        return replace(
            self, name=self.name if name is None else name, run_type=self.run_type if run_type is None else run_type,
            side_a_stream_keys=new_a, side_b_stream_keys=new_b,
            exception_after_days=self.exception_after_days if exception_after_days is None else exception_after_days,
            updated_at=now, version=self.version + 1,
        )


def check_sides(side_a: Sequence[str], side_b: Sequence[str], overlap_field: str = SIDE_B) -> None:
    """At least one stream a side, at most MAX_STREAMS_PER_SIDE, no stream twice, no stream on
    both sides (reported on `overlap_field`, the side the client changed)."""
    errors: list[FieldError] = []
    for field, stream_keys in ((SIDE_A, side_a), (SIDE_B, side_b)):
        if not stream_keys:
            errors.append(FieldError(field, "must name at least one data stream"))
        if len(stream_keys) > MAX_STREAMS_PER_SIDE:
            errors.append(FieldError(field, f"must name at most {MAX_STREAMS_PER_SIDE} data streams"))
        seen: set[str] = set()
        for i, key in enumerate(stream_keys):
            if key in seen:
                errors.append(FieldError(f"{field}[{i}]", f"'{shown(key)}' is named twice"))
            seen.add(key)
    if overlap_field == SIDE_A:
        checked, other, other_side = side_a, side_b, "B"
    else:
        checked, other, other_side = side_b, side_a, "A"
    shared = set(other)
    for i, key in enumerate(checked):
        if key in shared:
            errors.append(FieldError(f"{overlap_field}[{i}]",
                                     f"'{shown(key)}' is also on side {other_side}; the sides must not share a stream"))
    if errors:
        raise ValidationFailed(errors)


def missing_streams(side_a: Sequence[str], side_b: Sequence[str], existing: set[str]) -> None:
    """A field error for every key that names no data stream of the environment."""
    errors = [FieldError(f"{field}[{i}]", f"no data stream with key '{shown(key)}'")
              for field, stream_keys in ((SIDE_A, side_a), (SIDE_B, side_b))
              for i, key in enumerate(stream_keys) if key not in existing]
    if errors:
        raise ValidationFailed(errors)


@dataclass(frozen=True)
class StreamUser:
    """A reconciliation that holds a data stream (its name is None while its create is in flight)."""
    reconciliation_id: int
    name: str | None


def usage_holds_stream(reconciliation: Reconciliation | None, stream_key: str, written_at: datetime,
                       now: datetime) -> bool:
    """Whether a usage item still keeps its stream from being deleted.

    It does while its reconciliation uses the stream. A usage whose reconciliation is missing or
    does not use the stream is either in flight (a create or an edit writes usages first) or left
    by a crash; it holds only while younger than STALE_USAGE_AGE, so a crash never blocks a stream
    for ever. A reconciliation being deleted holds nothing.
    """
    if reconciliation is not None and reconciliation.deleting:
        return False
    if reconciliation is not None and reconciliation.uses(stream_key):
        return True
    return now - written_at < STALE_USAGE_AGE
