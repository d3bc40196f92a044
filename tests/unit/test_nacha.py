"""The NACHA parser on the project's corpus (tests/data/nacha, written by make_nacha_corpus.py)
and on generated and mutated files."""
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain.parsers import FileRejected
from chalicelib.domain.parsers.nacha import parse_nacha
from tests.support.nacha_writer import Batch, Entry, addenda_05, addenda_99, write_file

CORPUS = Path(__file__).resolve().parents[1] / "data" / "nacha"


def parse(name: str):
    return parse_nacha((CORPUS / name).read_bytes())


def items(parsed):
    return [row.item for row in parsed.rows]


def test_a_ppd_file_gives_one_record_per_entry_with_direction_from_the_transaction_code():
    parsed = parse("ppd.ach")
    records = items(parsed)
    assert [(r["amount"], r["direction"]) for r in records] == [(150000, "credit"), (98765, "credit"),
                                                                (0, "credit")]
    first = records[0]
    assert first["date"] == "2026-11-03"
    assert first["external_id"] == "076401251-2611020930A-0000001-076401250000001"
    assert first["description"] == "PAYROLL JANE DOE"
    assert first["metadata"] == {"sec_code": "PPD", "company_name": "ACME PAYROLL", "company_id": "1234567890",
                                 "batch_number": "0000001", "transaction_code": "22",
                                 "receiving_routing_number": "091000019", "account_number": "****8901",
                                 "trace_number": "076401250000001", "date_source": "effective_entry_date"}
    assert records[2]["metadata"]["prenote"] is True
    assert [row.line for row in parsed.rows] == [3, 4, 5]


def test_account_numbers_never_appear_whole():
    for path in CORPUS.glob("*.ach"):
        if path.name.startswith("broken"):
            continue
        for record in items(parse_nacha(path.read_bytes())):
            masked = record["metadata"]["account_number"]
            assert masked.startswith("****") and len(masked) <= 8


def test_ccd_addenda_text_is_kept():
    records = items(parse("ccd_addenda.ach"))
    assert records[0]["metadata"]["addenda"] == "RMR*IV*INV-2026-001*PO*1234.56\\"
    assert records[1]["direction"] == "debit" and "addenda" not in records[1]["metadata"]


def test_ctx_reads_the_receiving_company_and_joins_its_addenda():
    [record] = items(parse("ctx.ach"))
    assert record["description"] == "EDI PMT INITECH"
    assert record["metadata"]["addenda"].startswith("ISA*00*") and "BPR*C*5000" in record["metadata"]["addenda"]


def test_web_debits():
    records = items(parse("web.ach"))
    assert [r["direction"] for r in records] == ["debit", "debit"]
    assert sum(r["amount"] for r in records) == 1999 + 4999


def test_returns_carry_their_reason_codes():
    records = items(parse("returns.ach"))
    assert [r["metadata"]["return_reason_code"] for r in records] == ["R01", "R03"]
    assert records[0]["metadata"]["original_trace"] == "076401250000001"
    assert [r["direction"] for r in records] == ["credit", "debit"]


def test_notifications_of_change_carry_the_change_code_and_corrected_data():
    [record] = items(parse("noc.ach"))
    assert record["metadata"]["change_code"] == "C01"
    assert record["metadata"]["corrected_data"] == "1234567890123"
    assert record["metadata"]["sec_code"] == "COR" and record["amount"] == 0


def test_iat_entries_read_their_own_layout_and_addenda():
    [record] = items(parse("iat.ach"))
    assert record["amount"] == 250000 and record["metadata"]["sec_code"] == "IAT"
    assert record["metadata"]["account_number"] == "****3000"
    assert "MUSTERMANN GMBH" in record["metadata"]["addenda"] and "HAUPTSTRASSE" in record["metadata"]["addenda"]


def test_crlf_lf_and_unbroken_files_read_the_same():
    crlf = parse("multi_batch_crlf.ach")
    assert crlf.summary["batches"] == 3 and len(crlf.rows) == 3 + 2 + 2
    unbroken = parse("unbroken.ach")
    assert len(unbroken.rows) == 5
    lf = (CORPUS / "multi_batch_crlf.ach").read_bytes().replace(b"\r\n", b"\n")
    assert items(parse_nacha(lf)) == items(crlf)


