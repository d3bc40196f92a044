"""Exceptions: how unmatched records come and go (the refresh after each run and from the
sweeper), and what people do with them (the offset list, the detail with its aggregates,
status moves, assignees, comments)."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from chalicelib.domain import event_data
from chalicelib.domain.allocation import kept_amount_changed, remaining_records
from chalicelib.domain.audit import system_actor
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, NotFound, ValidationFailed
from chalicelib.domain.events import ANNOUNCEMENT_LEASE, Announcer, Event, EventOrigin
from chalicelib.domain.reconciliation_exceptions import (
    Assignee,
    ExceptionComment,
    ExceptionRecord,
    ExceptionStatus,
    ExceptionSummary,
    QueueOrder,
    ReconciliationException,
    RecordFilter,
    aggregate,
    aggregates,
    check_filter,
    default_title,
    describe,
    is_overdue,
    queue_key,
    totals,
)
from chalicelib.domain.reconciliations import Reconciliation
from chalicelib.domain.records import OpenRecord, Record
from chalicelib.domain.tallies import tally_stream
from chalicelib.domain.users import User
from chalicelib.observability import logger
from chalicelib.services import approvals, audit, service_levels, users
from chalicelib.services.events import announce, announced, save_and_emit
from chalicelib.services.ports import Ports

REFRESH_EVERY = timedelta(hours=1)  # ages cross the grace period by the day; runs refresh at once
REFRESH_LEASE = timedelta(minutes=15)  # longer than one refresh may take (a Lambda call)
MARK_THREADS = 8
SYSTEM_AUTHOR = "system"
MAX_BODY = 10_000


# Coming and going -----------------------------------------------------------------------------

def refresh(ports: Ports, environment: str, reconciliation_id: int, now: datetime | None = None,
            ask_if_busy: bool = True) -> bool:
    """Records of the reconciliation unmatched for longer than its `exception_after_days` join
    the active exception of their stream (one is opened when none is); records matched since
    leave it, and an exception left empty resolves itself with a system comment. A record that
    sits in a dismissed or resolved exception stays there.

    One refresh of a reconciliation runs at a time (a lease; False when another holds it, which may
    have read before the change this one was called for: with `ask_if_busy` a refresh is requested, so
    the sweeper runs one after it; not by the sweeper's own, which brings no change and, asking while
    a long refresh runs, would keep the reconciliation refreshing back to back). A
    record is marked as held by the exception before it is added (conditionally, so it is never
    in two), and the totals are always recomputed from the exception's records, so a refresh
    cut short is put right by the next one. Each stream's tally (domain/tallies.py) is saved
    from the same read.
    """
    now = now or utc_now()
    reconciliation = ports.reconciliations.get(environment, reconciliation_id)
    if not ports.exceptions.take_refresh_lease(environment, reconciliation_id, now, REFRESH_LEASE):
        if ask_if_busy:
            ports.reconciliations.request_exceptions_refresh(environment, reconciliation_id)
        return False
    try:
        proposed = ports.claims.proposed_records(environment, reconciliation.id)
        partly = ports.claims.partly_paid(environment, reconciliation.id)  # counted by what they have left
        for stream_key in reconciliation.stream_keys:
            read_at = utc_now()  # the tally is as of its read, not of the sweep that began it
            adopted = ports.claims.is_adopted(environment, reconciliation.id, stream_key)
            open_records = remaining_records({r.id: r for r in ports.claims.open_records(
                environment, stream_key, reconciliation.id, adopted)}, partly)
            _refresh_stream(ports, reconciliation, stream_key, open_records, now,
                            {r.id: r for r in proposed if r.data_stream_key == stream_key})
            _save_tally(ports, reconciliation, stream_key, open_records.values(), read_at)
        for stream_key in set(ports.exceptions.guarded_stream_keys(environment, reconciliation.id)) - set(
                reconciliation.stream_keys):
            _resolve_left_stream(ports, reconciliation, stream_key, now)
        ports.reconciliations.mark_exceptions_refreshed(environment, reconciliation_id, now,
                                                        reconciliation.exceptions_refresh_requests)
        service_levels.after_refresh(ports, environment, reconciliation_id, now)  # routing, overdue events
    finally:
        ports.exceptions.release_refresh_lease(environment, reconciliation_id, now)
    return True


def request_neighbour_refreshes(ports: Ports, environment: str, reconciliation_id: int) -> None:
    """After a run, the other reconciliations of its streams are refreshed too (by the sweeper):
    their tallies say what of a shared stream this one matched and they did not (a story's
    continuation), which only their own refresh reads."""
    reconciliation = ports.reconciliations.find_including_deleting(environment, reconciliation_id)
    if reconciliation is None:
        return
    others = {user.reconciliation_id for key in reconciliation.stream_keys
              for user in ports.reconciliations.users_of_stream(environment, key)} - {reconciliation_id}
    for other in sorted(others):
        ports.reconciliations.request_exceptions_refresh(environment, other)


def _refresh_stream(ports: Ports, reconciliation: Reconciliation, stream_key: str,
                    open_records: dict[int, OpenRecord], now: datetime, proposed: dict[int, OpenRecord]) -> None:
    """`proposed`: the stream's records a proposed match holds, not reconciled until a person
    confirms it: they stay (and join) as open records do, marked `pending_confirmation`."""
    environment, today = reconciliation.environment, now.date()
    active = ports.exceptions.find_active(environment, reconciliation.id, stream_key)
    kept_before = {r.record_id: r for r in ports.exceptions.records(active)} if active else {}
    members = set(kept_before)
    open_records = {**open_records, **proposed}
    gone = [record_id for record_id in members if record_id not in open_records]
    flipped = [open_records[i] for i, r in kept_before.items()
               if i in open_records and (r.pending_confirmation is not (i in proposed)
                                         or kept_amount_changed(r.amount, open_records[i], active.decimal_places
                                                                if active else 0))]
    joining = [record for record in open_records.values()
               if record.id not in members
               and record.exception_in(reconciliation.id) in (None, active.id if active else None)
               and is_overdue(_exception_record(record, record.decimal_places), today,
                              reconciliation.exception_after_days)]
    opened = active is None
    if active is None:
        if not joining:
            return
        stream = ports.data_streams.get(environment, stream_key)
        active = ports.exceptions.open_new(ReconciliationException(
            environment=environment, id=ports.exceptions.next_id(environment), reconciliation_id=reconciliation.id,
            data_stream_key=stream_key, data_stream_id=stream.id, title=default_title(stream.name), description="",
            status=ExceptionStatus.OPEN, created_at=now, updated_at=now, opened_at=now,
            decimal_places=max(record.decimal_places for record in joining)))
        if active is None:
            return  # another exception holds the stream's guard: the next refresh joins it
    scale = max([active.decimal_places] + [record.decimal_places for record in joining])
    if scale > active.decimal_places:  # a record kept with more decimals: every amount moves to its scale
        active = ports.exceptions.rescale(active, scale)
    held = ports.exceptions.hold_together(environment, [record.id for record in joining], reconciliation.id, active.id)
    held |= _each(lambda record_id: ports.exceptions.hold_record(environment, record_id, reconciliation.id, active.id),
                  [record.id for record in joining if record.id not in held])
    ports.exceptions.add_records(active, [_exception_record(record, scale, record.id in proposed)
                                          for record in joining if record.id in held] +
                                 [_exception_record(record, scale, record.id in proposed) for record in flipped])
    joined = [record.id for record in joining if record.id in held]
    if joined and not ports.exceptions.get(environment, active.id).active:
        # A person dismissed or resolved it since it was read: what joined after their decision goes,
        # to join the next active exception (a record a closed exception keeps never comes out again).
        gone += joined
    # Let go before leaving the list: cut short in between, a record is still listed, and the next
    # refresh lets go again; the other way round, it kept a hold on an exception that then resolved
    # (empty), and a hold on a closed exception keeps the record out of every later one.
    _each(lambda record_id: ports.exceptions.let_go_record(environment, record_id, reconciliation.id, active.id), gone)
    ports.exceptions.remove_records(active, gone)
    remaining = ports.exceptions.records(active)
    kept = totals(remaining)
    currencies = sorted({r.currency for r in remaining})
    currency = currencies[0] if len(currencies) == 1 else None
    ports.exceptions.set_totals(active, kept, describe(kept, currency, scale), currency)
    # With its records and totals in; again on a refresh after one that died before announcing it.
    if opened or not announced(ports.event_ledger, environment, event_data.exception_opened_id(environment, active.id)):
        announce(ports, event_data.exception_opened(ports.exceptions.get(environment, active.id)), environment,
                 actor=system_actor("exception_refresh", reconciliation.id),
                 summary_fields=("status", "reconciliation_id", "data_stream_id", "totals"))
    if not remaining:
        _resolve_empty(ports, ports.exceptions.get(environment, active.id), now)


def _save_tally(ports: Ports, reconciliation: Reconciliation, stream_key: str, open_records: Iterable[OpenRecord],
                now: datetime) -> None:
    """The stream's tally for story summaries, from the open records the refresh read anyway. A
    failure costs only the summary's freshness (it shows when the tally was computed)."""
    try:
        mirrored = ports.mirror.stream_money(reconciliation.environment, stream_key)
        tally = tally_stream(reconciliation.environment, reconciliation.id, stream_key, total=mirrored.money,
                             published_imports=mirrored.imports, open_records=open_records, now=now)
        if tally.inconsistent:
            logger.warning("a stream's open records exceed its money in the analytics mirror (a part is missing: "
                           "`python -m chalicelib.cli mirror rebuild` writes it again); matched shows as none",
                           extra={"reconciliation_id": reconciliation.id, "data_stream_key": stream_key})
        ports.tallies.save(tally)
    except Exception:
        logger.exception("computing a stream tally failed", extra={"reconciliation_id": reconciliation.id,
                                                                   "data_stream_key": stream_key})


