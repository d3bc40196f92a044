"""What every statement parser shares, and how a dropped file's format is told: exact amounts in the currency's minor units (and only plain
decimals: no exponent or NaN reaches Decimal's slow or failing paths), and accounts compared
normalised for routing."""
from __future__ import annotations

from datetime import date

import pytest

from chalicelib.domain.ingestion import JobSource
from chalicelib.domain.parsers import FileRejected
from chalicelib.domain.parsers.statements import (
    MAX_STATEMENT_BYTES,
    deterministic_id,
    normalise_account,
    to_minor_units,
    uniform_details,
)
from chalicelib.services.ingestion.drops import _format_of


def test_amounts_are_exact_in_the_currencys_minor_units():
    assert to_minor_units("1234,56", "EUR", "line 3") == (123456, 2)
    assert to_minor_units("1000", "JPY", "line 3") == (1000, 0)
    assert to_minor_units("1.234", "BHD", "line 3") == (1234, 3)
    assert to_minor_units("12.", "USD", "line 3") == (1200, 2)
    assert to_minor_units("123456", "USD", "line 3", implied_decimals=2) == (123456, 2)


@pytest.mark.parametrize("text", ["1e999999", "NaN", "Infinity", "-5.00", "1.2.3", "", "12,345.00", "1.005",
                                  "9" * 25])
def test_anything_but_a_plain_positive_decimal_within_the_currencys_places_is_refused_naming_where(text):
    with pytest.raises(FileRejected) as rejected:
        to_minor_units(text, "USD", "Stmt[1]/Ntry[2]")
    assert rejected.value.message.startswith("Stmt[1]/Ntry[2]: amount")


def test_accounts_compare_without_case_spaces_dashes_or_a_plain_numbers_leading_zeros():
    assert normalise_account("DE89 3704 0044 0532 0130 00") == normalise_account("de89370400440532013000")
    assert normalise_account("000123456") == normalise_account("123-456") == "123456"
    assert normalise_account("0AB12") == "0AB12"  # not a plain number: its zero stays
    assert normalise_account("000") == "0"


def test_a_deterministic_id_depends_on_account_day_amount_direction_and_position():
    day = date(2026, 11, 22)
    first = deterministic_id("000123456", day, 100, "credit", 1)
    assert first == deterministic_id("123456", day, 100, "credit", 1)
    assert len({first, deterministic_id("123456", day, 100, "credit", 2),
                deterministic_id("123456", day, 100, "debit", 1)}) == 3


def test_a_dropped_files_format_is_told_by_its_extension_then_its_first_bytes():
    assert _format_of("morning.bai2", b"") is JobSource.BAI2
    assert _format_of("statement.txt", b"{1:F01BANKDEFFAXXX}") is JobSource.MT940
    assert _format_of("statement.txt", b"\xef\xbb\xbf01,BANKID,ACME,261123") is JobSource.BAI2
    assert _format_of("statement", b'<?xml version="1.0"?><Document xmlns="urn:iso:std:iso:20022:tech:xsd:'
                                   b'camt.053.001.08">') is JobSource.CAMT053
    assert _format_of("codes.csv", b"01,Opening,100\n") is JobSource.CSV  # the extension says CSV
    assert _format_of("payroll.txt", b"101 091000019") is JobSource.NACHA
    assert _format_of("notes.txt", b"date,amount\n") is JobSource.CSV


SHAPE = {"line", "element", "statement_id", "account", "expected", "found"}


def test_each_parsers_details_come_out_in_one_shape():
    bai2 = {"line": 7, "account": "123", "record": "49", "field": "control_total", "expected": 5, "found": 6,
            "errors": [{"line": 7, "account": "123", "record": "49", "field": "control_total", "expected": 5,
                        "found": 6, "message": "line 7: ..."}], "error_count": 1}
    mt940 = {"where": "line 12", "line": 12, "account": "DE89", "statement_id": "S/1/1", "expected": "EUR 1,00",
             "found": "EUR 2,00"}
    camt_entry = {"where": "Stmt[2]/Ntry[5]", "statement_id": "S", "account": "DE89", "expected": "an amount",
                  "found": "x"}
    camt_xml = {"where": "line 40", "column": 3, "element": "Stmt[1]/Ntry[2]", "expected": "well-formed XML",
                "found": "no element found"}
    whole_file = {"where": "file", "expected": "a camt.053 document", "found": "nothing"}

    shown = [uniform_details(d) for d in (bai2, mt940, camt_entry, camt_xml, whole_file)]

    assert all(set(s) - {"errors", "error_count"} == SHAPE for s in shown)
    assert shown[0] | {"errors": None} == {"line": 7, "element": "49", "statement_id": None, "account": "123",
                                           "expected": 5, "found": 6, "errors": None, "error_count": 1}
    assert shown[0]["errors"] == [{"line": 7, "element": "49", "statement_id": None, "account": "123",
                                   "expected": 5, "found": 6, "message": "line 7: ..."}]
    assert (shown[1]["line"], shown[1]["element"], shown[1]["statement_id"]) == (12, None, "S/1/1")
    assert (shown[2]["line"], shown[2]["element"]) == (None, "Stmt[2]/Ntry[5]")
    assert (shown[3]["line"], shown[3]["element"]) == (40, "Stmt[1]/Ntry[2]")
    assert (shown[4]["line"], shown[4]["element"], shown[4]["found"]) == (None, None, "nothing")


def test_the_import_limit_a_client_meets_can_never_exceed_the_statement_parsers_own_guard():
    from pydantic import ValidationError

    from chalicelib.domain.ingestion import MAX_IMPORT_BYTES
    from chalicelib.settings import Settings

    assert Settings().max_import_bytes == MAX_IMPORT_BYTES <= MAX_STATEMENT_BYTES
    assert Settings(max_import_bytes=MAX_STATEMENT_BYTES).max_import_bytes == MAX_STATEMENT_BYTES
    with pytest.raises(ValidationError):
        Settings(max_import_bytes=MAX_STATEMENT_BYTES + 1)
