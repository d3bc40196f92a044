"""The open-records index is sharded: every reader reads every shard and the unsharded partition
that records written before the shards still sit in, in the order each promises."""
from chalicelib.adapters.dynamodb import keys
from chalicelib.domain.matching.frames import open_records_frame
from tests.integration.conftest import record


def _written_before_the_shards(services, record_id):
    """Moves a record's open-index entry back to the unsharded partition, as ingestion wrote it then."""
    services.table.update(keys.record("acme", record_id), "SET gsi5pk = :p",
                          values={":p": keys.open_records_of_stream_pk("acme", "bank")})


def test_records_written_before_and_after_the_shards_are_all_open_to_every_reader(
        api, services, ingest, reconciliation):
    # Given a stream whose oldest two records sit in the unsharded partition, the rest in shards
    ids = ingest(*(record("bank", n, 100 + n) for n in range(1, 9)))
    for record_id in ids[:2]:
        _written_before_the_shards(services, record_id)
    claims, recon = services.claims, reconciliation["id"]
    claims.adopt("acme", recon, "bank")
    assert len({services.table.get(keys.record("acme", i))["gsi5pk"] for i in ids}) > 2

    # When a run, a count, the exception refresh and the API read the stream's open records
    columns = open_records_frame(claims.open_record_columns("acme", "bank", recon, adopted=True), [], None)
    counted = claims.count_open("acme", "bank", recon, adopted=True)
    one_by_one = [r.id for r in claims.open_records("acme", "bank", recon, adopted=True)]
    pages, cursor = [], None
    while True:
        page = api.get("/v1/records?status=unreconciled&limit=3" + (f"&cursor={cursor}" if cursor else "")).json_body
        pages.append([r["id"] for r in page["data"]])
        if (cursor := page["next_cursor"]) is None:
            break

    # Then each finds every record, in id order (the API's newest first, in pages of 3)
    assert columns["id"].to_list() == ids
    assert counted == (8, True)
    assert one_by_one == ids
    assert pages == [ids[::-1][:3], ids[::-1][3:6], ids[::-1][6:]]


def test_a_claim_takes_a_record_out_of_whichever_partition_holds_it(api, services, ingest, reconciliation):
    # Given a record written before the shards and one written after
    old, new = ingest(record("bank", 1, 100), record("bank", 2, 200))
    _written_before_the_shards(services, old)
    claims, recon = services.claims, reconciliation["id"]
    claims.adopt("acme", recon, "bank")

    # When a match of the only reconciliation of the stream claims both
    for record_id in (old, new):
        assert claims.claim_record("acme", record_id, recon, match_id=70 + record_id, users=frozenset({recon}))

    # Then neither is open anywhere any more
    assert list(claims.open_records("acme", "bank", recon, adopted=True)) == []
    assert all("gsi5pk" not in services.table.get(keys.record("acme", i)) for i in (old, new))
    assert api.get("/v1/records?status=unreconciled").json_body["data"] == []
