"""A run reads a stream's open records from the analytics mirror where they are as their import
wrote them and the mirror holds every import whole, and the blocks of ids where a record changed
since from the table; all from the table otherwise. Both give the same frame, record for record."""
from polars.testing import assert_frame_equal

from chalicelib.adapters.dynamodb import keys
from chalicelib.domain.matching.frames import open_records_frame
from chalicelib.domain.record_changes import CHANGE_BLOCK_IDS, change_block
from chalicelib.services import imported_records
from tests.integration.conftest import record

METADATA_KEYS = ["metadata.detail", "metadata.rate", "metadata.ref"]


def _bank_records():
    """Records as real feeds send them: metadata of text, numbers and a nested object whose keys
    are not in order, a description or none, one without an external_id."""
    return [record("bank", 1, 1250, description="Wire in", metadata={"ref": "INV-1", "rate": 1.25,
                                                                    "detail": {"z": 1, "a": [1, 2.5]}}),
            record("bank", 2, 990, day="2026-11-03", direction="debit", metadata={"ref": "INV-2"}),
            {"data_stream_key": "bank", "amount": 5, "date": "2026-11-04", "direction": "credit",
             "currency": "EUR", "description": "Fee"}]


def _frames(services, stream_key, reconciliation_id, new_jobs=None):
    """The stream's open records in the reconciliation, read from the mirror and from the table."""
    ports = services.ports
    mirrored = imported_records.open_pages(ports, "acme", stream_key, reconciliation_id, False, with_metadata=True)
    assert mirrored is not None, "the mirror should answer for this stream"
    table = ports.claims.open_record_columns("acme", stream_key, reconciliation_id, adopted=False, with_metadata=True)
    return (open_records_frame(mirrored, METADATA_KEYS, new_jobs),
            open_records_frame(table, METADATA_KEYS, new_jobs))


def _file_import_id(api, record_id):
    return api.get(f"/v1/records/{record_id}").json_body["file_import_id"]


def test_the_mirror_gives_the_tables_open_records_of_every_import(api, services, ingest, reconciliation):
    # Given a stream fed by two bulk requests, one of which also fed another stream
    first = ingest(*_bank_records())
    second = ingest(record("bank", 4, 700, metadata={"ref": "INV-4"}), record("ledger", 1, 1250))

    # When a reconciliation's open records are read both ways (records of the second import new)
    new_jobs = {_file_import_id(api, second[0])}
    bank_from_mirror, bank_from_table = _frames(services, "bank", reconciliation["id"], new_jobs)
    ledger_from_mirror, ledger_from_table = _frames(services, "ledger", reconciliation["id"], new_jobs)

    # Then they are the same frames, column by column, metadata compared as the engine compares it
    assert bank_from_mirror["id"].to_list() == sorted(first + second[:1])
    assert_frame_equal(bank_from_mirror, bank_from_table)
    assert_frame_equal(ledger_from_mirror, ledger_from_table)
    assert bank_from_mirror["metadata.detail"][0] == '{"a": [1, 2.5], "z": 1}'
    assert bank_from_mirror["is_new"].to_list() == [False, False, False, True]


def test_runs_read_the_mirror_but_for_the_blocks_of_records_claimed_which_the_table_gives(
        api, services, worker, ingest, reconciliation):
    # Given two streams that pair one to one but for one bank record, the pairs missing from the
    # table's stream listings (so that only a read of the mirror can find them)
    ids = ingest(record("bank", 1, 100), record("bank", 2, 200), record("ledger", 1, 100), record("ledger", 2, 200),
                 record("bank", 9, 900))
    _hide_from_the_listings(services, ids[:4])
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", {
        "name": "Same amount", "conditions": [{"field": "amount", "operator": "equals"}]}).status_code == 201

    # When a run matches them
    assert _run(api, worker, reconciliation) == 4

    # Then it found every record (in the mirror), and the claims noted their block
    ports = services.ports
    assert ports.data_streams.changed_since_import("acme", "bank") == {change_block(ids[0])}

    # And after an import in blocks of its own, both ways give the same frames: the claimed block
    # (the bank record left open) from the table, the new import from the mirror
    ports.counters.next_ids("acme", "record", CHANGE_BLOCK_IDS)
    more = ingest(record("ledger", 9, 900, metadata={"ref": "R-9"}), record("bank", 3, 300, metadata={"ref": "R-3"}),
                  record("ledger", 3, 300))
    for stream_key in ("bank", "ledger"):
        from_mirror, from_table = _frames(services, stream_key, reconciliation["id"])
        assert_frame_equal(from_mirror, from_table)
    assert from_mirror["id"].to_list() == [more[0], more[2]]  # (ledger's)

    # And a run finds the new import in the mirror alone, the bank record left open in the table alone
    _hide_from_the_listings(services, more)
    assert _run(api, worker, reconciliation) == 4
    assert all(api.get(f"/v1/records/{i}").json_body["status"] == "reconciled" for i in [ids[4], *more])


