"""The `sql` tool's engine on moto's S3: one environment's published mirror parts as `records`, less
its tombstones, never another environment's; bounded rows and time; parts cached by key and ETag."""
from __future__ import annotations

import io
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote

import boto3
import pytest

from chalicelib.adapters.mirror import AnalyticsMirror, import_prefix
from chalicelib.adapters.records_sql import RecordsSql, SqlAnswer, as_table
from chalicelib.domain.agents.sql_guard import SqlRefused
from chalicelib.domain.records import Direction, Record, RecordStatus
from tests.support.worlds import WORLDS

BUCKET = "recon-sql-test"
BIG = 2**53 + 1  # no float holds it: a sum that went through a float would come back even


def record(record_id: int, stream: str = "bank", amount: int = 100, currency: str = "EUR",
           direction: Direction = Direction.CREDIT, environment: str = "acme", **fields) -> Record:
    return Record(environment=environment, id=record_id, data_stream_key=stream, data_stream_id=1,
                  date=f"2026-03-{1 + record_id % 28:02d}", amount=amount, direction=direction, currency=currency,
                  decimal_places=2, status=RecordStatus.UNRECONCILED, created_at=datetime(2026, 3, 1, tzinfo=UTC),
                  external_id=f"{environment}-{record_id}", file_import_id=None, **fields)


def imported(mirror: AnalyticsMirror, environment: str, job_id: int, records: list[Record]) -> None:
    streams = sorted({r.data_stream_key for r in records})
    mirror.write_part(environment, job_id, 0, records)
    mirror.publish(environment, job_id, streams)
    mirror.summarize(environment, job_id, streams)


ACME = [record(1, amount=BIG), record(2, amount=BIG), record(3, amount=250, currency="USD"),
        record(4, "ledger", amount=40, direction=Direction.DEBIT, metadata={"order": "A-1", "channel": "web"}),
        record(5, "ledger", amount=7, metadata={"order": "B-2"})]
GLOBEX = [record(101 + n, amount=1_000_000, currency="EUR", environment="globex") for n in range(3)]


@pytest.fixture
def s3(moto_aws):
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def mirror(s3):
    """Both environments' records in the mirror: written once a process, restored after."""
    mirror = AnalyticsMirror(s3, BUCKET)

    def both_imported() -> None:
        imported(mirror, "acme", 7, ACME)
        imported(mirror, "globex", 8, GLOBEX)
    WORLDS.restore_or_build("test_records_sql.mirror", both_imported)
    return mirror


@pytest.fixture
def engine(s3, mirror, tmp_path):
    return RecordsSql(s3, BUCKET, tmp_path / "cache")


def gets(s3) -> list[str]:
    """The keys of every GetObject the client sends from now on."""
    seen: list[str] = []
    s3.meta.events.register("before-call.s3.GetObject", lambda params, **_: seen.append(params["url_path"]))
    return seen


def test_a_group_by_sums_each_currency_in_exact_integers(engine):
    answer = engine.query("acme", "SELECT currency, count(*) AS n, sum(amount) AS total FROM records "
                                  "GROUP BY currency ORDER BY currency")
    assert answer == SqlAnswer(columns=["currency", "n", "total"], rows=[("EUR", 4, 2 * BIG + 47), ("USD", 1, 250)],
                               truncated=False, total_records=5)
    assert as_table(answer).splitlines() == ["currency | n | total", f"EUR | 4 | {2 * BIG + 47}", "USD | 1 | 250",
                                             "(2 rows)"]


def test_the_table_has_the_records_api_fields_and_nothing_else(engine):
    answer = engine.query("acme", "SELECT * FROM records WHERE id = 4")
    assert answer.columns == ["id", "data_stream_key", "date", "amount", "currency", "decimal_places", "direction",
                              "description", "external_id", "metadata"]
    assert answer.rows == [(4, "ledger", "2026-03-05", 40, "EUR", 2, "debit", None, "acme-4",
                            '{"channel":"web","order":"A-1"}')]