def test_lines_whose_trailing_blanks_were_trimmed_are_padded_back():
    data = (CORPUS / "ppd.ach").read_bytes()
    trimmed = b"\n".join(line.rstrip(b" ") for line in data.split(b"\n"))
    assert items(parse_nacha(trimmed)) == items(parse_nacha(data))


def test_bad_batch_totals_name_the_line_the_batch_and_what_disagrees():
    with pytest.raises(FileRejected) as caught:
        parse("broken_bad_batch_totals.ach")
    errors = caught.value.details["errors"]
    assert errors[0]["line"] == 6 and errors[0]["batch"] == 1
    assert errors[0]["field"] == "total_debit_amount"
    assert errors[0]["expected"] == "000000000000" and errors[0]["found"] == "000000099999"
    assert "line 6" in caught.value.message


@pytest.mark.parametrize("name, phrase", [
    ("broken_short_line.ach", "trace number"),
    ("broken_missing_file_control.ach", "file control record (type 9) is missing"),
    ("broken_truncated.ach", "looks truncated"),
    ("broken_cut_mid_batch.ach", "no batch control"),
])
def test_broken_files_fail_whole_with_a_clear_message(name, phrase):
    with pytest.raises(FileRejected) as caught:
        parse(name)
    assert phrase in caught.value.message or any(phrase in e["message"] for e in caught.value.details["errors"])


@pytest.mark.parametrize("data, phrase", [
    (b"", "empty"),
    (b"\x00\xff\xfe garbage", "not a NACHA file"),
    (b"hello world\n", "not a NACHA file"),
    (b"1" + b"x" * 200 + b"\n", "characters"),
])
def test_garbage_fails_with_a_clear_message(data, phrase):
    with pytest.raises(FileRejected, match=phrase):
        parse_nacha(data)


def test_an_oversized_file_is_refused_before_parsing():
    with pytest.raises(FileRejected, match="accepted up to 100 bytes"):
        parse_nacha((CORPUS / "ppd.ach").read_bytes(), max_bytes=100)


# Property-based --------------------------------------------------------------------------

CODES = ["22", "23", "27", "28", "32", "37", "42", "47", "52", "55"]
entries = st.builds(
    lambda code, routing, amount, name, addenda: Entry(
        code, routing, "ACC" + routing[:5], 0 if code[1] in "38" else amount, name,
        addenda=[addenda_05(addenda, "0")] if addenda else []),
    st.sampled_from(CODES), st.from_regex(r"\A[0-9]{9}\Z"), st.integers(0, 9_999_999_999),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=22), st.none() | st.text(
        alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=80))
batches = st.builds(lambda sec, entries_: Batch(sec, "CO", "1234567890", "DESC", date(2026, 1, 31), entries_),
                    st.sampled_from(["PPD", "CCD", "WEB", "TEL"]), st.lists(entries, min_size=1, max_size=12))
files = st.builds(lambda bs, ending: (bs, ending), st.lists(batches, min_size=1, max_size=4),
                  st.sampled_from(["\n", "\r\n", ""]))


def _fix_addenda_sequence(batch_list):
    """addenda_05 needs its entry's trace; the writer assigns traces, so rebuild the addenda after."""
    for batch in batch_list:
        for sequence, entry in enumerate(batch.entries, start=1):
            if entry.addenda:
                text = entry.addenda[0][3:83]
                entry.addenda = [addenda_05(text, batch.odfi + f"{sequence:07d}")]
    return batch_list


@settings(max_examples=60, deadline=None)
@given(files)
def test_generated_valid_files_import_sums_equal_to_their_control_totals(spec):
    batch_list, ending = spec
    data = write_file(_fix_addenda_sequence(batch_list), line_ending=ending)
    parsed = parse_nacha(data)
    records = items(parsed)
    assert len(records) == sum(len(b.entries) for b in batch_list)
    credits = sum(r["amount"] for r in records if r["direction"] == "credit")
    debits = sum(r["amount"] for r in records if r["direction"] == "debit")
    control = data.decode().replace("\r\n", "\n")
    control_line = next(line for line in (control.split("\n") if ending else
                                          [control[i:i + 94] for i in range(0, len(control), 94)])
                        if line.startswith("9") and not line.startswith("999999"))
    assert (debits, credits) == (int(control_line[31:43]), int(control_line[43:55]))


