"""The CSV parser: columns to fields, exact amounts, dates, encodings, quoting; rows fail alone."""
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.domain.parsers import FileRejected
from chalicelib.domain.parsers.csv_records import CsvOptions, RowError, parse_csv, to_minor_units

OPTIONS = CsvOptions(data_stream_key="bank")


def parse(text: str | bytes, **options):
    data = text.encode() if isinstance(text, str) else text
    return parse_csv(data, CsvOptions(data_stream_key="bank", **options))


@pytest.mark.parametrize("text, places, minor", [
    ("1,234.56", 2, 123456), ("$12.00", 2, 1200), ("(12.00)", 2, -1200), ("-12.00", 2, -1200),
    ("12", 2, 1200), ("0.5", 2, 50), (".75", 2, 75), ("+3.10", 2, 310), ("1234567890123.45", 2, 123456789012345),
    ("12", 0, 12), ("1.500", 3, 1500), ("1.50", 0, None), ("1.230", 2, 123), ("€ 9.99", 2, 999),
    ("( 1,000.00 )", 2, -100000),
])
def test_amounts_convert_exactly_to_minor_units(text, places, minor):
    if minor is None:
        with pytest.raises(RowError, match="decimal places"):
            to_minor_units(text, places)
    else:
        assert to_minor_units(text, places) == minor


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "12,34", "(12.00", "1e5", "--1", "$"])
def test_things_that_are_not_amounts_fail_with_the_text(text):
    with pytest.raises(RowError, match="amount"):
        to_minor_units(text, 2)


@given(st.decimals(min_value=Decimal("-99999999999.99"), max_value=Decimal("99999999999.99"), places=2,
                   allow_nan=False, allow_infinity=False))
def test_every_two_place_amount_converts_without_rounding(value):
    text = f"{value:,.2f}"
    assert to_minor_units(text, 2) == int(value * 100)


def test_a_file_maps_columns_to_fields_and_the_rest_to_metadata():
    parsed = parse("date,amount,description,external_id,payout_id\n2026-11-01,12.34,Coffee,tx-1,po_9\n")
    [row] = parsed.rows
    assert row.line == 2 and row.error is None
    assert row.item == {"data_stream_key": "bank", "date": "2026-11-01", "amount": 1234, "direction": "credit",
                        "currency": "USD", "decimal_places": 2, "description": "Coffee", "external_id": "tx-1",
                        "metadata": {"payout_id": "po_9"}}


def test_the_sign_gives_the_direction_without_a_direction_column():
    parsed = parse("date,amount\n2026-11-01,-12.00\n2026-11-01,(3.00)\n2026-11-01,4\n")
    assert [(r.item["amount"], r.item["direction"]) for r in parsed.rows] == [
        (1200, "debit"), (300, "debit"), (400, "credit")]


def test_a_direction_column_is_read_and_a_negative_amount_beside_it_fails_alone():
    parsed = parse("date,amount,direction\n2026-11-01,5.00,DR\n2026-11-01,-5.00,credit\n2026-11-01,1,sideways\n")
    assert parsed.rows[0].item["direction"] == "debit"
    assert "negative" in parsed.rows[1].error
    assert "sideways" in parsed.rows[2].error


def test_column_mapping_renames_source_columns():
    parsed = parse("Posted,Value,Ref\n11/03/2026,1.00,A1\n", column_mapping={"Posted": "date", "Value": "amount",
                                                                              "Ref": "external_id"},
                   date_format="MM/DD/YYYY")
    assert parsed.rows[0].item["date"] == "2026-11-03" and parsed.rows[0].item["external_id"] == "A1"


def test_day_first_dates_when_declared():
    parsed = parse("date,amount\n03/11/2026,1\n31/12/2026,1\n", date_format="DD/MM/YYYY")
    assert [r.item["date"] for r in parsed.rows] == ["2026-11-03", "2026-12-31"]


def test_bom_crlf_and_quoted_fields_with_commas_and_newlines():
    text = '\ufeffdate,amount,description\r\n2026-11-01,"1,000.00","Rent, November\r\nsecond line"\r\n2026-11-02,2,x\r\n'
    parsed = parse(text)
    assert parsed.rows[0].item["amount"] == 100000
    assert parsed.rows[0].item["description"] == "Rent, November\r\nsecond line"
    assert [r.line for r in parsed.rows] == [2, 4]


def test_currency_sets_decimal_places_unless_declared():
    parsed = parse("date,amount,currency\n2026-11-01,1500,jpy\n2026-11-01,1.234,KWD\n2026-11-01,1.5,\n")
    assert [(r.item["amount"], r.item["currency"], r.item["decimal_places"]) for r in parsed.rows] == [
        (1500, "JPY", 0), (1234, "KWD", 3), (150, "USD", 2)]
    fixed = parse("date,amount\n2026-11-01,1.5\n", decimal_places=3)
    assert fixed.rows[0].item["amount"] == 1500


def test_a_bad_row_fails_alone_with_its_line_number():
    parsed = parse("date,amount\n2026-11-01,1\n2026-11-01,abc\n2026-11-01\n\n2026-11-01,2\n")
    assert [(r.line, r.error is None) for r in parsed.rows] == [(2, True), (3, False), (4, False), (6, True)]
    assert "abc" in parsed.rows[1].error and "fields" in parsed.rows[2].error


@pytest.mark.parametrize("text, phrase", [
    ("", "empty"), ("amount\n1\n", "no 'date' column"), ("date,amount,amount\n", "twice"),
    (b"date,amount\n\x81\xfe,1\n", "line 2"),
])
def test_files_that_cannot_be_read_are_refused_whole(text, phrase):
    with pytest.raises(FileRejected, match=phrase):
        parse(text)


