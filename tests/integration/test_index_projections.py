"""The readers of the open-records index get from it alone what they get from a whole record (moto
honours projections, as DynamoDB does, so a reader needing an attribute the index lacks fails here)."""
import boto3

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.records import OPEN_RECORD_ATTRIBUTES
from tests.integration.conftest import record


def test_moto_returns_only_what_an_index_projects(services):
    table = services.table
    table.put({**keys.record("acme", 1), **keys.record_indexes("acme", 1, "bank", "partially_reconciled"),
               "id": 1, "amount": 5, "created_at": "2026-01-01T00:00:00Z"})
    client = boto3.client("dynamodb", region_name="us-east-1")

    def entries(index, partition):
        return client.query(TableName=table.name, IndexName=index, KeyConditionExpression=f"{index}pk = :p",
                            ExpressionAttributeValues={":p": {"S": partition}})["Items"]
    [open_entry] = entries("gsi5", keys.open_record_shard("acme", "bank", 1))
    [status_entry] = entries("gsi4", keys.record_indexes("acme", 1, "bank", "partially_reconciled")["gsi4pk"])
    assert set(open_entry) == {"pk", "sk", "gsi5pk", "gsi5sk", "id", "amount"}
    assert set(status_entry) == {"pk", "sk", "gsi4pk", "gsi4sk"}


def test_open_records_read_from_the_index_make_the_same_engine_frames_as_whole_records(
        services, ingest, reconciliation):
    from chalicelib.adapters.dynamodb.record_columns import record_columns
    from chalicelib.adapters.dynamodb.table import serialize
    from chalicelib.domain.matching.frames import investigation_frame, open_records_frame

    ids = ingest(record("bank", 1, 1250, description="Payout 7", metadata={"payout_id": "po_7", "n": 3}),
                 record("bank", 2, 99, direction="debit", currency="JPY"),
                 record("bank", 3, 400, metadata={"reference": "INV-9"}))
    claims, recon = services.claims, reconciliation["id"]
    whole = sorted(services.table.get_many(keys.record("acme", i) for i in ids), key=lambda i: i["id"])
    claims.adopt("acme", recon, "bank")
    indexed = sorted((i for partition in keys.open_records_of_stream_partitions("acme", "bank")
                      for i in services.table.query_all(keys.GSI5, partition)), key=lambda i: i["id"])

    assert [i["id"] for i in indexed] == ids
    assert all(set(i) <= {"pk", "sk", "gsi5pk", "gsi5sk", *OPEN_RECORD_ATTRIBUTES} for i in indexed)
    metadata_keys = ["metadata.n", "metadata.payout_id", "metadata.reference"]
    pages = list(claims.open_record_columns("acme", "bank", recon, adopted=True, with_metadata=True))
    whole_pages = [record_columns([serialize(i) for i in whole], with_metadata=True)]
    assert open_records_frame(pages, metadata_keys, {1}).drop("status").equals(
        open_records_frame(whole_pages, metadata_keys, {1}).drop("status"))  # the index holds no status
    open_records = sorted(claims.open_records("acme", "bank", recon, adopted=True), key=lambda r: r.id)
    whole_records = sorted((h.record for h in claims.held_records("acme", ids)), key=lambda r: r.id)
    assert investigation_frame(open_records).equals(investigation_frame(whole_records))


def test_a_record_matched_or_being_deleted_leaves_the_open_records_of_that_reconciliation_only(
        services, ingest, reconciliation):
    ids = ingest(record("bank", 1, 100), record("bank", 2, 200), record("bank", 3, 300))
    claims, recon = services.claims, reconciliation["id"]
    claims.adopt("acme", recon, "bank")
    users = frozenset({recon, recon + 1})  # a second reconciliation uses the stream: the record stays open
    assert claims.claim_record("acme", ids[0], recon, match_id=77, users=users)
    services.table.update(keys.record("acme", ids[1]), "SET deleting = :t", values={":t": True})

    assert [r.id for r in claims.open_records("acme", "bank", recon, adopted=True)] == [ids[2]]
    assert sorted(r.id for r in claims.open_records("acme", "bank", recon + 1, adopted=True)) == [ids[0], ids[2]]
    assert [r.id for r in claims.open_records("acme", "bank", recon, adopted=False)] == [ids[2]]


def test_the_sweeper_finds_the_reconciliations_due_for_a_refresh_from_its_index_alone(services, reconciliation):
    from datetime import timedelta

    from chalicelib.domain.clock import utc_now

    reconciliations, recon, now = services.reconciliations, reconciliation["id"], utc_now()
    assert reconciliations.due_for_exception_refresh(now - timedelta(hours=1)) == []  # new: an hour for a run
    assert reconciliations.due_for_exception_refresh(now + timedelta(hours=1)) == [("acme", recon)]
    reconciliations.mark_exceptions_refreshed("acme", recon, now)
    assert reconciliations.due_for_exception_refresh(now - timedelta(hours=1)) == []
    assert reconciliations.due_for_exception_refresh(now + timedelta(seconds=1)) == [("acme", recon)]
