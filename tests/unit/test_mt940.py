"""The MT940 parser on the project's corpus (tests/data/statements/mt940, written by hand) and on
generated and mutated files (tests/support/mt940_files.py)."""
from datetime import date, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain.parsers import FileRejected
from chalicelib.domain.parsers.mt940 import parse_mt940
from chalicelib.domain.parsers.statements import StatementBalance, StatementTransaction, deterministic_id
from tests.support.mt940_files import Line, Statement, free_text, structured, write_file

CORPUS = Path(__file__).resolve().parents[1] / "data" / "statements" / "mt940"


def parse(name: str, lenient: bool = False):
    return parse_mt940((CORPUS / name).read_bytes(), lenient=lenient)


def rejection(data: bytes, lenient: bool = False) -> FileRejected:
    with pytest.raises(FileRejected) as caught:
        parse_mt940(data, lenient=lenient)
    return caught.value


def one_statement(*lines: str, opening: str = ":60F:C260105EUR100,00", closing: str = ":62F:C260105EUR100,00") -> bytes:
    text = [":20:REF", ":25:DE89370400440532013000", ":28C:1/1", opening, *lines, closing, "-"]
    return "\n".join(text).encode()


# The corpus -------------------------------------------------------------------------------------

def test_a_file_of_two_swift_messages_gives_each_account_its_transactions_with_structured_details():
    parsed = parse("swift_blocks_two_accounts.sta")
    statement = "STARTUMS/00001/001"
    assert parsed.transactions == [
        StatementTransaction(
            1, "line 6", "0532013000", "EUR", 25000, 2, "credit", date(2026, 1, 5), date(2026, 1, 5),
            "EREF+INV-2026-001 SVWZ+Rechnung 2026-001 vom 02.01.2026", "BANKREF0001",
            {"transaction_type": "NTRF", "transaction_type_meaning": "transfer", "statement_id": statement,
             "value_date": "2026-01-05", "funds_code": "R", "business_transaction_code": "166",
             "posting_text": "GUTSCHRIFT", "counterparty_bank": "COBADEFFXXX",
             "counterparty_account": "DE44500105175407324931",
             "counterparty_name": "Mustermann und Soehne Handelsgesellschaft mbH"}),
        StatementTransaction(
            2, "line 10", "0532013000", "EUR", 10050, 2, "debit", date(2026, 1, 5), date(2026, 1, 5),
            "Strom Januar 2026", "BANKREF0002",
            {"transaction_type": "NDDT", "transaction_type_meaning": "direct debit", "customer_reference": "MANDATE-77",
             "statement_id": statement, "value_date": "2026-01-05", "funds_code": "R",
             "business_transaction_code": "105", "posting_text": "LASTSCHRIFT",
             "counterparty_account": "DE02100100109307118603", "counterparty_name": "Stadtwerke Musterstadt"}),
        StatementTransaction(
            3, "line 13", "0532013000", "EUR", 4000, 2, "credit", date(2026, 1, 6), date(2026, 1, 6),
            "Rueckbuchung Lastschrift vom 02.01.", "BANKREF0003",
            {"transaction_type": "NRTI", "transaction_type_meaning": "returned item", "statement_id": statement,
             "value_date": "2026-01-06", "reversal": True}),
        StatementTransaction(
            4, "line 23", "NL91ABNA0417164300", "USD", 50000, 2, "credit", date(2026, 1, 5), date(2026, 1, 5),
            "Payment from ACME CORP", "FT26005AAA",
            {"transaction_type": "S103", "transaction_type_meaning": "SWIFT MT103 transfer",
             "customer_reference": "REF-A", "statement_id": "STARTUMS/00007/001", "value_date": "2026-01-05",
             "supplementary_details": "Invoice 4711 settlement"}),
    ]
    assert parsed.balances == [
        StatementBalance("0532013000", "EUR", 2, date(2026, 1, 6), statement, 100000, 118950, 118950),
        StatementBalance("NL91ABNA0417164300", "USD", 2, date(2026, 1, 5), "STARTUMS/00007/001", -50000, 0),
    ]
    assert parsed.accounts == ["0532013000", "NL91ABNA0417164300"]  # from BIC/account, and an IBAN with its currency
    assert parsed.warnings == []


