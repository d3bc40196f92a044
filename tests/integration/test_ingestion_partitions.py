"""Ingestion at scale, as the table sees it (moto): a chunk's external_ids are claimed in batches,
not one conditional put each, and a stream's records spread over many index partitions, which its
listing merges back into one list, newest first, with the records written before the shards."""
import math
from collections import Counter
from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb import keys
from chalicelib.domain.clock import utc_now
from chalicelib.domain.data_streams import StreamType
from chalicelib.domain.ingestion import BULK_CHUNK_ROWS, ItemStatus, OnConflict
from chalicelib.domain.records import Direction, Record, RecordQuery, RecordStatus
from chalicelib.services.data_streams import create_stream
from chalicelib.services.ingestion.bulk import process_job, submit_bulk

ITEMS = 4 * BULK_CHUNK_ROWS


class SentItems:
    """The items each write request of the service's client names, by operation."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict]] = []

    def __call__(self, model, params, **_) -> None:
        if model.name in ("PutItem", "UpdateItem", "DeleteItem"):
            self.items.append((model.name, params.get("Item") or params["Key"]))
        elif model.name == "BatchWriteItem":
            for requests in params["RequestItems"].values():
                self.items += [("BatchWriteItem", r["PutRequest"]["Item"]) for r in requests if "PutRequest" in r]


@pytest.fixture
def sent(services):
    counter = SentItems()
    services.aws.dynamodb.meta.events.register("before-parameter-build.dynamodb.*", counter)
    yield counter
    services.aws.dynamodb.meta.events.unregister("before-parameter-build.dynamodb.*", counter)


@pytest.fixture
def bank(services):
    create_stream(services.data_streams, "acme", key="bank", name="Bank", type_=StreamType.API)


def fee(n: int) -> dict:
    return {"date": "2026-11-02", "data_stream_key": "bank", "amount": 100 + n, "direction": "credit",
            "external_id": f"fee-{n}"}


def all_records(services, limit: int) -> list[Record]:
    found, cursor = [], None
    while True:
        page, cursor = services.records.list_page("acme", RecordQuery(data_stream_key="bank"), limit, cursor)
        found += page
        if cursor is None:
            return found


def test_a_bulk_requests_external_ids_are_claimed_in_batches_not_one_put_each(services, bank, sent):
    job = submit_bulk(services.ports, "acme", [fee(n) for n in range(ITEMS)], OnConflict.SKIP, None)

    done = process_job(services.ports, "acme", job.id)

    assert done.successful_items == ITEMS
    guards = [(operation, item) for operation, item in sent.items if "#EXT#" in item["pk"]["S"]]
    assert [operation for operation, _ in guards] == ["BatchWriteItem"] * ITEMS


class SentWrites:
    """Every write request of the service's client: its operation, key (or item) and update."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, dict, str]] = []

    def __call__(self, model, params, **_) -> None:
        if model.name in ("PutItem", "UpdateItem", "DeleteItem"):
            self.writes.append((model.name, params.get("Item") or params["Key"], params.get("UpdateExpression", "")))


@pytest.fixture
def writes(services):
    counter = SentWrites()
    services.aws.dynamodb.meta.events.register("before-parameter-build.dynamodb.*", counter)
    yield counter
    services.aws.dynamodb.meta.events.unregister("before-parameter-build.dynamodb.*", counter)


