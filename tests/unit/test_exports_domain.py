"""The pure part of exports: decimal strings, neutralised cells, CSV bytes, spreadsheet cells, the
column sets (each row as long as its header, docs/exports.md the same table)."""
from __future__ import annotations

import csv
import io
import re
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.domain.audit import AuditEntry
from chalicelib.domain.exports import (
    COLUMNS,
    XLSX_CELL_CHARS,
    XLSX_EXACT_INTEGER,
    Column,
    ExportKind,
    ExportTooLarge,
    audit_row,
    cell_text,
    csv_bytes,
    decimal_string,
    exception_row,
    header,
    item_result_row,
    match_record_row,
    match_row,
    period_close_rows,
    record_row,
    spreadsheet_cell,
)
from chalicelib.domain.ingestion import ItemResult, ItemStatus
from chalicelib.domain.matches import Match, MatchStatus
from chalicelib.domain.period_closes import CloseStatus, OpenException, OpenMoney, Period, PeriodClose
from chalicelib.domain.reconciliation_exceptions import Assignee, ExceptionStatus, ReconciliationException
from chalicelib.domain.records import Direction, Record, RecordStatus

DOC = Path(__file__).resolve().parents[2] / "docs" / "exports.md"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("minor", "places", "text"), [
    (12345, 2, "123.45"), (5, 2, "0.05"), (-5, 2, "-0.05"), (0, 2, "0.00"), (7, 0, "7"), (-7, 0, "-7"),
    (1, 3, "0.001"), (10**20 + 1, 2, "1000000000000000000.01"),
])
def test_decimal_strings_are_exact(minor, places, text):
    assert decimal_string(minor, places) == text


@given(st.integers(min_value=-(10**30), max_value=10**30), st.integers(min_value=0, max_value=18))
def test_a_decimal_string_reads_back_as_its_minor_units(minor, places):
    text = decimal_string(minor, places)
    assert int(text.replace(".", "")) == minor and (places == 0 or len(text.split(".")[1]) == places)


