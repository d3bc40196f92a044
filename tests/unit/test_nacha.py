"""The NACHA parser on the project's corpus (tests/data/nacha, written by make_nacha_corpus.py)
and on generated and mutated files."""
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain.parsers import FileRejected
from chalicelib.domain.parsers.nacha import parse_nacha
from chalicelib.domain.parsers.nacha_writer import Batch, Entry, addenda_05, write_file

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
    assert first["date"] == "2026-11-03" and first["external_id"] == "076401250000001"
    assert first["description"] == "PAYROLL JANE DOE"
    assert first["metadata"] == {"sec_code": "PPD", "company_name": "ACME PAYROLL", "company_id": "1234567890",
                                 "batch_number": "0000001", "transaction_code": "22",
                                 "receiving_routing_number": "091000019", "account_number": "****8901"}
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
    (b"\x00\xff\xfe garbage", "not ASCII"),
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
