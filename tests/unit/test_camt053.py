"""The camt.053 parser on the project's corpus (tests/data/statements/camt053, written by hand) and on
files written by tests/support/camt_files.py: generated, broken and mutated."""
import time
import tracemalloc
import xml.etree.ElementTree as ET
from datetime import date
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.domain.parsers import FileRejected
from chalicelib.domain.parsers.camt053 import CHUNK_BYTES, MAX_HELD_ELEMENTS, MAX_OPEN_ELEMENTS, parse_camt053
from chalicelib.domain.parsers.statements import ParsedStatements, deterministic_id
from tests.support.camt_files import Detail, Entry, Statement, decimal_text, write_camt053

CORPUS = Path(__file__).resolve().parents[1] / "data" / "statements" / "camt053"
DAY = date(2026, 11, 3)


def parse(name: str, lenient: bool = False) -> ParsedStatements:
    return parse_camt053((CORPUS / name).read_bytes(), lenient)


def rows(parsed: ParsedStatements) -> list[tuple]:
    return [(t.where, t.account, t.currency, t.amount, t.direction, t.booking_date, t.description, t.external_id)
            for t in parsed.transactions]


def rejection(data: bytes, lenient: bool = False) -> FileRejected:
    with pytest.raises(FileRejected) as caught:
        parse_camt053(data, lenient)
    return caught.value


def one_statement(entries: list[Entry], **fields) -> bytes:
    return write_camt053([Statement("S-1", "DE89370400440532013000", "EUR", 10_000, DAY, entries, **fields)])


# The corpus ------------------------------------------------------------------------------------------------

def test_a_file_of_several_accounts_and_statements_gives_each_booked_entry_with_its_account():
    parsed = parse("multi_account.xml")
    iban, other = "DE89370400440532013000", "000123456"
    assert rows(parsed) == [
        ("Stmt[1]/Ntry[1]", iban, "EUR", 150000, "credit", DAY, "INV 1001 PO 77", "2026110300001"),
        ("Stmt[1]/Ntry[2]", iban, "EUR", 25040, "debit", DAY, "Stationery", "2026110300002"),
        ("Stmt[1]/Ntry[3]/NtryDtls/TxDtls[1]", iban, "EUR", 10000, "credit", DAY, "INV 2001", "2026110300003/1"),
        ("Stmt[1]/Ntry[3]/NtryDtls/TxDtls[2]", iban, "EUR", 12000, "credit", DAY, "INV 2002", "DTL-2"),
        ("Stmt[1]/Ntry[3]/NtryDtls/TxDtls[3]", iban, "EUR", 8000, "credit", DAY, "INV 2003", "2026110300003/3"),
        ("Stmt[1]/Ntry[4]", iban, "EUR", 7500, "debit", DAY, "Fee A Fee B", "STMT-2026-11-03-001/4"),
        ("Stmt[1]/Ntry[5]", iban, "EUR", 60, "credit", DAY, "Interest", deterministic_id(iban, DAY, 60, "credit", 7)),
        ("Stmt[2]/Ntry[1]", other, "USD", 120000, "debit", DAY, "Cheque 1042", "US-1"),
        ("Stmt[3]/Ntry[1]", iban, "EUR", 9980, "credit", date(2026, 11, 4), "", "STMT-2026-11-04-001/1"),
        ("Stmt[3]/Ntry[2]", iban, "EUR", 150000, "debit", date(2026, 11, 4), "Return of INV 1001", "2026110300001#2"),
    ]
    assert [t.position for t in parsed.transactions] == list(range(1, 11))
    assert parsed.accounts == [iban, other]
    assert parsed.warnings == []


def test_a_record_carries_the_code_references_counterparty_value_date_and_statement_in_its_metadata():
    first, second, *_ = parse("multi_account.xml").transactions
    assert first.value_date == date(2026, 11, 4)
    assert first.metadata == {
        "bank_transaction_code": "PMNT/RCDT/ESCT", "end_to_end_id": "E2E-INV-1001", "counterparty_name": "Muster GmbH",
        "counterparty_account": "DE02120300000000202051", "value_date": "2026-11-04", "entry_reference": "1",
        "statement_id": "STMT-2026-11-03-001"}
    assert second.metadata == {
        "bank_transaction_code": "PMNT/ICDT/ESCT", "customer_reference": "PAY-REF-9",
        "counterparty_name": "Office Supplies SA", "counterparty_account": "FR-ACC-778", "value_date": "2026-11-03",
        "entry_reference": "2", "statement_id": "STMT-2026-11-03-001"}