def test_a_bare_file_of_several_statements_gives_one_balance_per_statement_and_reads_reversals():
    parsed = parse("plain_lf_several_statements.sta")
    cheque, reversal, transfer = parsed.transactions
    assert (cheque.amount, cheque.direction, cheque.external_id) == (123456, "debit", "CHQ-000981")
    assert cheque.description == "Cheque 000981 presented by Office Supplies Ltd, 14 Long Lane, London"
    assert (reversal.amount, reversal.direction, reversal.metadata["reversal"]) == (1000, "debit", True)
    assert reversal.description == "Reversal of a credit: duplicate payment"
    assert reversal.external_id == deterministic_id("0001234567", date(2026, 1, 5), 1000, "debit", 2)
    assert "customer_reference" not in reversal.metadata  # NONREF
    assert transfer.metadata["customer_reference"] == "PO 5521" and transfer.external_id.startswith("stmt-")
    assert transfer.description == ""  # the :86: after :62F: is about the statement, not the line
    assert parsed.balances == [
        StatementBalance("0001234567", "EUR", 2, date(2026, 1, 5), "MT940-260105/00042/001", 0, -124456),
        StatementBalance("0001234567", "EUR", 2, date(2026, 1, 5), "MT940-260105/00042/002", -124456, 75544, 70000),
        StatementBalance("0001234567", "EUR", 2, date(2026, 1, 6), "MT940-260106/00043/001", 75544, 75544),
    ]
    assert parsed.accounts == ["0001234567"]


def test_an_entry_date_takes_the_year_that_puts_it_nearest_the_value_date():
    booked, back_valued, no_entry_date = parse("new_year_entry_dates.sta").transactions
    assert (booked.value_date, booked.booking_date) == (date(2025, 12, 31), date(2026, 1, 2))
    assert (back_valued.value_date, back_valued.booking_date) == (date(2026, 1, 2), date(2025, 12, 31))
    assert (no_entry_date.value_date, no_entry_date.booking_date) == (date(2025, 12, 31), date(2025, 12, 31))
    assert booked.metadata["value_date"] == "2025-12-31"


def test_yen_and_dinar_amounts_are_exact_in_their_minor_units():
    parsed = parse("jpy_bhd_crlf.sta")
    assert [(t.currency, t.amount, t.decimal_places, t.direction) for t in parsed.transactions] == [
        ("JPY", 150000, 0, "credit"), ("JPY", 2500, 0, "debit"), ("BHD", 12345, 3, "debit"), ("BHD", 500, 3, "credit")]
    assert [(b.account, b.opening_booked, b.closing_booked, b.closing_available) for b in parsed.balances] == [
        ("1234567", 1000000, 1147500, 1147500), ("BH67BMAG00001299123456", 100000, 88155, None)]


def test_crlf_and_lf_files_read_the_same():
    crlf = (CORPUS / "swift_blocks_two_accounts.sta").read_bytes()
    assert b"\r\n" in crlf
    assert parse_mt940(crlf.replace(b"\r\n", b"\n")) == parse_mt940(crlf)
    assert parse_mt940(crlf.replace(b"\r\n", b"\r")) == parse_mt940(crlf)


def test_the_same_messages_with_and_without_swift_blocks_read_the_same():
    enveloped = (CORPUS / "swift_blocks_two_accounts.sta").read_bytes().decode().split("\r\n")
    bare = ["-" if line.startswith("-}") else line for line in enveloped if not line.startswith("{1:")]
    with_blocks, without = parse_mt940("\n".join(enveloped).encode()), parse_mt940("\n".join(bare).encode())
    for transaction in with_blocks.transactions + without.transactions:
        transaction.where = ""  # the lines moved
    assert without == with_blocks


def test_a_field_on_the_line_that_opens_block_4_is_read():
    data = b"{1:F01BANKDEFFAXXX0000000000}{2:O940}{4::20:REF\n" + one_statement().split(b"\n", 1)[1][:-1] + b"-}\n"
    assert [b.statement_id for b in parse_mt940(data).balances] == ["REF/1/1"]


def test_a_statement_line_broken_inside_its_first_subfields_is_read_whole():
    data = one_statement(":61:2601050105CR", "250,00NTRFNONREF//B1", "supplementary", closing=":62F:C260105EUR350,00")
    [transaction] = parse_mt940(data).transactions
    assert (transaction.amount, transaction.external_id) == (25000, "B1")
    assert transaction.metadata["supplementary_details"] == "supplementary"