@settings(max_examples=80, deadline=None)
@given(files, st.data())
def test_a_changed_amount_is_always_caught(spec, data):
    batch_list, _ = spec
    lines = write_file(_fix_addenda_sequence(batch_list)).decode().split("\n")
    entry_lines = [i for i, line in enumerate(lines) if line.startswith("6")]
    target = data.draw(st.sampled_from(entry_lines))
    position = data.draw(st.integers(29, 38))
    old = lines[target][position]
    new = data.draw(st.sampled_from([d for d in "0123456789" if d != old]))
    lines[target] = lines[target][:position] + new + lines[target][position + 1:]
    with pytest.raises(FileRejected):
        parse_nacha("\n".join(lines).encode())


@settings(max_examples=150, deadline=None)
@given(files, st.data())
def test_any_mutation_is_either_read_or_refused_cleanly(spec, data):
    batch_list, ending = spec
    original = bytearray(write_file(_fix_addenda_sequence(batch_list), line_ending=ending))
    kind = data.draw(st.sampled_from(["flip", "truncate", "delete_line", "insert"]))
    if kind == "flip":
        position = data.draw(st.integers(0, len(original) - 1))
        original[position] = data.draw(st.integers(0, 255))
    elif kind == "truncate":
        original = original[:data.draw(st.integers(0, len(original) - 1))]
    elif kind == "delete_line" and ending:
        lines = bytes(original).split(ending.encode())
        del lines[data.draw(st.integers(0, len(lines) - 1))]
        original = bytearray(ending.encode().join(lines))
    else:
        position = data.draw(st.integers(0, len(original)))
        original[position:position] = data.draw(st.binary(min_size=1, max_size=5))
    try:
        parse_nacha(bytes(original))
    except FileRejected as error:
        assert error.message


def test_an_unbroken_file_with_a_final_line_break_or_dos_eof_mark_is_read():
    data = (CORPUS / "unbroken.ach").read_bytes()
    for ending in (b"\n", b"\r\n", b"\x1a"):
        assert len(parse_nacha(data + ending).rows) == 5


@pytest.mark.parametrize("data", [b"\x1c\n", b"\n\n\n", b"\x0b\x0c"])
def test_files_of_only_breaks_are_refused_cleanly(data):
    with pytest.raises(FileRejected):
        parse_nacha(data)


@pytest.mark.parametrize("code", ["25", "35", "45", "57", "58", "59", "61"])
def test_transaction_codes_that_do_not_exist_are_refused(code):
    batch = Batch("PPD", "CO", "1234567890", "DESC", date(2026, 1, 31), [Entry(code, "091000019", "1", 100, "X")])
    with pytest.raises(FileRejected, match="transaction code"):
        parse_nacha(write_file([batch]))


def test_zero_dollar_entries_must_carry_no_amount():
    batch = Batch("CCD", "CO", "1234567890", "DESC", date(2026, 1, 31), [Entry("24", "091000019", "1", 100, "X")])
    with pytest.raises(FileRejected, match="zero-dollar"):
        parse_nacha(write_file([batch]))


# Files written by other tools (tests/data/nacha/moov-io, see its README) -------------------

MOOV = CORPUS / "moov-io"


def moov(name: str, **options):
    return parse_nacha((MOOV / name).read_bytes(), **options)


def rejection(data: bytes, **options) -> FileRejected:
    with pytest.raises(FileRejected) as caught:
        parse_nacha(data, **options)
    return caught.value


def lines_of(name: str) -> list[str]:
    return (MOOV / name).read_bytes().decode("ascii").split("\n")