def test_an_entry_whose_details_carry_no_amounts_is_one_record_with_its_proprietary_code():
    fees = parse("multi_account.xml").transactions[5]
    assert (fees.amount, fees.description) == (7500, "Fee A Fee B")
    assert fees.metadata == {"bank_transaction_code": "NCHG+808", "entry_reference": "4",
                             "statement_id": "STMT-2026-11-03-001"}


def test_each_statement_keeps_its_booked_and_available_balances_signed_and_dated_by_its_closing_balance():
    balances = parse("multi_account.xml").balances
    assert [(b.account, b.currency, b.date, b.statement_id, b.opening_booked, b.closing_booked, b.closing_available)
            for b in balances] == [
        ("DE89370400440532013000", "EUR", DAY, "STMT-2026-11-03-001", 1000000, 1147520, 1140000),
        ("000123456", "USD", DAY, "STMT-2026-11-03-002", 500000, 380000, None),  # PRCD as the opening
        ("DE89370400440532013000", "EUR", date(2026, 11, 4), "STMT-2026-11-04-001", 1147520, 1007500, None),
    ]


def test_version_02_reads_text_statuses_detail_amounts_under_amtdtls_and_plain_party_names():
    parsed = parse("reversals_v02.xml")
    account = "GB33BUKB20201555555555"
    assert rows(parsed) == [
        ("Stmt[1]/Ntry[1]/NtryDtls/TxDtls[1]", account, "GBP", 50000, "credit", DAY, "Rent", "GB-1"),
        ("Stmt[1]/Ntry[2]", account, "GBP", 4500, "credit", DAY, "Direct debit returned", "GB-2"),
        ("Stmt[1]/Ntry[3]", account, "GBP", 2000, "debit", DAY, "Credit recalled", "GB-3"),
        ("Stmt[1]/Ntry[4]/NtryDtls/TxDtls[1]", account, "GBP", 6000, "debit", DAY, "", "GB-4/1"),
        ("Stmt[1]/Ntry[4]/NtryDtls/TxDtls[2]", account, "GBP", 3000, "debit", DAY, "", "GB-4/2"),
    ]
    assert [t.metadata.get("counterparty_name") for t in parsed.transactions] == [
        "Jane Doe", "Gym Ltd", "Wrong Payer", "Supplier One", "Supplier Two"]
    assert [t.metadata.get("customer_reference") for t in parsed.transactions][3:] == ["SUP-60", "SUP-30"]
    [balance] = parsed.balances
    assert (balance.opening_booked, balance.closing_booked) == (-20000, 23500)


def test_a_reversal_keeps_the_direction_it_was_booked_in_and_names_the_original_counterparty():
    # ISO 20022: CRDT with RvslInd true is the reversal of a debit (money back in), so the credit
    # stands, the balance adds up with it, and the counterparty is the payee of the original debit.
    returned, recalled = parse("reversals_v02.xml").transactions[1:3]
    assert (returned.direction, returned.metadata["reversal"]) == ("credit", True)
    assert returned.metadata["counterparty_account"] == "GB94BARC10201530093459"
    assert (recalled.direction, recalled.metadata["reversal"]) == ("debit", True)
    assert "reversal" not in parse("reversals_v02.xml").transactions[3].metadata  # RvslInd false


def test_crlf_and_lf_files_read_the_same():
    crlf = (CORPUS / "reversals_v02.xml").read_bytes()
    assert b"\r\n" in crlf
    assert parse_camt053(crlf.replace(b"\r\n", b"\n")) == parse_camt053(crlf)


def test_amounts_are_exact_in_minor_units_of_currencies_with_none_and_three_decimals():
    parsed = parse("jpy_bhd.xml")
    assert [(t.currency, t.amount, t.decimal_places, t.direction) for t in parsed.transactions] == [
        ("JPY", 150000, 0, "credit"), ("JPY", 2500, 0, "debit"), ("BHD", 10125, 3, "credit"), ("BHD", 375, 3, "debit")]
    assert [(b.currency, b.decimal_places, b.opening_booked, b.closing_booked, b.closing_available)
            for b in parsed.balances] == [("JPY", 0, 1000000, 1147500, None), ("BHD", 3, 1250, 11000, 10500)]


