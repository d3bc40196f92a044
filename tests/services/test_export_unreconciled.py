"""The unreconciled records an export reads at scale (ids from the open-records index, columns from
the analytics mirror) are exactly the rows `GET /records?status=unreconciled` lists, in its order:
whatever is matched, proposed or deleted, whatever the mirror lacks (an import not published yet,
parts written before `created_at` was a column), under every filter, and from any cursor."""
from __future__ import annotations

import pytest

from chalicelib.domain.exports import csv_bytes, frame_csv_bytes, record_row
from chalicelib.domain.matches import MatchStatus
from chalicelib.domain.records import RecordQuery, RecordStatus
from chalicelib.services import export_unreconciled
from chalicelib.services.reconciliation_rules import create_rule
from chalicelib.services.records import delete_record
from tests.services.conftest import ENV, matched_by_a_run, record

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}
UNRECONCILED = RecordStatus.UNRECONCILED


def listed(ports, query: RecordQuery) -> list[tuple]:
    """The list route's rows, every page."""
    rows, cursor = [], None
    while True:
        found, cursor = ports.records.list_page(ENV, query, 17, cursor)
        rows += [record_row(r) for r in found]
        if cursor is None:
            return rows


def exported(ports, query: RecordQuery, cursor: str | None = None, window_rows: int = 7) -> list[tuple]:
    return [row for page in export_unreconciled.pages(ports, ENV, query, cursor, window_rows)
            for row in page.all_rows()]


@pytest.fixture
def world(ports, ingest, reconciliation):
    """Bank and ledger records over four imports, some matched (confirmed and proposed), one
    deleted; the mirror lacks one import and holds another as parts written before `created_at`."""
    rule = create_rule(ports, ENV, reconciliation.id, RULE)
    bank = ingest(*[record("bank", n, 100 + n, f"2026-11-{1 + n % 20:02d}", metadata={"n": n} if n % 3 else None)
                    for n in range(40)])
    ledger = ingest(*[record("ledger", n, 100 + n, "2026-11-05", description=f"=INV {n}") for n in range(25)])
    unpublished = ingest(*[record("bank", 100 + n, 7, "2026-11-09") for n in range(9)])
    old_parts = ingest(*[record("ledger", 100 + n, 8, "2026-11-10") for n in range(11)])
    for n in (0, 1, 2):
        matched_by_a_run(ports, reconciliation, rule, [bank[n]], [ledger[n]])
    matched_by_a_run(ports, reconciliation, rule, [bank[3]], [ledger[3]], MatchStatus.PROPOSED)
    delete_record(ports, ENV, bank[10])
    mirror = ports.mirror
    unpublished_job, old_parts_job = _job_of(ports, unpublished[0]), _job_of(ports, old_parts[0])
    mirror.forget_import(ENV, unpublished_job, ["bank"])
    for key, part in mirror.published.items():
        if key[2] == old_parts_job:
            mirror.published[key] = tuple({k: v for k, v in row.items() if k not in ("created_at", "metadata")}
                                          for row in part)
    return {"bank": bank, "ledger": ledger, "unpublished_job": unpublished_job}


def _job_of(ports, record_id: int) -> int:
    """The ingestion job whose block of ids holds the record."""
    return next(job.id for job in (ports.ingestion_jobs.get(env, job_id) for env, job_id in ports.ingestion_jobs.rows)
                if job.environment == ENV and job.first_record_id is not None
                and job.first_record_id <= record_id < job.first_record_id + job.total_items)


@pytest.mark.parametrize("query", [
    RecordQuery(status=UNRECONCILED),
    RecordQuery(status=UNRECONCILED, data_stream_key="bank"),
    RecordQuery(status=UNRECONCILED, data_stream_key="ledger"),
    RecordQuery(status=UNRECONCILED, date_from="2026-11-05", date_to="2026-11-09"),
], ids=["every stream", "bank", "ledger", "dates"])
def test_the_rows_are_the_list_routes_in_its_order(ports, world, query):
    rows = exported(ports, query)
    assert rows == listed(ports, query) and rows
    written = b"".join(frame_csv_bytes(p.frame) for p in export_unreconciled.pages(ports, ENV, query, None, 7))
    assert written == csv_bytes(listed(ports, query))  # the file the list route's rows would make
    assert [row[0] for row in rows] == sorted((row[0] for row in rows), reverse=True)
    ids = {row[0] for row in rows}
    assert not ids & set(world["bank"][:4] + world["ledger"][:4])  # matched, proposed
    assert world["bank"][10] not in ids  # deleted


def test_the_rows_of_one_import_are_those_it_wrote_that_are_open(ports, world):
    query = RecordQuery(status=UNRECONCILED, file_import_id=world["unpublished_job"])
    rows = exported(ports, query)
    assert len(rows) == 9 and rows == listed(ports, query)


def test_every_cursor_continues_with_the_rows_after_it(ports, world):
    query = RecordQuery(status=UNRECONCILED)
    everything = listed(ports, query)
    pages = list(export_unreconciled.pages(ports, ENV, query, None, 7))
    assert [p.cursor is None for p in pages] == [False] * (len(pages) - 1) + [True]
    seen = 0
    for page in pages[:-1]:
        seen += page.row_count
        assert exported(ports, query, page.cursor, 5) == everything[seen:]


def test_a_window_wider_than_everything_reads_it_in_one_page(ports, world):
    query = RecordQuery(status=UNRECONCILED)
    [page] = list(export_unreconciled.pages(ports, ENV, query, None, 10_000))
    assert page.all_rows() == listed(ports, query) and page.cursor is None


def test_no_unreconciled_record_is_one_empty_page(ports, reconciliation):
    assert [(p.all_rows(), p.cursor) for p in export_unreconciled.pages(
        ports, ENV, RecordQuery(status=UNRECONCILED), None)] == [([], None)]


def test_a_cursor_of_the_list_routes_read_is_not_this_paths():
    query = RecordQuery(status=UNRECONCILED)
    assert export_unreconciled.serves(query, None) and export_unreconciled.serves(query, "unreconciled-below:12")
    assert not export_unreconciled.serves(query, "E#acme#ST#unreconciled:12")  # begun before: goes on as it was
    assert not export_unreconciled.serves(RecordQuery(status=UNRECONCILED, external_id="x"), None)
    assert not export_unreconciled.serves(RecordQuery(status=UNRECONCILED, file_import_id=3), None)  # one block
    assert not export_unreconciled.serves(RecordQuery(), None)
