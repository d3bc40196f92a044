"""Submitting bulk requests (services/ingestion/bulk.py) on the fakes: idempotency keys."""
import pytest

from chalicelib.domain.errors import Conflict
from chalicelib.domain.ingestion import JobStatus, OnConflict
from chalicelib.services.ingestion.bulk import process_job, submit_bulk
from tests.services.conftest import ENV, streams


def item(n, stream="bank", **fields):
    return {"date": "2026-11-01", "data_stream_key": stream, "amount": 1000 + n, "direction": "credit",
            "external_id": f"ext-{n}", **fields}


def submit(ports, records, key=None, environment=ENV):
    return submit_bulk(ports, environment, records, OnConflict.SKIP, key)


def queued(ports):
    return [m["job_id"] for m in ports.bulk_queue.messages]


@pytest.fixture
def bank(ports):
    streams(ports, "bank", "ledger")


# Moved from tests/integration/test_bulk_ingestion_api.py -----------------------------------------

def test_the_same_idempotency_key_with_another_body_is_409(ports, bank):
    submit(ports, [item(1)], key="batch-2")
    with pytest.raises(Conflict) as refused:
        submit(ports, [item(2)], key="batch-2")
    assert "Idempotency-Key" in refused.value.message


def test_a_pending_bulk_request_is_listed_among_its_streams_imports_before_a_worker_takes_it(ports, bank):
    pending = submit(ports, [item(1), item(2, stream="ghost")])

    listed = ports.ingestion_jobs.list_of_stream(ENV, "bank", 50, None)[0]

    assert [(j.id, j.status) for j in listed] == [(pending.id, "pending")]


# Added ---------------------------------------------------------------------------------------------

def test_a_repeat_returns_the_first_job_and_queues_it_again_only_while_it_has_not_started(ports, bank):
    first = submit(ports, [item(1), item(2)], key="batch-1")
    again = submit(ports, [item(1), item(2)], key="batch-1")
    assert again.id == first.id and queued(ports) == [first.id, first.id]  # the first send may have been lost

    process_job(ports, ENV, first.id)
    after = submit(ports, [item(1), item(2)], key="batch-1")

    assert after.id == first.id and after.status is JobStatus.COMPLETED
    assert queued(ports) == [first.id, first.id]
    assert [j.id for j in ports.ingestion_jobs.list_of_stream(ENV, "bank", 50, None)[0]] == [first.id]


def test_idempotency_keys_are_per_environment_and_requests_without_one_are_never_merged(ports, bank):
    mine = submit(ports, [item(1)], key="shared-key")
    theirs = submit(ports, [item(9)], key="shared-key", environment="globex")  # another body, but elsewhere

    assert ports.payloads.get_json(theirs.payload_key) == {"records": [item(9)]}
    assert ports.payloads.get_json(mine.payload_key) == {"records": [item(1)]}
    plain = [submit(ports, [item(1)]), submit(ports, [item(1)])]
    assert len({j.id for j in plain} | {mine.id}) == 3
