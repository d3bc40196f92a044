"""Reconciliation exceptions: the exception and its guard (one active per reconciliation and
stream), versioned saves, descriptions, totals, the offset listing, records and their pages,
holds on record items, the refresh lease and comments."""
from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest
from botocore.exceptions import ClientError

from chalicelib.adapters.dynamodb.table import ConditionFailed
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.reconciliation_exceptions import (
    AgeBucket,
    Assignee,
    ExceptionComment,
    ExceptionRecord,
    ExceptionStatus,
    QueueOrder,
    ReconciliationException,
    RecordFilter,
    queue_key,
    totals,
)
from chalicelib.domain.records import Direction, Record, RecordStatus
from tests.contract.builders import ENV, OTHER_ENV, T0, T0_MS

TODAY = date(2024, 5, 1)
LATER = datetime(2024, 5, 2, 8, 0, 0, 456789, tzinfo=UTC)
LATER_MS = LATER.replace(microsecond=456000)


def exception(exception_id: int, reconciliation_id: int = 1, stream_key: str = "bank", environment: str = ENV,
              **kw) -> ReconciliationException:
    return ReconciliationException(**{
        "environment": environment, "id": exception_id, "reconciliation_id": reconciliation_id,
        "data_stream_key": stream_key, "data_stream_id": 4, "title": "Bank: unmatched records", "description": "",
        "status": ExceptionStatus.OPEN, "created_at": T0, "updated_at": T0, "opened_at": T0, **kw})


def saved(exceptions, current: ReconciliationException, previous: ReconciliationException | None = None,
          **changes) -> ReconciliationException:
    """Save `current` with `changes` as the next version; the exception as it reads back."""
    exceptions.save(replace(current, version=current.version + 1, **changes), previous=previous or current)
    return exceptions.get(current.environment, current.id)


def moved(exceptions, current: ReconciliationException, target: ExceptionStatus) -> ReconciliationException:
    return saved(exceptions, current.moved(target, LATER), previous=current)


RECORDS = [ExceptionRecord(1, 1000, "credit", "2024-04-30", "EUR"),  # 1 day old
           ExceptionRecord(2, 250, "debit", "2024-04-20", "EUR"),  # 11
           ExceptionRecord(3, 4000, "credit", "2024-03-01", "USD"),  # 61
           ExceptionRecord(4, 75, "debit", "2024-01-15", "EUR"),  # 107
           ExceptionRecord(5, 600, "credit", "2024-05-03", "EUR"),  # dated after today
           ExceptionRecord(12, 90, "credit", "2024-04-28", "EUR")]  # 3


def record_items(records, *record_ids: int) -> None:
    """Record items, for the holds (which need them)."""
    records.put_many(Record(environment=ENV, id=i, data_stream_key="bank", data_stream_id=4, date="2024-04-01",
                            amount=100, direction=Direction.CREDIT, currency="EUR", decimal_places=2,
                            status=RecordStatus.UNRECONCILED, created_at=T0) for i in record_ids)