# IAT ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, amounts", [
    ("iat-debit.ach", [(100000, "debit")]),                           # addenda 10-16, 17 and 18
    ("20180713-IAT.ach", [(100000, "credit"), (2000, "debit")]),     # two IAT batches
    ("iat-addenda99.ach", [(100000, "credit")]),                      # an IAT return
    ("iat-addenda98.ach", [(100000, "credit")]),                      # an IAT notification of change (IATCOR)
])
def test_iat_files_that_other_tools_write_and_validate_import(name, amounts):
    records = items(moov(name))
    assert [(r["amount"], r["direction"]) for r in records] == amounts
    for record in records:
        metadata = record["metadata"]
        assert (metadata["iso_originating_currency"], metadata["iso_destination_currency"]) == ("CAD", "USD")
        assert metadata["foreign_exchange_indicator"] == "FF" and metadata["iso_destination_country"] == "US"
        assert metadata["receiver_name"] == "BEK Enterprises" and record["description"] == "TRADEPAYMT BEK Enterprises"
        assert metadata["account_number"].startswith("****")


def test_an_iat_batch_control_may_leave_the_company_identification_blank_but_other_batches_may_not():
    assert len(moov("20180713-IAT.ach").rows) == 2  # both batch controls have blanks at 45-54
    lines = lines_of("flattenBatchesTraceNumberCollision.ach")
    lines[8] = lines[8][:44] + " " * 10 + lines[8][54:]
    error = rejection("\n".join(lines).encode())
    assert error.details["errors"][0] | {"message": None} == {
        "line": 9, "batch": 1, "field": "company_identification", "expected": "121042882 ", "found": " " * 10,
        "message": None}


def test_a_company_identification_aligned_right_in_the_batch_control_is_the_same_identification():
    records = items(moov("return-WEB.ach"))  # header '123456789 ', control ' 123456789'
    assert [r["metadata"]["return_reason_code"] for r in records] == ["R01", "R03"]


def test_an_iat_entry_without_one_of_its_mandatory_addenda_is_refused():
    lines = [line for line in lines_of("iat-debit.ach") if not line.startswith("713")]
    error = rejection("\n".join(lines).encode())
    [addenda] = [e for e in error.details["errors"] if e["field"] == "addenda_type_code"]
    assert (addenda["line"], addenda["batch"], addenda["expected"], addenda["found"]) == (7, 1, "13", "14")


def test_an_iat_entry_whose_addenda_stop_before_16_is_refused_naming_the_missing_one():
    lines = lines_of("iat-debit.ach")
    out_of_order = lines[:8] + lines[11:]  # 15, 16, 17 gone; 18 follows 14
    [addenda] = [e for e in rejection("\n".join(out_of_order).encode()).details["errors"]
                 if e["field"] == "addenda_type_code"]
    assert (addenda["line"], addenda["expected"], addenda["found"]) == (9, "15", "18")
    cut = lines[:9] + lines[12:]  # 16, 17, 18 gone: the batch control follows 15
    [addenda] = [e for e in rejection("\n".join(cut).encode()).details["errors"] if e["field"] == "addenda_type_code"]
    assert (addenda["line"], addenda["expected"], addenda["found"]) == (3, "16", "none")


def test_iat_addenda_in_a_ppd_batch_and_a_05_addenda_in_an_iat_batch_are_refused():
    ppd = lines_of("flattenBatchesTraceNumberCollision.ach")
    ppd[3] = "710" + ppd[3][3:]
    [error] = rejection("\n".join(ppd).encode()).details["errors"]
    assert (error["line"], error["field"], error["found"]) == (4, "addenda_type_code", "10")
    iat = lines_of("iat-debit.ach")
    iat[10] = "705" + iat[10][3:]
    errors = rejection("\n".join(iat).encode()).details["errors"]
    assert (errors[0]["line"], errors[0]["field"], errors[0]["found"]) == (11, "addenda_type_code", "05")


def test_an_iat_batch_header_is_checked_by_its_own_layout():
    lines = lines_of("iat-debit.ach")
    lines[1] = lines[1][:20] + "XX" + lines[1][22:63] + "1A3" + lines[1][66:]
    errors = rejection("\n".join(lines).encode()).details["errors"]
    assert [(e["line"], e["field"], e["found"]) for e in errors] == [
        (2, "foreign_exchange_indicator", "XX"), (2, "iso_originating_currency_code", "1A3")]