def test_a_bulk_job_takes_its_streams_writer_lease_once_and_marks_chunks_begun_as_it_saves_them(
        services, bank, writes):
    # Given a bulk request of four chunks on one stream,
    job = submit_bulk(services.ports, "acme", [fee(n) for n in range(ITEMS)], OnConflict.SKIP, None)
    writes.writes.clear()

    # when it is processed,
    done = process_job(services.ports, "acme", job.id)

    # then the stream's writer lease is taken once and given back once for the whole job, and
    # one begin mark is written, with the first chunk (for the chunks in flight with it): the others
    # are marked by the saves before them, so the job writes no more per record than it did before
    # the lease.
    assert done.successful_items == ITEMS
    lease = keys.stream_writer_lease("acme", "bank")
    lease_writes = [op for op, key, _ in writes.writes if key["sk"]["S"] == lease["sk"]]
    assert lease_writes[0] == "PutItem" and lease_writes.count("DeleteItem") == 1  # (a put may renew it)
    assert lease_writes[-1] == "DeleteItem"
    begin_marks = [update for op, _, update in writes.writes if update == "SET chunks_begun = :through"]
    assert len(begin_marks) == 1


def test_a_writer_lease_another_job_holds_is_refused_without_a_write(services, bank, writes):
    # Given a stream whose writer lease another job holds,
    assert services.records.take_writer_lease("acme", "bank", "job:1", timedelta(seconds=60))
    writes.writes.clear()

    # when a second job tries to take it, it is refused, and no failed conditional write is sent.
    assert not services.records.take_writer_lease("acme", "bank", "job:2", timedelta(seconds=60))
    assert writes.writes == []


def test_racing_duplicates_after_a_batch_are_skipped_with_the_first_records_id(services, bank):
    first = process_job(services.ports, "acme", submit_bulk(services.ports, "acme", [fee(n) for n in range(300)],
                                                            OnConflict.SKIP, None).id)
    again = submit_bulk(services.ports, "acme", [fee(n) for n in range(250, 350)], OnConflict.SKIP, None)

    done = process_job(services.ports, "acme", again.id)

    results = services.ingestion_jobs.results("acme", again.id)
    assert (done.successful_items, done.skipped_items) == (50, 50)
    assert [(r.status, r.record_id) for r in results[:50]] == [
        (ItemStatus.SKIPPED, first.record_id(n)) for n in range(250, 300)]
    assert len(all_records(services, 200)) == 350


def test_no_index_partition_takes_more_than_a_sixteenth_of_a_streams_records(services, bank, sent):
    job = submit_bulk(services.ports, "acme", [fee(n) for n in range(ITEMS)], OnConflict.SKIP, None)

    process_job(services.ports, "acme", job.id)

    records = [item for _, item in sent.items if item.get("entity", {}).get("S") == "record"]
    assert len(records) == ITEMS
    for index in ("gsi1", "gsi2", "gsi3", "gsi4"):  # gsi5, the open records' index, is sharded apart
        per_partition = Counter(item[f"{index}pk"]["S"] for item in records if f"{index}pk" in item)
        assert not per_partition or max(per_partition.values()) <= math.ceil(ITEMS / 16), index  # ids modulo 16
    per_table_partition = Counter(item["pk"]["S"] for _, item in sent.items)
    assert max(per_table_partition.values()) <= ITEMS / 16


def test_a_streams_records_list_newest_first_across_its_shards_and_the_records_written_before_them(
        services, bank):
    job = process_job(services.ports, "acme", submit_bulk(services.ports, "acme", [fee(n) for n in range(300)],
                                                          OnConflict.SKIP, None).id)
    # Records written before the listing was sharded sit in its one partition: still listed.
    before = [Record(environment="acme", id=record_id, data_stream_key="bank", data_stream_id=1, date="2026-10-01",
                     amount=record_id, direction=Direction.DEBIT, currency="USD", decimal_places=2,
                     status=RecordStatus.UNRECONCILED, created_at=utc_now())
              for record_id in (job.record_id(0) - 1, job.record_id(150) + 10_000)]
    services.table.batch_write(puts=[{**services.records.to_item(r),
                                      "gsi1pk": keys.records_of_stream_pk("acme", "bank")} for r in before])

    listed = all_records(services, 7)

    expected = sorted([job.record_id(n) for n in range(300)] + [r.id for r in before], reverse=True)
    assert [r.id for r in listed] == expected
    assert [r.id for r in all_records(services, 500)] == expected
