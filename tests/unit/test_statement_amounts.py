"""What every statement parser shares, and how a dropped file's format is told: exact amounts in the currency's minor units (and only plain
decimals: no exponent or NaN reaches Decimal's slow or failing paths), and accounts compared
normalised for routing."""
from __future__ import annotations

from datetime import date

import pytest

from chalicelib.domain.ingestion import JobSource
from chalicelib.domain.parsers import FileRejected
from chalicelib.domain.parsers.statements import deterministic_id, normalise_account, to_minor_units
from chalicelib.services.file_imports import _format_of


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