def test_reimporting_a_file_gives_the_same_external_ids():
    first = [t.external_id for t in parse("plain_lf_several_statements.sta").transactions]
    assert first == [t.external_id for t in parse("plain_lf_several_statements.sta").transactions]


def test_text_beyond_ascii_is_read_as_utf8_else_latin1():
    for encoding in ("utf-8", "latin-1"):
        data = one_statement(":61:260105C1,00NTRFNONREF//X1", ":86:Müller Straße", ":61:260105D1,00NTRFNONREF//X2",
                             closing=":62F:C260105EUR100,00").decode().encode(encoding)
        assert parse_mt940(data).transactions[0].description == "Müller Straße"


# Broken files ----------------------------------------------------------------------------------

def test_a_balance_that_does_not_add_up_names_the_line_the_account_what_was_expected_and_found():
    error = rejection((CORPUS / "broken_balance.sta").read_bytes())
    assert error.details == {"where": "line 8", "line": 8, "account": "DE89370400440532013000",
                             "statement_id": "BROKEN1/1/1", "expected": "130.00", "found": "140.00"}
    assert error.message.startswith("line 8: ") and "DE89370400440532013000" in error.message
    assert "EUR 140.00" in error.message and "EUR 130.00" in error.message


def test_lenient_makes_a_balance_that_does_not_add_up_a_warning_and_keeps_the_bank_s_balance():
    parsed = parse("broken_balance.sta", lenient=True)
    [warning] = parsed.warnings
    assert warning.startswith("line 8: ") and "EUR 140.00" in warning and "EUR 130.00" in warning
    assert [t.external_id for t in parsed.transactions] == ["X1", "X2"]
    assert [(b.opening_booked, b.closing_booked) for b in parsed.balances] == [(10000, 14000)]


@pytest.mark.parametrize("name, line, expected, found, phrase", [
    ("broken_truncated.sta", 7, ":62F:", "end of file", "looks truncated"),
    ("broken_garbage.sta", 1, "{1: or :20:", "Dear customer,", "not an MT940 statement"),
    ("broken_bad_date.sta", 5, "YYMMDD", "261399", "value date 261399 is not a date"),
])
@pytest.mark.parametrize("lenient", [False, True])
def test_broken_files_fail_in_both_modes_naming_the_line_and_what_was_expected_and_found(
        name, line, expected, found, phrase, lenient):
    error = rejection((CORPUS / name).read_bytes(), lenient=lenient)
    assert (error.details["line"], error.details["expected"], error.details["found"]) == (line, expected, found)
    assert error.message.startswith(f"line {line}: ") and phrase in error.message


def test_a_truncated_file_names_the_account_and_statement_it_cut():
    error = rejection((CORPUS / "broken_truncated.sta").read_bytes())
    assert error.details["account"] == "DE89370400440532013000" and "CUT/1/1" in error.message


@pytest.mark.parametrize("data, line, phrase", [
    (b":20:REF\n:61:260105C1,00NTRFNONREF\n:62F:C260105EUR1,00\n", 2, "before the account (:25:)"),
    (b":20:REF\n:25:DE89370400440532013000\n:28C:1/1\n:61:260105C1,00NTRF\n", 4, "before the account (:25:)"),
    (one_statement(":61:260105C100.00NTRFNONREF"), 5, "not a SWIFT amount"),
    (one_statement(":61:260105C1,005NTRFNONREF"), 5, "more decimals than EUR"),
    (one_statement(":61:260105C1234567890123,45NTRFNONREF"), 5, "at most 15 characters"),
    (one_statement(":61:260105C1,00XTRFNONREF"), 5, "statement line :61: is not"),
    (one_statement(":61:2601050230C1,00NTRFNONREF"), 5, "entry date 0230"),
    (one_statement(opening=":60F:C260105XYZ100,00"), 4, "not an ISO 4217 code"),
    (one_statement(opening=":60F:C260105EUR100"), 4, "not a SWIFT amount"),
    (one_statement(closing=":62F:C260105USD100,00"), 5, "is in USD but the statement in EUR"),
    (one_statement(":64:C260105EUR100,00"), 5, ":64: before the closing balance"),
    (one_statement(":99X:something"), 5, "unknown field :99X:"),
    (one_statement(closing=":62F:C260105EUR100,00\n:61:260105C1,00NTRF"), 6, "after the closing balance"),
    (one_statement(":25:DE89370400440532013000"), 5, "after the opening balance"),
    (b":20:REF\n:25:DE89370400440532013000\n:60F:C260105EUR1,00\n", 3, ":28C: statement number"),
    (one_statement()[:-2] + b"\n:20:NEXT\n:25:X\n:28C:1/1\n:60F:C260105EUR1,00\n", 9, "before the closing balance"),
    (one_statement(closing="")[:-1] + b":20:NEXT\n", 6, "a new statement (:20:) begins before the closing"),
    (b"{1:F01BANK}{2:O940}{4:\n" + one_statement()[:-2], 6, "not closed by -}"),
    (b"{1:F01BANK}{2:O940}{4:\n" + one_statement()[:-1] + b"{1:F01BANK}{2:O940}{4:\n", 7, "looks truncated"),
    (b"{1:F01BANK}{2:O940}{4:\nhello\n-}", 2, "text where a field (:20:) belongs"),
    (b"{1:F01BANK}{2:O940}{4:\n-}", 2, "the message has no statement"),
    (b"{1:F01BANK}{2:O940}{5:{CHK:1}}\n", 1, "no MT940 statement"),
    (b":25:DE89370400440532013000\n", 1, "a statement begins with :20:"),
])
def test_structural_errors_always_fail_naming_the_line(data, line, phrase):
    for lenient in (False, True):
        error = rejection(data, lenient=lenient)
        assert error.details["line"] == line, error.message
        assert phrase in error.message and error.message.startswith(f"line {line}: ")
        assert {"where", "line", "account", "expected", "found"} <= error.details.keys()


