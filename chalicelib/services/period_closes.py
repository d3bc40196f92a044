"""Period closes: closing a date range of a reconciliation (a sign-off listing what is still open
there), reopening it (an admin, with a reason), and the guards every change to a record calls:
nothing dated inside a closed period is matched, unmatched, deleted or imported.

The guards read one small item per reconciliation (its periods closed now), once per request,
per import chunk or per run step: never one read per record. A record is inside a period when its
`date` (the day the money moved, as stored) is; the date it was imported on plays no part.
"""
from __future__ import annotations

import base64
import binascii
import functools
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from chalicelib.domain.allocation import remaining_records
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import BadRequest, Conflict, NotFound, shown
from chalicelib.domain.events import EventOrigin
from chalicelib.domain.period_closes import (
    ClosedPeriod,
    ClosedPeriodsChanged,
    CloseStatus,
    OpenException,
    OpenRecordInPeriod,
    Period,
    PeriodClose,
    explained,
    holding,
    not_open_in,
    not_open_refusal,
    open_money,
    outside_closed,
    overlapping,
    period_event,
    refusal,
    refuse_dated,
)
from chalicelib.domain.reconciliation_exceptions import ACTIVE
from chalicelib.domain.records import ItemError, Record, RecordDraft
from chalicelib.observability import logger
from chalicelib.services import audit
from chalicelib.services.events import save_and_emit
from chalicelib.services.ports import Ports

if TYPE_CHECKING:
    from chalicelib.domain.matches import Match, MatchMember
    from chalicelib.domain.matching.frames import Frame
    from chalicelib.domain.reconciliations import Reconciliation
    from chalicelib.domain.runs import Run

ATTEMPTS = 3  # a close or reopen raced by another one reads the closed periods again, this often at most
# The closing fence: a writer's lease (longer than a request lives), how long a close waits for the
# writers registered before its fence to finish, and when a fence whose close died stops counting.
WRITER_LEASE = timedelta(seconds=60)
FENCE_WAIT = timedelta(seconds=10)
FENCE_STALE = timedelta(minutes=2)
FENCE_POLL_SECONDS = 0.05
P = ParamSpec("P")
R = TypeVar("R")

# A worker's unit of work (a run's persist chunk, an import chunk, a bulk action's item) registers
# for longer than it may run (the persist and import-chunk workers' 300 s timeout), and waits at a
# fence that is up (the close lands or gives up: FENCE_STALE at most) instead of failing.
WORKER_LEASE = timedelta(seconds=300)
WORKER_WAIT = FENCE_STALE + timedelta(seconds=10)
WORKER_POLL_SECONDS = 0.2


class FenceWriter:
    """A writer behind the closing fence: each reconciliation whose closed periods it reads (`closed`)
    registers it, in the same conditional write that reads them (a lease of `lease`); `leave` takes
    the registrations back. At a fence that is up, a request's writer is refused (409: the caller
    tries again), a worker's (`waits`) waits for the close to land or give up, then reads the
    periods as it left them. Registered once, a writer reads again what it read then: no close lands
    while it is registered (one that went up since waits for it)."""

    def __init__(self, ports: Ports, lease: timedelta = WRITER_LEASE, waits: bool = False) -> None:
        self._ports, self._lease, self._waits = ports, lease, waits
        self._token = uuid.uuid4().hex[:16]
        self._entered: dict[tuple[str, int], list[ClosedPeriod]] = {}

    def closed(self, environment: str, reconciliation_id: int) -> list[ClosedPeriod]:
        if (environment, reconciliation_id) in self._entered:
            return list(self._entered[(environment, reconciliation_id)])
        deadline = time.monotonic() + WORKER_WAIT.total_seconds()
        while True:
            now = utc_now()
            closed = self._ports.period_closes.enter_fence(environment, reconciliation_id, self._token,
                                                           now + self._lease, now - FENCE_STALE)
            if closed is not None:
                self._entered[(environment, reconciliation_id)] = closed
                return list(closed)
            if not self._waits or time.monotonic() > deadline:
                raise Conflict(f"a period of reconciliation {reconciliation_id} is being closed right now; nothing "
                               "was changed: try again in a moment")
            # Polled by reads until it comes down (the close landed or gave up), then entered again: a
            # refused entry is a write, and every waiting worker would send five a second to one item.
            while time.monotonic() <= deadline:
                time.sleep(WORKER_POLL_SECONDS)
                if not self._ports.period_closes.fence_up(environment, reconciliation_id, utc_now() - FENCE_STALE):
                    break

    def leave(self) -> None:
        for environment, reconciliation_id in sorted(self._entered):
            try:
                self._ports.period_closes.leave_fence(environment, reconciliation_id, self._token)
            except Exception:  # its lease runs out instead
                logger.exception("leaving the closing fence failed", extra={"reconciliation_id": reconciliation_id})
        self._entered.clear()