def _each(write: Callable[[int], bool], record_ids: list[int]) -> set[int]:
    """One conditional write per record, several at a time; the ids whose write held."""
    with ThreadPoolExecutor(MARK_THREADS) as pool:
        results = list(pool.map(write, record_ids))
    return {record_id for record_id, held in zip(record_ids, results) if held}


def _resolve_left_stream(ports: Ports, reconciliation: Reconciliation, stream_key: str, now: datetime) -> None:
    """The active exception of a stream the reconciliation no longer uses (a PATCH took it out): no
    refresh looks at it again, so it resolves itself, its records listed as they were and let go (should
    the stream come back, they join its next exception)."""
    environment = reconciliation.environment
    active = ports.exceptions.find_active(environment, reconciliation.id, stream_key)
    if active is None or ports.reconciliations.get(environment, reconciliation.id).uses(stream_key):
        return  # (read again: a PATCH may have put it back since this refresh read the reconciliation)
    _each(lambda record_id: ports.exceptions.let_go_record(environment, record_id, reconciliation.id, active.id),
          [r.record_id for r in ports.exceptions.records(active)])
    _resolve(ports, active, now, f"The data stream '{stream_key}' is no longer part of this reconciliation, so this "
             "exception was resolved automatically; its records are listed as they were.")