def test_pending_and_information_only_entries_are_not_imported_and_are_named_in_a_warning():
    parsed = parse("pending.xml")
    assert [(t.where, t.amount) for t in parsed.transactions] == [("Stmt[1]/Ntry[1]", 1000), ("Stmt[1]/Ntry[4]", 250)]
    [warning] = parsed.warnings
    assert "Stmt[1] (NL-20261103) account NL91ABNA0417164300" in warning
    assert "Stmt[1]/Ntry[2] (PDNG)" in warning and "Stmt[1]/Ntry[3] (INFO)" in warning


def test_the_same_file_read_twice_gives_the_same_external_ids():
    assert [t.external_id for t in parse("multi_account.xml").transactions] == \
        [t.external_id for t in parse("multi_account.xml").transactions]


# Broken files ----------------------------------------------------------------------------------------------

def test_a_balance_that_does_not_add_up_fails_naming_the_statement_account_expected_and_found():
    error = rejection((CORPUS / "broken_balance.xml").read_bytes())
    assert error.details["where"] == "Stmt[2]/Bal"
    assert error.details["statement_id"] == "BAD-20261103"
    assert error.details["account"] == "DE89370400440532013000"
    assert (error.details["expected"], error.details["found"]) == ("1010.00", "1000.00")
    assert error.details["error_count"] == 1
    assert error.message.startswith("Stmt[2] (BAD-20261103) account DE89370400440532013000")


def test_lenient_turns_a_balance_that_does_not_add_up_into_a_warning_and_imports_the_file():
    parsed = parse("broken_balance.xml", lenient=True)
    assert [t.external_id for t in parsed.transactions] == ["OK-1", "BAD-1"]
    [warning] = parsed.warnings
    assert "Stmt[2] (BAD-20261103)" in warning and "1010.00" in warning and "1000.00" in warning


def test_a_statement_without_its_closing_balance_fails_and_is_a_warning_when_lenient():
    data = one_statement([Entry(500, "CRDT", DAY)]).replace(b"<Cd>CLBD</Cd>", b"<Cd>ITBD</Cd>")
    assert "no closing booked balance (CLBD)" in rejection(data).message
    parsed = parse_camt053(data, lenient=True)
    assert parsed.balances[0].closing_booked is None and "CLBD" in parsed.warnings[0]


def test_a_truncated_file_fails_naming_the_line_and_the_element_it_ends_in():
    error = rejection((CORPUS / "broken_truncated.xml").read_bytes())
    assert error.details["where"] == "line 50"
    assert error.details["element"] == "Stmt[1]/Ntry[1]/NtryDtls"
    assert "truncated" in error.message


@pytest.mark.parametrize("lenient", [False, True])
def test_garbage_fails_cleanly_in_both_modes(lenient):
    error = rejection((CORPUS / "broken_garbage.xml").read_bytes(), lenient)
    assert error.details["where"] == "line 1" and "not well-formed XML" in error.message


@pytest.mark.parametrize("data, phrase", [
    (b"", "empty"),
    (b"   \n", "empty"),
    (b"hello", "not well-formed XML"),
    (b"<?xml version='1.0'?>", "not well-formed XML"),
    (b'<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"/>', "holds nothing"),
])
def test_empty_and_almost_empty_files_fail_cleanly(data, phrase):
    assert phrase in rejection(data).message


@pytest.mark.parametrize("encoding", ["UTF-0", "base64", "utf-7", "idna", "cp037"])
def test_an_encoding_that_cannot_be_read_fails_cleanly(encoding):
    data = one_statement([]).replace(b'encoding="UTF-8"', f'encoding="{encoding}"'.encode())
    error = rejection(data)
    assert error.details["where"] == "line 1"


@pytest.mark.parametrize("encoding", ["UTF-16", "ISO-8859-1"])
def test_a_file_in_another_encoding_expat_reads_is_read(encoding):
    entry = Entry(100, "CRDT", DAY, additional_info="Café Größe")
    data = one_statement([entry]).decode().replace('encoding="UTF-8"', f'encoding="{encoding}"').encode(encoding)
    assert parse_camt053(data).transactions[0].description == "Café Größe"


def test_a_utf8_byte_order_mark_is_read_past():
    data = (CORPUS / "pending.xml").read_bytes()
    assert parse_camt053(b"\xef\xbb\xbf" + data) == parse_camt053(data)


@pytest.mark.parametrize("lenient", [False, True])
def test_an_entity_bomb_is_refused_before_anything_is_expanded(lenient):
    data = (CORPUS / "broken_entity_bomb.xml").read_bytes()
    tracemalloc.start()
    started = time.perf_counter()
    try:
        error = rejection(data, lenient)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 1
    assert peak < 1024 * 1024  # a billion "lol"s would be 3 GB
    assert error.details == {"where": "line 2", "expected": "no DTD", "found": "a DOCTYPE declaration"}