_fence: ContextVar[FenceWriter | None] = ContextVar("period_close_fence", default=None)


@contextmanager
def fencing(ports: Ports, lease: timedelta = WRITER_LEASE, waits: bool = False) -> Iterator[FenceWriter]:
    """Inside (a request: api/middleware.py; a worker's unit of work: `worker_unit`), each read of a
    reconciliation's closed periods by a guard (`closed_of`, `StreamClosures`) registers the caller
    as a writer behind the closing fence, in the same conditional write that reads them; the
    registrations go at the end. A close puts its fence up, then waits for the writers registered
    before it: a write that passed the guard lands before the close counts what is open, and none
    passes the guard once the fence is up."""
    writer = FenceWriter(ports, lease, waits)
    token = _fence.set(writer)
    try:
        yield writer
    finally:
        _fence.reset(token)
        writer.leave()


def worker_unit(unit: Callable[Concatenate[Ports, P], R]) -> Callable[Concatenate[Ports, P], R]:
    """A worker's unit of work (its first argument the ports) behind the closing fence: its guards
    register it for WORKER_LEASE and wait at a fence that is up (docs/period-close.md)."""

    def fenced(ports: Ports, *args: P.args, **kwargs: P.kwargs) -> R:
        with fencing(ports, WORKER_LEASE, waits=True):
            return unit(ports, *args, **kwargs)
    return functools.update_wrapper(fenced, unit)  # type: ignore[return-value]  # its name and doc for logs


# Closing and reopening ----------------------------------------------------------------------------

def close(ports: Ports, environment: str, reconciliation_id: int, period: Period, note: str,
          explanations: Mapping[int, str], actor: str) -> PeriodClose:
    """The close behind its fence (`fencing`): put up, the writers before it waited out, then the
    close itself (`_close`); the fence comes down after, whatever happened."""
    ports.reconciliations.get(environment, reconciliation_id)
    closed, version = ports.period_closes.closed_version(environment, reconciliation_id)
    _refuse_overlap(period, closed)
    close_id = ports.counters.next_id(environment, "period_close")
    for attempt in range(ATTEMPTS):
        try:
            ports.period_closes.mark_closing(environment, reconciliation_id, close_id, version, utc_now())
            break
        except ClosedPeriodsChanged:  # another close or reopen landed meanwhile
            if attempt == ATTEMPTS - 1:
                raise
            closed, version = ports.period_closes.closed_version(environment, reconciliation_id)
            _refuse_overlap(period, closed)
    try:
        _wait_for_writers(ports, environment, reconciliation_id)
        _refuse_changing_matches(ports, environment, reconciliation_id)
        # What the writers and the match changes that ended wrote reaches the indexes the close reads
        time.sleep(ports.limits.index_settle.total_seconds())
        return _close(ports, environment, reconciliation_id, period, note, explanations, actor, close_id)
    finally:
        ports.period_closes.clear_closing(environment, reconciliation_id, close_id)