def test_an_iat_entry_with_addenda_indicator_0_is_refused():
    lines = lines_of("iat-debit.ach")
    lines[2] = lines[2][:78] + "0" + lines[2][79:]
    errors = rejection("\n".join(lines).encode()).details["errors"]
    assert (errors[0]["line"], errors[0]["field"], errors[0]["expected"], errors[0]["found"]) == (
        3, "addenda_record_indicator", "1", "0")


# Dates of returns and notifications of change ----------------------------------------------

def test_a_notification_of_change_without_an_effective_date_takes_the_file_creation_date():
    [record] = items(moov("cor-example.ach"))  # effective entry date 000000, no settlement date
    assert record["date"] == "2019-08-29" and record["metadata"]["date_source"] == "file_creation_date"
    assert record["metadata"]["change_code"] == "C01"
    [iat_return] = items(moov("iat-addenda99.ach"))
    assert iat_return["date"] == "2019-01-16" and iat_return["metadata"]["date_source"] == "file_creation_date"


def _returns_batch(effective, settlement_day="   ") -> Batch:
    return Batch("PPD", "ACME PAYROLL", "1234567890", "RETURN", effective, settlement_day=settlement_day, entries=[
        Entry("26", "021000021", "98765432", 2500, "JOHN ROE", "EMP002",
              addenda=[addenda_99("R03", "076401250000002", "02100002", "NO ACCOUNT", "021000020000002")])])


@pytest.mark.parametrize("created, settlement, expected", [
    (date(2026, 3, 10), "070", "2026-03-11"),
    (date(2025, 12, 30), "002", "2026-01-02"),   # settles in the next year
    (date(2026, 1, 2), "364", "2025-12-30"),     # a file of January returning entries of December
    (date(2024, 12, 31), "366", "2024-12-31"),   # day 366 of a leap year
    (date(2025, 1, 1), "366", "2024-12-31"),     # 366 exists in 2024 only
])
def test_a_return_without_an_effective_date_takes_its_settlement_date_in_the_year_nearest_the_file(
        created, settlement, expected):
    [record] = items(parse_nacha(write_file([_returns_batch("000000", settlement)], created=created)))
    assert record["date"] == expected and record["metadata"]["date_source"] == "settlement_date"


@pytest.mark.parametrize("effective, settlement", [("000000", "   "), ("      ", "   "), ("000000", "000"),
                                                   ("      ", "400")])
def test_a_return_with_a_blank_or_zero_date_and_no_usable_settlement_date_takes_the_file_creation_date(
        effective, settlement):
    [record] = items(parse_nacha(write_file([_returns_batch(effective, settlement)], created=date(2026, 2, 27))))
    assert record["date"] == "2026-02-27" and record["metadata"]["date_source"] == "file_creation_date"


def test_records_with_an_effective_date_say_so():
    records = items(parse_nacha(write_file([_returns_batch(date(2026, 5, 4), "130")])))
    assert [(r["date"], r["metadata"]["date_source"]) for r in records] == [("2026-05-04", "effective_entry_date")]


def test_a_batch_of_ordinary_entries_still_needs_its_effective_date():
    batch = Batch("PPD", "ACME", "1234567890", "PAYROLL", "000000", [Entry("22", "091000019", "1", 100, "X")],
                  settlement_day="070")
    [error] = rejection(write_file([batch])).details["errors"]
    assert (error["line"], error["batch"], error["field"], error["expected"], error["found"]) == (
        2, 1, "effective_entry_date", "YYMMDD", "000000")
    assert "line 3" in error["message"]


def test_a_date_that_is_not_a_day_is_refused_even_in_a_return():
    [error] = rejection(write_file([_returns_batch("261399")])).details["errors"]
    assert (error["field"], error["found"]) == ("effective_entry_date", "261399")


# Text beyond ASCII -----------------------------------------------------------------------------