class TestExceptionRepository:
    def test_open_new_then_get_reads_what_it_writes(self, exceptions):
        opened = exception(3, description="4 records", decimal_places=3, totals={"record_count": 4},
                           assignees=(Assignee(1, "ann"),), version=1)
        assert exceptions.open_new(opened) is opened  # what it was given, not read back
        assert exceptions.get(ENV, 3) == replace(opened, created_at=T0_MS, updated_at=T0_MS, opened_at=T0_MS,
                                                 assignees=())  # written with none
        with pytest.raises(NotFound):
            exceptions.get(OTHER_ENV, 3)
        assert (exceptions.next_id(ENV), exceptions.next_id(ENV), exceptions.next_id(ENV, "exception_comment"),
                exceptions.next_id(OTHER_ENV)) == (1, 2, 1, 1)

    def test_one_active_exception_per_reconciliation_and_stream(self, exceptions):
        exceptions.open_new(exception(1))
        assert exceptions.open_new(exception(2)) is None
        assert exceptions.find_active(ENV, 1, "bank") == exceptions.get(ENV, 1)
        assert exceptions.open_new(exception(3, stream_key="ledger")) is not None
        assert exceptions.open_new(exception(4, reconciliation_id=2)) is not None
        exceptions.open_new(exception(6, reconciliation_id=11, stream_key="cards"))  # 1's key is a prefix of 11's
        exceptions.open_new(exception(7, environment=OTHER_ENV, stream_key="wires"))
        assert exceptions.guarded_stream_keys(ENV, 1) == ["bank", "ledger"]
        assert exceptions.find_active(ENV, 1, "cards") is None
        assert exceptions.find_active(OTHER_ENV, 1, "bank") is None
        moved(exceptions, exceptions.get(ENV, 1), ExceptionStatus.DISMISSED)  # a close frees the guard
        assert exceptions.find_active(ENV, 1, "bank") is None
        assert exceptions.open_new(exception(5)) is not None
        assert exceptions.find_active(ENV, 1, "bank").id == 5
        with pytest.raises(ConditionFailed):  # an id in use: refused once the guard is taken
            exceptions.open_new(exception(5, stream_key="cards"))
        assert exceptions.find_active(ENV, 1, "cards").data_stream_key == "bank"  # the guard names exception 5

    def test_a_save_writes_the_next_version_only(self, exceptions):
        exceptions.open_new(exception(1, decimal_places=2))
        current = exceptions.get(ENV, 1)
        investigating = saved(exceptions, current.moved(ExceptionStatus.INVESTIGATING, LATER), title="Look here",
                              assignees=(Assignee(7, "bob"),), decimal_places=5, totals={"record_count": 9})
        assert investigating == replace(current, status=ExceptionStatus.INVESTIGATING, updated_at=LATER_MS,
                                        title="Look here", assignees=(Assignee(7, "bob"),), version=2)
        with pytest.raises(Conflict):  # written meanwhile: version 2 is stored
            saved(exceptions, current, title="stale")
        with pytest.raises(Conflict):
            saved(exceptions, exception(9), title="never written")
        resolved = moved(exceptions, investigating, ExceptionStatus.RESOLVED)
        assert (resolved.status, resolved.closed_at, resolved.version) == (ExceptionStatus.RESOLVED, LATER_MS, 3)
        reopened = moved(exceptions, resolved, ExceptionStatus.OPEN)
        assert (reopened.status, reopened.opened_at, reopened.closed_at, reopened.version) == (
            ExceptionStatus.OPEN, LATER_MS, None, 4)
        assert exceptions.find_active(ENV, 1, "bank") == reopened

    def test_a_reopen_is_refused_while_another_exception_is_active(self, exceptions):
        exceptions.open_new(exception(1))
        first = moved(exceptions, exceptions.get(ENV, 1), ExceptionStatus.RESOLVED)
        exceptions.open_new(exception(2))
        with pytest.raises(Conflict, match="exception 2 is already open"):
            moved(exceptions, first, ExceptionStatus.OPEN)
        assert (exceptions.get(ENV, 1).status, exceptions.find_active(ENV, 1, "bank").id) == (
            ExceptionStatus.RESOLVED, 2)
        moved(exceptions, exceptions.get(ENV, 2), ExceptionStatus.DISMISSED)
        with pytest.raises(Conflict, match="changed meanwhile"):  # a stale reopen gives the guard back
            exceptions.save(replace(first.moved(ExceptionStatus.OPEN, LATER), version=first.version), previous=first)
        with pytest.raises(Conflict, match="changed meanwhile"):  # never written: the guard taken is given back
            exceptions.save(exception(9, version=2), previous=exception(9, status=ExceptionStatus.RESOLVED))
        assert exceptions.open_new(exception(3)) is not None

    def test_the_guard_goes_to_whoever_asks_once_stale(self, exceptions, clock):
        clock.set(datetime(2024, 5, 1, 12, 0, tzinfo=UTC))
        assert exceptions.open_guard_for(exception(8)) is None  # a guard naming an exception never written
        assert exceptions.open_guard_for(exception(8)) is None  # its own
        assert exceptions.open_guard_for(exception(9)) == 8
        clock.advance(minutes=2)
        assert exceptions.open_new(exception(1)) is None  # 2 minutes are not yet stale
        clock.advance(milliseconds=1)
        assert exceptions.open_new(exception(1)) is not None
        assert exceptions.open_guard_for(exception(9)) == 1

    def test_whether_a_save_closes_or_reopens_is_told_by_previous(self, exceptions):
        """A close from a "closed" previous keeps the guard (which then names a closed exception: stale);
        a reopen from an "open" previous takes none."""
        exceptions.open_new(exception(1))
        closed = exceptions.get(ENV, 1).moved(ExceptionStatus.RESOLVED, LATER)
        closed = saved(exceptions, closed, previous=closed)
        assert exceptions.find_active(ENV, 1, "bank") is None
        assert exceptions.open_guard_for(exception(9)) is None
        exceptions.open_new(exception(20, reconciliation_id=2))
        closed = moved(exceptions, exceptions.get(ENV, 20), ExceptionStatus.RESOLVED)
        reopened = closed.moved(ExceptionStatus.OPEN, LATER)
        saved(exceptions, reopened, previous=reopened)
        assert (exceptions.get(ENV, 20).status, exceptions.find_active(ENV, 2, "bank")) == (ExceptionStatus.OPEN, None)
        assert exceptions.open_new(exception(21, reconciliation_id=2)) is not None

    def test_the_default_description_shows_until_a_person_writes_one(self, exceptions, clock):
        exceptions.open_new(exception(1, description="opened"))
        assert exceptions.get(ENV, 1).description == "opened"
        kept = totals(RECORDS[:2])
        clock.set(LATER)
        exceptions.set_totals(exceptions.get(ENV, 1), kept, "2 unmatched records")
        current = exceptions.get(ENV, 1)
        assert (current.description, current.totals, current.updated_at) == ("2 unmatched records", kept, LATER_MS)
        current = saved(exceptions, current, description="mine")
        assert current.description == "2 unmatched records"  # written, not shown until marked
        exceptions.mark_custom_description(current)
        assert exceptions.get(ENV, 1).description == "mine"
        exceptions.set_totals(current, totals([]), "0 unmatched records")
        assert (exceptions.get(ENV, 1).description, exceptions.get(ENV, 1).totals["oldest"]) == ("mine", None)

    def test_writes_to_a_missing_exception_leave_an_item_get_cannot_read(self, exceptions):
        exceptions.set_totals(exception(6), totals([]), None)
        with pytest.raises(KeyError):
            exceptions.get(ENV, 6)
        with pytest.raises(ConditionFailed):
            exceptions.open_new(exception(6))
        assert exceptions.list_page(ENV, lambda s: True, 0, 10) == ([], False)

    def test_list_page_is_newest_first_by_offset_and_filtered_on_summaries(self, exceptions):
        for exception_id, reconciliation_id, stream_key in ((1, 1, "bank"), (2, 1, "ledger"), (3, 2, "bank"),
                                                            (11, 3, "bank")):
            exceptions.open_new(exception(exception_id, reconciliation_id, stream_key))
        exceptions.open_new(exception(4, environment=OTHER_ENV))
        saved(exceptions, exceptions.get(ENV, 2), assignees=(Assignee(5, "ann"),))
        moved(exceptions, exceptions.get(ENV, 3), ExceptionStatus.DISMISSED)
        page, more = exceptions.list_page(ENV, lambda s: True, 0, 2)
        assert ([e.id for e in page], more) == ([11, 3], True)
        page, more = exceptions.list_page(ENV, lambda s: True, 2, 2)
        assert ([e.id for e in page], more) == ([2, 1], False)
        assert exceptions.list_page(ENV, lambda s: True, 4, 2) == ([], False)
        seen = []
        page, _ = exceptions.list_page(ENV, lambda s: seen.append(s) or s.status is ExceptionStatus.OPEN, 0, 10)
        assert [e.id for e in page] == [11, 2, 1]
        assert next(s for s in seen if s.id == 2).assignees == (Assignee(5, "ann"),)
        page, more = exceptions.list_page(ENV, lambda s: s.reconciliation_id == 1 and s.data_stream_key == "bank",
                                          0, 1)
        assert ([e for e in page], more) == ([exceptions.get(ENV, 1)], False)

    def test_queue_page_sorts_summaries_by_their_totals_and_counts_what_it_keeps(self, exceptions):
        """The summaries carry the stored totals and decimal places, so the queue's amount and age
        filters and orders need no read of their own; the total counts the filtered queue."""
        for exception_id, records, places in ((1, RECORDS[:1], 2), (2, RECORDS[2:4], 3), (3, RECORDS[1:2], 2)):
            exceptions.open_new(exception(exception_id, stream_key=f"s{exception_id}", decimal_places=places))
            exceptions.set_totals(exceptions.get(ENV, exception_id), totals(records), None)
        by_amount = queue_key(QueueOrder.AMOUNT)
        page, total = exceptions.queue_page(ENV, lambda s: True, by_amount, 0, 2)
        assert ([e.id for e in page], total) == ([1, 2], 3)  # 10.00, 3.925 (4.000 - 0.075), 2.50
        page, total = exceptions.queue_page(ENV, lambda s: s.oldest is not None and s.oldest < "2024-04-25",
                                            queue_key(QueueOrder.OLDEST), 0, 10)
        assert ([e.id for e in page], total) == ([2, 3], 2)
        page, total = exceptions.queue_page(ENV, lambda s: s.amount > 3, queue_key(QueueOrder.NEWEST), 1, 1)
        assert ([e.id for e in page], total) == ([1], 2)
        exceptions.set_totals(exceptions.get(ENV, 1), totals(RECORDS[:1]), None, "EUR")
        assert exceptions.get(ENV, 1).currency == "EUR"  # the records' one currency, kept beside the totals
        exceptions.set_totals(exceptions.get(ENV, 1), totals(RECORDS[:3]), None)
        assert exceptions.get(ENV, 1).currency is None  # mixed: none

    def test_queue_page_filters_in_storage_as_it_does_in_memory(self, exceptions):
        """Newest first with equality filters only, storage filters and counts (a page read only as
        far as it goes): the same page and total as the summaries filtered in memory."""
        for exception_id, reconciliation_id, stream_key in ((1, 1, "bank"), (2, 1, "ledger"), (3, 2, "bank"),
                                                            (5, 1, "bank2"), (11, 1, "card")):
            exceptions.open_new(exception(exception_id, reconciliation_id, stream_key))
        exceptions.open_new(exception(4, environment=OTHER_ENV))
        moved(exceptions, exceptions.get(ENV, 5), ExceptionStatus.DISMISSED)
        newest = queue_key(QueueOrder.NEWEST)
        for equal in ({}, {"reconciliation_id": 1}, {"status": "open"}, {"reconciliation_id": 1, "status": "open"},
                      {"data_stream_key": "bank"}, {"reconciliation_id": 9}):
            for offset, limit in ((0, 2), (2, 2), (0, 10), (3, 1)):
                fast = exceptions.queue_page(ENV, None, None, offset, limit, equal=equal)
                assert fast == exceptions.queue_page(ENV, lambda s: True, newest, offset, limit, equal=equal), equal
        page, total = exceptions.queue_page(ENV, None, None, 1, 2, equal={"reconciliation_id": 1, "status": "open"})
        assert ([e.id for e in page], total) == ([2, 1], 3)

    def test_records_are_kept_per_exception_and_written_again_by_id(self, exceptions):
        first, second = exception(1), exception(2)
        exceptions.add_records(first, RECORDS)
        exceptions.add_records(second, RECORDS[:1])
        exceptions.add_records(first, [replace(RECORDS[0], amount=1)])
        assert [r.record_id for r in exceptions.records(first)] == [1, 2, 3, 4, 5, 12]
        assert exceptions.records(first)[0] == ExceptionRecord(1, 1, "credit", "2024-04-30", "EUR")
        exceptions.remove_records(first, [2, 4, 99])
        assert [r.record_id for r in exceptions.records(first)] == [1, 3, 5, 12]
        assert exceptions.records(second) == RECORDS[:1]
        with pytest.raises(ClientError, match="duplicates"):  # one batch of 25 may not name an item twice
            exceptions.add_records(second, [RECORDS[1], RECORDS[1]])
        with pytest.raises(ClientError, match="duplicates"):
            exceptions.remove_records(second, [1, 1])
        assert exceptions.records(second) == RECORDS[:1]

    def test_record_pages_are_newest_first_and_filtered(self, exceptions):
        exceptions.open_new(exception(1))
        current = exceptions.get(ENV, 1)
        exceptions.add_records(current, RECORDS)

        def ids(limit: int = 10, cursor: str | None = None, **filters) -> tuple[list[int], str | None]:
            return exceptions.record_page(current, RecordFilter(**filters), TODAY, limit, cursor)

        page, cursor = ids(2)
        assert page == [12, 5]
        page, cursor = ids(2, cursor)
        assert page == [4, 3]
        assert ids(2, cursor) == ([2, 1], None)
        page, cursor = ids(2, direction="credit")
        assert (page, ids(2, cursor, direction="credit")) == ([12, 5], ([3, 1], None))
        assert ids(amount_min=100, amount_max=1000) == ([5, 2, 1], None)
        assert ids(date_from="2024-03-01", date_to="2024-04-28") == ([12, 3, 2], None)
        assert ids(3, direction="debit") == ([4, 2], None)
        with pytest.raises(BadRequest):
            exceptions.record_page(exception(2), RecordFilter(), TODAY, 2, cursor)  # another exception's
        with pytest.raises(BadRequest):
            ids(2, "not-a-cursor")

    def test_age_buckets_are_date_ranges_ending_today(self, exceptions):
        current = exception(1)
        exceptions.add_records(current, RECORDS)
        by_bucket = {bucket: exceptions.record_page(current, RecordFilter(age_bucket=bucket), TODAY, 10, None)[0]
                     for bucket in AgeBucket}
        assert by_bucket == {AgeBucket.LT_7D: [12, 1], AgeBucket.D7_30: [2], AgeBucket.D30_90: [3],
                             AgeBucket.GT_90D: [4]}  # record 5, dated after today, is in none
        assert RecordFilter(age_bucket=AgeBucket.LT_7D).admits(RECORDS[4], TODAY)  # where the domain's filter puts it
        assert exceptions.record_page(current, RecordFilter(age_bucket=AgeBucket.LT_7D, date_from="2024-04-29"),
                                      TODAY, 10, None) == ([1], None)

    def test_rescale_multiplies_the_kept_amounts(self, exceptions):
        exceptions.open_new(exception(1, decimal_places=2, totals={"credit_sum": 5}))
        current = exceptions.get(ENV, 1)
        exceptions.add_records(current, RECORDS[:2])
        rescaled = exceptions.rescale(current, 4)
        assert (rescaled.decimal_places, rescaled.totals) == (4, {"credit_sum": 5})  # totals untouched
        assert [r.amount for r in exceptions.records(current)] == [100000, 25000]
        with pytest.raises(TypeError):  # fewer places: the amounts would be floats, refused before any write
            exceptions.rescale(rescaled, 3)
        assert (exceptions.get(ENV, 1).decimal_places, [r.amount for r in exceptions.records(current)]) == (
            4, [100000, 25000])

    def test_a_record_is_held_by_one_exception_per_reconciliation(self, exceptions, records):
        record_items(records, 1, 2)
        assert exceptions.hold_record(ENV, 1, 1, 10)
        assert exceptions.hold_record(ENV, 1, 1, 10)  # the holder again
        assert not exceptions.hold_record(ENV, 1, 1, 11)
        assert exceptions.hold_record(ENV, 1, 2, 11)  # another reconciliation
        assert not exceptions.hold_record(ENV, 3, 1, 10)  # no such record
        assert not exceptions.hold_record(OTHER_ENV, 1, 1, 10)
        assert not exceptions.let_go_record(ENV, 1, 1, 11)
        assert not exceptions.let_go_record(ENV, 2, 1, 10)  # not held
        assert exceptions.let_go_record(ENV, 1, 1, 10)
        assert not exceptions.let_go_record(ENV, 1, 1, 10)
        assert exceptions.hold_record(ENV, 1, 1, 11)
        record_items(records, 1)  # a record written again (whole) is held nowhere
        assert exceptions.hold_record(ENV, 1, 2, 12)

    def test_holds_together_hold_every_record_hold_record_would_and_leave_the_rest(self, exceptions, records):
        # Given 250 records (three transactions' worth), one held by another exception of the
        # reconciliation, one by this exception already, one in another reconciliation
        record_items(records, *range(1, 251))
        assert exceptions.hold_record(ENV, 7, 1, 11)
        assert exceptions.hold_record(ENV, 8, 1, 10)
        assert exceptions.hold_record(ENV, 9, 2, 20)
        # When they are held together, with a record that is not there and one asked twice
        held = exceptions.hold_together(ENV, [*range(1, 251), 400, 8], 1, 10)
        # Then every record but the other exception's is held (cancelled transactions went again without it)
        assert held == set(range(1, 251)) - {7}
        assert not exceptions.hold_record(ENV, 1, 1, 11) and exceptions.hold_record(ENV, 250, 1, 10)
        assert [exceptions.let_go_record(ENV, i, 1, 10) for i in (1, 7, 8, 9, 101, 250, 400)] == [
            True, False, True, True, True, True, False]
        assert exceptions.let_go_record(ENV, 7, 1, 11) and exceptions.let_go_record(ENV, 9, 2, 20)
        assert exceptions.hold_together(OTHER_ENV, [1, 2], 1, 10) == set()  # no such records there
        assert exceptions.hold_together(ENV, [], 1, 10) == set()

    def test_holds_together_hold_none_where_holds_are_not_made_in_transactions(self, exceptions, records):
        record_items(records, 1)
        exceptions.in_transactions = False
        assert exceptions.hold_together(ENV, [1], 1, 10) == set()
        assert exceptions.hold_record(ENV, 1, 1, 11)  # nothing held it

    def test_one_refresh_lease_at_a_time_until_it_ends(self, exceptions):
        now = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
        assert exceptions.take_refresh_lease(ENV, 1, now, timedelta(minutes=15))
        assert not exceptions.take_refresh_lease(ENV, 1, now + timedelta(minutes=15), timedelta(minutes=15))
        assert exceptions.take_refresh_lease(ENV, 2, now, timedelta(minutes=15))
        assert exceptions.take_refresh_lease(OTHER_ENV, 1, now, timedelta(minutes=15))
        exceptions.release_refresh_lease(ENV, 1, now + timedelta(milliseconds=1))  # not its taker: nothing
        assert not exceptions.take_refresh_lease(ENV, 1, now + timedelta(minutes=1), timedelta(minutes=15))
        exceptions.release_refresh_lease(ENV, 1, now.replace(microsecond=123999))  # the same millisecond
        later = now + timedelta(minutes=1)
        assert exceptions.take_refresh_lease(ENV, 1, later, timedelta(seconds=30))
        assert exceptions.take_refresh_lease(ENV, 1, later + timedelta(seconds=30, milliseconds=1), timedelta(0))

    def test_comments_in_id_order(self, exceptions):
        first, second = exception(1), exception(2)
        exceptions.add_comment(first, ExceptionComment(2, "second", "bob", (3,), LATER))
        exceptions.add_comment(first, ExceptionComment(1, "first", "ann", (), T0))
        exceptions.add_comment(second, ExceptionComment(1, "elsewhere", "ann", (1, 2), T0))
        assert exceptions.comments(first) == [ExceptionComment(1, "first", "ann", (), T0_MS),
                                              ExceptionComment(2, "second", "bob", (3,), LATER_MS)]
        with pytest.raises(Conflict, match="comment 2 of exception 1 was written already"):  # a retry's: once
            exceptions.add_comment(first, ExceptionComment(2, "again", "ann", (), T0))
        assert [c.body for c in exceptions.comments(second)] == ["elsewhere"]
        assert exceptions.comments(exception(3)) == []
