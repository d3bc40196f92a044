"""A stream's index of row markers (adapters/mirror.py): a count lists one key an import, not its
parts; a stream published before the index existed is listed in full once and its index filled in;
the mirror repair makes the index agree with the imports' own markers before it trusts it."""
from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from chalicelib.adapters.mirror import AnalyticsMirror, import_prefix, index_marker_key, rows_index
from chalicelib.domain.records import Direction, Record, RecordStatus
from chalicelib.services.mirror_repair import repair_mirror
from tests.contract.builders import T0
from tests.integration.conftest import record as item

BUCKET = "recon-test-data"
ENV = "acme"


def record(record_id: int) -> Record:
    return Record(environment=ENV, id=record_id, data_stream_key="bank", data_stream_id=1, date="2024-03-01",
                  amount=100 + record_id, direction=Direction.CREDIT, currency="EUR", decimal_places=2,
                  status=RecordStatus.UNRECONCILED, created_at=T0)


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def imported(mirror: AnalyticsMirror, job_id: int, ids: range) -> None:
    for part, start in enumerate(range(ids.start, ids.stop, 2)):  # two records a part: several parts
        mirror.write_part(ENV, job_id, part, [record(i) for i in range(start, min(start + 2, ids.stop))])
    mirror.publish(ENV, job_id, ["bank"])
    mirror.summarize(ENV, job_id, ["bank"])


def keys(s3, prefix: str) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))


def listed_keys(s3) -> list[int]:
    """How many keys each ListObjectsV2 the client sends from now on answers with."""
    counts: list[int] = []
    s3.meta.events.register("after-call.s3.ListObjectsV2",
                            lambda parsed, **_: counts.append(len(parsed.get("Contents", []))))
    return counts


def test_a_count_lists_the_index_not_the_parts(s3):
    mirror = AnalyticsMirror(s3, BUCKET)
    imported(mirror, 1, range(1, 8))  # 7 records in 4 parts
    imported(mirror, 2, range(8, 10))
    mirror.tombstone(ENV, "bank", 1, 3)
    assert mirror.count_records(ENV, "bank") == 8  # the first count lists it all and marks the index whole

    counts = listed_keys(s3)
    assert mirror.count_records(ENV, "bank") == 8
    assert mirror.published_imports(ENV, "bank") == {1: 7, 2: 2}
    # Then each reads the index (two markers and its mark of being whole) and the one tombstone
    assert counts == [3, 1, 3, 1]


def test_a_stream_published_before_the_index_counts_whole_and_gets_one(s3):
    # Given a stream whose imports were published with their markers in the imports alone
    mirror = AnalyticsMirror(s3, BUCKET)
    imported(mirror, 1, range(1, 6))
    imported(mirror, 2, range(6, 8))
    for key in keys(s3, rows_index(ENV, "bank")):
        s3.delete_object(Bucket=BUCKET, Key=key)

    # When it is counted, it is listed in full and its index filled in
    assert mirror.count_records(ENV, "bank") == 7
    index = rows_index(ENV, "bank")
    assert keys(s3, index) == [f"{index}_whole", f"{index}import=1/_rows=5", f"{index}import=2/_rows=2"]

    # Then later imports and counts go by the index: the imports' own markers are no longer read
    imported(mirror, 3, range(8, 9))
    s3.delete_object(Bucket=BUCKET, Key=f"{import_prefix(ENV, 'bank', 1)}_rows=5")
    assert mirror.count_records(ENV, "bank") == 8
    assert mirror.published_imports(ENV, "bank") == {1: 5, 2: 2, 3: 1}


def test_an_import_forgotten_leaves_the_index_and_is_counted_as_written_again(s3):
    mirror = AnalyticsMirror(s3, BUCKET)
    imported(mirror, 1, range(1, 6))
    imported(mirror, 2, range(6, 8))
    assert mirror.count_records(ENV, "bank") == 7
    mirror.forget_import(ENV, 1, ["bank"])
    assert mirror.published_imports(ENV, "bank") == {2: 2}
    imported(mirror, 1, range(1, 4))  # written again from the table: fewer records now
    assert mirror.published_imports(ENV, "bank") == {1: 3, 2: 2}
    assert mirror.count_records(ENV, "bank") == 5


def test_a_stream_forgotten_takes_its_index_with_it(s3):
    mirror = AnalyticsMirror(s3, BUCKET)
    imported(mirror, 1, range(1, 6))
    assert mirror.count_records(ENV, "bank") == 5
    mirror.forget_stream(ENV, "bank")
    assert keys(s3, rows_index(ENV, "bank")) == []
    imported(mirror, 2, range(6, 8))  # a new stream with the key
    assert mirror.count_records(ENV, "bank") == 2


def test_the_largest_marker_stands_in_the_index_too(s3):
    mirror = AnalyticsMirror(s3, BUCKET)
    imported(mirror, 1, range(1, 4))
    assert mirror.count_records(ENV, "bank") == 3  # the index is whole from here
    mirror.write_part(ENV, 1, 0, [record(1)])  # a retry that saw fewer parts
    mirror.publish(ENV, 1, ["bank"])
    mirror.summarize(ENV, 1, ["bank"])
    assert mirror.published_imports(ENV, "bank") == {1: 3}
    assert mirror.count_records(ENV, "bank") == 3


def test_reindex_mends_an_entry_missing_and_one_left_over(s3):
    # Given a whole index that lacks one import (published by code from before the index) and keeps
    # another whose own marker is gone (an import forgotten while the index was filled in)
    mirror = AnalyticsMirror(s3, BUCKET)
    imported(mirror, 1, range(1, 4))
    imported(mirror, 2, range(4, 6))
    assert mirror.count_records(ENV, "bank") == 5
    s3.delete_object(Bucket=BUCKET, Key=index_marker_key(ENV, "bank", 1, 3))
    s3.delete_object(Bucket=BUCKET, Key=f"{import_prefix(ENV, 'bank', 2)}_rows=2")
    assert mirror.published_imports(ENV, "bank") == {2: 2}  # the index alone is read

    # When it is reindexed, the imports' own markers are what it holds
    assert mirror.reindex(ENV, "bank") == {1: 3}
    assert keys(s3, rows_index(ENV, "bank")) == [f"{rows_index(ENV, 'bank')}_whole",
                                                 index_marker_key(ENV, "bank", 1, 3)]
    assert mirror.count_records(ENV, "bank") == 3


def test_the_repair_rewrites_an_import_whose_own_marker_is_lost_though_the_index_names_it(
        services, ingest, reconciliation):
    # Given a stream of two imports, counted (so its index is whole), the marker in one import lost
    ingest(item("bank", 1, 100), item("bank", 2, 200))
    ingest(item("bank", 3, 300))
    bucket, s3 = services.settings.bucket_name, services.aws.s3
    own = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="mirror/")["Contents"]
                 if "/data_stream=bank/import=" in o["Key"] and "/_rows=" in o["Key"])
    assert len(own) == 2
    s3.delete_object(Bucket=bucket, Key=own[0])
    lost = int(own[0].split("/import=")[1].split("/")[0])

    # When the mirror is repaired, the import is written again and its marker is back
    repair = repair_mirror(services.ports, "acme")
    assert repair.imports_rewritten == [("acme", lost)]
    assert own[0] in [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="mirror/")["Contents"]]
    assert services.ports.mirror.count_records("acme", "bank") == 3