def test_windows_1252_names_are_read_one_byte_to_one_character():
    batch = Batch("PPD", "CAFÉ MÜLLER", "1234567890", "PAYROLL", date(2026, 11, 3), entries=[
        Entry("22", "091000019", "12345678901", 150000, "JOSÉ NUÑEZ €", "EMP001"),
        Entry("22", "091000019", "12345678902", 2500, "ZOË ~ BRONTË", "EMP002"),
    ])
    data = write_file([batch], encoding="cp1252").replace(b"ZO\xcb ~", b"ZO\xcb \x81")  # 0x81: not cp1252
    assert b"NU\xd1EZ \x80" in data
    parsed = parse_nacha(data)
    records = items(parsed)
    assert [r["description"] for r in records] == ["PAYROLL JOSÉ NUÑEZ €", "PAYROLL ZOË \x81 BRONTË"]
    assert [r["amount"] for r in records] == [150000, 2500]
    assert records[0]["metadata"]["company_name"] == "CAFÉ MÜLLER"
    assert parsed.summary["text_encoding"] == "windows-1252"


def test_a_file_from_another_tool_with_windows_1252_in_a_name_field_is_read():
    parsed = moov("nonascii.ach", control_mismatch="warn")  # its file control counts are wrong, see below
    [record] = items(parsed)
    assert record["description"] == "REG.SALARY Receiver¦Acc Nam" and parsed.summary["text_encoding"] == "windows-1252"
    assert "ISA¦00¦" in record["metadata"]["addenda"] and record["amount"] == 100000000


def test_a_line_too_long_only_because_its_name_is_utf8_is_read_as_utf8():
    parsed = moov("extended-ascii.ach")  # line 15 is 95 bytes: 'ż' takes two
    records = items(parsed)
    assert len(records) == 6 and records[5]["description"] == "Moov, Inc Distracted Aużtin"
    assert records[5]["amount"] == 44 and records[5]["metadata"]["trace_number"] == "121042889211558"
    assert parsed.summary["text_encoding"] == "utf-8"


@pytest.mark.parametrize("position, byte, field", [
    (30, b"\xb2", "amount"),            # '²' is a digit to Python, not to NACHA
    (85, b"\xe9", "trace_number"),
    (3, b"\xb9", "receiving_dfi_identification"),
    (1, b"\xe9", "transaction_code"),
])
def test_bytes_beyond_ascii_in_numeric_and_code_fields_are_refused(position, byte, field):
    data = bytearray((CORPUS / "ppd.ach").read_bytes())
    entry_start = data.index(b"\n6") + 1
    data[entry_start + position:entry_start + position + 1] = byte
    errors = rejection(bytes(data)).details["errors"]
    assert errors[0]["line"] == 3 and errors[0]["field"] == field


def test_a_byte_beyond_ascii_where_a_record_type_belongs_is_refused():
    data = (CORPUS / "ppd.ach").read_bytes().replace(b"\n6", b"\n\xe9", 1)
    error = rejection(data).details["errors"][0]
    assert (error["line"], error["field"], error["found"]) == (3, "record_type_code", "é")


# External ids --------------------------------------------------------------------------------

def test_entries_of_batches_restarting_their_trace_numbers_get_distinct_external_ids():
    records = items(moov("flattenBatchesTraceNumberCollision.ach"))
    traces = [r["metadata"]["trace_number"] for r in records]
    assert len(records) == 15 and len(set(traces)) == 13  # 1 and 2 twice
    assert len({r["external_id"] for r in records}) == 15
    assert records[0]["external_id"] == "121042882-1908261725A-0000001-121042880000001"
    assert records[3]["external_id"] == "121042882-1908261725A-0000002-121042880000001"


def test_the_same_file_gives_the_same_external_ids_and_another_file_other_ones():
    batches = [_returns_batch(date(2026, 11, 3))]
    first = [r["external_id"] for r in items(parse_nacha(write_file(batches)))]
    assert first == [r["external_id"] for r in items(parse_nacha(write_file(batches)))]
    for other in (write_file(batches, modifier="B"), write_file(batches, created_time="1015"),
                  write_file(batches, origin=" 091000019"), write_file(batches, created=date(2026, 11, 3))):
        assert set(first).isdisjoint(r["external_id"] for r in items(parse_nacha(other)))