def test_an_external_entity_is_refused_without_reading_what_it_names(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("THE-SECRET")
    data = (CORPUS / "broken_external_entity.xml").read_bytes().replace(b"file:///etc/passwd", secret.as_uri().encode())
    error = rejection(data, lenient=True)
    assert error.details["found"] == "a DOCTYPE declaration"
    assert "THE-SECRET" not in repr(error.message) + repr(error.details)


@pytest.mark.parametrize("prolog", [
    b'<!DOCTYPE Document SYSTEM "http://127.0.0.1:9/camt.dtd">',
    b'<!DOCTYPE Document PUBLIC "-//X//Y" "camt.dtd">',
    b"<!-- a comment first --><!DOCTYPE Document>",
])
def test_any_doctype_is_refused_even_one_without_entities(prolog):
    body = one_statement([]).split(b"?>", 1)[1]
    error = rejection(b'<?xml version="1.0"?>' + prolog + body)
    assert error.details["found"] == "a DOCTYPE declaration"


def test_an_entity_reference_without_a_dtd_is_not_well_formed():
    data = one_statement([Entry(100, "CRDT", DAY, additional_info="x")]).replace(b">x<", b">&nbsp;<")
    error = rejection(data)
    assert "undefined entity" in error.message and error.details["element"].startswith("Stmt[1]/Ntry[1]")


@pytest.mark.parametrize("lenient", [False, True])
def test_a_statement_without_an_account_fails_in_both_modes_naming_the_statement(lenient):
    error = rejection((CORPUS / "broken_missing_acct.xml").read_bytes(), lenient)
    assert error.details["where"] == "Stmt[1]/Acct" and error.details["statement_id"] == "NOACCT-1"


@pytest.mark.parametrize("lenient", [False, True])
def test_an_entry_without_an_amount_fails_naming_the_entry_and_its_account(lenient):
    error = rejection((CORPUS / "broken_entry_without_amount.xml").read_bytes(), lenient)
    assert error.details == {"where": "Stmt[1]/Ntry[2]/Amt", "expected": "an amount", "found": "nothing",
                             "statement_id": "NOAMT-1", "account": "NL91ABNA0417164300"}


def test_a_file_over_the_size_limit_is_refused_before_parsing():
    data = (CORPUS / "multi_account.xml").read_bytes()
    with pytest.raises(FileRejected, match="accepted up to 1000 bytes"):
        parse_camt053(data, max_bytes=1000)


@pytest.mark.parametrize("namespace, phrase", [
    ("urn:iso:std:iso:20022:tech:xsd:camt.052.001.08", "camt.052.001.08"),
    ("urn:iso:std:iso:20022:tech:xsd:camt.053.001.01", "camt.053.001.01"),
    ("urn:iso:std:iso:20022:tech:xsd:camt.053.001.14", "camt.053.001.14"),
    ("", "no namespace"),
])
def test_other_messages_and_versions_are_refused_naming_what_was_found(namespace, phrase):
    data = one_statement([]).replace(b' xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"',
                                     f' xmlns="{namespace}"'.encode() if namespace else b"")
    error = rejection(data)
    assert error.details["where"] == "Document" and phrase in error.details["found"]


@pytest.mark.parametrize("version", ["02", "04", "08", "10", "13"])
def test_every_camt053_version_from_02_to_13_is_read(version):
    statement = Statement("S-1", "DE89370400440532013000", "EUR", 0, DAY,
                          [Entry(1234, "CRDT", DAY, details=[Detail(1000), Detail(234)])])
    parsed = parse_camt053(write_camt053([statement], version=version))
    assert [t.amount for t in parsed.transactions] == [1000, 234]


def test_a_document_prefixing_its_namespace_reads_the_same():
    data = one_statement([Entry(100, "CRDT", DAY, entry_ref="7")])
    prefixed = data.replace(b'xmlns="', b'xmlns:c="').replace(b"<", b"<c:").replace(b"<c:/", b"</c:").replace(
        b"<c:?xml", b"<?xml")
    assert parse_camt053(prefixed) == parse_camt053(data)


@pytest.mark.parametrize("text, phrase", [
    ("1e9999999", "not a decimal amount"),
    ("-5.00", "not a decimal amount"),
    ("NaN", "not a decimal amount"),
    ("1,000.00", "not a decimal amount"),
    ("1.001", "more decimals than EUR"),
    ("99999999999999999.99", "too large"),
    ("", "not a decimal amount"),
])
def test_amounts_that_are_not_plain_decimals_are_refused_naming_the_entry(text, phrase):
    data = one_statement([Entry(0, "CRDT", DAY, amount_text=text)], closing=10_000)
    error = rejection(data)
    assert phrase in error.message and error.details["where"] == "Stmt[1]/Ntry[1]/Amt"


def test_an_entry_in_another_currency_than_its_account_is_refused():
    data = one_statement([Entry(100, "CRDT", DAY, currency="USD")])
    error = rejection(data)
    assert error.details["where"] == "Stmt[1]/Ntry[1]/Amt" and error.details["found"] == "USD"


def test_details_that_do_not_add_up_to_their_entry_fail_and_are_a_warning_when_lenient():
    data = one_statement([Entry(1000, "DBIT", DAY, account_servicer_ref="B-1", details=[Detail(600), Detail(300)])])
    error = rejection(data)
    assert error.details["where"] == "Stmt[1]/Ntry[1]"
    assert (error.details["expected"], error.details["found"]) == ("10.00", "9.00")
    assert error.details["account"] == "DE89370400440532013000"
    parsed = parse_camt053(data, lenient=True)
    assert [t.amount for t in parsed.transactions] == [600, 300]
    [warning] = parsed.warnings
    assert warning.startswith("Stmt[1] (S-1) account DE89370400440532013000: Stmt[1]/Ntry[1]: its transaction "
                              "details add up to 9.00 EUR, the entry is 10.00")


def test_details_with_their_own_direction_net_to_their_entry():
    details = [Detail(1500, "CRDT", end_to_end_id="IN"), Detail(500, "DBIT", end_to_end_id="BACK")]
    parsed = parse_camt053(one_statement([Entry(1000, "CRDT", DAY, details=details)]))
    assert [(t.amount, t.direction) for t in parsed.transactions] == [(1500, "credit"), (500, "debit")]


def test_details_in_several_groups_are_named_by_their_group():
    data = one_statement([Entry(300, "CRDT", DAY, details=[Detail(100), Detail(200)])])
    regrouped = data.replace(b"</TxDtls><TxDtls>", b"</TxDtls></NtryDtls><NtryDtls><TxDtls>")
    assert [t.where for t in parse_camt053(regrouped).transactions] == [
        "Stmt[1]/Ntry[1]/NtryDtls/TxDtls[1]", "Stmt[1]/Ntry[1]/NtryDtls[2]/TxDtls[1]"]


@pytest.mark.parametrize("move", [
    (b"</NtryDtls>", b"</NtryDtls><TxDtls><Amt Ccy=\"EUR\">1.00</Amt></TxDtls>"),  # a detail outside NtryDtls
    (b"<AddtlNtryInf>x</AddtlNtryInf>", b"<AddtlNtryInf>x</AddtlNtryInf><Ntry/>"),  # an entry inside an entry
    (b"<GrpHdr>", b"<GrpHdr><Stmt><Id>X</Id></Stmt>"),  # a statement inside the group header
])
def test_entries_details_and_statements_out_of_their_place_are_refused(move):
    data = one_statement([Entry(100, "CRDT", DAY, details=[Detail()], additional_info="x")])
    assert move[0] in data
    rejection(data.replace(move[0], move[1], 1))


def test_a_document_holding_too_many_elements_outside_entries_is_refused_before_memory_grows():
    data = one_statement([Entry(100, "CRDT", DAY)])
    junk = b"<AddtlStmtInf/>" * (MAX_HELD_ELEMENTS + 1000)
    error = rejection(data.replace(b"</Stmt>", junk + b"</Stmt>"))
    assert f"more than {MAX_HELD_ELEMENTS} XML elements" in error.message


@pytest.mark.parametrize("filler", [b"", b"<!-- </a></a></a></a> -->" * 20_000, b"<?pi </a></a>?>" * 20_000])
def test_elements_nested_without_end_are_refused_before_memory_grows(filler):
    # Given a hostile file opening elements it never closes, with comments that try to hide them
    opened = (b"<a>" + filler[:len(filler) // 2] + b"<a>" * (MAX_OPEN_ELEMENTS + 10) + filler[len(filler) // 2:]
              + b"x" * 100_000)
    data = one_statement([]).replace(b"</Stmt>", opened + b"</Stmt>")
    # When it is read, Then it is refused at once, without building a tree of it
    tracemalloc.start()
    try:
        error = rejection(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"more than {MAX_OPEN_ELEMENTS} XML elements are open" in error.message
    assert peak < 8 * 1024 * 1024


def test_comments_and_processing_instructions_are_read_past():
    data = one_statement([Entry(100, "CRDT", DAY, additional_info="x")])
    noisy = data.replace(b"<Ntry>", b"<!-- <Ntry> was <b>here</b> -->" * 30_000 + b"<?bank note <x/>?><Ntry>")
    assert parse_camt053(noisy) == parse_camt053(data)


def test_references_that_say_there_is_none_are_not_ids():
    entry = Entry(100, "CRDT", DAY, account_servicer_ref="NONREF", entry_ref="9",
                  details=[Detail(end_to_end_id="NOTPROVIDED")])
    [record] = parse_camt053(one_statement([entry])).transactions
    assert record.external_id == "S-1/9" and "end_to_end_id" not in record.metadata


def test_a_placeholder_reference_is_recognised_in_any_case_and_padding_and_a_reference_of_its_length_is_kept():
    entries = [Entry(100, "CRDT", DAY, account_servicer_ref=" not provided ", entry_ref="1",
                     details=[Detail(end_to_end_id="NonRef", instruction_id="NONREX")]),
               Entry(100, "CRDT", DAY, account_servicer_ref="NOTPROVIDEX", entry_ref="2",
                     details=[Detail(end_to_end_id="  ")])]
    first, second = parse_camt053(one_statement(entries)).transactions
    assert first.external_id == "S-1/1" and "end_to_end_id" not in first.metadata
    assert first.metadata["customer_reference"] == "NONREX"
    assert second.external_id == "NOTPROVIDEX" and "end_to_end_id" not in second.metadata


def test_an_id_met_again_for_the_same_account_gets_a_counter_and_never_repeats():
    entries = [Entry(100, "CRDT", DAY, account_servicer_ref="SAME"), Entry(100, "CRDT", DAY, account_servicer_ref="SAME"),
               Entry(100, "CRDT", DAY, account_servicer_ref="SAME#2"), Entry(100, "CRDT", DAY, account_servicer_ref="SAME")]
    ids = [t.external_id for t in parse_camt053(one_statement(entries)).transactions]
    assert ids == ["SAME", "SAME#2", "SAME#2#2", "SAME#3"]



class PublicEventsOnly:
    """A pull parser with ElementTree's public methods only: no `_events_queue` to read in place."""

    def __init__(self, events):
        self.made = ET.XMLPullParser(events)
        self.reads = 0

    def feed(self, data):
        self.made.feed(data)

    def close(self):
        self.made.close()

    def read_events(self):
        self.reads += 1
        return self.made.read_events()


@pytest.mark.parametrize("name", ["multi_account.xml", "reversals_v02.xml", "jpy_bhd.xml", "pending.xml"])
def test_a_pull_parser_without_its_private_queue_reads_every_file_through_read_events_the_same(name):
    data = (CORPUS / name).read_bytes()
    made = []

    def public_only(events):
        made.append(PublicEventsOnly(events))
        return made[0]
    assert parse_camt053(data, pull_parser=public_only) == parse_camt053(data)
    assert made[0].reads > 0 and not hasattr(made[0], "_events_queue")


@pytest.mark.parametrize("name", ["broken_truncated.xml", "broken_garbage.xml", "broken_balance.xml",
                                  "broken_entry_without_amount.xml"])
def test_a_pull_parser_without_its_private_queue_refuses_every_broken_file_the_same(name):
    data = (CORPUS / name).read_bytes()
    with pytest.raises(FileRejected) as fallback:
        parse_camt053(data, pull_parser=PublicEventsOnly)
    assert (fallback.value.message, fallback.value.details) == (rejection(data).message, rejection(data).details)


def test_a_pull_parser_without_its_private_queue_reads_the_entries_before_a_break_in_the_middle_of_a_file():
    data = one_statement([Entry(100 + n, "CRDT", DAY, additional_info="x" * 200) for n in range(400)])
    pieces = data.split(b"</Ntry>")
    broken = b"</Ntry>".join(pieces[:300]) + b"</Ntri>" + b"</Ntry>".join(pieces[300:])
    assert broken.index(b"</Ntri>") > 4 * CHUNK_BYTES
    with pytest.raises(FileRejected) as fallback:
        parse_camt053(broken, pull_parser=PublicEventsOnly)
    assert "mismatched tag" in fallback.value.message and "Ntry[300]" in fallback.value.message
    assert (fallback.value.message, fallback.value.details) == (rejection(broken).message, rejection(broken).details)


# Memory ----------------------------------------------------------------------------------------------------

def _entries(count: int, fat: bool = False) -> list[Entry]:
    return [Entry(100 + n, "CRDT", DAY, account_servicer_ref=f"R{n}", additional_info="x" * 2000 if fat else None,
                  details=[Detail(end_to_end_id=f"E{n}", debtor=f"Payer {n}", remittance=[f"Invoice {n}"] * (20 if fat else 1))])
            for n in range(count)]


def _transient_peak(data: bytes) -> tuple[int, int]:
    """(peak memory while parsing beyond what the result keeps, what the result keeps)."""
    tracemalloc.start()
    try:
        parsed = parse_camt053(data)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parsed.transactions
    return peak - kept, kept


def test_memory_beyond_the_records_does_not_grow_with_the_xml():
    # Given two files of as many entries, one with six times the XML of the other
    lean, fat = one_statement(_entries(4_000)), one_statement(_entries(4_000, fat=True))
    assert len(fat) > 6 * len(lean)
    # When each is parsed
    lean_transient, lean_kept = _transient_peak(lean)
    fat_transient, _ = _transient_peak(fat)
    # Then what parsing holds beyond the records is about the same, a small part of the records, and far
    # less than a tree of the file would be
    assert fat_transient < lean_transient * 1.5
    assert lean_transient < lean_kept / 3
    assert fat_transient < len(fat) / 10


# Properties ------------------------------------------------------------------------------------------------

@st.composite
def statements(draw, index: int = 0):
    currency = draw(st.sampled_from(["EUR", "JPY", "BHD", "USD"]))
    entries = []
    for n in range(draw(st.integers(0, 6))):
        amount = draw(st.integers(0, 10**9))
        kind = draw(st.sampled_from(["plain", "detail", "batch", "batch-without-amounts"]))
        details: list[Detail] = []
        if kind == "detail":
            details = [Detail(end_to_end_id=f"E{n}", debtor="Payer", remittance=["Invoice"])]
        elif kind == "batch":
            cuts = sorted(draw(st.lists(st.integers(0, amount), min_size=1, max_size=3)))
            parts = [b - a for a, b in zip([0, *cuts], [*cuts, amount])]
            details = [Detail(part, end_to_end_id=f"E{n}-{i}") for i, part in enumerate(parts)]
        elif kind == "batch-without-amounts":
            details = [Detail(end_to_end_id=f"E{n}-{i}") for i in range(2)]
        entries.append(Entry(
            amount, draw(st.sampled_from(["CRDT", "DBIT"])), DAY, DAY,
            status=draw(st.sampled_from(["BOOK", "BOOK", "BOOK", "PDNG", "INFO"])),
            reversal=draw(st.sampled_from([None, True, False])),
            entry_ref=draw(st.none() | st.just(str(n + 1))),
            account_servicer_ref=draw(st.none() | st.just(f"AS-{index}-{n}")), details=details))
    account = draw(st.sampled_from(["DE89370400440532013000", "000123456", "GB33BUKB20201555555555"]))
    return Statement(f"STMT-{index}", account, currency, draw(st.integers(-10**9, 10**9)), DAY, entries,
                     other_account=account.isdigit(), opening_code=draw(st.sampled_from(["OPBD", "PRCD"])),
                     available=draw(st.none() | st.integers(-10**9, 10**9)))


files = st.tuples(st.lists(statements(), min_size=1, max_size=3), st.sampled_from(["02", "08", "13"]),
                  st.sampled_from(["\n", "\r\n"]))


def _numbered(statement_list: list[Statement]) -> list[Statement]:
    for index, statement in enumerate(statement_list):
        statement.id = f"STMT-{index}"
    return statement_list


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files)
def test_generated_statements_import_with_opening_plus_credits_minus_debits_equal_to_closing(spec):
    statement_list, version, ending = spec
    statement_list = _numbered(statement_list)
    parsed = parse_camt053(write_camt053(statement_list, version=version, line_ending=ending))
    assert [b.statement_id for b in parsed.balances] == [s.id for s in statement_list]
    for statement, balance in zip(statement_list, parsed.balances):
        records = [t for t in parsed.transactions if t.metadata["statement_id"] == statement.id]
        net = sum(t.amount if t.direction == "credit" else -t.amount for t in records)
        assert balance.opening_booked + net == balance.closing_booked == statement.computed_closing()
        assert balance.closing_available == statement.available
        booked = [e for e in statement.entries if e.status == "BOOK"]
        assert len(records) == sum(len(e.details) if e.details and e.details[0].amount is not None else 1
                                   for e in booked)
        assert all(t.account == statement.account and t.currency == statement.currency for t in records)
    ids = [(t.account, t.external_id) for t in parsed.transactions]
    assert len(ids) == len(set(ids))


def _mutate(original: bytes, data) -> bytes:
    mutated = bytearray(original)
    kind = data.draw(st.sampled_from(["flip", "truncate", "delete", "insert", "duplicate", "digit"]))
    position = data.draw(st.integers(0, len(mutated) - 1))
    if kind == "flip":
        mutated[position] = data.draw(st.integers(0, 255))
    elif kind == "truncate":
        del mutated[position:]
    elif kind == "delete":
        del mutated[position:position + data.draw(st.integers(1, 40))]
    elif kind == "insert":
        mutated[position:position] = data.draw(st.sampled_from(
            [b"<", b"&", b"]]>", b"<Ntry>", b"</Stmt>", b"<!DOCTYPE x>", b"\x00", b"\xff\xfe", b"&amp;", b"<Amt/>",
             b"<RvslInd>maybe</RvslInd>", b"<Sts>BOOK</Sts>", b"<Dt>2026-02-30</Dt>"]))
    elif kind == "duplicate":
        end = min(len(mutated), position + data.draw(st.integers(1, 400)))
        mutated[end:end] = mutated[position:end]
    else:
        digits = [i for i, byte in enumerate(mutated) if 48 <= byte <= 57]
        if digits:
            at = data.draw(st.sampled_from(digits))
            mutated[at] = data.draw(st.sampled_from(b"0123456789."))
    return bytes(mutated)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files, st.booleans(), st.data())
def test_a_mutated_file_is_either_read_or_refused_cleanly(spec, lenient, data):
    statement_list, version, ending = spec
    original = write_camt053(_numbered(statement_list), version=version, line_ending=ending)
    try:
        parse_camt053(_mutate(original, data), lenient)
    except FileRejected as error:
        assert error.message


@settings(max_examples=60, deadline=None)
@given(st.lists(statements(), min_size=1, max_size=2), st.data())
def test_a_changed_amount_or_balance_is_caught_unless_lenient(statement_list, data):
    statement_list = _numbered(statement_list)
    statement = data.draw(st.sampled_from(statement_list))
    statement.closing = statement.computed_closing() + data.draw(st.sampled_from([-1, 1, 10**6]))
    file = write_camt053(statement_list)
    with pytest.raises(FileRejected) as caught:
        parse_camt053(file)
    assert caught.value.details["statement_id"] == statement.id
    parsed = parse_camt053(file, lenient=True)
    assert any(statement.id in warning for warning in parsed.warnings)


def test_a_decimal_amount_is_written_as_the_currency_writes_it():
    assert (decimal_text(150000, "JPY"), decimal_text(1250, "BHD"), decimal_text(5, "EUR")) == ("150000", "1.250", "0.05")


# Tokens too long to be a statement's ------------------------------------------------------------------------

LONG = 4 * 1024 * 1024  # 4 MiB: took expat 9 s a file, read 16 KiB at a time (bench/statements.py --long-token)


def with_long_token(where: str) -> bytes:
    data = one_statement([Entry(500, "CRDT", DAY)], closing=10_500)
    if where == "attribute":  # an attribute of the root element
        return data.replace(b"<Document ", b'<Document note="' + b"a" * LONG + b'" ', 1)
    return data.replace(b"<Document ", b"<!--" + b"a" * LONG + b"--><Document ", 1)  # a comment before it


@pytest.mark.parametrize("where", ["attribute", "comment"])
def test_a_tag_or_comment_of_megabytes_before_the_first_element_is_refused_naming_the_limit(where):
    # Given a statement whose root element carries a 4 MiB attribute, or a 4 MiB comment stands before it
    data = with_long_token(where)
    # When it is read, Then it is refused, naming the limit and the line where the long stretch begins
    error = rejection(data)
    assert "1 MiB" in error.message and error.message.startswith("line 2:")  # the root element's line
    assert error.details["expected"] == "at most 1 MiB between two element ends"


def test_a_comment_under_the_limit_is_read_as_any_comment():
    data = one_statement([Entry(500, "CRDT", DAY)], closing=10_500)
    data = data.replace(b"<Document ", b"<!--" + b"a" * (512 * 1024) + b"--><Document ", 1)
    assert [t.amount for t in parse_camt053(data).transactions] == [500]