@pytest.mark.parametrize("sql", [
    "SELECT id, external_id FROM records",
    "SELECT id, external_id FROM records WHERE external_id LIKE 'globex%' OR 1 = 1",
    "SELECT id, external_id FROM records WHERE id > 100 OR id < 100",
    "SELECT id, external_id FROM records UNION ALL SELECT id, external_id FROM records WHERE id >= 101",
    "WITH everything AS (SELECT * FROM records) SELECT id, external_id FROM everything",
    "SELECT r.id, r.external_id FROM records r JOIN records s ON r.id <> s.id OR r.id = s.id",
])
def test_another_environments_records_never_appear(engine, sql):
    ids = {row[0] for row in engine.query("acme", sql).rows}
    assert ids == {1, 2, 3, 4, 5}
    assert {row[0] for row in engine.query("globex", sql).rows} == {101, 102, 103}


def test_a_statement_naming_anything_else_reads_nothing(engine, s3, tmp_path):
    pl = pytest.importorskip("polars")
    secret = tmp_path / "secret.parquet"
    pl.DataFrame({"id": [666]}).write_parquet(secret)
    sent = gets(s3)
    for sql in (f"SELECT * FROM read_parquet('{secret}')", f"SELECT * FROM '{secret}'",
                "SELECT * FROM records JOIN \"environment=globex\" USING (id)", "SELECT 1; DROP TABLE records"):
        with pytest.raises(SqlRefused):
            engine.query("acme", sql)
    assert sent == []  # refused before the listing's parts were even fetched
    assert not (tmp_path / "cache").exists()


def test_tombstoned_records_are_gone(engine, mirror):
    mirror.tombstone("acme", "bank", 7, 2)
    mirror.tombstone("acme", "ledger", 7, 5)
    answer = engine.query("acme", "SELECT id FROM records ORDER BY id")
    assert (answer.rows, answer.total_records) == ([(1,), (3,), (4,)], 3)
    assert engine.query("acme", "SELECT sum(amount) FROM records WHERE currency = 'EUR'").rows == [(BIG + 40,)]


def test_only_published_imports_with_their_row_marker_are_read(engine, mirror):
    mirror.write_part("acme", 9, 0, [record(50, amount=9)])  # staged only
    mirror.write_part("acme", 10, 0, [record(60, amount=9)])
    mirror.publish("acme", 10, ["bank"])  # published, not yet summarized: no marker, not counted anywhere
    assert engine.query("acme", "SELECT count(*) FROM records WHERE amount = 9").rows == [(0,)]
    mirror.summarize("acme", 10, ["bank"])
    answer = engine.query("acme", "SELECT id FROM records WHERE amount = 9")
    assert (answer.rows, answer.total_records) == ([(60,)], 6)


@pytest.mark.parametrize(("max_rows", "truncated"), [(4, True), (5, False), (6, False)])
def test_rows_are_bounded_and_a_cut_answer_says_so(s3, mirror, tmp_path, max_rows, truncated):
    engine = RecordsSql(s3, BUCKET, tmp_path, max_rows=max_rows)
    answer = engine.query("acme", "SELECT id FROM records ORDER BY id")
    assert (answer.rows, answer.truncated) == ([(n,) for n in range(1, 6)][:max_rows], truncated)
    assert ("the query returns more" in as_table(answer)) is truncated


def test_a_second_query_reads_the_parts_from_the_cache(engine, s3, mirror, tmp_path):
    sent = gets(s3)
    engine.query("acme", "SELECT count(*) FROM records")
    assert len(sent) == 2  # bank's part and ledger's part of import 7
    assert len(list((tmp_path / "cache" / "acme").glob("*.parquet"))) == 2
    assert engine.query("acme", "SELECT sum(amount) FROM records WHERE currency = 'USD'").rows == [(250,)]
    assert len(sent) == 2
    imported(mirror, "acme", 11, [record(70, amount=1, currency="USD")])
    sent.clear()
    assert engine.query("acme", "SELECT sum(amount) FROM records WHERE currency = 'USD'").rows == [(251,)]
    assert len(sent) == 1  # the new part, nothing else
    assert len(list((tmp_path / "cache" / "acme").glob("*.parquet"))) == 3


