"""Reconciliation exceptions, as `adapters/dynamodb/reconciliation_exceptions.py` keeps them: the
exception (its totals and descriptions on it), its records and comments, the guard naming the one
active exception of a reconciliation and stream, the refresh lease, and the holds an exception
writes on record items (`exception_holds` on the rows of a FakeRecordStore, shared with the records
and matches fakes as the adapters share one table).

What the adapter does, the fake does too, including the less obvious:
- `open_new` drops the assignees (the item is written with none) and returns the exception it was
  given (not read back); it takes the guard before it writes the exception, so an id already used
  fails with ConditionFailed with the guard taken.
- `save` writes title, description, status, the three timestamps, assignees and version, only over
  the version before it (Conflict otherwise, a missing exception too); totals and decimal places
  change only through `set_totals` and `rescale`. Whether it closes or reopens is told by
  `previous`, not by what is stored.
- The description read back is the default one (`set_totals`) until `mark_custom_description`,
  then the one `save` wrote.
- `set_totals`, `mark_custom_description` and `rescale` on a missing exception leave an item that
  `get` cannot read (KeyError), as an unconditional DynamoDB update does.
- `record_page` filters as the adapter's FilterExpression does: an age bucket is a range of record
  dates ending today, so a record dated after today is in no bucket (RecordFilter.admits puts it
  in lt_7d). Its cursors are the adapter's (the record item's key). The adapter reads at most
  2,000 records of a partition per page when a filter drops most of them; the fake reads them all.
- `hold_together` holds every record `hold_record` would: the adapter's transactions can leave
  holdable ones out (a conflict on AWS), for `hold_record`; the fake never does.
- Writing the same record twice in one batch of 25 fails as BatchWriteItem does (ValidationException),
  an amount that is a float as boto3's serializer does (TypeError, before anything is written).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.reconciliation_exceptions import STALE_GUARD_AGE
from chalicelib.adapters.dynamodb.table import BATCH_WRITE_LIMIT
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.reconciliation_exceptions import (
    ACTIVE,
    Assignee,
    ExceptionComment,
    ExceptionRecord,
    ExceptionSummary,
    ReconciliationException,
    RecordFilter,
)
from tests.fakes._support import ConditionFailed, decode_cursor, encode_cursor, stored_time
from tests.fakes.counters import FakeCounters
from tests.fakes.records import FakeRecordStore

CURSOR_KEY = ("pk", "sk")  # the adapter's cursor is the last record item's table key


@dataclass
class _Row:
    exception: ReconciliationException | None  # as stored (`description`: what save wrote); None: no readable item
    auto_description: str | None = None
    custom_description: bool = False


@dataclass(frozen=True)
class _Guard:
    exception_id: int
    created_at: datetime


@dataclass(frozen=True)
class _Lease:
    taken_at: str  # ISO text, compared as the table compares it
    until: str


class FakeExceptionRepository:
    def __init__(self, counters: FakeCounters | None = None, store: FakeRecordStore | None = None,
                 in_transactions: bool = True) -> None:
        self._counters = counters or FakeCounters()
        self.in_transactions = in_transactions
        self.store = store or FakeRecordStore()  # the record items, where the holds are written
        self.rows: dict[tuple[str, int], _Row] = {}
        self.exception_records: dict[tuple[str, int], dict[int, ExceptionRecord]] = {}
        self.exception_comments: dict[tuple[str, int], dict[int, ExceptionComment]] = {}
        self.guards: dict[tuple[str, int, str], _Guard] = {}  # (environment, reconciliation, stream key)
        self.leases: dict[tuple[str, int], _Lease] = {}

    def next_id(self, environment: str, entity: str = "exception") -> int:
        return self._counters.next_id(environment, entity)

    # The exception ---------------------------------------------------------------------------

    def get(self, environment: str, exception_id: int) -> ReconciliationException:
        found = self._find(environment, exception_id)
        if found is None:
            raise NotFound(f"reconciliation exception {exception_id} not found")
        return found

    def find_many(self, environment: str, exception_ids: Iterable[int]) -> dict[int, ReconciliationException]:
        found = (self._find(environment, i) for i in set(exception_ids))
        return {e.id: e for e in found if e is not None}

    def list_page(self, environment: str, admits: Callable[[ExceptionSummary], bool], offset: int,
                  limit: int) -> tuple[list[ReconciliationException], bool]:
        """Newest first, by offset, of the exceptions whose summary `admits` takes."""
        page, total = self.queue_page(environment, admits, lambda s: -s.id, offset, limit)
        return page, total > offset + limit

    def summaries(self, environment: str) -> list[ExceptionSummary]:
        found = [ExceptionSummary(id=e.id, reconciliation_id=e.reconciliation_id, status=e.status,
                                  data_stream_key=e.data_stream_key, assignees=e.assignees,
                                  decimal_places=e.decimal_places, totals=e.totals, currency=e.currency,
                                  opened_at=e.opened_at, closed_at=e.closed_at)
                 for (env, _), row in self.rows.items() if env == environment and (e := row.exception)]
        return sorted(found, key=lambda s: -s.id)

    def queue_page(self, environment: str, admits: Callable[[ExceptionSummary], bool] | None,
                   key: Callable[[ExceptionSummary], Any] | None, offset: int, limit: int,
                   equal: dict[str, Any] | None = None) -> tuple[list[ReconciliationException], int]:
        summaries = self.summaries(environment)
        kept = (s for s in summaries if all(getattr(s, name) == value for name, value in (equal or {}).items())
                and (admits is None or admits(s)))
        wanted = [s.id for s in sorted(kept, key=key or (lambda s: -s.id))]
        return [self.get(environment, i) for i in wanted[offset:offset + limit]], len(wanted)

    def guarded_stream_keys(self, environment: str, reconciliation_id: int) -> list[str]:
        return sorted(key for env, rid, key in self.guards if (env, rid) == (environment, reconciliation_id))

    def find_active(self, environment: str, reconciliation_id: int, stream_key: str) -> ReconciliationException | None:
        guard = self.guards.get((environment, reconciliation_id, stream_key))
        if guard is None:
            return None
        exception = self._find(environment, guard.exception_id)
        return exception if exception is not None and exception.active else None

    def open_new(self, exception: ReconciliationException) -> ReconciliationException | None:
        """Take the (reconciliation, stream) guard, then write the exception; None when another
        active exception holds the guard."""
        guard_key = (exception.environment, exception.reconciliation_id, exception.data_stream_key)
        existing = self.guards.get(guard_key)
        if existing is not None and not self._guard_is_stale(exception.environment, existing):
            return None
        self.guards[guard_key] = _Guard(exception.id, stored_time(utc_now()))
        if (exception.environment, exception.id) in self.rows:
            raise ConditionFailed()  # the adapter's put_new lets it through
        self.rows[(exception.environment, exception.id)] = _Row(replace(
            exception, created_at=stored_time(exception.created_at), updated_at=stored_time(exception.updated_at),
            opened_at=stored_time(exception.opened_at),
            closed_at=stored_time(exception.closed_at) if exception.closed_at else None,
            assignees=(), totals=_stored(exception.totals) if exception.totals else {}))
        return exception

    def _guard_is_stale(self, environment: str, guard: _Guard) -> bool:
        row = self.rows.get((environment, guard.exception_id))
        if row is None:
            return utc_now() - guard.created_at > STALE_GUARD_AGE
        if row.exception is None:
            raise KeyError("status")  # an item without the exception's attributes
        return row.exception.status not in ACTIVE

    def save(self, updated: ReconciliationException, previous: ReconciliationException,
             pending_event: str | None = None) -> None:
        """Write a change over the version before it; a close frees the stream's guard, a reopen takes
        it back (Conflict while another exception is active)."""
        reopening = updated.active and not previous.active
        if reopening:
            holder = self.open_guard_for(updated)
            if holder is not None:
                raise Conflict(f"exception {holder} is already open for this reconciliation and data stream; "
                               "reopen refused")
        row = self.rows.get((updated.environment, updated.id))
        if row is None or row.exception is None or row.exception.version != updated.version - 1:
            if reopening:
                self._release_guard(updated)
            raise Conflict(f"reconciliation exception {updated.id} changed meanwhile; retry")
        row.exception = replace(
            row.exception, title=updated.title, description=updated.description, status=updated.status,
            updated_at=stored_time(updated.updated_at), opened_at=stored_time(updated.opened_at),
            closed_at=stored_time(updated.closed_at) if updated.closed_at else None,
            assignees=tuple(Assignee(a.id, a.idp_user_id, a.user_id) for a in updated.assignees), version=updated.version)
        self.store.owe(updated.environment, "exception", (updated.id,), pending_event)
        if previous.active and not updated.active:
            self._release_guard(updated)

    def open_guard_for(self, exception: ReconciliationException) -> int | None:
        """Take the stream's guard for a reopened exception: None when taken, else the id of the
        exception that holds it."""
        guard_key = (exception.environment, exception.reconciliation_id, exception.data_stream_key)
        existing = self.guards.get(guard_key)
        if existing is None or existing.exception_id == exception.id or \
                self._guard_is_stale(exception.environment, existing):
            self.guards[guard_key] = _Guard(exception.id, stored_time(utc_now()))
            return None
        return existing.exception_id

    def _release_guard(self, exception: ReconciliationException) -> None:
        guard_key = (exception.environment, exception.reconciliation_id, exception.data_stream_key)
        guard = self.guards.get(guard_key)
        if guard is not None and guard.exception_id == exception.id:
            del self.guards[guard_key]

    def set_totals(self, exception: ReconciliationException, totals: dict[str, Any], description: str | None,
                   currency: str | None = None) -> None:
        row = self._row_to_update(exception)
        stored = _stored(totals)
        if row.exception is not None:
            row.exception = replace(row.exception, totals=stored, updated_at=stored_time(utc_now()), currency=currency)
        if description is not None:
            row.auto_description = description

    def mark_custom_description(self, exception: ReconciliationException) -> None:
        self._row_to_update(exception).custom_description = True

    # Its records ------------------------------------------------------------------------------

    def records(self, exception: ReconciliationException) -> list[ExceptionRecord]:
        kept = self.exception_records.get((exception.environment, exception.id), {})
        return [kept[i] for i in sorted(kept)]

    def record_page(self, exception: ReconciliationException, record_filter: RecordFilter, today: date, limit: int,
                    cursor: str | None) -> tuple[list[int], str | None]:
        """A page of the exception's record ids, newest first, filtered as the adapter's
        FilterExpression filters; a cursor only when another admitted record follows."""
        listing = keys.reconciliation_exception(exception.environment, exception.id)["pk"]
        admitted = _admits(record_filter, today)
        entries = sorted(((keys.exception_record(exception.environment, exception.id, r.record_id)["sk"], r.record_id)
                          for r in self.records(exception) if admitted(r)), reverse=True)
        if cursor:
            after = decode_cursor(cursor, listing, CURSOR_KEY)["sk"]
            entries = [e for e in entries if e[0] < after]
        if len(entries) <= limit:
            return [record_id for _, record_id in entries], None
        page = entries[:limit]
        return [record_id for _, record_id in page], encode_cursor(listing, page[-1][0], CURSOR_KEY)

    def add_records(self, exception: ReconciliationException, records: Iterable[ExceptionRecord]) -> None:
        records = list(records)
        for record in records:
            _stored(record.amount)
        kept = self.exception_records.setdefault((exception.environment, exception.id), {})
        for start in range(0, len(records), BATCH_WRITE_LIMIT):
            batch = records[start:start + BATCH_WRITE_LIMIT]
            _refuse_duplicates([r.record_id for r in batch])
            kept.update({r.record_id: r for r in batch})

    def remove_records(self, exception: ReconciliationException, record_ids: Iterable[int]) -> None:
        record_ids = list(record_ids)
        kept = self.exception_records.get((exception.environment, exception.id), {})
        for start in range(0, len(record_ids), BATCH_WRITE_LIMIT):
            batch = record_ids[start:start + BATCH_WRITE_LIMIT]
            _refuse_duplicates(batch)
            for record_id in batch:
                kept.pop(record_id, None)

    def hold_together(self, environment: str, record_ids: Sequence[int], reconciliation_id: int,
                      exception_id: int) -> set[int]:
        """As the adapter's transactions, whose cancelled ones go again without the refused holds:
        every record `hold_record` would hold is held, the others are left; none where holds are not
        made in transactions."""
        if not self.in_transactions:
            return set()
        return {record_id for record_id in dict.fromkeys(record_ids)
                if self.hold_record(environment, record_id, reconciliation_id, exception_id)}

    def hold_record(self, environment: str, record_id: int, reconciliation_id: int, exception_id: int) -> bool:
        """Mark the record as held by the exception in the reconciliation, unless another one holds it."""
        row = self.store.row(environment, record_id)
        if row is None or row.exception_holds.get(reconciliation_id, exception_id) != exception_id:
            return False
        row.exception_holds[reconciliation_id] = exception_id
        return True

    def let_go_record(self, environment: str, record_id: int, reconciliation_id: int, exception_id: int) -> bool:
        row = self.store.row(environment, record_id)
        if row is None or row.exception_holds.get(reconciliation_id) != exception_id:
            return False  # the record is gone, or held elsewhere
        del row.exception_holds[reconciliation_id]
        return True

    def rescale(self, exception: ReconciliationException, scale: int) -> ReconciliationException:
        """Every kept amount at `scale` decimal places, counted from the decimal places of `exception`."""
        factor = 10 ** (scale - exception.decimal_places)
        self.add_records(exception, [replace(r, amount=r.amount * factor) for r in self.records(exception)])
        row = self._row_to_update(exception)
        if row.exception is not None:
            row.exception = replace(row.exception, decimal_places=scale)
        return self.get(exception.environment, exception.id)

    def take_refresh_lease(self, environment: str, reconciliation_id: int, now: datetime, length: timedelta) -> bool:
        """One refresh of a reconciliation at a time; a lease past its end is taken over."""
        lease = self.leases.get((environment, reconciliation_id))
        if lease is not None and not lease.until < iso(now):
            return False
        self.leases[(environment, reconciliation_id)] = _Lease(iso(now), iso(now + length))
        return True

    def release_refresh_lease(self, environment: str, reconciliation_id: int, taken_at: datetime) -> None:
        lease = self.leases.get((environment, reconciliation_id))
        if lease is not None and lease.taken_at == iso(taken_at):
            del self.leases[(environment, reconciliation_id)]

    # Comments -------------------------------------------------------------------------------

    def add_comment(self, exception: ReconciliationException, comment: ExceptionComment,
                    pending_event: str | None = None) -> None:
        kept = self.exception_comments.setdefault((exception.environment, exception.id), {})
        if comment.id in kept:  # the adapter's put_new refuses it
            raise Conflict(f"comment {comment.id} of exception {exception.id} was written already")
        kept[comment.id] = replace(comment, mentions=tuple(comment.mentions), created_at=stored_time(comment.created_at))
        self.store.owe(exception.environment, "exception_comment", (exception.id, comment.id), pending_event)

    def comments(self, exception: ReconciliationException) -> list[ExceptionComment]:
        kept = self.exception_comments.get((exception.environment, exception.id), {})
        return [kept[i] for i in sorted(kept)]

    # Rows -------------------------------------------------------------------------------------

    def _find(self, environment: str, exception_id: int) -> ReconciliationException | None:
        row = self.rows.get((environment, exception_id))
        if row is None:
            return None
        if row.exception is None:
            raise KeyError("environment")  # what the adapter's _from_item meets in an item with no exception
        stored = row.exception.description
        shown = stored if row.custom_description else row.auto_description
        return replace(row.exception, description=shown or stored or "")

    def _row_to_update(self, exception: ReconciliationException) -> _Row:
        """The exception's row; an update of a missing exception writes an item with only its key."""
        return self.rows.setdefault((exception.environment, exception.id), _Row(None))


def _stored(value: Any) -> Any:
    """A value as the table keeps it: tuples as lists; a float refused as boto3's serializer refuses it."""
    if isinstance(value, float):
        raise TypeError("Float types are not supported. Use Decimal types instead.")
    if isinstance(value, dict):
        return {k: _stored(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_stored(v) for v in value]
    return value


def _refuse_duplicates(record_ids: list[int]) -> None:
    if len(set(record_ids)) != len(record_ids):
        raise ClientError({"Error": {"Code": "ValidationException",
                                     "Message": "Provided list of item keys contains duplicates"}}, "BatchWriteItem")


def _admits(record_filter: RecordFilter, today: date) -> Callable[[ExceptionRecord], bool]:
    """The adapter's FilterExpression: an age bucket becomes a range of record dates, ending today."""
    window = record_filter.as_date_window(today)
    return lambda record: window.admits(record, today)