@pytest.mark.parametrize(("value", "cell"), [
    ("=1+1", "'=1+1"), ("+cmd", "'+cmd"), ("-2+3", "'-2+3"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"),
    ("\rx", "'\rx"), (" =1+1", "' =1+1"), ("\n=cmd", "'\n=cmd"), ("-12.50", "-12.50"), ("+5", "+5"), ("plain", "plain"), (None, ""), (42, "42"), (-3, "-3"),
])
def test_formula_cells_are_neutralised_and_numbers_are_not(value, cell):
    assert cell_text(value) == cell


def test_csv_bytes_quote_only_what_needs_it_and_end_lines_with_crlf():
    data = csv_bytes([("a,b", 'say "hi"', "=HYPERLINK(1)", None, 5)])
    assert data == b'"a,b","say ""hi""",\'=HYPERLINK(1),,5\r\n'
    assert list(csv.reader(io.StringIO(data.decode()))) == [["a,b", 'say "hi"', "'=HYPERLINK(1)", "", "5"]]


def test_spreadsheet_cells_keep_numbers_numbers_unless_excel_would_round_them():
    number, text = Column("n", "int", ""), Column("t", "str", "")
    assert spreadsheet_cell(12345, number) == 12345
    assert spreadsheet_cell(XLSX_EXACT_INTEGER, number) == str(XLSX_EXACT_INTEGER)
    # Text as it is: XLSX writes it as a string cell, quote-prefixed by style where it looks like a formula
    assert spreadsheet_cell("=1", text) == "=1" and spreadsheet_cell(None, text) is None


def test_text_longer_than_an_xlsx_cell_holds_fails_the_export_naming_the_formats_that_keep_it(tmp_path):
    # Records take 64 KiB of metadata; XlsxWriter would keep the first 32,767 characters and say nothing
    from chalicelib.adapters.export_files import _write_xlsx

    text = Column("metadata", "str", "")
    assert spreadsheet_cell("x" * XLSX_CELL_CHARS, text) == "x" * XLSX_CELL_CHARS
    row = record_row(a_record(metadata={"note": "x" * 40_000}))
    with pytest.raises(ExportTooLarge, match="a 'metadata' cell of 40,011 characters is longer than an XLSX "
                                             "cell holds \\(32,767\\): ask for this export as CSV or Parquet"):
        _write_xlsx(str(tmp_path / "e.xlsx"), COLUMNS[ExportKind.RECORDS], [[row]])


def a_record(**fields):
    base = dict(environment="acme", id=9, data_stream_key="bank", data_stream_id=1, date="2026-11-02", amount=12345,
                direction=Direction.DEBIT, currency="EUR", decimal_places=2, status=RecordStatus.UNRECONCILED,
                created_at=NOW, description="=cmd", external_id="x-1", metadata={"b": 1, "a": "z"})
    return Record(**{**base, **fields})


def a_period_close() -> PeriodClose:
    return PeriodClose(
        environment="acme", id=5, reconciliation_id=2, period=Period(date(2026, 10, 1), date(2026, 10, 31)),
        status=CloseStatus.CLOSED, note="=signed", closed_by="user:1", closed_at=NOW,
        unmatched=(OpenMoney("EUR", 2, 3, 1050, 200), OpenMoney("USD", 2, 1, 0, 99)),
        open_exceptions=(OpenException(4, "open", "t", "bank", 3, (OpenMoney("EUR", 2, 3, 1050, 200),),
                                       "waiting for the bank", "exception"),))


def test_a_period_close_report_lists_each_open_exception_then_the_unmatched_money_per_currency():
    rows = [dict(zip(header(ExportKind.PERIOD_CLOSE_REPORT), row, strict=True))
            for row in period_close_rows(a_period_close())]
    assert [(r["line"], r["exception_id"], r["currency"], r["record_count"]) for r in rows] == [
        ("exception", 4, "EUR", 3), ("unmatched", None, "EUR", 3), ("unmatched", None, "USD", 1)]
    assert (rows[0]["credits_minor"], rows[0]["credits"], rows[0]["debits"]) == (1050, "10.50", "2.00")
    assert rows[0]["explanation"] == "waiting for the bank" and rows[1]["explanation"] is None
    assert {r["period_start"] for r in rows} == {"2026-10-01"} and {r["note"] for r in rows} == {"=signed"}
    assert b"'=signed" in csv_bytes(period_close_rows(a_period_close()))  # a formula is neutralised


def test_each_kinds_rows_are_as_long_as_its_header_and_named_by_it():
    record = a_record()
    match = Match(environment="acme", id=3, reconciliation_id=2, status=MatchStatus.CONFIRMED, group_key="g",
                  record_count=2, created_at=NOW, differences={"amount": 0})
    exception = ReconciliationException(
        environment="acme", id=4, reconciliation_id=2, data_stream_key="bank", data_stream_id=1, title="t",
        description="d", status=ExceptionStatus.OPEN, created_at=NOW, updated_at=NOW, opened_at=NOW,
        assignees=(Assignee(1, "idp-ada", 7), Assignee(2, "idp-bob")), currency="EUR")
    entry = AuditEntry(environment="acme", seq=1, at=NOW, actor="user:1", action="export.created",
                       resource_type="export", resource_id="1", summary={"kind": "records"}, prev_hash="0", hash="1")
    rows = {
        ExportKind.RECORDS: record_row(record), ExportKind.UNMATCHED_RECORDS: record_row(record),
        ExportKind.MATCHES: match_row(match), ExportKind.MATCH_RECORDS: match_record_row(match, "a", record),
        ExportKind.EXCEPTIONS: exception_row(exception, {"record_count": 2, "total_amount": -150, "credit_sum": 50,
                                                         "debit_sum": 200, "oldest_at": "2026-10-01"}),
        ExportKind.FILE_IMPORT_RESULTS: item_result_row(ItemResult(0, ItemStatus.FAILED, "x", None, "bad", 2)),
        ExportKind.AUDIT_EVENTS: audit_row(entry),
        ExportKind.PERIOD_CLOSE_REPORT: period_close_rows(a_period_close())[0],
    }
    assert set(rows) == set(ExportKind)
    for kind, row in rows.items():
        assert len(row) == len(header(kind)), kind
    named = dict(zip(header(ExportKind.RECORDS), rows[ExportKind.RECORDS], strict=True))
    assert (named["amount_minor"], named["amount"], named["currency"], named["date"]) == (12345, "123.45", "EUR",
                                                                                         "2026-11-02")
    assert named["metadata"] == '{"a":"z","b":1}' and named["created_at"] == "2026-11-29T12:00:00.000Z"
    exc = dict(zip(header(ExportKind.EXCEPTIONS), rows[ExportKind.EXCEPTIONS], strict=True))
    assert (exc["total_amount_minor"], exc["total_amount"], exc["debit_sum"]) == (-150, "-1.50", "2.00")
    assert exc["assignees"] == "user:7;idp-bob"
    assert dict(zip(header(ExportKind.AUDIT_EVENTS), rows[ExportKind.AUDIT_EVENTS], strict=True))["summary"] == '{"kind":"records"}'


def test_docs_list_every_kinds_columns_in_order():
    doc = DOC.read_text()
    for kind in ExportKind:
        section = doc.split(f"### `{kind.value}`", 1)[1].split("\n### ", 1)[0]
        documented = re.findall(r"^\| `(\w+)` \| (int|str) \|", section, flags=re.MULTILINE)
        assert documented == [(c.name, c.type) for c in COLUMNS[kind]], kind
