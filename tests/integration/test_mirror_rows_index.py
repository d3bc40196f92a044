"""A stream's index of row markers (adapters/mirror.py): a count lists one key an import, not its
parts; a stream published before the index existed is listed in full once and its index filled in;
the mirror repair makes the index agree with the imports' own markers before it trusts it."""
from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace

import boto3
import pytest
from moto import mock_aws

from chalicelib.adapters import mirror as mirror_module
from chalicelib.adapters.mirror import AnalyticsMirror, import_prefix, index_marker_key, money_rollups, rows_index
from chalicelib.domain.records import Direction, Record, RecordStatus
from chalicelib.domain.tallies import CurrencyAmounts
from chalicelib.services.mirror_repair import repair_mirror
from tests.contract.builders import T0
from tests.integration.conftest import record as item

BUCKET = "recon-test-data"
ENV = "acme"


def record(record_id: int, amount: int | None = None) -> Record:
    return Record(environment=ENV, id=record_id, data_stream_key="bank", data_stream_id=1, date="2024-03-01",
                  amount=100 + record_id if amount is None else amount, direction=Direction.CREDIT, currency="EUR", decimal_places=2,
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


# Roll-ups: the index's loose markers, once there are ROLL_UP_AFTER of them, written as one object by a count.

def rolled_up(s3, each: int) -> AnalyticsMirror:
    """A stream of three imports of `each` records (import n: ids 10n on), counted: its index is made
    whole and, three being enough, rolled up at once."""
    mirror = AnalyticsMirror(s3, BUCKET)
    for job_id in range(1, 4):
        imported(mirror, job_id, range(job_id * 10, job_id * 10 + each))
    assert mirror.count_records(ENV, "bank") == 3 * each
    assert len(rollup_keys(s3)) == 1
    return mirror


def rollup_keys(s3) -> list[str]:
    return [key for key in keys(s3, rows_index(ENV, "bank")) if "/rollup/" in key]


@pytest.fixture
def few(monkeypatch):
    """Roll-ups after three loose markers, not 500."""
    monkeypatch.setattr(mirror_module, "ROLL_UP_AFTER", 3)


def test_a_count_over_enough_loose_markers_rolls_them_up_and_the_next_reads_one_object(s3, few):
    mirror = AnalyticsMirror(s3, BUCKET)
    for job_id in range(1, 3):
        imported(mirror, job_id, range(job_id * 10, job_id * 10 + job_id))  # 1 and 2 records
    assert mirror.count_records(ENV, "bank") == 3  # the index made whole: two loose markers
    imported(mirror, 3, range(30, 33))
    mirror.tombstone(ENV, "bank", 3, 31)
    assert rollup_keys(s3) == []

    assert mirror.count_records(ENV, "bank") == 5  # three loose markers: rolled up
    index = rows_index(ENV, "bank")
    [rollup] = rollup_keys(s3)
    assert rollup.startswith(f"{index}rollup/g=00000001-")
    assert keys(s3, index) == [f"{index}_whole", rollup]
    assert json.loads(s3.get_object(Bucket=BUCKET, Key=rollup)["Body"].read()) == {"imports": {"1": 1, "2": 2, "3": 3}}

    # Then a count lists the index's two keys and the tombstone, and reads the one roll-up
    counts, gets = listed_keys(s3), got_keys(s3)
    assert mirror.count_records(ENV, "bank") == 5
    assert mirror.published_imports(ENV, "bank") == {1: 1, 2: 2, 3: 3}
    assert counts == [2, 1, 2, 1] and gets == [rollup, rollup]
    # and the imports' own markers stay where they are (the repair's view)
    assert mirror.reindex(ENV, "bank") == {1: 1, 2: 2, 3: 3}


def once_before(s3, operation: str, key_part: str, meanwhile: Callable[[], object]) -> list[str]:
    """Run `meanwhile` once, just before the client's first `operation` on a key holding `key_part`
    (another worker's step between two of this one's); the key it came before."""
    before: list[str] = []

    def hook(params, **_):
        if key_part in params.get("Key", "") and not before:
            before.append(params["Key"])
            meanwhile()

    s3.meta.events.register(f"before-parameter-build.s3.{operation}", hook)
    return before


def listed_prefixes(s3) -> list[str]:
    """The prefix of each ListObjectsV2 the client sends from now on."""
    prefixes: list[str] = []
    s3.meta.events.register("before-parameter-build.s3.ListObjectsV2",
                            lambda params, **_: prefixes.append(params.get("Prefix", "")))
    return prefixes


def got_keys(s3) -> list[str]:
    """The keys of each GetObject the client sends from now on."""
    got: list[str] = []
    s3.meta.events.register("before-parameter-build.s3.GetObject", lambda params, **_: got.append(params["Key"]))
    return got


def test_imports_after_a_roll_up_count_beside_it_and_the_next_roll_up_takes_its_place(s3, few):
    mirror = rolled_up(s3, each=2)
    [first] = rollup_keys(s3)

    imported(mirror, 4, range(40, 41))
    imported(mirror, 5, range(50, 53))
    assert mirror.count_records(ENV, "bank") == 10  # two loose markers and the roll-up
    imported(mirror, 6, range(60, 61))
    assert mirror.count_records(ENV, "bank") == 11  # three: rolled up with the first roll-up

    [second] = rollup_keys(s3)
    assert second != first and "/rollup/g=00000002-" in second
    assert keys(s3, rows_index(ENV, "bank")) == [f"{rows_index(ENV, 'bank')}_whole", second]
    assert mirror.published_imports(ENV, "bank") == {1: 2, 2: 2, 3: 2, 4: 1, 5: 3, 6: 1}


def test_the_largest_marker_stands_in_a_roll_up_too(s3, few):
    mirror = rolled_up(s3, each=3)
    mirror.write_part(ENV, 1, 0, [record(10)])  # a retry that saw fewer parts
    mirror.publish(ENV, 1, ["bank"])
    mirror.summarize(ENV, 1, ["bank"])
    assert mirror.published_imports(ENV, "bank")[1] == 3
    assert mirror.count_records(ENV, "bank") == 9


def test_an_import_forgotten_leaves_its_roll_up_and_counts_as_written_again(s3, few):
    mirror = rolled_up(s3, each=5)
    [rolled] = rollup_keys(s3)

    mirror.forget_import(ENV, 2, ["bank"])
    assert mirror.published_imports(ENV, "bank") == {1: 5, 3: 5}
    [without] = rollup_keys(s3)
    assert without != rolled
    imported(mirror, 2, range(20, 22))  # written again from the table: fewer records now
    assert mirror.published_imports(ENV, "bank") == {1: 5, 2: 2, 3: 5}
    assert mirror.count_records(ENV, "bank") == 12


def test_reindex_rewrites_the_roll_up_from_the_imports_own_markers(s3, few):
    # Given a rolled-up index, then one import's own marker lost, and a loose entry for an import whose
    # own marker is not there
    mirror = rolled_up(s3, each=2)
    s3.delete_object(Bucket=BUCKET, Key=f"{import_prefix(ENV, 'bank', 2)}_rows=2")
    s3.put_object(Bucket=BUCKET, Key=index_marker_key(ENV, "bank", 9, 4), Body=b"")
    assert mirror.published_imports(ENV, "bank") == {1: 2, 2: 2, 3: 2, 9: 4}  # the index alone is read

    # When it is reindexed, one roll-up holds what the imports' own markers say, and nothing is loose
    assert mirror.reindex(ENV, "bank") == {1: 2, 3: 2}
    index = rows_index(ENV, "bank")
    [rollup] = rollup_keys(s3)
    assert keys(s3, index) == [f"{index}_whole", rollup] and "/rollup/g=00000002-" in rollup
    assert mirror.published_imports(ENV, "bank") == {1: 2, 3: 2}
    assert mirror.count_records(ENV, "bank") == 4


def test_a_stream_of_many_imports_gets_a_roll_up_from_the_count_that_makes_its_index_whole(s3, few):
    mirror = AnalyticsMirror(s3, BUCKET)
    for job_id in range(1, 5):
        imported(mirror, job_id, range(job_id * 10, job_id * 10 + 1))
    for key in keys(s3, rows_index(ENV, "bank")):  # published before the index
        s3.delete_object(Bucket=BUCKET, Key=key)
    assert mirror.count_records(ENV, "bank") == 4
    index = rows_index(ENV, "bank")
    assert keys(s3, index) == [f"{index}_whole", *rollup_keys(s3)] and len(rollup_keys(s3)) == 1


def test_a_count_whose_roll_up_is_replaced_under_it_lists_again(s3, few):
    # Given a rolled-up stream with loose markers enough for another roll-up
    mirror, other = AnalyticsMirror(s3, BUCKET), AnalyticsMirror(s3, BUCKET)
    for job_id in range(1, 7):
        imported(mirror, job_id, range(job_id * 10, job_id * 10 + 1))
        if job_id in (1, 4):
            mirror.count_records(ENV, "bank")
    assert mirror.count_records(ENV, "bank") == 6  # one roll-up (of 1-3 and 4) and two loose markers (5, 6)
    imported(mirror, 7, range(70, 71))

    # When another count rolls up (replacing the roll-up) just as this one is about to read it
    counted: list[int] = []
    replaced = once_before(s3, "GetObject", "/rollup/", lambda: counted.append(other.count_records(ENV, "bank")))
    # Then this one finds it gone, lists again and counts every import once
    assert mirror.count_records(ENV, "bank") == 7
    assert counted == [7] and replaced[0] not in rollup_keys(s3)
    assert mirror.published_imports(ENV, "bank") == {job_id: 1 for job_id in range(1, 8)}


def test_roll_ups_written_by_counts_that_met_both_count_and_are_merged_by_the_next(s3, few):
    mirror, other = AnalyticsMirror(s3, BUCKET), AnalyticsMirror(s3, BUCKET)
    for job_id in range(1, 3):
        imported(mirror, job_id, range(job_id * 10, job_id * 10 + 1))
    mirror.count_records(ENV, "bank")  # the index whole, two loose markers
    imported(mirror, 3, range(30, 31))

    # Two counts roll the same markers up at once: two roll-ups of the same generation
    counted: list[int] = []
    once_before(s3, "PutObject", "/rollup/", lambda: counted.append(other.count_records(ENV, "bank")))
    assert mirror.count_records(ENV, "bank") == 3
    assert counted == [3] and len(rollup_keys(s3)) == 2
    assert mirror.count_records(ENV, "bank") == 3

    for job_id in range(4, 7):
        imported(mirror, job_id, range(job_id * 10, job_id * 10 + 1))
    assert mirror.count_records(ENV, "bank") == 6
    [merged] = rollup_keys(s3)
    assert "/rollup/g=00000002-" in merged
    assert mirror.published_imports(ENV, "bank") == {job_id: 1 for job_id in range(1, 7)}


# The money roll-up: imports' money, kept in one object once ROLL_UP_AFTER imports without a tombstone have it.

def money_rollup_keys(s3) -> list[str]:
    return keys(s3, money_rollups(ENV, "bank"))


def eur(count: int, credits: int) -> CurrencyAmounts:
    return CurrencyAmounts("EUR", count, credits, 0, 2)


def test_a_streams_money_over_enough_imports_is_rolled_up_and_then_read_from_one_object(s3, few):
    mirror = AnalyticsMirror(s3, BUCKET)
    for job_id in range(1, 4):
        imported(mirror, job_id, range(job_id * 10, job_id * 10 + 2))  # amounts 100 + id
    expected = {"EUR": eur(6, sum(100 + i for j in range(1, 4) for i in (j * 10, j * 10 + 1)))}
    prefixes = listed_prefixes(s3)
    assert mirror.stream_money(ENV, "bank").money == expected  # each import read, then rolled up
    [rollup] = money_rollup_keys(s3)
    # the epoch looked at once for the sums it kept, not once an import
    assert [prefix for prefix in prefixes if "/epoch/" in prefix] == [f"{money_rollups(ENV, 'bank')}epoch/"]

    gets = got_keys(s3)
    mirrored = mirror.stream_money(ENV, "bank")
    assert mirrored.money == expected and mirrored.imports == {1, 2, 3}
    assert [key for key in gets if "/rows/" not in key] == [rollup]  # no import read alone

    # A tombstone: that import is read alone again, the others stay rolled up
    mirror.tombstone(ENV, "bank", 2, 20)
    gets.clear()
    assert mirror.stream_money(ENV, "bank").money == {"EUR": eur(5, expected["EUR"].credits - 120)}
    assert [key for key in gets if "/rows/" not in key and "/money/" not in key] == [
        f"{import_prefix(ENV, 'bank', 2)}_money-2-1.json", *[f"{import_prefix(ENV, 'bank', 2)}part-{n:06d}.parquet"
                                                              for n in (0,)]]


def test_an_import_whose_rows_changed_since_its_roll_up_is_read_alone(s3, few):
    mirror = AnalyticsMirror(s3, BUCKET)
    for job_id in range(1, 4):
        imported(mirror, job_id, range(job_id * 10, job_id * 10 + 1))
    mirror.stream_money(ENV, "bank")
    assert len(money_rollup_keys(s3)) == 1
    # A settle found another part of import 1 and left a larger marker
    mirror.write_part(ENV, 1, 9, [record(19)])
    mirror.publish(ENV, 1, ["bank"])
    mirror.summarize(ENV, 1, ["bank"])
    assert mirror.stream_money(ENV, "bank").money == {"EUR": eur(4, 110 + 119 + 120 + 130)}


def test_an_import_forgotten_puts_the_money_roll_up_out_of_date_and_its_new_amounts_count(s3, few):
    mirror = AnalyticsMirror(s3, BUCKET)
    for job_id in range(1, 4):
        imported(mirror, job_id, range(job_id * 10, job_id * 10 + 2))
    mirror.stream_money(ENV, "bank")
    [rollup] = money_rollup_keys(s3)

    # When import 3 is forgotten and written again with as many rows and other amounts
    mirror.forget_import(ENV, 3, ["bank"])
    [epoch] = [key for key in money_rollup_keys(s3) if "/epoch/" in key]
    assert epoch.endswith(tuple("0123456789abcdef")) and "/money/epoch/00000001-" in epoch
    rewritten(mirror, 3, [record(30, amount=5000), record(31, amount=7000)])

    # Then its new amounts count, and the next refresh rolls the stream up again in the new epoch
    gets = got_keys(s3)
    assert mirror.stream_money(ENV, "bank").money == {"EUR": eur(6, 110 + 111 + 120 + 121 + 12_000)}
    assert f"{import_prefix(ENV, 'bank', 1)}_money-2-0.json" in gets  # the old roll-up is not taken
    [again] = [key for key in money_rollup_keys(s3) if "/g=" in key]
    assert again.startswith(f"{money_rollups(ENV, 'bank')}{epoch.rsplit('/', 1)[1]}/g=00000002-")
    assert money_rollup_keys(s3) == sorted([epoch, again])  # the roll-up of the epoch before is gone
    gets.clear()
    assert mirror.stream_money(ENV, "bank").money == {"EUR": eur(6, 110 + 111 + 120 + 121 + 12_000)}
    assert [key for key in gets if "/rows/" not in key] == [again]


def rewritten(mirror: AnalyticsMirror, job_id: int, records: list[Record]) -> None:
    mirror.write_part(ENV, job_id, 0, records)
    mirror.publish(ENV, job_id, ["bank"])
    mirror.summarize(ENV, job_id, ["bank"])


def test_a_refresh_that_read_an_import_before_it_was_forgotten_writes_a_roll_up_no_one_takes(s3, monkeypatch):
    # Given three imports whose sums are kept beside them, not rolled up yet
    mirror, repair = AnalyticsMirror(s3, BUCKET), AnalyticsMirror(s3, BUCKET)
    for job_id in range(1, 4):
        imported(mirror, job_id, range(job_id * 10, job_id * 10 + 2))
    mirror.stream_money(ENV, "bank")
    assert money_rollup_keys(s3) == []
    monkeypatch.setattr(mirror_module, "ROLL_UP_AFTER", 3)

    # When a refresh that read them rolls them up just as the repair forgets import 3 and writes it again
    # with as many rows and other amounts
    def repaired_meanwhile() -> None:
        repair.forget_import(ENV, 3, ["bank"])
        rewritten(repair, 3, [record(30, amount=5000), record(31, amount=7000)])

    late = once_before(s3, "PutObject", "/money/0/g=", repaired_meanwhile)
    assert mirror.stream_money(ENV, "bank").money == {"EUR": eur(6, 110 + 111 + 120 + 121 + 130 + 131)}

    # Then its roll-up is of the epoch before, and the next refresh counts the new amounts
    assert late and late[0] in money_rollup_keys(s3)
    assert mirror.stream_money(ENV, "bank").money == {"EUR": eur(6, 110 + 111 + 120 + 121 + 12_000)}
    assert late[0] not in money_rollup_keys(s3)  # taken away with the next roll-up


def test_a_sum_of_the_old_parts_written_after_the_import_was_forgotten_is_taken_back(s3):
    # Given three imports no refresh has read yet
    mirror, repair = AnalyticsMirror(s3, BUCKET), AnalyticsMirror(s3, BUCKET)
    for job_id in range(1, 4):
        imported(mirror, job_id, range(job_id * 10, job_id * 10 + 2))

    # When the repair forgets import 3 and writes it again (as many rows, other amounts) just after a
    # refresh read its old parts and before that refresh keeps their sum
    def repaired_meanwhile() -> None:
        repair.forget_import(ENV, 3, ["bank"])
        rewritten(repair, 3, [record(30, amount=5000), record(31, amount=7000)])

    late = once_before(s3, "PutObject", f"{import_prefix(ENV, 'bank', 3)}_money-", repaired_meanwhile)
    mirror.stream_money(ENV, "bank")  # its figure is of the parts it read

    # Then that sum is not kept: the next refresh reads the import's new parts
    assert late == [f"{import_prefix(ENV, 'bank', 3)}_money-2-0.json"]
    assert mirror.stream_money(ENV, "bank").money == {"EUR": eur(6, 110 + 111 + 120 + 121 + 12_000)}


def test_a_forget_takes_back_a_sum_a_refresh_wrote_after_its_first_look_at_the_import(s3):
    # Given an import whose sum a refresh writes while the repair forgets it: after the forget listed the
    # import's keys, before it writes the new epoch (the refresh, having listed the epoch before, would
    # keep it were it written after its own look at the epoch)
    mirror = AnalyticsMirror(s3, BUCKET)
    imported(mirror, 3, range(30, 32))
    stale = f"{import_prefix(ENV, 'bank', 3)}_money-2-0.json"
    late = once_before(s3, "PutObject", "/money/epoch/", lambda: s3.put_object(
        Bucket=BUCKET, Key=stale, Body=b'{"EUR":{"count":2,"credits":261,"debits":0,"decimal_places":2}}'))

    mirror.forget_import(ENV, 3, ["bank"])

    # Then the forget's second look at the import deletes it
    assert late and stale not in keys(s3, import_prefix(ENV, "bank", 3))
    rewritten(mirror, 3, [record(30, amount=5000), record(31, amount=7000)])
    assert mirror.stream_money(ENV, "bank").money == {"EUR": eur(2, 12_000)}


def test_a_forget_meeting_another_ends_with_an_epoch_of_its_own_as_the_latest(s3, monkeypatch):
    # Given two repairs forgetting imports of one stream at once: the second writes its epoch (of the
    # same generation, sorting after) just before the first writes its own
    mirror, other = AnalyticsMirror(s3, BUCKET), AnalyticsMirror(s3, BUCKET)
    imported(mirror, 1, range(10, 12))
    imported(mirror, 2, range(20, 22))
    tokens = iter(["a" * 32, "f" * 32, "b" * 32])
    monkeypatch.setattr(mirror_module, "uuid", SimpleNamespace(uuid4=lambda: SimpleNamespace(hex=next(tokens))))
    once_before(s3, "PutObject", "/money/epoch/", lambda: other.forget_import(ENV, 2, ["bank"]))

    mirror.forget_import(ENV, 1, ["bank"])

    # Then the first, finding the other's the latest, writes one of the next generation
    epochs = f"{money_rollups(ENV, 'bank')}epoch/"
    assert keys(s3, epochs) == [f"{epochs}00000001-{'a' * 12}", f"{epochs}00000001-{'f' * 12}",
                                f"{epochs}00000002-{'b' * 12}"]


def test_a_reindex_rolling_up_keeps_an_entry_naming_more_rows_than_it_listed_when_that_marker_came(s3, few):
    # Given a rolled-up stream whose import 1 a settle's retry finds larger as a reindex lists it: the
    # retry's index entry seen, its own marker not yet
    mirror = rolled_up(s3, each=2)
    mirror.write_part(ENV, 1, 5, [record(15)])
    mirror.publish(ENV, 1, ["bank"])
    s3.put_object(Bucket=BUCKET, Key=index_marker_key(ENV, "bank", 1, 3), Body=b"")
    landed = once_after_listing(s3, lambda: s3.put_object(
        Bucket=BUCKET, Key=f"{import_prefix(ENV, 'bank', 1)}_rows=3", Body=b""))

    assert mirror.reindex(ENV, "bank") == {1: 2, 2: 2, 3: 2}  # what the listing saw

    # Then the larger entry stays beside the roll-up
    assert landed and index_marker_key(ENV, "bank", 1, 3) in keys(s3, rows_index(ENV, "bank"))
    assert mirror.published_imports(ENV, "bank") == {1: 3, 2: 2, 3: 2}


def once_after_listing(s3, meanwhile: Callable[[], object]) -> list[bool]:
    """Run `meanwhile` once, just after the client's next listing answers."""
    landed: list[bool] = []

    def hook(**_):
        if not landed:
            landed.append(True)
            meanwhile()

    s3.meta.events.register("after-call.s3.ListObjectsV2", hook)
    return landed


def test_reindex_keeps_an_entry_whose_imports_own_marker_came_while_it_listed(s3):
    # Given an import publishing as the reindex lists: its index entry seen, its own marker not yet
    mirror = AnalyticsMirror(s3, BUCKET)
    imported(mirror, 1, range(1, 3))
    mirror.write_part(ENV, 2, 0, [record(5)])
    mirror.publish(ENV, 2, ["bank"])
    s3.put_object(Bucket=BUCKET, Key=index_marker_key(ENV, "bank", 2, 1), Body=b"")

    landed = once_after_listing(s3, lambda: s3.put_object(
        Bucket=BUCKET, Key=f"{import_prefix(ENV, 'bank', 2)}_rows=1", Body=b""))
    assert mirror.reindex(ENV, "bank") == {1: 2}  # what the listing saw

    # Then the entry stays: the import is counted
    assert landed and index_marker_key(ENV, "bank", 2, 1) in keys(s3, rows_index(ENV, "bank"))
    assert mirror.published_imports(ENV, "bank") == {1: 2, 2: 1}
    assert mirror.count_records(ENV, "bank") == 3
