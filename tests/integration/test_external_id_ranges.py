"""The ranges of a stream's guarded external_ids on the table (moto): a stream created now keeps
them, a chunk reads only the guards inside them, and every guard lies inside them."""
import pytest

from chalicelib.adapters.dynamodb import keys
from chalicelib.domain.data_streams import StreamType
from chalicelib.domain.errors import Conflict
from chalicelib.domain.ingestion import BULK_CHUNK_ROWS, ItemStatus, OnConflict
from chalicelib.services.data_streams import create_stream
from chalicelib.services.ingestion.bulk import process_job, submit_bulk


class GuardReads:
    """The guard keys of every BatchGetItem the service's client sends."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def __call__(self, model, params, **_) -> None:
        if model.name == "BatchGetItem":
            self.keys += [k["pk"]["S"] for requests in params["RequestItems"].values() for k in requests["Keys"]
                          if "#EXT#" in k["pk"]["S"]]


@pytest.fixture
def reads(services):
    counter = GuardReads()
    services.aws.dynamodb.meta.events.register("before-parameter-build.dynamodb.BatchGetItem", counter)
    yield counter
    services.aws.dynamodb.meta.events.unregister("before-parameter-build.dynamodb.BatchGetItem", counter)


@pytest.fixture
def bank(services):
    create_stream(services.data_streams, "acme", key="bank", name="Bank", type_=StreamType.API)


def pay(n: int) -> dict:
    return {"date": "2026-11-02", "data_stream_key": "bank", "amount": 100 + n, "direction": "credit",
            "external_id": f"pay-{n:06d}"}


def ingest(services, numbers):
    job = submit_bulk(services.ports, "acme", [pay(n) for n in numbers], OnConflict.SKIP, None)
    return process_job(services.ports, "acme", job.id)


def test_growing_ids_read_no_guard_and_a_repeat_reads_only_its_own(services, bank, reads):
    assert services.records.external_id_ranges("acme", "bank") == []  # kept since the stream's creation
    first = ingest(services, range(2 * BULK_CHUNK_ROWS))
    second = ingest(services, range(2 * BULK_CHUNK_ROWS, 3 * BULK_CHUNK_ROWS))
    assert reads.keys == []
    assert first.successful_items == 2 * BULK_CHUNK_ROWS and second.successful_items == BULK_CHUNK_ROWS

    repeat = ingest(services, [5, 3 * BULK_CHUNK_ROWS])

    assert reads.keys == [keys.external_id_guard("acme", "bank", "pay-000005")["pk"]]
    by_id = {r.external_id: r for r in services.ingestion_jobs.results("acme", first.id)}
    assert [(r.status, r.record_id) for r in services.ingestion_jobs.results("acme", repeat.id)] == [
        (ItemStatus.SKIPPED, by_id["pay-000005"].record_id), (ItemStatus.SUCCESSFUL, repeat.record_id(1))]


def test_every_guard_of_the_stream_lies_in_its_ranges(services, bank):
    for numbers in ([7, 3, 900], range(40, 60), [3, 41, 5000], range(100, 103)):
        ingest(services, numbers)
    ranges = services.records.external_id_ranges("acme", "bank")
    guards = services.records.external_id_claims("acme", [("bank", f"pay-{n:06d}") for n in range(6000)])

    assert len(guards) == 3 + 20 + 1 + 3
    assert all(any(low <= external_id <= high for low, high in ranges) for _, external_id in guards)


def test_a_new_stream_keeps_its_ranges_before_any_job_can_find_it(services):
    # A job that found the stream before its ranges were written would write guards no range covers,
    # which a later job, reading only the guards inside the ranges, would never read.
    seen = []

    def the_ranges_when_the_stream_is_written(model, params, **_):
        if params.get("Item", {}).get("entity", {}).get("S") == "data_stream":
            seen.append(services.records.external_id_ranges("acme", "fees"))

    services.aws.dynamodb.meta.events.register("before-parameter-build.dynamodb.PutItem",
                                               the_ranges_when_the_stream_is_written)
    try:
        create_stream(services.data_streams, "acme", key="fees", name="Fees", type_=StreamType.API)
    finally:
        services.aws.dynamodb.meta.events.unregister("before-parameter-build.dynamodb.PutItem",
                                                     the_ranges_when_the_stream_is_written)
    assert seen == [[]]


def test_a_refused_create_leaves_a_stream_made_before_the_ranges_without_any(services, bank):
    # A stream made before the ranges keeps none, so every guard of it is read; empty ones written by a
    # create refused for its key (a client's retry) would hide every guard it has.
    services.aws.dynamodb.delete_item(TableName=services.settings.table_name,
                                      Key={k: {"S": v} for k, v in keys.external_id_ranges("acme", "bank").items()})
    with pytest.raises(Conflict):
        create_stream(services.data_streams, "acme", key="bank", name="Bank", type_=StreamType.API)
    assert services.records.external_id_ranges("acme", "bank") is None
    first = ingest(services, [1])
    again = ingest(services, [1])
    assert (first.successful_items, again.skipped_items) == (1, 1)