def _wait_for_writers(ports: Ports, environment: str, reconciliation_id: int) -> None:
    deadline = time.monotonic() + FENCE_WAIT.total_seconds()
    while ports.period_closes.live_writers(environment, reconciliation_id, utc_now()):
        if time.monotonic() > deadline:
            raise Conflict(f"changes to reconciliation {reconciliation_id} are still being written; nothing was "
                           "closed: close the period again in a moment")
        time.sleep(FENCE_POLL_SECONDS)


def _refuse_changing_matches(ports: Ports, environment: str, reconciliation_id: int) -> None:
    """409 while a match of the reconciliation is still changing (`hold_match`: an unmatch or a manual
    match whose request stopped part-way; `hold_run_chunk`: a run's chunk whose persist stopped before
    committing its claims): its retry or its roll-back would open records the close counted as
    matched. The holds of changes that ended (or never began) go."""
    held_chunks = ports.period_closes.held_run_chunks(environment, reconciliation_id)
    runs = ports.runs.get_many(environment, {run_id for run_id, _ in held_chunks}) if held_chunks else {}
    for run_id, chunk in held_chunks:
        run = runs.get(run_id)
        if run is not None and not run.finished and chunk not in run.done_chunks:
            raise Conflict(f"run {run_id} of reconciliation {reconciliation_id} is still writing its matches (a "
                           "step stopped part-way; it is retried, or undone as the run ends, within minutes); "
                           "nothing was closed: close the period again in a few minutes")
        ports.period_closes.let_go_run_chunk(environment, reconciliation_id, run_id, chunk)
    for match_id in ports.period_closes.held_matches(environment, reconciliation_id):
        match = ports.matches.find(environment, match_id)
        if match is not None and match.unmatching and match.unmatched_at is None:
            raise Conflict(f"match {match_id} of reconciliation {reconciliation_id} is still being unmatched (a "
                           "request stopped part-way); nothing was closed: unmatch it again (DELETE "
                           f"/v1/reconciliation_matches/{match_id}) to finish it, then close the period")
        if match is not None and match.pending_since is not None:
            raise Conflict(f"match {match_id} of reconciliation {reconciliation_id} is still being made (a request "
                           "stopped part-way; it is rolled back within minutes); nothing was closed: close the "
                           "period again in a few minutes")
        ports.period_closes.let_go_match(environment, reconciliation_id, match_id)


def _close(ports: Ports, environment: str, reconciliation_id: int, period: Period, note: str,
           explanations: Mapping[int, str], actor: str, close_id: int) -> PeriodClose:
    """Close the period: 404 without the reconciliation, 409 when it overlaps a closed period of the
    reconciliation, 422 when an explanation names an exception not open in the period. The close
    lists the open exceptions holding records dated in the period, each with its explanation (its
    own, else the sign-off note), and the unmatched records there per currency."""
    reconciliation = ports.reconciliations.get(environment, reconciliation_id)
    closed, version = ports.period_closes.closed_version(environment, reconciliation_id)
    _refuse_overlap(period, closed)
    exceptions, unmatched = what_is_open(ports, environment, reconciliation.id, reconciliation.stream_keys, period,
                                         explanations, note)
    made = PeriodClose(environment=environment, id=close_id,
                       reconciliation_id=reconciliation_id, period=period, status=CloseStatus.CLOSED, note=note,
                       closed_by=actor, closed_at=utc_now(), unmatched=unmatched, open_exceptions=exceptions)
    ports.period_closes.add(made)  # shown nowhere until the closed periods take it (adapters/.../period_closes.py)
    for attempt in range(ATTEMPTS):
        try:
            _save_closed(ports, made, "closed", [*closed, made.in_force], version)
            break
        except ClosedPeriodsChanged:
            closed, version = ports.period_closes.closed_version(environment, reconciliation_id)
            try:
                _refuse_overlap(period, closed)
            except Conflict:
                ports.period_closes.remove(made)
                raise
            if attempt == ATTEMPTS - 1:
                ports.period_closes.remove(made)
                raise
    audit.note(period_start=period.start.isoformat(), period_end=period.end.isoformat(),
               open_exceptions=len(exceptions), unmatched_records=sum(m.count for m in unmatched))
    return made


