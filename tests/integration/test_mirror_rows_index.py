"""A stream's index of row markers (adapters/mirror.py): a count lists one key an import, not its
parts; a stream published before the index existed is listed in full once and its index filled in."""
from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from chalicelib.adapters.mirror import AnalyticsMirror, import_prefix, rows_index
from chalicelib.domain.records import Direction, Record, RecordStatus
from tests.contract.builders import T0

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
    assert mirror.count_records(ENV, "bank") == 8  # the first count fills the index in

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