def test_a_mapping_naming_a_missing_column_is_refused():
    with pytest.raises(FileRejected, match="Posted"):
        parse("date,amount\n", column_mapping={"Posted": "date"})


@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_parsed_or_refused_never_crash(data):
    try:
        parse_csv(data, OPTIONS)
    except FileRejected:
        pass


@pytest.mark.parametrize("amount", ["²", "1²", "١٢.٥٠", "１２"])
def test_non_ascii_digits_fail_the_row_instead_of_crashing_or_being_read(amount):
    parsed = parse(f"date,amount\n2026-11-01,{amount}\n")
    assert parsed.rows[0].error and "amount" in parsed.rows[0].error


def test_a_row_error_quotes_a_long_value_only_in_part():
    parsed = parse("date,amount\n2026-11-01," + "x" * 5000 + "\n")
    assert len(parsed.rows[0].error) < 200


def test_a_row_that_fails_keeps_its_external_id():
    parsed = parse("date,amount,external_id\n2026-11-01,abc,tx-3\n2026-11-01,abc,\n")
    assert parsed.rows[0].error and parsed.rows[0].item == {"external_id": "tx-3"}
    assert parsed.rows[1].error and parsed.rows[1].item is None  # a blank external_id is no external_id


@pytest.mark.parametrize("date_format, text", [("DD/MM/YYYY", "30/02/2026"), ("MM/DD/YYYY", "13/01/2026"),
                                               ("DD/MM/YYYY", "2026-11-01"), ("MM/DD/YYYY", "00/10/2026")])
def test_a_date_error_names_the_declared_format(date_format, text):
    [row] = parse(f"date,amount\n{text},1.00\n", date_format=date_format).rows
    assert row.item is None and date_format in row.error and "YYYY-MM-DD" not in row.error


# Encodings and delimiters of real bank exports ------------------------------------------------

def rejected(text: str | bytes, **options) -> FileRejected:
    with pytest.raises(FileRejected) as caught:
        parse(text, **options)
    return caught.value


def test_a_windows_1252_export_is_read_as_windows_1252_and_the_import_says_so():
    # Given an export that is not UTF-8 but Windows-1252 throughout ("Café Müller – 5 €")
    data = "date,amount,description\n2026-11-01,12.00,Café Müller – 5 €\n".encode("cp1252")
    # When it is parsed with no encoding given
    parsed = parse(data)
    # Then the text is what the bank wrote, and a warning says how it was read
    assert parsed.rows[0].item["description"] == "Café Müller – 5 €"
    [warning] = parsed.summary["warnings"]
    assert "Windows-1252" in warning and "line 2" in warning


def test_a_file_that_is_utf8_in_places_is_refused_naming_the_line_that_is_not():
    # Given a UTF-8 file with one byte that is not (a broken export): reading it as Windows-1252
    # would garble its other lines
    data = "date,amount,description\n2026-11-01,1,Café\n".encode() + b"2026-11-02,2,Caf\xe9\n"
    # When it is parsed, Then it is refused naming the line and the way out
    error = rejected(data)
    assert "line 3" in error.message and "encoding" in error.message and "byte" not in error.details
    assert error.details["line"] == 3


def test_a_byte_windows_1252_leaves_undefined_is_refused_naming_its_line():
    error = rejected(b"date,amount,description\n2026-11-01,1,ok\n2026-11-02,2,A\x81B\n")
    assert "line 3" in error.message and error.details["line"] == 3


def test_an_encoding_given_is_the_one_used_and_an_error_in_it_names_the_line():
    data = "date,amount,description\n2026-11-01,1,Müller\n".encode("cp1252")
    assert parse(data, encoding="iso-8859-1").rows[0].item["description"] == "Müller"
    assert "warnings" not in parse(data, encoding="windows-1252").summary
    error = rejected(data, encoding="utf-8")
    assert "line 2" in error.message and "utf-8" in error.message


def test_a_utf16_export_with_its_byte_order_mark_is_read():
    data = "date\tamount\tdescription\n2026-11-01\t3.00\tZürich\n".encode("utf-16")
    assert parse(data).rows[0].item["description"] == "Zürich"


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
def test_the_delimiter_is_read_from_the_header_line_when_not_given(delimiter):
    # Given a file separated by something other than commas (amounts with thousands commas too)
    text = delimiter.join(["date", "amount", "description"]) + "\n" + \
        delimiter.join(["2026-11-01", "1,250.00", "Rent, November"]) + "\n"
    # When it is parsed with no delimiter given, Then its columns are read
    [row] = parse(text).rows
    assert (row.item["amount"], row.item["description"]) == (125000, "Rent, November")


def test_a_delimiter_given_is_used_whatever_the_header_looks_like():
    [row] = parse("date;amount;x,y\n2026-11-01;3.00;a,b\n", delimiter=";").rows
    assert row.item["amount"] == 300 and row.item["metadata"] == {"x,y": "a,b"}


def test_a_missing_column_names_the_delimiter_it_was_read_with_and_the_one_the_header_looks_separated_by():
    # Given a ';'-separated file imported with delimiter ','
    error = rejected("date;amount;description\n2026-11-01;1.00;x\n", delimiter=",")
    # Then the message says how it was read and what to do
    assert "no 'date' or 'amount' column in the header" in error.message
    assert "read with delimiter ','" in error.message and "looks ';'-separated: pass delimiter" in error.message