def _save_closed(ports: Ports, close: PeriodClose, verb: str, closed: list[ClosedPeriod], version: int) -> None:
    """The reconciliation's closed periods become `closed` (if still at `version`), owing the event
    that tells of it: sent at least once, even if this process dies right after the write."""
    environment, reconciliation_id = close.environment, close.reconciliation_id
    save_and_emit(ports, environment, period_event(close, verb), EventOrigin.closed_periods(reconciliation_id),
                  lambda owed: ports.period_closes.set_closed(environment, reconciliation_id, closed, version, owed))


def _refuse_overlap(period: Period, closed: list[ClosedPeriod]) -> None:
    found = overlapping(period, closed)
    if found is not None:
        raise Conflict(f"the period {period.label} overlaps the closed period {found.period.label} of reconciliation "
                       f"{found.reconciliation_id} (period close {found.close_id}); periods of a reconciliation may "
                       "not overlap")


def reopen(ports: Ports, environment: str, reconciliation_id: int, close_id: int, reason: str,
           actor: str) -> PeriodClose:
    """Reopen a closed period (the route lets an admin alone): the reason, who and when on the close,
    then the period leaves the closed periods. 409 when it was reopened already; a reopen repeated
    after dying between the two finishes it."""
    for attempt in range(ATTEMPTS):
        closed, version = ports.period_closes.closed_version(environment, reconciliation_id)
        current = _visible(ports.period_closes.find(environment, close_id), close_id, reconciliation_id, closed)
        in_force = any(c.close_id == close_id for c in closed)
        if not in_force:
            raise Conflict(f"period close {close_id} was reopened already ({current.reopened_at}, by "
                           f"{current.reopened_by}); close the period again to close it")
        marked = current if current.status is CloseStatus.REOPENED else ports.period_closes.mark_reopened(
            replace(current, status=CloseStatus.REOPENED, reopened_by=actor, reopened_at=utc_now(),
                    reopen_reason=reason))
        try:
            _save_closed(ports, marked, "reopened", [c for c in closed if c.close_id != close_id], version)
        except ClosedPeriodsChanged:
            if attempt == ATTEMPTS - 1:
                raise
            continue
        audit.note(before={"status": CloseStatus.CLOSED.value}, after={"status": CloseStatus.REOPENED.value},
                   reason=shown(marked.reopen_reason, 200))
        return marked
    raise AssertionError("unreachable")


def get(ports: Ports, environment: str, reconciliation_id: int, close_id: int) -> PeriodClose:
    closed, _ = ports.period_closes.closed_version(environment, reconciliation_id)
    return _visible(ports.period_closes.find(environment, close_id), close_id, reconciliation_id, closed)


def list_page(ports: Ports, environment: str, reconciliation_id: int, limit: int,
              cursor: str | None) -> tuple[list[PeriodClose], str | None]:
    """The reconciliation's closes, newest first (a reopened one too: it says why)."""
    ports.reconciliations.get(environment, reconciliation_id)
    closed, _ = ports.period_closes.closed_version(environment, reconciliation_id)
    in_force = {c.close_id for c in closed}
    before = _cursor_value(cursor) if cursor else None
    shown_closes = [c for c in ports.period_closes.of_reconciliation(environment, reconciliation_id)
                    if (c.id in in_force or c.status is CloseStatus.REOPENED) and (before is None or c.id < before)]
    page = shown_closes[:limit]
    more = len(shown_closes) > limit
    return page, _cursor(page[-1].id) if more else None


