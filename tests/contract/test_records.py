"""Records: whole-item writes, the external-id guards, the listings (by stream, import, external id
and status; newest first, with cursors) and the two-step delete."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.records import (
    DELETABLE_STATUSES,
    Direction,
    ExternalIdClaim,
    Record,
    RecordQuery,
    RecordStatus,
    writer_lease_holder,
)
from tests.contract.builders import ENV, OTHER_ENV, T0, T0_MS, job, stream

STALE = timedelta(minutes=5)


def record(record_id: int, stream_key: str = "bank", environment: str = ENV, **kw) -> Record:
    return Record(**{"environment": environment, "id": record_id, "data_stream_key": stream_key, "data_stream_id": 1,
                     "date": "2024-03-01", "amount": 1000 + record_id, "direction": Direction.CREDIT,
                     "currency": "USD", "decimal_places": 2, "status": RecordStatus.UNRECONCILED, "created_at": T0,
                     **kw})


def ids(page) -> list[int]:
    return [r.id for r in page[0]]


def every_page(records, query: RecordQuery, limit: int) -> list[list[int]]:
    pages, cursor = [], None
    while True:
        items, cursor = records.list_page(ENV, query, limit, cursor)
        pages.append([r.id for r in items])
        if cursor is None:
            return pages


class TestRecordRepository:
    def test_put_many_then_get_reads_back_what_was_written(self, records):
        full = record(1, description="Wire 17", external_id="ext-1", file_import_id=4,
                      metadata={"rate": 1.25, "tags": ["a", "b"], "nested": {"n": 3}}, direction=Direction.DEBIT,
                      currency="JPY", decimal_places=0)
        assert records.put_many([full, record(2), record(3, environment=OTHER_ENV)]) == []  # none left
        assert records.get(ENV, 1) == replace(full, created_at=T0_MS)
        assert records.get(ENV, 2) == replace(record(2), created_at=T0_MS)
        assert records.get(ENV, 2).metadata == {}
        assert sorted(records.find_many(ENV, [2, 1, 3, 9, 2])) == [1, 2]
        with pytest.raises(NotFound):
            records.get(OTHER_ENV, 1)
        assert records.put_many(record(i) for i in range(10, 36)) == []  # 26 items, two batches: none left
        assert sorted(records.find_many(ENV, range(10, 36))) == list(range(10, 36))
        assert records.put_many([]) == []

    def test_put_absent_writes_only_where_no_item_is_and_leaves_a_claimed_one_as_it_stands(self, records, claims):
        records.put_many([record(1), record(2)])
        assert claims.claim_record(ENV, 2, 9, 41, frozenset({9}))  # a run claimed record 2 meanwhile

        left = records.put_absent([record(1, description="again"), record(2), record(3), record(3, environment=OTHER_ENV)])

        assert [(r.environment, r.id) for r in left] == [(ENV, 1), (ENV, 2)]
        assert records.get(ENV, 1).description is None
        assert records.get(ENV, 2).status is RecordStatus.RECONCILED  # the claim stands
        assert records.get(ENV, 3).id == 3 and records.get(OTHER_ENV, 3).id == 3
        assert records.put_absent([]) == []

    def test_claims_read_in_a_batch_name_their_owner_and_record_and_batch_claims_are_read_back(self, records):
        records.claim_external_id(ENV, "bank", "ext-1", "job:1:0", 5)
        records.put_external_id_guards(ENV, [("bank", "ext-2", "job:2:0", 6), ("ledger", "ext-1", "job:2:1", 7)])
        wanted = [("bank", "ext-1"), ("bank", "ext-2"), ("ledger", "ext-1"), ("bank", "ext-9")]
        assert records.external_id_claims(ENV, wanted) == {
            ("bank", "ext-1"): ("job:1:0", 5), ("bank", "ext-2"): ("job:2:0", 6), ("ledger", "ext-1"): ("job:2:1", 7)}
        assert records.external_id_claims(OTHER_ENV, wanted) == {}
        assert records.claim_external_id(ENV, "bank", "ext-2", "job:3:0", 8) == ExternalIdClaim(False, 6)

    def test_a_streams_writer_lease_has_one_holder_until_released_or_lapsed(self, records, clock):
        lease = timedelta(seconds=60)
        assert records.take_writer_lease(ENV, "bank", "job:1", lease)
        assert records.take_writer_lease(ENV, "bank", "job:1", lease)  # its holder again
        assert not records.take_writer_lease(ENV, "bank", "job:2", lease)
        assert records.take_writer_lease(ENV, "ledger", "job:2", lease)  # another stream
        assert records.take_writer_lease(OTHER_ENV, "bank", "job:2", lease)  # another environment
        records.release_writer_lease(ENV, "bank", "job:2")  # not its holder: nothing
        assert not records.take_writer_lease(ENV, "bank", "job:2", lease)
        records.release_writer_lease(ENV, "bank", "job:1")
        assert records.take_writer_lease(ENV, "bank", "job:2", lease)
        clock.advance(seconds=61)  # job:2 died holding it: it lapses
        assert records.take_writer_lease(ENV, "bank", "job:3", lease)
        assert not records.renew_writer_lease(ENV, "bank", "job:2", lease)  # gone to another: not renewed
        assert records.renew_writer_lease(ENV, "bank", "job:3", lease)

    def test_executions_of_one_job_hold_a_streams_writer_lease_together_until_the_last_gives_it_back(
            self, records, clock):
        lease = timedelta(seconds=60)
        first, again = writer_lease_holder(1, "first"), writer_lease_holder(1, "again")
        assert records.take_writer_lease(ENV, "bank", first, lease)
        assert records.take_writer_lease(ENV, "bank", again, lease)  # a delivery again: no wait for a lapse
        assert not records.take_writer_lease(ENV, "bank", writer_lease_holder(2, "x"), lease)
        records.release_writer_lease(ENV, "bank", again)  # leaving (on an error, say) while the first writes on
        assert not records.take_writer_lease(ENV, "bank", writer_lease_holder(2, "x"), lease)
        assert records.renew_writer_lease(ENV, "bank", first, lease)
        assert not records.renew_writer_lease(ENV, "bank", again, lease)  # it gave it back
        records.release_writer_lease(ENV, "bank", first)
        assert records.take_writer_lease(ENV, "bank", writer_lease_holder(2, "x"), lease)
        # One that died holding it keeps it only until it lapses; whoever takes it then holds it alone
        assert records.take_writer_lease(ENV, "ledger", first, lease)
        clock.advance(seconds=61)
        assert records.take_writer_lease(ENV, "ledger", again, lease)
        assert not records.renew_writer_lease(ENV, "ledger", first, lease)
        records.release_writer_lease(ENV, "ledger", first)  # late: gives back nothing it no longer holds
        assert not records.take_writer_lease(ENV, "ledger", writer_lease_holder(2, "x"), lease)

    def test_a_put_rewrites_the_whole_item(self, records):
        records.put_many([record(1, external_id="x")])
        records.mark_deleting(ENV, 1, DELETABLE_STATUSES, STALE)
        records.put_many([record(1, amount=5, status=RecordStatus.PARTIALLY_RECONCILED)])
        again = records.get(ENV, 1)  # the delete mark went with the old item
        assert (again.amount, again.external_id, again.status) == (5, None, RecordStatus.PARTIALLY_RECONCILED)

    def test_an_external_id_is_claimed_by_one_owner_per_stream(self, records):
        assert records.claim_external_id(ENV, "bank", "ext-1", "job-1", 5) == ExternalIdClaim(True, 5)
        assert records.claim_external_id(ENV, "bank", "ext-1", "job-1", 6) == ExternalIdClaim(True, 6)  # a retry
        assert records.claim_external_id(ENV, "bank", "ext-1", "job-2", 7) == ExternalIdClaim(False, 6)
        assert records.claim_external_id(ENV, "ledger", "ext-1", "job-2", 7) == ExternalIdClaim(True, 7)
        assert records.claim_external_id(OTHER_ENV, "bank", "ext-1", "job-3", 8) == ExternalIdClaim(True, 8)

    def test_a_claim_is_released_only_by_its_owner(self, records):
        records.claim_external_id(ENV, "bank", "ext-1", "job:1:4", 5)
        records.claim_external_id(ENV, "ledger", "ext-1", "job:1:4", 6)
        assert records.release_external_id(ENV, "bank", "ext-1", "job:1:5") is False  # not its owner
        assert records.release_external_id(ENV, "bank", "ext-1", "job:1") is False  # the owner exactly, no prefix
        assert records.release_external_id(OTHER_ENV, "bank", "ext-1", "job:1:4") is False
        assert records.claim_external_id(ENV, "bank", "ext-1", "job:2:0", 9) == ExternalIdClaim(False, 5)
        assert records.release_external_id(ENV, "bank", "ext-1", "job:1:4") is True
        assert records.release_external_id(ENV, "bank", "ext-1", "job:1:4") is False  # gone already
        assert records.release_external_id(ENV, "bank", "ext-9", "job:1:4") is False  # never claimed
        assert records.claim_external_id(ENV, "bank", "ext-1", "job:2:0", 9) == ExternalIdClaim(True, 9)
        assert records.claim_external_id(ENV, "ledger", "ext-1", "job:2:0", 9) == ExternalIdClaim(False, 6)
        assert ids(records.list_page(ENV, RecordQuery(external_id="ext-1"), 5, None)) == []  # no record either way

    def test_a_streams_records_are_listed_newest_first(self, records):
        records.put_many([record(i) for i in (1, 2, 3, 4, 5)] + [record(6, "ledger"), record(7, environment=OTHER_ENV)])
        query = RecordQuery(data_stream_key="bank")
        first = records.list_page(ENV, query, 2, None)
        assert ids(first) == [5, 4]
        assert ids(records.list_page(ENV, query, 2, first[1])) == [3, 2]
        assert every_page(records, query, 2) == [[5, 4], [3, 2], [1]]
        assert every_page(records, query, 5) == [[5, 4, 3, 2, 1]]
        with pytest.raises(BadRequest):
            records.list_page(ENV, RecordQuery(data_stream_key="ledger"), 2, first[1])
        with pytest.raises(BadRequest):
            records.list_page(ENV, query, 2, "not a cursor")

    def test_the_other_filters_narrow_a_streams_listing(self, records):
        records.put_many([record(1, date="2024-01-05", external_id="a"), record(2, date="2024-02-10"),
                          record(3, date="2024-03-15", external_id="a"),
                          record(4, date="2024-02-11", status=RecordStatus.RECONCILED)])
        records.mark_deleting(ENV, 2, DELETABLE_STATUSES, STALE)
        assert ids(records.list_page(ENV, RecordQuery(data_stream_key="bank", date_from="2024-02-01",
                                                      date_to="2024-03-01"), 10, None)) == [4]
        assert ids(records.list_page(ENV, RecordQuery(data_stream_key="bank", external_id="a"), 10, None)) == [3, 1]
        assert ids(records.list_page(ENV, RecordQuery(data_stream_key="bank", status=RecordStatus.UNRECONCILED),
                                     10, None)) == [3, 1]

    def test_an_imports_records_are_its_block_of_ids(self, records, jobs):
        jobs.add(job(4, total_items=4))
        jobs.reserve_record_ids(jobs.get(ENV, 4), 10)
        jobs.add(job(5))
        records.put_many([record(i, file_import_id=4) for i in (10, 11, 13)] +
                         [record(14, file_import_id=4), record(9, file_import_id=4), record(12, file_import_id=5)])
        query = RecordQuery(file_import_id=4)
        assert every_page(records, query, 2) == [[13, 11], [10]]
        assert ids(records.list_page(ENV, RecordQuery(file_import_id=4, date_to="2023-12-31"), 2, None)) == []
        assert records.list_page(ENV, RecordQuery(file_import_id=5), 2, None) == ([], None)  # no block yet
        assert records.list_page(ENV, RecordQuery(file_import_id=6), 2, None) == ([], None)  # no such import
        cursor = records.list_page(ENV, query, 1, None)[1]
        with pytest.raises(BadRequest):
            records.list_page(ENV, RecordQuery(data_stream_key="bank"), 1, cursor)

    def test_an_external_ids_records_are_those_its_guards_name(self, records):
        for stream_key, record_id in (("bank", 3), ("ledger", 8), ("cards", 5), ("fx", 9)):
            records.claim_external_id(ENV, stream_key, "inv-1", "job-1", record_id)
        records.put_many([record(3, external_id="inv-1"), record(8, "ledger", external_id="inv-1"),
                          record(5, "cards", external_id="inv-1"), record(1, external_id="inv-1")])
        # 9's guard has no record yet, and 1 holds no guard
        query = RecordQuery(external_id="inv-1")
        assert every_page(records, query, 2) == [[8, 5], [3]]
        assert ids(records.list_page(ENV, RecordQuery(external_id="inv-1", date_from="2025-01-01"), 2, None)) == []
        cursor = records.list_page(ENV, query, 1, None)[1]
        with pytest.raises(BadRequest):
            records.list_page(ENV, RecordQuery(external_id="inv-2"), 1, cursor)

    def test_unreconciled_records_are_the_unmatched_open_records_of_every_stream(self, records, claims, data_streams):
        data_streams.add(stream(1, "bank"))
        data_streams.add(stream(2, "ledger"))
        records.put_many([record(1), record(3), record(5), record(2, "ledger"), record(4, "ledger"),
                          record(6, "gone"), record(7, environment=OTHER_ENV)])  # "gone": no such stream
        query = RecordQuery(status=RecordStatus.UNRECONCILED)
        assert every_page(records, query, 2) == [[5, 4], [3, 2], [1]]
        assert claims.claim_record(ENV, 3, 1, 100, frozenset({1, 2}))
        records.mark_deleting(ENV, 4, DELETABLE_STATUSES, STALE)
        assert every_page(records, query, 2) == [[5, 2], [1]]
        assert list(records.unreconciled_ids(ENV, None, None)) == [(5, "bank"), (2, "ledger"), (1, "bank")]
        assert list(records.unreconciled_ids(ENV, "bank", 5)) == [(1, "bank")]  # strictly below
        assert list(records.unreconciled_ids(ENV, "ledger", None)) == [(2, "ledger")]
        assert list(records.unreconciled_ids(OTHER_ENV, None, None)) == []  # no stream there
        assert ids(records.list_page(ENV, RecordQuery(status=RecordStatus.UNRECONCILED, date_from="2024-03-02"),
                                     2, None)) == []
        cursor = records.list_page(ENV, query, 1, None)[1]
        with pytest.raises(BadRequest):
            records.list_page(ENV, RecordQuery(status=RecordStatus.PARTIALLY_RECONCILED), 1, cursor)

    def test_matched_records_are_listed_by_status(self, records, claims):
        records.put_many([record(i) for i in range(1, 6)])
        for record_id in (1, 2, 4):
            claims.claim_record(ENV, record_id, 1, 100 + record_id, frozenset({1, 2}))
        claims.claim_record(ENV, 4, 2, 204, frozenset({1, 2}))
        claims.claim_record(ENV, 5, 2, 205, frozenset({2}))
        partially = RecordQuery(status=RecordStatus.PARTIALLY_RECONCILED)
        assert every_page(records, partially, 1) == [[2], [1]]
        assert every_page(records, RecordQuery(status=RecordStatus.RECONCILED), 5) == [[5, 4]]
        page = records.list_page(ENV, partially, 1, None)
        assert page[0][0] == replace(record(2), status=RecordStatus.PARTIALLY_RECONCILED, created_at=T0_MS)
        with pytest.raises(BadRequest):
            records.list_page(ENV, RecordQuery(status=RecordStatus.RECONCILED), 1, page[1])

    def test_a_delete_mark_hides_the_record_and_is_taken_over_once_stale(self, records, clock):
        records.put_many([record(1), record(2, status=RecordStatus.PARTIALLY_RECONCILED)])
        marked = records.mark_deleting(ENV, 1, DELETABLE_STATUSES, STALE)
        assert marked == replace(record(1), created_at=T0_MS)
        with pytest.raises(NotFound):
            records.get(ENV, 1)
        assert records.find_many(ENV, [1, 2]).keys() == {2}
        assert records.find_many(ENV, [1, 2, 3], including_deleting=True) == {
            1: replace(record(1), created_at=T0_MS), 2: replace(record(2, status=RecordStatus.PARTIALLY_RECONCILED),
                                                                created_at=T0_MS)}
        assert ids(records.list_page(ENV, RecordQuery(data_stream_key="bank"), 10, None)) == [2]
        assert records.mark_deleting(ENV, 1, DELETABLE_STATUSES, STALE) is None  # another delete holds it
        clock.advance(minutes=5, seconds=1)
        assert records.mark_deleting(ENV, 1, DELETABLE_STATUSES, STALE).id == 1  # its request died: taken over
        with pytest.raises(Conflict):
            records.mark_deleting(ENV, 2, DELETABLE_STATUSES, STALE)
        with pytest.raises(NotFound):
            records.mark_deleting(ENV, 3, DELETABLE_STATUSES, STALE)
        assert records.mark_deleting(ENV, 2, (RecordStatus.PARTIALLY_RECONCILED,), STALE).id == 2

    def test_remove_frees_the_external_id_only_for_its_holder(self, records):
        records.claim_external_id(ENV, "bank", "x", "job-1", 1)
        records.put_many([record(1, external_id="x"), record(2, external_id="x")])
        records.remove(records.get(ENV, 2))  # a record the guard does not name
        assert records.claim_external_id(ENV, "bank", "x", "job-2", 3) == ExternalIdClaim(False, 1)
        records.remove(records.get(ENV, 1))
        with pytest.raises(NotFound):
            records.get(ENV, 1)
        assert records.claim_external_id(ENV, "bank", "x", "job-2", 3) == ExternalIdClaim(True, 3)
        records.remove(record(9, external_id="y"))  # nothing there: nothing to do

    def test_ids_since_import_name_every_record_of_the_stream_and_those_changed_since(self, records):
        # (services/changed_blocks.py: where a stream made before changed blocks has changed)
        records.put_many([record(1, description="as imported", external_id="a", metadata={"k": 1}, file_import_id=7),
                          record(2), record(3, status=RecordStatus.RECONCILED), record(4), record(5, "ledger"),
                          record(6, environment=OTHER_ENV)])
        records.mark_deleting(ENV, 2, DELETABLE_STATUSES, STALE)
        assert records.ids_since_import(ENV, "bank") == ({1, 2, 3, 4}, {2, 3})
        assert records.ids_since_import(ENV, "ledger") == ({5}, set())
        assert records.ids_since_import(OTHER_ENV, "ledger") == (set(), set())

    def test_remove_all_of_stream_deletes_its_records_and_their_guards(self, records):
        for stream_key, record_id, external_id in (("bank", 1, "a"), ("bank", 2, "b"), ("ledger", 3, "a")):
            records.claim_external_id(ENV, stream_key, external_id, "job-1", record_id)
        records.put_many([record(1, external_id="a"), record(2, external_id="b"), record(4),
                          record(3, "ledger", external_id="a"), record(5, environment=OTHER_ENV)])
        records.mark_deleting(ENV, 4, DELETABLE_STATUSES, STALE)
        records.remove_all_of_stream(ENV, "bank")
        assert records.find_many(ENV, [1, 2, 3, 4]).keys() == {3}
        assert records.get(OTHER_ENV, 5).id == 5
        assert records.claim_external_id(ENV, "bank", "a", "job-2", 6) == ExternalIdClaim(True, 6)
        assert records.claim_external_id(ENV, "ledger", "a", "job-2", 7) == ExternalIdClaim(False, 3)
        assert ids(records.list_page(ENV, RecordQuery(external_id="b"), 5, None)) == []
