"""Reconciliation exceptions in DynamoDB: the exception item (with its aggregates, so that a
queue page needs no request per row), its records and comments in its partition, and the
guard naming the one active exception of a reconciliation and stream."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import date, datetime, timedelta
from typing import Any, TypedDict

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.event_ledger import owes, owing
from chalicelib.adapters.dynamodb.table import (
    ConditionalUpdate,
    ConditionFailed,
    DynamoTable,
    Filter,
)
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.reconciliation_exceptions import (
    Assignee,
    ExceptionComment,
    ExceptionRecord,
    ExceptionStatus,
    ExceptionSummary,
    ReconciliationException,
    RecordFilter,
)

STALE_GUARD_AGE = timedelta(minutes=2)  # a guard whose exception was never written (its writer died)
# What the queue's filters and orders read of every exception (ExceptionSummary).
LISTING_ATTRIBUTES = ("id", "reconciliation_id", "status", "data_stream_key", "assignees", "decimal_places", "totals",
                      "currency", "opened_at", "closed_at")
HOLD_THREADS = 8  # transactions of holds in flight at once
_HOLD_UPDATE = "SET #e = :e ADD #holds :hold"
_HOLD_CONDITION = "attribute_exists(pk) AND (attribute_not_exists(#e) OR #e = :e)"


class ExceptionRepository:
    """`in_transactions`: holds go in TransactWriteItems of TRANSACTION_LIMIT records (as a run's
    claims do, settings.claims_in_transactions), rather than one UpdateItem a record."""

    def __init__(self, table: DynamoTable, counters, in_transactions: bool = True) -> None:
        self._table = table
        self._counters = counters
        self.in_transactions = in_transactions

    def next_id(self, environment: str, entity: str = "exception") -> int:
        return self._counters.next_id(environment, entity)

    # The exception ---------------------------------------------------------------------------

    def get(self, environment: str, exception_id: int) -> ReconciliationException:
        item = self._table.get(keys.reconciliation_exception(environment, exception_id))
        if item is None:
            raise NotFound(f"reconciliation exception {exception_id} not found")
        return self._from_item(item)

    def find_many(self, environment: str, exception_ids: Iterable[int]) -> dict[int, ReconciliationException]:
        """The exceptions of these ids that exist, by id: one batch read (a bulk action's chunk)."""
        items = self._table.get_many(keys.reconciliation_exception(environment, i) for i in exception_ids)
        return {e.id: e for e in map(self._from_item, items)}

    def list_page(self, environment: str, admits: Callable[[ExceptionSummary], bool], offset: int,
                  limit: int) -> tuple[list[ReconciliationException], bool]:
        """A page of the environment's exceptions, newest first, by offset, and whether more follow."""
        page, total = self.queue_page(environment, admits, lambda s: -s.id, offset, limit)
        return page, total > offset + limit

    def summaries(self, environment: str) -> list[ExceptionSummary]:
        """Every exception's summary, newest first: one read of the index (the overview's)."""
        items = self._table.query_all(keys.GSI1, keys.exceptions_index_pk(environment), projection=LISTING_ATTRIBUTES)
        return sorted(map(_summary_of, items), key=lambda s: -s.id)

    def queue_page(self, environment: str, admits: Callable[[ExceptionSummary], bool] | None,
                   key: Callable[[ExceptionSummary], Any] | None, offset: int, limit: int,
                   equal: dict[str, Any] | None = None) -> tuple[list[ReconciliationException], int]:
        """A page of the exceptions whose attributes are `equal` (reconciliation_id, status,
        data_stream_key) and that `admits` keeps, sorted by `key`, by offset, and how many are kept.

        With neither `admits` nor `key` (newest first, equality filters only), DynamoDB filters, in
        two reads: the index is read newest first only as far as the page (ids only), then the
        count is a separate Select=COUNT query (every entry read, none sent back). An exception
        opened or closed between the two makes the total and the page disagree by it (a page may
        end before `total` says, or `has_more` be off by one); the next request sees both alike.
        Otherwise the index is read once for the few attributes the filters and orders need (the
        page and the total come from that one read), then only the page's items are read whole."""
        equal = equal or {}
        partition = keys.exceptions_index_pk(environment)
        if admits is None and key is None:
            condition = _equal_filter(equal)
            page_ids: list[int] = []
            for item in self._table.query_newest(keys.GSI1, partition, filter=condition, projection="id"):
                page_ids.append(item["id"])
                if len(page_ids) >= offset + limit:
                    break
            page_ids, (total, _) = page_ids[offset:], self._table.count(keys.GSI1, partition, filter=condition)
        else:
            summaries = self._table.query_all(keys.GSI1, partition, projection=LISTING_ATTRIBUTES)
            kept = (s for s in map(_summary_of, summaries) if all(getattr(s, name) == value for name, value in
                                                                  equal.items()) and (admits is None or admits(s)))
            wanted = [s.id for s in sorted(kept, key=key or (lambda s: -s.id))]
            page_ids, total = wanted[offset:offset + limit], len(wanted)
        found = {e.id: e for e in map(self._from_item, self._table.get_many(
            keys.reconciliation_exception(environment, i) for i in page_ids))}
        return [found[i] for i in page_ids if i in found], total

    def guarded_stream_keys(self, environment: str, reconciliation_id: int) -> list[str]:
        """The streams of the reconciliation with an active exception's guard (a stream it stopped
        using may still have one): one consistent Query of the reconciliation's partition."""
        guard = keys.active_exception_guard(environment, reconciliation_id, "")
        items = self._table.query_all(keys.BASE_TABLE, guard["pk"], sort_prefix=guard["sk"], projection="sk",
                                      consistent=True)
        return sorted(item["sk"].removeprefix(guard["sk"]) for item in items)

    def find_active(self, environment: str, reconciliation_id: int, stream_key: str) -> ReconciliationException | None:
        guard = self._table.get(keys.active_exception_guard(environment, reconciliation_id, stream_key))
        if guard is None:
            return None
        item = self._table.get(keys.reconciliation_exception(environment, guard["exception_id"]))
        exception = self._from_item(item) if item else None
        return exception if exception is not None and exception.active else None

    def open_new(self, exception: ReconciliationException) -> ReconciliationException | None:
        """Take the (reconciliation, stream) guard, then write the exception. None when another
        active exception holds the guard (use that one)."""
        guard_key = keys.active_exception_guard(exception.environment, exception.reconciliation_id,
                                                exception.data_stream_key)
        guard = {**guard_key, "entity": "active_exception_guard", "exception_id": exception.id,
                 "created_at": iso(utc_now())}
        try:
            self._table.put(guard, condition="attribute_not_exists(pk)")
        except ConditionFailed:
            existing = self._table.get(guard_key)
            if existing is None or not self._guard_is_stale(exception.environment, existing):
                return None
            try:
                self._table.put(guard, condition="exception_id = :old", values={":old": existing["exception_id"]})
            except ConditionFailed:
                return None
        self._table.put_new(self._to_item(exception))
        return exception

    def _guard_is_stale(self, environment: str, guard: dict[str, Any]) -> bool:
        item = self._table.get(keys.reconciliation_exception(environment, guard["exception_id"]))
        if item is None:
            return utc_now() - parse_iso(guard["created_at"]) > STALE_GUARD_AGE
        return ExceptionStatus(item["status"]) not in (ExceptionStatus.OPEN, ExceptionStatus.INVESTIGATING)

    def save(self, updated: ReconciliationException, previous: ReconciliationException,
             pending_event: str | None = None) -> None:
        """Write a change (optimistic: `updated.version` is one past the stored one). A close frees
        the stream's guard; a reopen takes it back, refused (409) while another exception is active.
        `pending_event` is the mark of the event the change owes (see event_ledger)."""
        reopening = updated.active and not previous.active
        if reopening:
            holder = self.open_guard_for(updated)
            if holder is not None:
                raise Conflict(f"exception {holder} is already open for this reconciliation and data stream; "
                               "reopen refused")
        owed, owed_values = owes(pending_event)
        try:
            self._table.update(
                keys.reconciliation_exception(updated.environment, updated.id),
                "SET title = :title, description = :description, #status = :status, updated_at = :updated, "
                "opened_at = :opened, closed_at = :closed, assignees = :assignees, #v = :version" + owed,
                condition="#v = :expected", names={"#status": "status", "#v": "version"},
                values={":title": updated.title, ":description": updated.description, ":status": updated.status.value,
                        ":updated": iso(updated.updated_at), ":opened": iso(updated.opened_at),
                        ":closed": iso(updated.closed_at) if updated.closed_at else None,
                        ":assignees": [_assignee_item(a) for a in updated.assignees],
                        ":version": updated.version, ":expected": updated.version - 1, **owed_values},
                keep_nulls=True)
        except ConditionFailed:
            if reopening:
                self._release_guard(updated)
            raise Conflict(f"reconciliation exception {updated.id} changed meanwhile; retry") from None
        if previous.active and not updated.active:
            self._release_guard(updated)  # only once the close is written

    def open_guard_for(self, exception: ReconciliationException) -> int | None:
        """Take the stream's guard for a reopened exception. None when taken; else the id of
        the exception that holds it."""
        guard_key = keys.active_exception_guard(exception.environment, exception.reconciliation_id,
                                                exception.data_stream_key)
        guard = {**guard_key, "entity": "active_exception_guard", "exception_id": exception.id,
                 "created_at": iso(utc_now())}
        try:
            self._table.put(guard, condition="attribute_not_exists(pk) OR exception_id = :id",
                            values={":id": exception.id})
            return None
        except ConditionFailed:
            existing = self._table.get(guard_key)
            if existing is None:
                return self.open_guard_for(exception)
            if self._guard_is_stale(exception.environment, existing):
                try:
                    self._table.put(guard, condition="exception_id = :old", values={":old": existing["exception_id"]})
                    return None
                except ConditionFailed:
                    pass
            return existing["exception_id"]

    def _release_guard(self, exception: ReconciliationException) -> None:
        try:
            self._table.delete(keys.active_exception_guard(exception.environment, exception.reconciliation_id,
                                                           exception.data_stream_key),
                               condition="exception_id = :id", values={":id": exception.id})
        except ConditionFailed:
            pass

    def set_totals(self, exception: ReconciliationException, totals: dict[str, Any], description: str | None,
                   currency: str | None = None) -> None:
        """Totals kept on the item, so a queue page needs no request per row (with the records' one
        currency, and the default description, unless a person wrote one)."""
        expression = "SET totals = :totals, updated_at = :now"
        values: dict[str, Any] = {":totals": totals, ":now": iso(utc_now())}
        if currency is not None:
            expression += ", currency = :currency"
            values[":currency"] = currency
        if description is not None:  # shown while no person wrote one (see _from_item)
            expression += ", auto_description = :description"
            values[":description"] = description
        if currency is None:
            expression += " REMOVE currency"
        self._table.update(keys.reconciliation_exception(exception.environment, exception.id), expression,
                           values=values)

    def mark_custom_description(self, exception: ReconciliationException) -> None:
        self._table.update(keys.reconciliation_exception(exception.environment, exception.id),
                           "SET custom_description = :t", values={":t": True})

    # Its records ------------------------------------------------------------------------------

    def records(self, exception: ReconciliationException) -> list[ExceptionRecord]:
        items = self._table.query_all(keys.BASE_TABLE,
                                      keys.reconciliation_exception(exception.environment, exception.id)["pk"],
                                      sort_prefix=keys.EXCEPTION_RECORD_PREFIX)
        return [ExceptionRecord(i["record_id"], i["amount"], i["direction"], i["date"], i["currency"],
                                bool(i.get("pending_confirmation"))) for i in items]

    def record_page(self, exception: ReconciliationException, record_filter: RecordFilter, today: date, limit: int,
                    cursor: str | None) -> tuple[list[int], str | None]:
        """A page of the exception's record ids, newest first, filtered by DynamoDB itself."""
        page = self._table.query_page(keys.BASE_TABLE,
                                      keys.reconciliation_exception(exception.environment, exception.id)["pk"],
                                      sort_prefix=keys.EXCEPTION_RECORD_PREFIX, limit=limit, cursor=cursor,
                                      filter=_filter(record_filter, today))
        return [i["record_id"] for i in page.items], page.cursor

    def add_records(self, exception: ReconciliationException, records: Iterable[ExceptionRecord]) -> None:
        self._table.batch_write(puts=[
            {**keys.exception_record(exception.environment, exception.id, r.record_id), "entity": "exception_record",
             "record_id": r.record_id, "amount": r.amount, "direction": r.direction, "date": r.date,
             "currency": r.currency, "pending_confirmation": True if r.pending_confirmation else None}
            for r in records])

    def remove_records(self, exception: ReconciliationException, record_ids: Iterable[int]) -> None:
        self._table.batch_write(deletes=[keys.exception_record(exception.environment, exception.id, i)
                                         for i in record_ids])

    def hold_together(self, environment: str, record_ids: Sequence[int], reconciliation_id: int,
                      exception_id: int) -> set[int]:
        """`hold_record` for many records, TRANSACTION_LIMIT a transaction, HOLD_THREADS at once: the
        ids now held. The records are independent (a transaction is only a batch here): a cancelled
        one's records whose own hold passed go again; the ids left out (refused, or in a transaction
        whose reasons do not say, and all of them where holds are not made in transactions) are
        for `hold_record`, one by one."""
        if not self.in_transactions:
            return set()
        placeholders = _hold_placeholders(reconciliation_id, exception_id)
        return set(self._table.write_whole(
            list(dict.fromkeys(record_ids)), threads=HOLD_THREADS,
            updates_of=lambda record_id: [ConditionalUpdate(keys.record(environment, record_id), _HOLD_UPDATE,
                                                            _HOLD_CONDITION, placeholders["values"],
                                                            placeholders["names"])]))

    def hold_record(self, environment: str, record_id: int, reconciliation_id: int, exception_id: int) -> bool:
        """Mark the record as held by the exception in the reconciliation, unless another one holds it."""
        try:
            self._table.update(keys.record(environment, record_id), _HOLD_UPDATE, condition=_HOLD_CONDITION,
                               **_hold_placeholders(reconciliation_id, exception_id))
        except ConditionFailed:
            return False
        return True

    def let_go_record(self, environment: str, record_id: int, reconciliation_id: int, exception_id: int) -> bool:
        try:
            self._table.update(keys.record(environment, record_id), "REMOVE #e DELETE #holds :hold",
                               condition="#e = :e", **_hold_placeholders(reconciliation_id, exception_id))
        except ConditionFailed:
            return False  # the record is gone, or held elsewhere
        return True

    def rescale(self, exception: ReconciliationException, scale: int) -> ReconciliationException:
        """Move every kept amount to more decimal places (exact: a multiplication)."""
        factor = 10 ** (scale - exception.decimal_places)
        self.add_records(exception, [replace(r, amount=r.amount * factor) for r in self.records(exception)])
        self._table.update(keys.reconciliation_exception(exception.environment, exception.id),
                           "SET decimal_places = :scale", values={":scale": scale})
        return self.get(exception.environment, exception.id)

    def take_refresh_lease(self, environment: str, reconciliation_id: int, now: datetime, length: timedelta) -> bool:
        """One exception refresh of a reconciliation at a time; a lease past its end is taken over."""
        try:
            self._table.put({**keys.exception_refresh_lease(environment, reconciliation_id), "entity": "refresh_lease",
                             "taken_at": iso(now), "until": iso(now + length)},
                            condition="attribute_not_exists(pk) OR #until < :now", names={"#until": "until"},
                            values={":now": iso(now)})
        except ConditionFailed:
            return False
        return True

    def release_refresh_lease(self, environment: str, reconciliation_id: int, taken_at: datetime) -> None:
        try:
            self._table.delete(keys.exception_refresh_lease(environment, reconciliation_id),
                               condition="taken_at = :taken", values={":taken": iso(taken_at)})
        except ConditionFailed:
            pass

    # Comments -------------------------------------------------------------------------------

    def add_comment(self, exception: ReconciliationException, comment: ExceptionComment,
                    pending_event: str | None = None) -> None:
        """Once: a comment of the same id again (a bulk action's retried item) is a Conflict."""
        try:
            self._table.put_new({**keys.exception_comment(exception.environment, exception.id, comment.id),
                                 "entity": "exception_comment", "id": comment.id, "body": comment.body,
                                 "author_idp_id": comment.author_idp_id, "mentions": list(comment.mentions),
                                 "created_at": iso(comment.created_at), **owing(pending_event)})
        except ConditionFailed:
            raise Conflict(f"comment {comment.id} of exception {exception.id} was written already") from None

    def comments(self, exception: ReconciliationException) -> list[ExceptionComment]:
        items = self._table.query_all(keys.BASE_TABLE,
                                      keys.reconciliation_exception(exception.environment, exception.id)["pk"],
                                      sort_prefix=keys.COMMENT_PREFIX)
        return [ExceptionComment(i["id"], i["body"], i["author_idp_id"], tuple(i.get("mentions") or ()),
                                 parse_iso(i["created_at"])) for i in items]

    # Items ------------------------------------------------------------------------------------

    @staticmethod
    def _to_item(exception: ReconciliationException) -> dict[str, Any]:
        return {
            **keys.reconciliation_exception(exception.environment, exception.id),
            **keys.exception_index(exception.environment, exception.id),
            "entity": "reconciliation_exception", "environment": exception.environment, "id": exception.id,
            "reconciliation_id": exception.reconciliation_id, "data_stream_key": exception.data_stream_key,
            "data_stream_id": exception.data_stream_id, "title": exception.title,
            "description": exception.description, "status": exception.status.value,
            "created_at": iso(exception.created_at), "updated_at": iso(exception.updated_at),
            "opened_at": iso(exception.opened_at),
            "closed_at": iso(exception.closed_at) if exception.closed_at else None,
            "decimal_places": exception.decimal_places, "totals": exception.totals or None,
            "assignees": [], "version": exception.version, "currency": exception.currency,
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> ReconciliationException:
        return ReconciliationException(
            environment=item["environment"], id=item["id"], reconciliation_id=item["reconciliation_id"],
            data_stream_key=item["data_stream_key"], data_stream_id=item["data_stream_id"], title=item["title"],
            description=(item.get("description") if item.get("custom_description") else item.get("auto_description"))
            or item.get("description") or "", status=ExceptionStatus(item["status"]),
            created_at=parse_iso(item["created_at"]), updated_at=parse_iso(item["updated_at"]),
            opened_at=parse_iso(item["opened_at"]), closed_at=parse_optional_iso(item.get("closed_at")),
            decimal_places=item.get("decimal_places", 2),
            assignees=tuple(_assignee(a) for a in item.get("assignees") or ()),
            totals=item.get("totals") or {}, version=item.get("version", 1), currency=item.get("currency"),
        )


def _summary_of(item: dict[str, Any]) -> ExceptionSummary:
    return ExceptionSummary(id=item["id"], reconciliation_id=item["reconciliation_id"],
                            status=ExceptionStatus(item["status"]), data_stream_key=item["data_stream_key"],
                            assignees=tuple(_assignee(a) for a in item.get("assignees") or ()),
                            decimal_places=int(item.get("decimal_places", 2)), totals=item.get("totals") or {},
                            currency=item.get("currency"), opened_at=parse_optional_iso(item.get("opened_at")),
                            closed_at=parse_optional_iso(item.get("closed_at")))


class _Placeholders(TypedDict):
    names: dict[str, str]
    values: dict[str, Any]


def _hold_placeholders(reconciliation_id: int, exception_id: int) -> _Placeholders:
    """A hold is written twice: `exception_<id>` for the conditions, `exception_holds` for the index."""
    return {"names": {"#e": keys.exception_attribute(reconciliation_id), "#holds": keys.EXCEPTION_HOLDS},
            "values": {":e": exception_id, ":hold": {keys.exception_hold(reconciliation_id, exception_id)}}}


def _filter(record_filter: RecordFilter, today: date) -> Filter | None:
    """RecordFilter as a FilterExpression (an age bucket is a range of record dates)."""
    clauses: list[str] = []
    values: dict[str, Any] = {}
    names = {"#fa": "amount", "#fd": "date", "#fdir": "direction"}
    window = record_filter.as_date_window(today)
    for clause, key, value in (("#fa >= :famin", ":famin", window.amount_min),
                               ("#fa <= :famax", ":famax", window.amount_max),
                               ("#fd >= :fdfrom", ":fdfrom", window.date_from),
                               ("#fd <= :fdto", ":fdto", window.date_to),
                               ("#fdir = :fdir", ":fdir", window.direction)):
        if value is not None:
            clauses.append(clause)
            values[key] = value
    if window.pending_confirmation is not None:
        clauses.append(f"attribute_{'' if window.pending_confirmation else 'not_'}exists(#fpc)")
        names["#fpc"] = "pending_confirmation"
    if not clauses:
        return None
    used = {n: v for n, v in names.items() if any(n + " " in c or n + ")" in c for c in clauses)}
    return Filter(" AND ".join(clauses), used, values)


def _equal_filter(equal: dict[str, Any]) -> Filter | None:
    """Attributes equal to values, as a FilterExpression (None for none)."""
    if not equal:
        return None
    names = {f"#fq{i}": name for i, name in enumerate(equal)}
    values = {f":fq{i}": value for i, value in enumerate(equal.values())}
    return Filter(" AND ".join(f"#fq{i} = :fq{i}" for i in range(len(equal))), names, values)


def _assignee_item(assignee: Assignee) -> dict[str, Any]:
    item: dict[str, Any] = {"id": assignee.id, "idp_user_id": assignee.idp_user_id}
    if assignee.user_id is not None:
        item["user_id"] = assignee.user_id
    return item


def _assignee(item: dict[str, Any]) -> Assignee:
    user_id = item.get("user_id")
    return Assignee(int(item["id"]), item["idp_user_id"], int(user_id) if user_id is not None else None)