def _resolve_empty(ports: Ports, exception: ReconciliationException, now: datetime) -> None:
    """An exception left with no records resolves itself (unless a person moved it meanwhile)."""
    _resolve(ports, exception, now, "Every record of this exception was matched, so it was resolved automatically.")


def _resolve(ports: Ports, exception: ReconciliationException, now: datetime, comment: str) -> None:
    """Resolve it as the system, saying why in a comment (unless a person moved it meanwhile)."""
    if not exception.active:
        return
    resolved = replace(exception.moved(ExceptionStatus.RESOLVED, now), version=exception.version + 1)
    announcer = Announcer(system_actor("exception_refresh", exception.reconciliation_id), ("previous_status", "status"))
    try:
        save_and_emit(ports, exception.environment, event_data.exception_status_changed(exception, resolved),
                      EventOrigin.exception(exception.id),
                      lambda owed: ports.exceptions.save(resolved, previous=exception, pending_event=owed),
                      announcer=announcer, lease=ANNOUNCEMENT_LEASE)
    except Conflict:
        return  # changed meanwhile: the next refresh looks again
    add_comment(ports, exception.environment, exception.id, body=comment, author_idp_id=SYSTEM_AUTHOR, mentions=[])


def _exception_record(record: OpenRecord, scale: int, pending_confirmation: bool = False) -> ExceptionRecord:
    """The record as the exception keeps it: its amount at the exception's scale (exact)."""
    amount = record.amount * 10 ** (scale - record.decimal_places)
    return ExceptionRecord(record.id, amount, record.direction.value, record.date, record.currency,
                           pending_confirmation)