def test_other_environments_caches_go_when_the_cache_is_over_its_bound(s3, mirror, tmp_path):
    engine = RecordsSql(s3, BUCKET, tmp_path, max_cache_bytes=1)
    engine.query("acme", "SELECT 1 FROM records")
    assert (tmp_path / "acme").is_dir()
    engine.query("globex", "SELECT 1 FROM records")
    assert not (tmp_path / "acme").exists()
    assert len(list((tmp_path / "globex").glob("*.parquet"))) == 1  # the one queried stays, over the bound or not


def test_a_forgotten_import_leaves_the_cache_and_the_table(engine, mirror, tmp_path):
    engine.query("acme", "SELECT 1 FROM records")
    mirror.forget_import("acme", 7, ["bank", "ledger"])
    assert engine.query("acme", "SELECT count(*) FROM records").rows == [(0,)]
    assert list((tmp_path / "cache" / "acme").glob("*.parquet")) == []


def children() -> set[int]:
    """This process' live children (Linux)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


@pytest.fixture
def many(s3, mirror):
    """80,000 more records of acme: 6.4e9 pairs for a self-join to go through (written once a
    process, restored after)."""
    WORLDS.restore_or_build("test_records_sql.many", lambda: imported(
        AnalyticsMirror(s3, BUCKET), "acme", 12, [record(1000 + n, amount=n) for n in range(80_000)]))


def test_a_query_over_the_time_bound_is_stopped_and_refused(s3, many, tmp_path):
    engine = RecordsSql(s3, BUCKET, tmp_path, timeout_seconds=3)
    assert engine.query("acme", "SELECT count(*) FROM records").rows == [(80_005,)]  # cached: the query is timed
    before = children()
    started = time.monotonic()
    with pytest.raises(SqlRefused, match=r"took longer than 3 s and was stopped"):
        engine.query("acme", "SELECT count(*) FROM records a CROSS JOIN records b WHERE a.amount < b.id")
    assert 3 <= time.monotonic() - started < 4.5
    assert children() == before  # killed and reaped, not left computing


def test_a_query_over_the_memory_bound_is_stopped_and_refused(s3, many, tmp_path):
    engine = RecordsSql(s3, BUCKET, tmp_path, timeout_seconds=60, max_memory_mb=400)
    with pytest.raises(SqlRefused, match=r"needed more than 400 MB"):  # a set of 3.2e9 pairs
        engine.query("acme", "SELECT count(DISTINCT a.id * 1000000 + b.id) FROM records a JOIN records b "
                             "ON a.amount % 2 = b.amount % 2")


def test_the_querys_process_holds_no_aws_credentials(engine, monkeypatch):
    import subprocess

    started = []
    popen = subprocess.Popen

    def spy(*args, **kwargs):
        started.append(kwargs["env"])
        return popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    monkeypatch.setenv("MODEL_API_KEY", "sk-secret")
    assert engine.query("acme", "SELECT count(*) FROM records").rows == [(5,)]
    assert os.environ["AWS_SECRET_ACCESS_KEY"] and started
    assert [name for name in started[0] if name.startswith("AWS_") or "KEY" in name] == []


def test_a_request_larger_than_a_pipes_buffer_reaches_the_querys_process(s3, mirror, tmp_path):
    """300 parts under a long cache path: the query's request (their paths) is over 64 KB."""
    for part in range(300):
        mirror.write_part("acme", 13, part, [record(2000 + part, amount=1)])
    mirror.publish("acme", 13, ["bank"])
    mirror.summarize("acme", 13, ["bank"])
    engine = RecordsSql(s3, BUCKET, tmp_path / ("a-long-cache-directory-" * 8), timeout_seconds=20)
    assert engine.query("acme", "SELECT count(*), sum(amount) FROM records WHERE id >= 2000").rows == [(300, 300)]