def _hide_from_the_listings(services, record_ids):
    for record_id in record_ids:
        services.table.update(keys.record("acme", record_id), "REMOVE gsi1pk, gsi1sk, gsi5pk, gsi5sk")


def _run(api, worker, reconciliation):
    """Run the reconciliation to its end: the records it matched."""
    run = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body
    worker.drain()
    finished = api.get(f"/v1/reconciliations/{reconciliation['id']}/runs/{run['id']}").json_body
    assert finished["status"] == "completed", finished
    return finished["matched_records"]


def test_a_deleted_record_sends_its_block_of_its_stream_alone_to_the_table(api, services, ingest, reconciliation):
    bank_id, ledger_id = ingest(record("bank", 1, 100), record("ledger", 1, 100))

    assert api.delete(f"/v1/records/{bank_id}").status_code == 204

    ports = services.ports
    assert ports.data_streams.changed_since_import("acme", "bank") == {change_block(bank_id)}
    assert ports.data_streams.changed_since_import("acme", "ledger") == frozenset()
    for stream_key, left in (("bank", []), ("ledger", [ledger_id])):
        from_mirror, from_table = _frames(services, stream_key, reconciliation["id"])
        assert_frame_equal(from_mirror, from_table)
        assert from_mirror["id"].to_list() == left


def test_an_import_the_mirror_lost_sends_the_stream_to_the_table(services, ingest, reconciliation):
    # Given a stream of two imports, the row marker of one lost
    ingest(record("bank", 1, 100))
    ingest(record("bank", 2, 200))
    bucket, s3 = services.settings.bucket_name, services.aws.s3
    markers = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="mirror/")["Contents"]
               if "/data_stream=bank/import=" in o["Key"] and "/_rows=" in o["Key"]]
    assert len(markers) == 2  # (each also has its copy in the stream's index of row markers, kept)
    s3.delete_object(Bucket=bucket, Key=markers[0])

    # Then the mirror does not answer for it: the table does, with both records
    ports = services.ports
    assert imported_records.open_pages(ports, "acme", "bank", reconciliation["id"], False, with_metadata=False) is None
    table = ports.claims.open_record_columns("acme", "bank", reconciliation["id"], adopted=False)
    assert open_records_frame(table, [], None).height == 2


def test_more_records_than_the_limit_are_left_to_the_table(services, ingest, reconciliation):
    ingest(record("bank", 1, 100), record("bank", 2, 200))
    ports = services.ports
    def pages(limit):
        return imported_records.open_pages(ports, "acme", "bank", reconciliation["id"], False, False, limit)
    assert pages(limit=1) is None
    assert [len(page["id"]) for page in pages(limit=2)] == [2]


def test_a_stream_made_before_the_blocks_gets_those_its_past_changed_then_reads_the_mirror(
        api, services, worker, ingest, reconciliation):
    # Given streams made before changed blocks were noted (their items without the mark), a run
    # that matched a pair, a record deleted in a block of its own, and an import nothing touched
    from datetime import timedelta

    from chalicelib.domain.clock import utc_now
    from chalicelib.services.changed_blocks import note_past_changes

    for stream_key in ("bank", "ledger"):
        services.table.update(keys.data_stream("acme", stream_key), "REMOVE changes_noted")
    matched = ingest(record("bank", 1, 100), record("ledger", 1, 100), record("bank", 2, 250))
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", {
        "name": "Same amount", "conditions": [{"field": "amount", "operator": "equals"}]}).status_code == 201
    assert _run(api, worker, reconciliation) == 2
    services.ports.counters.next_ids("acme", "record", CHANGE_BLOCK_IDS)
    deleted, kept = ingest(record("bank", 3, 300), record("bank", 4, 400))
    assert api.delete(f"/v1/records/{deleted}").status_code == 204
    services.ports.counters.next_ids("acme", "record", CHANGE_BLOCK_IDS)
    untouched = ingest(record("bank", 5, 500), record("ledger", 5, 600))
    ports = services.ports
    assert ports.data_streams.changed_since_import("acme", "bank") is None

    # When their past changes are found (the wait for calls begun before the marks passed at once)
    now = [utc_now()]
    outcome = note_past_changes(ports, ["acme"], wait=lambda s: now.__setitem__(0, now[0] + timedelta(seconds=s)),
                                progress=lambda _: None, now=lambda: now[0])

    # Then the claimed and the deleted blocks are noted, and both ways give the same frames
    assert sorted(outcome.noted) == [("acme", "bank"), ("acme", "ledger")]
    assert ports.data_streams.changed_since_import("acme", "bank") == {change_block(matched[0]),
                                                                        change_block(deleted)}
    assert ports.data_streams.changed_since_import("acme", "ledger") == {change_block(matched[1])}
    for stream_key in ("bank", "ledger"):
        from_mirror, from_table = _frames(services, stream_key, reconciliation["id"])
        assert_frame_equal(from_mirror, from_table)
    assert from_mirror["id"].to_list() == [untouched[1]]  # (ledger's)
    assert change_block(kept) != change_block(untouched[0])