def sweep(ports: Ports, now: datetime | None = None) -> int:
    """Refresh every reconciliation not refreshed for REFRESH_EVERY (records age into
    exceptions with time, not only with runs), and every one whose refresh was requested (a
    person matched, unmatched or confirmed: a refresh reads every open record of the streams, too
    slow for that request; its exceptions show `refresh_pending` until then). One failure stops
    no other."""
    now = now or utc_now()
    refreshed = 0
    for environment, reconciliation_id in ports.reconciliations.due_for_exception_refresh(now - REFRESH_EVERY):
        try:
            refreshed += refresh(ports, environment, reconciliation_id, now, ask_if_busy=False)
        except Exception:
            logger.exception("refreshing exceptions failed", extra={"environment": environment,
                                                                     "reconciliation_id": reconciliation_id})
    return refreshed


# Reading --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExceptionQuery:
    """The queue's filters, all applied to the summaries the list reads anyway (no read of its own).
    `assignee` is a provider id, `assignee_user_id` our user id; `unassigned` keeps those with none.
    `amount_min`/`amount_max` bound |credits - debits|, given in minor units at `amount_decimal_places`
    (compared exactly with each exception at its own scale); `oldest_before` keeps the exceptions
    whose oldest record is dated on or before that day (`older_than_days` of the API)."""
    reconciliation_id: int | None = None
    status: ExceptionStatus | None = None
    data_stream_key: str | None = None
    assignee: str | None = None
    assignee_user_id: int | None = None
    unassigned: bool = False
    amount_min: int | None = None
    amount_max: int | None = None
    amount_decimal_places: int = 2
    oldest_before: str | None = None
    # Any other test of a summary (the service level filters: services/service_levels.queue_filter).
    also: Callable[[ExceptionSummary], bool] | None = None

    def admits(self, summary: ExceptionSummary) -> bool:
        scale = 10 ** self.amount_decimal_places
        return ((self.reconciliation_id is None or summary.reconciliation_id == self.reconciliation_id)
                and (self.status is None or summary.status is self.status)
                and (self.data_stream_key is None or summary.data_stream_key == self.data_stream_key)
                and (self.assignee is None or any(a.idp_user_id == self.assignee for a in summary.assignees))
                and (self.assignee_user_id is None
                     or any(a.user_id == self.assignee_user_id for a in summary.assignees))
                and (not self.unassigned or not summary.assignees)
                and (self.amount_min is None or summary.amount >= Fraction(self.amount_min, scale))
                and (self.amount_max is None or summary.amount <= Fraction(self.amount_max, scale))
                and (self.oldest_before is None
                     or (summary.oldest is not None and summary.oldest <= self.oldest_before))
                and (self.also is None or self.also(summary)))


def list_exceptions(ports: Ports, environment: str, query: ExceptionQuery, offset: int,
                    limit: int) -> tuple[list[ReconciliationException], bool]:
    """A page of the environment's exceptions, newest first, and whether more follow."""
    return ports.exceptions.list_page(environment, query.admits, offset, limit)


def check_query(query: ExceptionQuery) -> None:
    """The rules between the queue's filters (422): the queue's and a bulk action's filter alike."""
    if (query.amount_min is not None and query.amount_max is not None and query.amount_min > query.amount_max):
        raise ValidationFailed.on("amount_min", "must not be above amount_max")
    if query.assignee_user_id is not None and query.unassigned:
        raise ValidationFailed.on("unassigned", "give assignee_user_id or unassigned, not both")


