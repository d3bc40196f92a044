"""A file import's chunk task died after writing part of a chunk's records, before saving its
results, on moto through the state machine's tasks: the next task owns what is in the table and
writes only the rest (a match made meanwhile stays), and an import failed with its files gone owns
those records too. Either way the stream's records_count is the records in the table."""
from dataclasses import replace
from datetime import timedelta

import pytest
import requests

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.records import RecordRepository
from chalicelib.services.ingestion import files

# Write to the end whatever the machine's load: a real task budget could run out on a busy CI core.
WHOLE_FILE = timedelta(hours=1)

# Chunks of 50 rows set on the import (500 by default): the same two chunks, a tenth of the writes.
CHUNK = 50
ROWS = CHUNK + 20  # two chunks; the second dies
KEPT = 10  # records of the second chunk written before the task died


class DiesWriting(RecordRepository):
    """The second put_many writes its first KEPT records, then the task dies."""

    def __init__(self, table) -> None:
        super().__init__(table)
        self.calls = 0

    def put_many(self, records):
        self.calls += 1
        if self.calls == 2:
            super().put_many(list(records)[:KEPT])
            raise RuntimeError("the chunk task died after writing some of its records")
        return super().put_many(records)


@pytest.fixture
def crashed(api, services, reconciliation):
    """An uploaded import of ROWS rows into bank whose second chunk died with KEPT records written."""
    created = api.post("/v1/data_streams/bank/file_imports", {"filename": "nov.csv", "format": "csv"}).json_body
    data = "date,amount,external_id\n" + "".join(f"2026-11-02,{n}.00,f-{n}\n" for n in range(ROWS))
    assert requests.put(created["upload_url"], data=data.encode(), timeout=10).status_code == 200
    services.table.update(keys.ingestion_job("acme", created["id"]), "SET file_chunk_rows = :rows", {":rows": CHUNK})
    assert files.prepare(services.ports, "acme", created["id"]) == "chunk"
    with pytest.raises(RuntimeError):
        files.write_chunks(replace(services.ports, records=DiesWriting(services.table)), "acme", created["id"])
    return created, services.ingestion_jobs.get("acme", created["id"])


def records_of(api, job_id: int) -> list[dict]:
    found, cursor = [], None
    while True:
        page = api.get(f"/v1/file_imports/{job_id}/records?limit=20" + (f"&cursor={cursor}" if cursor else ""))
        found += page.json_body["data"]
        cursor = page.json_body["next_cursor"]
        if not cursor:
            return found


def test_the_next_task_owns_what_the_dead_one_wrote_and_a_claim_made_meanwhile_stays(
        api, services, reconciliation, crashed):
    created, job = crashed
    claimed = job.record_id(CHUNK + 5)  # written before the task died
    # Runs and manual matches leave a writing import's records alone; one that did not see it
    # writing (its list of active jobs lagging) claims a record all the same.
    users = frozenset({reconciliation["id"]})
    assert services.ports.claims.claim_record("acme", claimed, reconciliation["id"], 77, users)

    assert files.write_chunks(services.ports, "acme", created["id"], budget=WHOLE_FILE) == "finish"
    assert files.finish(services.ports, "acme", created["id"]) == "stop"

    done = api.get(created["url"]).json_body
    assert (done["status"], done["successful_items"], done["processed_items"]) == ("completed", ROWS, ROWS)
    assert sorted(r["external_id"] for r in records_of(api, created["id"])) == sorted(f"f-{n}" for n in range(ROWS))
    assert api.get(f"/v1/records/{claimed}").json_body["status"] == "reconciled"
    item = services.table.get(keys.record("acme", claimed))
    assert item[keys.match_attribute(reconciliation["id"])] == 77 and item["matched_in"] == {reconciliation["id"]}
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == ROWS
    [listed] = api.get("/v1/data_streams/bank/file_imports").json_body["data"]
    assert listed["record_count"] == ROWS


def test_an_import_failed_with_its_files_gone_owns_what_its_unfinished_chunk_wrote(api, services, crashed):
    created, job = crashed
    bucket = services.settings.bucket_name
    for prefix in (f"imports/acme/{job.id}/", f"uploads/acme/{job.id}/"):
        for found in services.aws.s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []):
            services.aws.s3.delete_object(Bucket=bucket, Key=found["Key"])

    assert files.give_up(services.ports, "acme", created["id"],
                                {"Error": "NoSuchKey", "Cause": "the chunk file is gone"}) == "stop"

    done = api.get(created["url"]).json_body
    written = CHUNK + KEPT
    assert (done["status"], done["total_items"], done["processed_items"]) == ("failed", ROWS, ROWS)
    assert (done["successful_items"], done["failed_items"], done["skipped_items"]) == (written, ROWS - written, 0)
    owned = [r for r in records_of(api, created["id"]) if r["id"] >= job.record_id(CHUNK)]
    assert len(owned) == KEPT
    assert len(records_of(api, created["id"])) == written
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == written
    [listed] = api.get("/v1/data_streams/bank/file_imports").json_body["data"]
    assert listed["record_count"] == written