def test_metadata_is_json_text_with_sorted_keys_and_null_when_empty(engine):
    answer = engine.query("acme", "SELECT id, metadata FROM records WHERE metadata LIKE '%\"order\":\"B-2\"%'")
    assert answer.rows == [(5, '{"order":"B-2"}')]
    answer = engine.query("acme", "SELECT id FROM records WHERE regexp_like(metadata, '\"channel\":\"web\"')")
    assert answer.rows == [(4,)]
    assert engine.query("acme", "SELECT count(*) FROM records WHERE metadata IS NULL").rows == [(3,)]


def test_parts_written_before_the_metadata_column_read_as_null(engine, s3):
    pl = pytest.importorskip("polars")
    old = pl.DataFrame({"id": [201], "data_stream_key": ["bank"], "data_stream_id": [1], "date": ["2025-01-02"],
                        "amount": [5], "currency": ["EUR"], "decimal_places": [2], "direction": ["credit"],
                        "description": ["old"], "external_id": ["old-201"], "file_import_id": [None]},
                       schema_overrides={"decimal_places": pl.Int32, "file_import_id": pl.Int64})
    buffer = io.BytesIO()
    old.write_parquet(buffer)
    prefix = import_prefix("acme", "bank", 3)
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}part-000000.parquet", Body=buffer.getvalue())
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}_rows=1", Body=b"")
    answer = engine.query("acme", "SELECT id, description, metadata FROM records WHERE id IN (201, 4) ORDER BY id")
    assert answer.rows == [(4, None, '{"channel":"web","order":"A-1"}'), (201, "old", None)]


def test_polars_errors_come_back_as_a_refusal_without_the_query_plan(engine):
    with pytest.raises(SqlRefused) as refused:
        engine.query("acme", "SELECT no_such_column FROM records")
    assert "no_such_column" in refused.value.reason
    assert "\n" not in refused.value.reason and "cache" not in refused.value.reason


def test_an_environment_without_records_is_an_empty_table(engine):
    answer = engine.query("initech", "SELECT currency, count(*) FROM records GROUP BY currency")
    assert (answer.columns, answer.rows, answer.total_records) == (["currency", "len"], [], 0)


@pytest.mark.parametrize("environment", ["acme/../globex", "acme\n"])
def test_the_environment_must_be_an_environment_name(engine, environment):
    with pytest.raises(ValueError):
        engine.query(environment, "SELECT 1 FROM records")


def test_cells_are_printed_plainly_and_long_ones_cut():
    answer = SqlAnswer(columns=["a", "b", "c"], rows=[(None, "x|y\nz", "w" * 200), (True, 1.5, 12)], truncated=False,
                       total_records=2)
    lines = as_table(answer).splitlines()
    assert lines[1].startswith("null | x\\|y\\nz | " + "w" * 79 + "…")
    assert lines[2:] == ["true | 1.5 | 12", "(2 rows)"]


def test_an_import_of_many_parts_is_read_as_its_one_compact_object(engine, s3, mirror):
    for part in range(3):  # three chunks of one import, as a large file import writes them
        mirror.write_part("acme", 12, part, [record(300 + 10 * part + n, amount=1) for n in range(10)])
    mirror.publish("acme", 12, ["bank"])
    mirror.summarize("acme", 12, ["bank"])
    sent = gets(s3)
    assert engine.query("acme", "SELECT count(*), sum(amount) FROM records WHERE id >= 300").rows == [(30, 30)]
    read = [unquote(key).rsplit("/", 2)[-2:] for key in sent]
    assert [name for name in read if name[0] == "import=12"] == [["import=12", "compact.parquet"]]
    mirror.tombstone("acme", "bank", 12, 305)  # a record deleted afterwards is gone from the compact reading too
    assert engine.query("acme", "SELECT count(*) FROM records WHERE id >= 300").rows == [(29,)]