def test_an_entry_repeating_a_batch_number_and_trace_number_of_its_file_is_still_its_own_entry():
    entry = Entry("22", "091000019", "1", 100, "X", trace="076401250000001")
    batches = [Batch("PPD", "A", "1234567890", "PAY", date(2026, 1, 5), [entry, entry], batch_number=7),
               Batch("PPD", "A", "1234567890", "PAY", date(2026, 1, 5), [entry], batch_number=7)]
    ids = [r["external_id"] for r in items(parse_nacha(write_file(batches)))]
    base = "076401251-2611020930A-0000007-076401250000001"
    assert ids == [base, f"{base}-2", f"{base}-3"]


# Control records that disagree only in counts or hashes -------------------------------------

def test_wrong_control_counts_are_refused_by_default_and_warnings_when_asked():
    error = rejection((MOOV / "nonascii.ach").read_bytes())
    assert [(e["line"], e["field"], e["expected"], e["found"]) for e in error.details["errors"]] == [
        (17, "block_count", "000002", "000001"), (17, "entry_addenda_count", "00000013", "00000001")]
    parsed = moov("nonascii.ach", control_mismatch="warn")
    assert [(w["line"], w["batch"], w["field"], w["expected"], w["found"]) for w in parsed.summary["warnings"]] == [
        (17, None, "block_count", "000002", "000001"), (17, None, "entry_addenda_count", "00000013", "00000001")]
    assert parsed.summary["warning_count"] == 2


def _with_wrong_hashes_and_batch_count() -> bytes:
    lines = (CORPUS / "ppd.ach").read_bytes().decode().split("\n")
    control = next(i for i, line in enumerate(lines) if line.startswith("8"))
    lines[control] = lines[control][:10] + "0000000001" + lines[control][20:]              # batch entry hash
    file_control = control + 1
    lines[file_control] = "9000002" + lines[file_control][7:21] + "0000000002" + lines[file_control][31:]
    return "\n".join(lines).encode()


def test_a_wrong_entry_hash_or_batch_count_is_a_warning_when_asked():
    data = _with_wrong_hashes_and_batch_count()
    assert {e["field"] for e in rejection(data).details["errors"]} == {"entry_hash", "batch_count"}
    parsed = parse_nacha(data, control_mismatch="warn")
    assert len(parsed.rows) == 3
    assert [(w["line"], w["batch"], w["field"]) for w in parsed.summary["warnings"]] == [
        (6, 1, "entry_hash"), (7, None, "batch_count"), (7, None, "entry_hash")]


def test_wrong_amount_totals_are_refused_even_when_counts_may_disagree():
    error = rejection((CORPUS / "broken_bad_batch_totals.ach").read_bytes(), control_mismatch="warn")
    assert error.details["errors"][0]["field"] == "total_debit_amount"


def test_files_without_disagreements_have_no_warnings():
    assert "warnings" not in parse("ppd.ach").summary
    assert "warnings" not in parse_nacha((CORPUS / "ppd.ach").read_bytes(), control_mismatch="warn").summary


def test_an_unknown_control_mismatch_mode_is_a_programming_error():
    with pytest.raises(ValueError):
        parse_nacha((CORPUS / "ppd.ach").read_bytes(), control_mismatch="ignore")


# Every failure says where and what ------------------------------------------------------------

def _broken_files():
    iat = lines_of("iat-debit.ach")
    yield "\n".join(line for line in iat if not line.startswith("713")).encode()
    yield (MOOV / "nonascii.ach").read_bytes()
    yield write_file([Batch("PPD", "A", "1234567890", "P", "000000", [Entry("22", "091000019", "1", 1, "X")])])
    yield (CORPUS / "ppd.ach").read_bytes().replace(b"\n6", b"\n\xe9", 1)
    yield _with_wrong_hashes_and_batch_count()
    for path in sorted(CORPUS.glob("broken_*.ach")):
        yield path.read_bytes()


@pytest.mark.parametrize("data", list(_broken_files()))
def test_every_failure_says_line_batch_field_expected_and_found(data):
    error = rejection(data)
    assert error.details["errors"]
    for item in error.details["errors"]:
        assert {"line", "batch", "field", "expected", "found", "message"} <= item.keys()
        assert item["field"] and item["expected"] is not None and item["found"] is not None, item