def queue_page(ports: Ports, environment: str, query: ExceptionQuery, order: QueueOrder, offset: int,
               limit: int) -> tuple[list[ReconciliationException], int]:
    """A page of the queue in `order`, and how many exceptions the filters keep in all (counted
    from the same read of the environment's exception index as the page: no read of its own)."""
    check_query(query)
    equal = {name: value for name, value in (("reconciliation_id", query.reconciliation_id),
                                             ("status", query.status.value if query.status else None),
                                             ("data_stream_key", query.data_stream_key)) if value is not None}
    rest = replace(query, reconciliation_id=None, status=None, data_stream_key=None)
    if order is QueueOrder.NEWEST and rest == ExceptionQuery(amount_decimal_places=rest.amount_decimal_places):
        # Newest first, equality filters only: storage filters, reads only as far as the page, counts.
        return ports.exceptions.queue_page(environment, None, None, offset, limit, equal=equal)
    return ports.exceptions.queue_page(environment, rest.admits, queue_key(order), offset, limit, equal=equal)


def view_aggregates(exception: ReconciliationException, now: datetime | None = None) -> dict[str, Any]:
    return aggregates(exception.totals or totals([]), (now or utc_now()).date())


def filtered_aggregates(ports: Ports, exception: ReconciliationException, record_filter: RecordFilter,
                        now: datetime | None = None) -> dict[str, Any]:
    today = (now or utc_now()).date()
    check_filter(record_filter)
    if record_filter.empty:
        return view_aggregates(exception, now)
    return aggregate((r for r in ports.exceptions.records(exception) if record_filter.admits(r, today)), today)


def record_ids(ports: Ports, exception: ReconciliationException, record_filter: RecordFilter,
               now: datetime | None = None) -> list[int]:
    """The ids of the exception's records that pass the filter, newest first."""
    today = (now or utc_now()).date()
    check_filter(record_filter)
    return sorted((r.record_id for r in ports.exceptions.records(exception) if record_filter.admits(r, today)),
                  reverse=True)


def records_page(ports: Ports, exception: ReconciliationException, record_filter: RecordFilter, limit: int,
                 cursor: str | None, now: datetime | None = None) -> tuple[list[Record], str | None]:
    """A page of the exception's records that pass the filter, newest first (one deleted since is left out)."""
    check_filter(record_filter)
    ids, next_cursor = ports.exceptions.record_page(exception, record_filter, (now or utc_now()).date(), limit,
                                                    cursor)
    found = ports.records.find_many(exception.environment, ids)
    return [found[i] for i in ids if i in found], next_cursor


# Changing -------------------------------------------------------------------------------------

def update(ports: Ports, environment: str, exception_id: int, *, title: str | None,
           description: str | None, status: ExceptionStatus | None) -> ReconciliationException:
    current = ports.exceptions.get(environment, exception_id)
    approvals.check_status_move(ports, current, status, title, description)
    now = utc_now()
    updated = current.moved(status, now) if status is not None else current
    updated = replace(updated, title=title if title is not None else updated.title,
                      description=description if description is not None else updated.description,
                      updated_at=now, version=current.version + 1)
    if updated.status is not current.status:
        _save_telling(ports, current, updated, event_data.exception_status_changed(current, updated))
    else:
        ports.exceptions.save(updated, previous=current)
    audit.note(**audit.changes(_audited(current), _audited(updated)))
    if description is not None:
        ports.exceptions.mark_custom_description(updated)
    return ports.exceptions.get(environment, exception_id)


def _save_telling(ports: Ports, current: ReconciliationException, updated: ReconciliationException,
                  event: Event) -> None:
    """Save a person's change to the exception and send the event that tells of it."""
    save_and_emit(ports, updated.environment, event, EventOrigin.exception(updated.id),
                  lambda owed: ports.exceptions.save(updated, previous=current, pending_event=owed))


def _audited(exception: ReconciliationException) -> dict[str, Any]:
    return {"status": exception.status.value, "title": exception.title, "description": exception.description}