@pytest.mark.parametrize("data", [b"", b"  \r\n\n", b"\x00\xff\xfe\x00", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"])
def test_empty_and_garbage_files_fail_cleanly(data):
    assert rejection(data).message


def test_an_oversized_file_is_refused_before_parsing():
    with pytest.raises(FileRejected, match="accepted up to 100 bytes"):
        parse_mt940((CORPUS / "jpy_bhd_crlf.sta").read_bytes(), max_bytes=100)


# Generated and mutated files -------------------------------------------------------------------

SAFE_TEXT = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 .,+()'", max_size=150)
REFERENCE = st.from_regex(r"\A[A-Z0-9][A-Z0-9.\-]{0,15}\Z")


@st.composite
def lines(draw, day: date) -> tuple[Line, str]:
    """A statement line, and the description a reader should make of its :86:."""
    value_date = day + timedelta(days=draw(st.integers(-3, 3)))
    kind = draw(st.sampled_from(["none", "free", "structured"]))
    text = draw(SAFE_TEXT)
    if kind == "none":
        information, description = [], ""
    elif kind == "free":
        information, description = free_text(text), " ".join(text.split())
    else:
        posting_text, name = " ".join(draw(SAFE_TEXT).split())[:20].strip(), draw(SAFE_TEXT)[:54]
        information = structured(draw(st.sampled_from(["166", "105", "020"])), posting_text, text,
                                 draw(REFERENCE), draw(REFERENCE), name)
        description = " ".join(text.split()) or posting_text
    line = Line(
        amount=draw(st.integers(0, 10**11)), mark=draw(st.sampled_from(["C", "D", "RC", "RD"])),
        value_date=value_date,
        entry_date=draw(st.none() | st.integers(-3, 3).map(lambda d: value_date + timedelta(days=d))),
        type_code=draw(st.sampled_from(["NTRF", "NCHK", "FCHG", "S103", "NMSC", "NDDT"])),
        customer_reference=draw(st.just("NONREF") | REFERENCE),
        bank_reference=draw(st.just("") | st.just("NONREF") | REFERENCE),
        funds_code=draw(st.sampled_from(["", "R"])),
        supplementary=draw(st.just("") | st.from_regex(r"\A[A-Za-z][A-Za-z0-9 ]{0,30}\Z")),
        information=information)
    return line, description


@st.composite
def statements(draw) -> tuple[list[Statement], list[str]]:
    """Statements, and the description of each of their lines in file order."""
    count = draw(st.integers(1, 4))
    result, descriptions = [], []
    for number in range(1, count + 1):
        day = draw(st.dates(date(2020, 1, 1), date(2040, 12, 31)))
        drawn = draw(st.lists(lines(day), max_size=12))
        descriptions += [description for _, description in drawn]
        result.append(Statement(
            account=draw(st.sampled_from(["DE89370400440532013000", "DEUTDEFF/0532013000", "12345678/000123",
                                          "GB29NWBK60161331926819GBP"])),
            lines=[line for line, _ in drawn], currency=draw(st.sampled_from(["EUR", "JPY", "BHD", "USD"])),
            opening=draw(st.integers(-10**12, 10**12)), reference=f"STMT{number}", number=f"{number}/1",
            opening_date=day - timedelta(days=1), closing_date=day,
            available=draw(st.none() | st.integers(-10**12, 10**12))))
    return result, descriptions


files = st.tuples(statements(), st.booleans(), st.sampled_from(["\n", "\r\n"]))


@settings(max_examples=80, deadline=None)
@given(files)
def test_generated_valid_statements_import_with_opening_plus_credits_minus_debits_equal_to_the_closing(spec):
    (generated, descriptions), envelope, ending = spec
    parsed = parse_mt940(write_file(generated, envelope=envelope, line_ending=ending))
    assert len(parsed.balances) == len(generated)
    for statement, balance in zip(generated, parsed.balances):
        transactions = [t for t in parsed.transactions if t.metadata["statement_id"] == balance.statement_id]
        signed = sum(t.amount if t.direction == "credit" else -t.amount for t in transactions)
        assert balance.opening_booked + signed == balance.closing_booked == statement.computed_closing()
        assert [(t.amount, t.direction == "credit") for t in transactions] == [
            (line.amount, line.mark in ("C", "RD")) for line in statement.lines]
        assert [t.booking_date for t in transactions] == [line.entry_date or line.value_date for line in statement.lines]
        assert balance.closing_available == statement.available
    assert [t.description for t in parsed.transactions] == descriptions
    assert parsed.warnings == []


@settings(max_examples=60, deadline=None)
@given(statements(), st.data())
def test_a_changed_amount_digit_is_always_caught(spec, data):
    generated, _ = spec
    lines_of_file = write_file(generated).decode("latin-1").split("\n")
    statement_lines = [i for i, text in enumerate(lines_of_file) if text.startswith(":61:")]
    if not statement_lines:
        return
    target = data.draw(st.sampled_from(statement_lines))
    text = lines_of_file[target]
    amount_start = text.index(",") - 1  # the last digit before the decimal comma
    old = text[amount_start]
    new = data.draw(st.sampled_from([d for d in "0123456789" if d != old]))
    lines_of_file[target] = text[:amount_start] + new + text[amount_start + 1:]
    with pytest.raises(FileRejected):
        parse_mt940("\n".join(lines_of_file).encode("latin-1"))


@settings(max_examples=40, deadline=None)
@given(statements(), st.data())
def test_lenient_returns_every_transaction_with_one_warning_per_statement_that_does_not_add_up(spec, data):
    generated, _ = spec
    broken = data.draw(st.sets(st.integers(0, len(generated) - 1)))
    for index in broken:
        generated[index].closing = generated[index].computed_closing() + 1
    parsed = parse_mt940(write_file(generated), lenient=True)
    assert len(parsed.warnings) == len(broken)
    assert len(parsed.transactions) == sum(len(s.lines) for s in generated)


@settings(max_examples=200, deadline=None)
@given(files, st.data())
def test_any_mutation_is_either_read_or_refused_cleanly(spec, data):
    (generated, _), envelope, ending = spec
    original = bytearray(write_file(generated, envelope=envelope, line_ending=ending))
    kind = data.draw(st.sampled_from(["flip", "truncate", "delete_line", "duplicate_line", "insert"]))
    if kind == "flip":
        position = data.draw(st.integers(0, len(original) - 1))
        original[position] = data.draw(st.integers(0, 255))
    elif kind == "truncate":
        original = original[:data.draw(st.integers(0, len(original) - 1))]
    elif kind in ("delete_line", "duplicate_line"):
        file_lines = bytes(original).split(ending.encode())
        index = data.draw(st.integers(0, len(file_lines) - 1))
        file_lines[index:index + 1] = [] if kind == "delete_line" else [file_lines[index]] * 2
        original = bytearray(ending.encode().join(file_lines))
    else:
        position = data.draw(st.integers(0, len(original)))
        original[position:position] = data.draw(st.binary(min_size=1, max_size=8) | st.sampled_from(
            [b":61:", b":86:", b"-}", b"\n-\n", b"{4:", b"?20", b"\r", b":20:X\n"]))
    try:
        parsed = parse_mt940(bytes(original))
    except FileRejected as error:
        assert error.message and "where" in error.details
    else:
        assert parsed.balances