def _visible(found: PeriodClose | None, close_id: int, reconciliation_id: int,
             closed: list[ClosedPeriod]) -> PeriodClose:
    """The close, if it belongs to the reconciliation and was ever in force (an attempt that lost a
    race, or died before the closed periods took it, is no close)."""
    if found is None or found.reconciliation_id != reconciliation_id or (
            found.status is CloseStatus.CLOSED and all(c.close_id != found.id for c in closed)):
        raise NotFound(f"period close {close_id} not found in reconciliation {reconciliation_id}")
    return found


def _cursor(after: int) -> str:
    return base64.urlsafe_b64encode(f"pclose:{after}".encode()).decode().rstrip("=")


def _cursor_value(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if text.startswith("pclose:"):
            return int(text.removeprefix("pclose:"))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        pass
    raise BadRequest("cursor does not belong to this list; pass the next_cursor of a previous page unchanged")


def what_is_open(ports: Ports, environment: str, reconciliation_id: int, stream_keys: Iterable[str], period: Period,
                 explanations: Mapping[int, str], note: str) -> tuple[tuple[OpenException, ...], tuple[Any, ...]]:
    """The open exceptions holding records dated in the period (with their explanations) and the
    unmatched records there per currency: every open record of the reconciliation's streams is
    read once (a close is rare; the exceptions are one per stream at most)."""
    in_period: list[OpenRecordInPeriod] = []
    partly = ports.claims.partly_paid(environment, reconciliation_id)  # counted by what they have left
    for stream_key in dict.fromkeys(stream_keys):
        adopted = ports.claims.is_adopted(environment, reconciliation_id, stream_key)
        open_records = remaining_records({r.id: r for r in ports.claims.open_records(
            environment, stream_key, reconciliation_id, adopted)}, partly)
        in_period += [OpenRecordInPeriod(r.amount, r.direction.value, r.currency, r.decimal_places,
                                         r.exception_in(reconciliation_id))
                      for r in open_records.values() if period.contains(r.date)]
    held: dict[int, list[OpenRecordInPeriod]] = {}
    for record in in_period:
        if record.exception_id is not None:
            held.setdefault(record.exception_id, []).append(record)
    found = ports.exceptions.find_many(environment, held)
    active = {eid: e for eid, e in found.items() if e.status in ACTIVE and e.reconciliation_id == reconciliation_id}
    strays = not_open_in(explanations, active)
    if strays:
        known = ports.exceptions.find_many(environment, strays)
        missing = [eid for eid in strays if eid not in known]
        if missing:
            raise NotFound(f"reconciliation exception {missing[0]} not found")
        raise Conflict(not_open_refusal(strays[0], period, active))
    exceptions = []
    for eid in sorted(active):
        exception = active[eid]
        text, by = explained(eid, explanations, note)
        exceptions.append(OpenException(id=eid, status=exception.status.value, title=exception.title,
                                        data_stream_key=exception.data_stream_key, record_count=len(held[eid]),
                                        money=open_money(held[eid]), explanation=text, explained_by=by))
    return tuple(exceptions), open_money(in_period)


# A match change that can stop part-way ----------------------------------------------------------------

def hold_match(ports: Ports, match: Match) -> None:
    """Hold a change of the match (an unmatch from before its mark, a manual match from before its
    begin) on its reconciliation's closing fence until `let_go_match`: a close refuses while it is
    under way, instead of counting records its retry (or roll-back) then opens inside the period."""
    ports.period_closes.hold_match(match.environment, match.reconciliation_id, match.id, utc_now())


def let_go_match(ports: Ports, match: Match) -> None:
    """The change ended (the match unmatched, made, or rolled back): the hold goes."""
    try:
        ports.period_closes.let_go_match(match.environment, match.reconciliation_id, match.id)
    except Exception:  # the next close finds the change ended and lets it go
        logger.exception("letting go of a match's hold failed", extra={"match_id": match.id})


def hold_run_chunk(ports: Ports, run: Run, chunk: int) -> None:
    """Hold a run's chunk, before its first claim, until `let_go_run_chunk`: a close refuses while
    the chunk has claims neither committed nor released (an attempt that died keeps them until its
    retry, or the run's end, settles them)."""
    ports.period_closes.hold_run_chunk(run.environment, run.reconciliation_id, run.id, chunk, utc_now())


def let_go_run_chunk(ports: Ports, run: Run, chunk: int) -> None:
    """Each match of the chunk is committed or released: the hold goes."""
    try:
        ports.period_closes.let_go_run_chunk(run.environment, run.reconciliation_id, run.id, chunk)
    except Exception:  # the next close finds the chunk counted (or the run ended) and lets it go
        logger.exception("letting go of a run chunk's hold failed", extra={"run_id": run.id, "chunk": chunk})


# The guards -------------------------------------------------------------------------------------------

def closed_of(ports: Ports, environment: str, reconciliation_id: int) -> list[ClosedPeriod]:
    """The reconciliation's periods closed now. Inside `fencing` (a request, a worker's unit), read
    by registering as a writer behind the closing fence: 409 while a close of the reconciliation is
    under way (a worker waits for it instead)."""
    writer = _fence.get()
    if writer is None:
        return ports.period_closes.closed_periods(environment, [reconciliation_id]).get(reconciliation_id, [])
    return writer.closed(environment, reconciliation_id)


def refuse_records(ports: Ports, environment: str, reconciliation_id: int, records: Iterable[Record]) -> None:
    """409 when a record is dated inside a closed period of the reconciliation (a manual match, an
    accepted investigation)."""
    refuse_dated({f"record {r.id}": r.date for r in records}, closed_of(ports, environment, reconciliation_id))


def refuse_match(ports: Ports, environment: str, match: Match, what: str) -> None:
    """409 when a record of the match is dated inside a closed period of its reconciliation
    (confirming or unmatching it); its records are read only when the reconciliation has one."""
    closed = closed_of(ports, environment, match.reconciliation_id)
    if not closed:
        return
    members: list[MatchMember] = ports.matches.members(environment, match.id)
    records = ports.records.find_many(environment, [m.record_id for m in members])
    for record in sorted(records.values(), key=lambda r: r.id):
        found = holding(record.date, closed)
        if found is not None:
            raise Conflict(f"{what} match {match.id} is refused: " + refusal(f"its record {record.id}", record.date,
                                                                              found))


def refuse_dropping_streams(ports: Ports, environment: str, current: Reconciliation, updated: Reconciliation) -> None:
    """409 when a PATCH takes a stream out of a reconciliation that has a closed period: the guards of
    records and balances see only the reconciliations using a stream now, so the stream's records
    dated inside (and the stream itself) could then be changed or deleted."""
    dropped = [k for k in current.stream_keys if not updated.uses(k)]
    if dropped:
        _refuse_closed(ports, environment, current.id, f"removing data stream '{dropped[0]}' from reconciliation "
                                                       f"{current.id}")


def refuse_deleting_reconciliation(ports: Ports, environment: str, reconciliation_id: int) -> None:
    """409 when the reconciliation has a closed period: deleting it would remove what the close covers.
    Fenced (the request is a writer until it ends: a close waits for the delete, then finds the
    reconciliation gone) once the reconciliation is found, hidden or not: for an id that is not
    there (another environment's, say) no fence item is written, and the delete's mark says 404."""
    if ports.reconciliations.find_including_deleting(environment, reconciliation_id) is None:
        return
    _refuse_closed(ports, environment, reconciliation_id, f"deleting reconciliation {reconciliation_id}")


def _refuse_closed(ports: Ports, environment: str, reconciliation_id: int, what: str) -> None:
    closed = sorted(closed_of(ports, environment, reconciliation_id), key=lambda c: c.period)
    if closed:
        first = closed[0]
        more = f" (and {len(closed) - 1} more)" if len(closed) > 1 else ""
        raise Conflict(f"{what} is refused: it has the closed period {first.period.label} (period close "
                       f"{first.close_id}){more}; an admin must reopen it first")


class StreamClosures:
    """The periods closed now of every reconciliation using some streams, read once (a request, an
    import chunk): `holding(stream, date)` then costs no read. Behind the closing fence (`fence`, or
    the request's or worker unit's `fencing`), each of those reconciliations registers the writer
    (a record delete, an import chunk); else one plain read of all (a statement's balance days)."""

    def __init__(self, ports: Ports, environment: str, stream_keys: Iterable[str],
                 fence: FenceWriter | None = None) -> None:
        users = {key: sorted({u.reconciliation_id for u in ports.reconciliations.users_of_stream(environment, key)})
                 for key in set(stream_keys)}
        ids = {rid for found in users.values() for rid in found}
        writer = fence or _fence.get()
        closed = ports.period_closes.closed_periods(environment, ids) if writer is None else \
            {rid: writer.closed(environment, rid) for rid in sorted(ids)}
        self._of_stream = {key: [c for rid in ids for c in closed.get(rid, [])] for key, ids in users.items()}

    def holding(self, stream_key: str, day: str) -> ClosedPeriod | None:
        periods = self._of_stream.get(stream_key)
        return holding(day, periods) if periods else None


def refuse_record_change(ports: Ports, environment: str, record: Record | None, what: str) -> None:
    """409 when the record is dated inside a closed period of a reconciliation of its stream (a DELETE;
    no record: nothing to refuse)."""
    if record is None:
        return
    found = StreamClosures(ports, environment, [record.data_stream_key]).holding(record.data_stream_key, record.date)
    if found is not None:
        raise Conflict(f"{what} is refused: " + refusal(f"record {record.id}", record.date, found))


def failing_closed(ports: Ports, environment: str, drafts: list[RecordDraft | ItemError],
                   fence: FenceWriter | None = None) -> list[RecordDraft | ItemError]:
    """An import chunk's validated items, those dated inside a closed period of a reconciliation of
    their stream turned into a failed item saying so (the rest of the chunk goes on). `fence`: the
    chunk's writer behind the closing fence, left once its records are written."""
    valid = [d for d in drafts if isinstance(d, RecordDraft)]
    if not valid:
        return list(drafts)
    closures = StreamClosures(ports, environment, {d.data_stream_key for d in valid}, fence)
    out: list[RecordDraft | ItemError] = []
    for draft in drafts:
        found = closures.holding(draft.data_stream_key, draft.date) if isinstance(draft, RecordDraft) else None
        if found is None or not isinstance(draft, RecordDraft):
            out.append(draft)
        else:
            out.append(ItemError("date", refusal(f"a record of data stream '{draft.data_stream_key}'", draft.date,
                                                  found)))
    return out


def open_outside_closed(ports: Ports, environment: str, reconciliation_id: int, frame: Frame) -> Frame:
    """A run's open records less those dated inside a closed period: the run leaves them open."""
    return outside_closed(frame, closed_of(ports, environment, reconciliation_id))


def planned_outside_closed(ports: Ports, environment: str, reconciliation_id: int,
                           batch: list[tuple[Match, list[MatchMember]]],
                           members: Frame) -> list[tuple[Match, list[MatchMember]]]:
    """A run's planned matches less those with a record dated inside a period closed since the run
    read its records (a close between its load and its persist): those records stay open."""
    closed = closed_of(ports, environment, reconciliation_id)
    if not closed or not batch:
        return batch
    if "date" in members.columns:
        dates = {rid: day.isoformat() for rid, day in members.select("record_id", "date").rows()}
    else:  # a plan made before plans kept dates
        found = ports.records.find_many(environment, [m.record_id for _, ms in batch for m in ms])
        dates = {rid: r.date for rid, r in found.items()}
    return [(match, ms) for match, ms in batch
            if not any(rid in dates and holding(dates[rid], closed) for rid in (m.record_id for m in ms))]