def add_assignee(ports: Ports, environment: str, exception_id: int, *, user_id: int | None = None,
                 idp_user_id: str | None = None) -> Assignee:
    """Assign an active user of the environment, named by our id or the provider's (422 otherwise)."""
    current = ports.exceptions.get(environment, exception_id)  # 404 before 422
    if user_id is None and idp_user_id is None:
        raise ValidationFailed.on("user_id", "give user_id or idp_user_id")
    user = users.active_user(ports, environment, "user_id" if user_id is not None else "idp_user_id",
                             user_id=user_id, idp_user_id=idp_user_id)
    if idp_user_id is not None and user.idp_user_id != idp_user_id:
        raise ValidationFailed.on("idp_user_id", f"user {user.id} is not '{idp_user_id[:64]}': give one of the two")
    existing = next((a for a in current.assignees if a.idp_user_id == user.idp_user_id), None)
    if existing is not None:
        return existing  # assigning twice changes nothing
    assignee = Assignee(ports.exceptions.next_id(environment, "exception_assignee"), user.idp_user_id, user.id)
    assigned = replace(current, assignees=current.assignees + (assignee,), updated_at=utc_now(),
                       version=current.version + 1)
    _save_telling(ports, current, assigned, event_data.exception_assigned(current, assigned))
    return assignee


def remove_assignee(ports: Ports, environment: str, exception_id: int, assignee_id: int) -> None:
    current = ports.exceptions.get(environment, exception_id)
    if not any(a.id == assignee_id for a in current.assignees):
        raise NotFound(f"assignee {assignee_id} not found on exception {exception_id}")
    unassigned = replace(current, assignees=tuple(a for a in current.assignees if a.id != assignee_id),
                         updated_at=utc_now(), version=current.version + 1)
    _save_telling(ports, current, unassigned, event_data.exception_assigned(current, unassigned))


def comment_by_person(ports: Ports, environment: str, exception_id: int, *, body: str, signed_in: User | None,
                      author_idp_id: str | None, mentions: list[int]) -> ExceptionComment:
    """A person's comment: its author is the signed-in user (an API key names one, `author_idp_id`,
    who must be an active user of the environment), and each mention an active user (422 naming
    those that are not)."""
    ports.exceptions.get(environment, exception_id)  # 404 before 422
    if signed_in is not None:
        if author_idp_id is not None and author_idp_id != signed_in.idp_user_id:
            raise ValidationFailed.on("author_idp_id", "the author is the signed-in user; omit it")
        author = signed_in
    elif author_idp_id is None:
        raise ValidationFailed.on("author_idp_id", "an API key names the comment's author: the idp_user_id of "
                                                   "an active user of this environment")
    else:
        author = users.active_user(ports, environment, "author_idp_id", idp_user_id=author_idp_id)
    users.active_users(ports, environment, mentions, "mentions")
    return add_comment(ports, environment, exception_id, body=body, author_idp_id=author.idp_user_id,
                       mentions=mentions)


def add_comment(ports: Ports, environment: str, exception_id: int, *, body: str, author_idp_id: str,
                mentions: list[int], comment_id: int | None = None) -> ExceptionComment:
    """A comment as given: the system's and agents' (`comment_by_person` checks a person's first).
    `comment_id`: one reserved before (a bulk action's), so that a retry writes no second comment
    (Conflict when it is written already)."""
    exception = ports.exceptions.get(environment, exception_id)
    if not body.strip() or len(body) > MAX_BODY:
        raise ValidationFailed.on("body", f"must be 1 to {MAX_BODY} characters")
    comment = ExceptionComment(id=comment_id if comment_id is not None
                               else ports.exceptions.next_id(environment, "exception_comment"), body=body,
                               author_idp_id=author_idp_id, mentions=tuple(mentions), created_at=utc_now())
    save_and_emit(ports, environment, event_data.exception_commented(exception, comment),
                  EventOrigin.exception_comment(exception_id, comment.id),
                  lambda owed: ports.exceptions.add_comment(exception, comment, pending_event=owed))
    return comment

