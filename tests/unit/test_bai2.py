"""The BAI2 parser on the project's corpus (tests/data/statements/bai2) and on generated and mutated
files (tests/support/statement_files.py)."""
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain.parsers import FileRejected
from chalicelib.domain.parsers.bai2 import parse_bai2
from chalicelib.domain.parsers.statements import StatementBalance, deterministic_id
from tests.support.statement_files import Bai2Account, Bai2Detail, Bai2Group, bai2_file, bai2_large_file

CORPUS = Path(__file__).resolve().parents[1] / "data" / "statements" / "bai2"


def corpus(name: str) -> bytes:
    return (CORPUS / name).read_bytes()


def parse(name: str, lenient: bool = False):
    return parse_bai2(corpus(name), lenient)


def rows(parsed):
    return [(t.where, t.account, t.currency, t.amount, t.decimal_places, t.direction, t.booking_date.isoformat(),
             t.description, t.external_id) for t in parsed.transactions]


def rejection(data: bytes, lenient: bool = False) -> FileRejected:
    with pytest.raises(FileRejected) as caught:
        parse_bai2(data, lenient)
    return caught.value


def lines(*records: str) -> bytes:
    return ("\n".join(records) + "\n").encode()


# The corpus ----------------------------------------------------------------------------------

def test_a_file_of_two_accounts_gives_every_transaction_with_its_account_and_direction():
    parsed = parse("two_accounts.bai2")
    assert parsed.accounts == ["0975312468", "00012345"]
    payroll_id = deterministic_id("0975312468", date(2026, 3, 1), 100000, "debit", 4)
    assert rows(parsed) == [
        ("line 4", "0975312468", "USD", 250000, 2, "credit", "2026-03-01", "ACH CREDIT FROM GLOBEX CORP", "B000000001"),
        ("line 5", "0975312468", "USD", 100000, 2, "credit", "2026-03-01",
         "WIRE FROM INITECH LLC REF 88231, INVOICE 1002 BENEFICIARY ACME CORP", "B000000002"),
        ("line 7", "0975312468", "USD", 37450, 2, "debit", "2026-03-01", "CHECK 4417 PAID", "B000000003"),
        ("line 8", "0975312468", "USD", 100000, 2, "debit", "2026-03-01", "ACH DEBIT PAYROLL", payroll_id),
        ("line 11", "00012345", "USD", 52500, 2, "debit", "2026-03-01", "MISC ACH DEBIT", "B000000004"),
    ]
    assert [t.position for t in parsed.transactions] == [1, 2, 3, 4, 5]
    assert parsed.transactions[0].metadata == {
        "type_code": "165", "type_description": "Preauthorized ACH Credit", "customer_reference": "INV-1001",
        "funds_type": "0", "statement_id": "121000248-2603020600-20260302A/1/0975312468"}
    assert parsed.warnings == []


def test_each_account_of_a_group_keeps_its_balances_signed():
    parsed = parse("two_accounts.bai2")
    assert parsed.balances == [
        StatementBalance("0975312468", "USD", 2, date(2026, 3, 1), "121000248-2603020600-20260302A/1/0975312468",
                         opening_booked=1500000, closing_booked=1712550, closing_available=1612550),
        StatementBalance("00012345", "USD", 2, date(2026, 3, 1), "121000248-2603020600-20260302A/1/00012345",
                         opening_booked=50000, closing_booked=-2500, closing_available=None),
    ]


def test_two_groups_are_two_statement_days_and_a_group_without_currency_is_in_usd():
    parsed = parse("two_groups_crlf.bai2")
    assert parsed.accounts == ["0975312468", "DE89 3704 0044 0532 0130 00"]
    assert rows(parsed) == [
        ("line 4", "0975312468", "USD", 50000, 2, "credit", "2026-03-01", "ACH CREDIT STRIPE PAYOUT", "C1"),
        ("line 9", "DE89 3704 0044 0532 0130 00", "EUR", 10000, 2, "debit", "2026-03-02",
         "SEPA TRANSFER TO LIEFERANT GMBH", "W-77"),
    ]
    assert [(b.account, b.currency, b.date.isoformat(), b.opening_booked, b.closing_booked) for b in parsed.balances] == [
        ("0975312468", "USD", "2026-03-01", 1712550, 1762550),
        ("DE89 3704 0044 0532 0130 00", "EUR", "2026-03-02", 990000, 980000),
        ("0975312468", "USD", "2026-03-02", 1762550, 1762550),
    ]
    assert parsed.balances[0].statement_id != parsed.balances[2].statement_id


def test_crlf_and_lf_read_the_same():
    crlf = corpus("two_groups_crlf.bai2")
    assert b"\r\n" in crlf
    assert rows(parse_bai2(crlf.replace(b"\r\n", b"\n"))) == rows(parse_bai2(crlf))


def test_files_with_and_without_slash_terminators_read_the_same():
    data = corpus("two_accounts.bai2")
    without = b"\n".join(line.removesuffix(b"/") for line in data.split(b"\n"))
    assert b"/\n" not in without
    assert rows(parse_bai2(without)) == rows(parse_bai2(data))
    assert parse_bai2(without).balances == parse_bai2(data).balances


def test_continuations_carry_a_summarys_balances_and_a_details_fields_then_its_text():
    parsed = parse("no_slashes.bai2")
    [balance] = parsed.balances
    assert (balance.opening_booked, balance.closing_booked, balance.closing_available) == (200000, 260000, 240000)
    lockbox, fee = parsed.transactions
    assert (lockbox.amount, lockbox.direction, lockbox.external_id) == (75000, "credit", "LB0301")
    assert lockbox.description == "LOCKBOX DEPOSIT BATCH 12 OF 30 ITEMS"
    assert lockbox.metadata["funds_type"] == "S" and lockbox.where == "line 6"
    assert fee.description == "FEE, ACCOUNT ANALYSIS" and fee.direction == "debit"


@pytest.mark.parametrize("account_lines", [
    ["03,1,USD,010,500", "88,,,015,600,,"],          # no terminators: a summary goes on in the next line
    ["03,1,USD,010,500,/", "88,015,600,,/"],          # a "/" ends a summary early: count and funds type defaulted
    ["03,1,USD,010,500,,,", "88,015,600,,"],          # a trailing comma before the continuation
    ["03,1,USD,010,500,,/", "88,015,600,,/"],
])
def test_a_summary_continued_in_an_88_is_read_however_the_bank_breaks_the_line(account_lines):
    data = lines("01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", *account_lines, "49,1100,3", "98,1100,1,5",
                 "99,1100,1,7")
    [balance] = parse_bai2(data).balances
    assert (balance.opening_booked, balance.closing_booked) == (500, 600)


def test_reversal_codes_keep_the_class_their_range_gives_and_say_so():
    parsed = parse("reversals.bai2")
    assert [(t.metadata["type_code"], t.direction, t.metadata.get("reversal", False)) for t in parsed.transactions] == [
        ("165", "credit", False), ("552", "debit", True), ("455", "debit", False), ("252", "credit", True),
        ("258", "credit", True), ("558", "debit", True), ("395", "credit", True), ("694", "debit", True)]
    assert parsed.transactions[1].metadata["type_description"] == "Credit Reversal"


def test_non_monetary_and_bank_specific_details_give_no_record_but_count_in_the_totals():
    parsed = parse("reversals.bai2")  # an 890 and a 950 (123 cents, in the 49's total) at the end
    assert len(parsed.transactions) == 8
    assert "950" not in [t.metadata["type_code"] for t in parsed.transactions]
    [balance] = parsed.balances
    assert (balance.opening_booked, balance.closing_booked) == (1000000, 1003000)


def test_jpy_and_bhd_amounts_are_in_their_currencies_minor_units():
    parsed = parse("jpy_bhd.bai2")
    assert [(t.currency, t.amount, t.decimal_places) for t in parsed.transactions] == [("JPY", 250000, 0),
                                                                                      ("BHD", 12345, 3)]
    assert [(b.currency, b.decimal_places, b.closing_booked, b.closing_available) for b in parsed.balances] == [
        ("JPY", 0, 1250000, None), ("BHD", 3, 4987655, 4987655)]


def test_funds_types_s_v_and_d_take_their_own_fields_and_v_gives_the_value_date():
    parsed = parse("funds_types.bai2")
    assert [(t.external_id, t.metadata["funds_type"], t.description) for t in parsed.transactions] == [
        ("F1", "1", "ONE-DAY FUNDS"), ("F2", "2", "TWO-DAY FUNDS"), ("F3", "Z", "UNKNOWN AVAILABILITY"),
        ("F4", "S", "DISTRIBUTED SIMPLE"), ("F5", "V", "VALUE DATED WIRE"), ("F6", "D", "DISTRIBUTED"),
        ("F7", "0", "CHECK 9001")]
    wire = parsed.transactions[4]
    assert wire.value_date == date(2026, 3, 3) and wire.metadata["value_date"] == "2026-03-03"
    assert wire.booking_date == date(2026, 3, 1) and wire.metadata["customer_reference"] == "C-5"
    assert all(t.value_date is None for t in parsed.transactions if t is not wire)


# Broken files ----------------------------------------------------------------------------

def test_a_wrong_account_total_names_the_line_the_account_what_was_expected_and_what_was_found():
    error = rejection(corpus("broken_account_total.bai2"))
    assert {k: error.details[k] for k in ("line", "account", "record", "field", "expected", "found")} == {
        "line": 9, "account": "0975312468", "record": "49", "field": "control_total", "expected": 6712550,
        "found": 6712500}
    assert error.details["error_count"] == 1
    assert "line 9" in error.message and "account 0975312468" in error.message
    assert "6712500" in error.message and "6712550" in error.message


def test_a_wrong_file_record_count_names_the_line_what_was_expected_and_what_was_found():
    error = rejection(corpus("broken_file_count.bai2"))
    assert {k: error.details[k] for k in ("line", "account", "record", "field", "expected", "found")} == {
        "line": 14, "account": None, "record": "99", "field": "number_of_records", "expected": 14, "found": 15}
    assert "line 14" in error.message and "15 records" in error.message and "has 14" in error.message


def test_a_truncated_file_fails_naming_its_last_line_and_the_account_left_open():
    error = rejection(corpus("broken_truncated.bai2"))
    assert error.details == {"line": 8, "account": "0975312468", "expected": "99", "found": "end of file"}
    assert "truncated" in error.message and "line 8" in error.message and "has no trailer (49)" in error.message


def test_garbage_is_not_a_bai2_file():
    error = rejection(corpus("broken_garbage.bai2"))
    assert error.details["line"] == 1 and error.details["expected"] == "01"
    assert "not a BAI2 file" in error.message


def test_an_unparsable_amount_fails_naming_its_line_and_account():
    error = rejection(corpus("broken_amount.bai2"))
    assert error.details == {"line": 11, "account": "00012345", "expected": "up to 18 digits", "found": "525O0"}
    assert error.message.startswith("line 11: account 00012345: amount '525O0'")


def test_a_detail_outside_an_account_fails_naming_its_line():
    error = rejection(corpus("broken_detail_outside_account.bai2"))
    assert error.details["line"] == 10 and "outside an account" in error.message


def test_every_broken_file_of_the_corpus_is_refused_in_both_modes_but_lenient_takes_control_mismatches():
    taken_when_lenient = {"broken_account_total.bai2", "broken_file_count.bai2"}
    for path in CORPUS.glob("broken_*.bai2"):
        with pytest.raises(FileRejected):
            parse_bai2(path.read_bytes())
        if path.name in taken_when_lenient:
            assert len(parse_bai2(path.read_bytes(), lenient=True).warnings) == 1
        else:
            with pytest.raises(FileRejected):
                parse_bai2(path.read_bytes(), lenient=True)


@pytest.mark.parametrize("records, line, phrase", [
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "98,0,0,2"], 3, "the file ends without its file trailer"),
    (["01,A,B,260302,0600,1,,,2", "01,A,B,260302,0600,1,,,2", "99,0,0,2"], 2, "a second file header"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "02,B,A,1,260301,,USD,2"], 3, "inside group 1"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "49,0,1"], 3, "no account identifier"),
    (["01,A,B,260302,0600,1,,,2", "03,1,USD,010,5,,", "49,5,2"], 2, "outside a group"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD", "98,0,1,4"], 4, "account 1 of line 3"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD", "99,0,1,4"], 4, "has no trailer (49)"),
    (["01,A,B,260302,0600,1,,,2", "77,whatever", "99,0,0,3"], 2, "unknown record type"),
    (["01,A,B,260302,0600,1,,,2", "/", "99,0,0,3"], 2, "unknown record type"),
    (["01,A,B,260302,0600,1,,,2", "99,0,0,2", "02,B,A,1,260301,,USD,2"], 3, "after the file trailer"),
    (["01,A,B,261302,0600,1,,,2", "99,0,0,2"], 1, "creation date"),
    (["01,A,B,260302,0600,1,,,3", "99,0,0,2"], 1, "only version 2"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,2603,,USD,2"], 2, "as-of date"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,DOLLARS,2"], 2, "not an ISO 4217 code"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,,USD"], 3, "no account number"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD,01X,5,,"], 3, "summary type code"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD,010,5.00,,"], 3, "amount '5.00'"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD,010,5,,S,1"], 3, "funds type S needs 3"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD", "16,165,5,X,R,,T"], 4, "funds type 'X'"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD", "16,010,5,0,R,,T"], 4, "not a transaction"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD", "16,165,-5,0,R,,T"], 4, "amount '-5'"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD", "16,165,5,V,261340,,R,,T"], 4, "value date"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD", "16,165,5,D,x"], 4, "count 'x'"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD", "16,165,5,S,1", "88,2"], 4, "needs 3"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD", "49,five,3"], 4, "control total 'five'"),
    (["01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", "03,1,USD", "49,0"], 4, "number of records ''"),
])
def test_a_file_that_cannot_be_read_fails_in_both_modes_naming_its_line(records, line, phrase):
    for lenient in (False, True):
        error = rejection(lines(*records), lenient)
        assert error.details["line"] == line and error.message.startswith(f"line {line}: ")
        assert phrase in error.message


@pytest.mark.parametrize("data", [b"", b"\n\n  \r\n", b"\x00\x01\x02", b"hello,world\n", b"\xef\xbb\xbf"])
def test_empty_files_and_other_formats_are_refused_cleanly(data):
    assert rejection(data).message


def test_an_oversized_file_is_refused_before_parsing():
    # the bound is MAX_STATEMENT_BYTES (200 MB); a smaller one shows it
    with pytest.raises(FileRejected, match="accepted up to 100 bytes") as caught:
        parse_bai2(corpus("two_accounts.bai2"), max_bytes=100)
    assert caught.value.details["expected"] == "at most 100 bytes"


# Lenient ---------------------------------------------------------------------------------

def test_lenient_turns_a_wrong_total_into_a_warning_and_imports_the_file():
    strict_rows = rows(parse("two_accounts.bai2"))
    parsed = parse("broken_account_total.bai2", lenient=True)
    assert rows(parsed) == strict_rows
    assert parsed.warnings == ["line 9: account 0975312468: the account trailer (49) control total is 6712500 but "
                               "the account's amounts add up to 6712550"]


def test_lenient_warns_of_every_control_that_disagrees():
    data = corpus("two_accounts.bai2").replace(b"49,100000,3/", b"49,100000,4/").replace(
        b"98,6812550,2,12/", b"98,6812551,3,12/").replace(b"99,6812550,1,14/", b"99,6812550,2,14/")
    parsed = parse_bai2(data, lenient=True)
    assert [warning.split(":")[0] for warning in parsed.warnings] == ["line 12", "line 13", "line 13", "line 14"]
    assert "counts 4 records but the account has 3" in parsed.warnings[0]
    assert "control total 6812551 but the group's amounts add up to 6812550" in parsed.warnings[1]
    assert "counts 3 accounts but the group has 2" in parsed.warnings[2]
    assert "counts 2 groups but the file has 1" in parsed.warnings[3]
    error = rejection(data)
    assert error.details["error_count"] == 4 and [e["line"] for e in error.details["errors"]] == [12, 13, 13, 14]


# Details ---------------------------------------------------------------------------------

def _one_account(*details: Bai2Detail, **file_options) -> bytes:
    return bai2_file([Bai2Group(date(2026, 3, 1), [Bai2Account("123", list(details))])], **file_options)


def test_a_repeated_bank_reference_stays_unique_in_its_account():
    parsed = parse_bai2(_one_account(Bai2Detail("165", 100, bank_reference="R1"),
                                     Bai2Detail("165", 200, bank_reference="R1"),
                                     Bai2Detail("165", 300, bank_reference="R1-2"),
                                     Bai2Detail("165", 400, bank_reference="R1")))
    assert [t.external_id for t in parsed.transactions] == ["R1", "R1-2", "R1-2-2", "R1-3"]


def test_a_text_keeps_its_commas_and_inner_slashes_and_drops_the_terminator():
    parsed = parse_bai2(_one_account(Bai2Detail("165", 100, text="PAYMENT 1/2, INVOICE 7")))
    assert parsed.transactions[0].description == "PAYMENT 1/2, INVOICE 7"
    parsed = parse_bai2(_one_account(Bai2Detail("165", 100, text="PAYMENT 1/2, INVOICE 7"), slashes=False))
    assert parsed.transactions[0].description == "PAYMENT 1/2, INVOICE 7"


def test_a_long_text_is_continued_over_several_88s_and_joined_with_spaces():
    text = " ".join(f"WORD{n}" for n in range(60))
    data = _one_account(Bai2Detail("195", 100, bank_reference="W1", text=text), width=40)
    assert data.count(b"\n88,") > 5
    assert parse_bai2(data).transactions[0].description == text


def test_a_bank_file_with_padded_lines_and_a_dos_end_of_file_mark_is_read():
    data = corpus("two_accounts.bai2")
    padded = b"\n".join(line.ljust(80) for line in data.split(b"\n")) + b"\x1a"
    assert rows(parse_bai2(padded)) == rows(parse_bai2(data))


def test_a_text_that_is_not_utf8_is_read_as_windows_1252():
    data = _one_account(Bai2Detail("165", 100, text="CAFE")).replace(b"CAFE", "CAFÉ".encode("cp1252"))
    assert parse_bai2(data).transactions[0].description == "CAFÉ"


def test_a_large_generated_file_parses_whole():
    parsed = parse_bai2(bai2_large_file(20_000, accounts=3))
    assert len(parsed.transactions) == 20_000 and len(parsed.balances) == 3
    assert sum(1 for t in parsed.transactions if t.metadata.get("reversal")) == 5_000
    assert sum(1 for t in parsed.transactions if t.external_id.startswith("stmt-")) == 20_000 // 7 + 1


# Property-based --------------------------------------------------------------------------

CODES = ["165", "142", "195", "252", "258", "395", "399", "451", "475", "495", "552", "558", "694", "699", "721",
         "760", "890", "950"]
words = st.text(alphabet="ABCDEFXYZ0123456789,.-&/", min_size=1, max_size=12).filter(lambda w: not w.endswith("/"))
references = st.text(alphabet="ABCXYZ0123456789-", max_size=12)


@st.composite
def details(draw):
    funds = draw(st.sampled_from(["0", "1", "2", "Z", "", "S", "V", "D"]))
    amount = draw(st.integers(0, 10**15))
    if funds == "S":
        availability = tuple(str(draw(st.integers(0, amount))) for _ in range(3))
    elif funds == "V":
        availability = (draw(st.dates(date(2020, 1, 1), date(2040, 12, 31))).strftime("%y%m%d"),
                        draw(st.sampled_from(["", "0930", "2400"])))
    elif funds == "D":
        days = draw(st.integers(0, 3))
        availability = (str(days), *[f for d in range(days) for f in (str(d), str(draw(st.integers(0, amount))))])
    else:
        availability = ()
    return Bai2Detail(draw(st.sampled_from(CODES)), amount, funds, availability, draw(references), draw(references),
                      " ".join(draw(st.lists(words, max_size=15))))


accounts = st.builds(Bai2Account, st.from_regex(r"\A[0-9]{1,12}\Z") | st.sampled_from(["GB29NWBK60161331926819"]),
                     st.lists(details(), max_size=8), st.sampled_from(["", "USD", "JPY", "BHD", "EUR"]),
                     st.lists(st.tuples(st.sampled_from(["010", "015", "040", "045", "072", "100", "400"]),
                                        st.none() | st.integers(-10**12, 10**12)), max_size=5))
groups = st.builds(Bai2Group, st.dates(date(2020, 1, 1), date(2040, 12, 31)),
                   st.lists(accounts, min_size=1, max_size=4, unique_by=lambda a: a.number),
                   st.sampled_from(["", "USD", "CAD"]))
files = st.fixed_dictionaries({"groups": st.lists(groups, min_size=1, max_size=3), "slashes": st.booleans(),
                               "line_ending": st.sampled_from(["\n", "\r\n"]), "width": st.integers(30, 120)})


@settings(max_examples=80, deadline=None)
@given(files)
def test_generated_valid_files_import_with_amounts_adding_up_to_their_control_totals(spec):
    data = bai2_file(spec["groups"], slashes=spec["slashes"], line_ending=spec["line_ending"], width=spec["width"])
    parsed = parse_bai2(data)
    imported: dict[tuple[str, ...], list] = {}
    for transaction in parsed.transactions:
        imported.setdefault(tuple(transaction.metadata["statement_id"].split("/")[-2:]), []).append(transaction)
    written = [(str(ordinal), account) for ordinal, group in enumerate(spec["groups"], start=1)
               for account in group.accounts]
    trailer_totals = [int(line.split(b",")[1].rstrip(b"/\r")) for line in data.split(b"\n") if line.startswith(b"49,")]
    for (ordinal, account), trailer_total in zip(written, trailer_totals, strict=True):
        transactions = imported.pop((ordinal, account.number), [])
        monetary = [d for d in account.details if d.type_code < "890"]
        assert [(t.amount, t.description) for t in transactions] == [(d.amount, d.text) for d in monetary]
        assert [t.direction for t in transactions] == [
            "credit" if d.type_code < "400" or "721" <= d.type_code <= "728" else "debit" for d in monetary]
        skipped = sum(d.amount for d in account.details if d.type_code >= "890")
        balances_and_summaries = sum(amount or 0 for _, amount in account.summaries)
        assert sum(t.amount for t in transactions) + skipped + balances_and_summaries == trailer_total
    assert imported == {}
    file_total = int(data.rstrip(b"\r\n").split(b"\n")[-1].split(b",")[1].rstrip(b"/\r"))
    assert file_total == sum(trailer_totals)
    assert parsed.warnings == []


@settings(max_examples=60, deadline=None)
@given(files, st.data())
def test_a_changed_detail_amount_is_always_caught(spec, data):
    text = bai2_file(spec["groups"], slashes=spec["slashes"]).decode().split("\n")
    detail_lines = [i for i, line in enumerate(text) if line.startswith("16,")]
    if not detail_lines:
        return
    target = data.draw(st.sampled_from(detail_lines))
    fields = text[target].split(",")
    position = data.draw(st.integers(0, len(fields[2]) - 1))
    old = fields[2][position]
    fields[2] = fields[2][:position] + data.draw(st.sampled_from([d for d in "0123456789" if d != old])) + \
        fields[2][position + 1:]
    text[target] = ",".join(fields)
    with pytest.raises(FileRejected):
        parse_bai2("\n".join(text).encode())


@settings(max_examples=150, deadline=None)
@given(files, st.data())
def test_any_mutation_is_either_read_or_refused_cleanly(spec, data):
    original = bytearray(bai2_file(spec["groups"], slashes=spec["slashes"], line_ending=spec["line_ending"],
                                   width=spec["width"]))
    kind = data.draw(st.sampled_from(["flip", "truncate", "drop_line", "insert"]))
    if kind == "flip":
        position = data.draw(st.integers(0, len(original) - 1))
        original[position] = data.draw(st.integers(0, 255))
    elif kind == "truncate":
        original = original[:data.draw(st.integers(0, len(original) - 1))]
    elif kind == "drop_line":
        records = bytes(original).split(b"\n")
        del records[data.draw(st.integers(0, len(records) - 1))]
        original = bytearray(b"\n".join(records))
    else:
        position = data.draw(st.integers(0, len(original)))
        original[position:position] = data.draw(st.binary(min_size=1, max_size=5))
    for lenient in (False, True):
        try:
            parse_bai2(bytes(original), lenient)
        except FileRejected as error:
            assert error.message and "line" in error.details


# Files with no line breaks ----------------------------------------------------------------------

def test_a_file_of_one_line_of_slash_terminated_records_reads_as_the_same_file_with_line_breaks():
    one_line = corpus("one_line_slashes.bai2")
    assert b"\n" not in one_line and b"\r" not in one_line
    assert rows(parse_bai2(one_line)) == rows(parse("two_accounts.bai2"))
    assert parse_bai2(one_line).balances == parse("two_accounts.bai2").balances


def test_a_file_of_fixed_80_character_records_and_no_line_breaks_reads_as_the_same_file():
    fixed = corpus("fixed_80_no_line_breaks.bai2")
    assert b"\n" not in fixed and len(fixed) % 80 == 0 and b"/" not in fixed
    assert rows(parse_bai2(fixed)) == rows(parse("two_accounts.bai2"))
    assert parse_bai2(fixed).balances == parse("two_accounts.bai2").balances


def test_padded_80_character_records_with_terminators_and_a_final_line_break_read_the_same():
    records = [line for line in corpus("two_accounts.bai2").decode().split("\n") if line]
    padded = ("".join(record.ljust(80) for record in records) + "\r\n").encode()
    assert rows(parse_bai2(padded)) == rows(parse("two_accounts.bai2"))


def test_a_text_with_slashes_is_only_split_where_a_record_code_follows():
    group = Bai2Group(date(2026, 3, 1), [Bai2Account("123", [Bai2Detail(
        "195", 500, bank_reference="R1", text="INV/2026/11 16 PCS/ 88 BOXES")])])
    one_line = bai2_file([group], line_ending="")
    assert b"\n" not in one_line
    [tx] = parse_bai2(one_line).transactions
    assert tx.description == "INV/2026/11 16 PCS/ 88 BOXES"


ONE_LINE_TEXT = b"ACH CREDIT FROM GLOBEX CORP"


@pytest.mark.parametrize("text", [b"RENT 12/01/2024", b"PAID 05/03/26", b"INV 2024/16,17", b"REF A/88,B"])
@pytest.mark.parametrize("lenient", [False, True])
def test_a_text_of_a_one_line_file_keeps_a_slash_and_record_code_that_cannot_begin_a_record_there(text, lenient):
    one_line = corpus("one_line_slashes.bai2")
    assert one_line.count(ONE_LINE_TEXT) == 1
    parsed = parse_bai2(one_line.replace(ONE_LINE_TEXT, text), lenient)
    expected = parse("two_accounts.bai2")
    assert [t.description for t in parsed.transactions] == [
        text.decode() if t.description == ONE_LINE_TEXT.decode() else t.description for t in expected.transactions]
    assert [t.amount for t in parsed.transactions] == [t.amount for t in expected.transactions]
    assert parsed.balances == expected.balances
    assert not [warning for warning in parsed.warnings if "disagree" in warning or "counts" in warning]


def test_a_one_line_text_that_reads_as_an_88_either_way_is_read_as_text_and_the_other_reading_is_a_warning():
    parsed = parse_bai2(corpus("one_line_slashes.bai2").replace(ONE_LINE_TEXT, b"REF A/88,B"))
    assert parsed.transactions[0].description == "REF A/88,B"
    assert parsed.transactions[1].description == "WIRE FROM INITECH LLC REF 88231, INVOICE 1002 BENEFICIARY ACME CORP"
    [warning] = parsed.warnings
    assert warning.startswith("account 0975312468: the file has no line breaks") and "'/88,B'" in warning


def one_line_of(*details: Bai2Detail) -> bytes:
    data = bai2_file([Bai2Group(date(2026, 3, 1), [Bai2Account("123", list(details))])], line_ending="")
    assert b"\n" not in data
    return data


def test_a_one_line_text_that_reads_as_a_detail_is_told_from_one_by_the_account_control_total():
    parsed = parse_bai2(one_line_of(Bai2Detail("195", 500, bank_reference="R1", text="INV/16,165,70,0,X,,Y"),
                                    Bai2Detail("475", 200, bank_reference="R2", text="CHECK")))
    assert [(t.amount, t.description) for t in parsed.transactions] == [(500, "INV/16,165,70,0,X,,Y"), (200, "CHECK")]
    assert parsed.warnings == []


def test_two_one_line_texts_that_read_as_88s_are_both_kept_when_no_other_reading_agrees_with_the_trailers():
    parsed = parse_bai2(one_line_of(Bai2Detail("195", 500, bank_reference="R1", text="A/88,B"),
                                    Bai2Detail("475", 200, bank_reference="R2", text="C/88,D/88,E")))
    assert [t.description for t in parsed.transactions] == ["A/88,B", "C/88,D/88,E"]
    assert parsed.warnings == []


def test_a_one_line_text_that_reads_as_an_account_trailer_is_kept_when_no_account_or_group_follows_it():
    parsed = parse_bai2(one_line_of(Bai2Detail("195", 500, bank_reference="R1", text="TOTAL/49,500,3"),
                                    Bai2Detail("475", 200, bank_reference="R2", text="CHECK")))
    assert [t.description for t in parsed.transactions] == ["TOTAL/49,500,3", "CHECK"]


def test_a_one_line_file_whose_trailers_count_wrong_whatever_the_reading_is_refused_naming_the_trailer():
    broken = corpus("one_line_slashes.bai2").replace(b"49,6712550,7/", b"49,6712550,6/")
    error = rejection(broken)
    assert error.message.startswith("BAI2 controls disagree") and error.details["expected"] == 7
    assert error.details["found"] == 6


def test_a_one_line_file_splits_the_same_with_spaces_after_its_terminators_and_keeps_them_in_a_text():
    one_line = corpus("one_line_slashes.bai2").replace(b"/", b"/  ").replace(ONE_LINE_TEXT, b"REF A/  88,B")
    assert rows(parse_bai2(one_line))[1:] == rows(parse("two_accounts.bai2"))[1:]
    assert parse_bai2(one_line).transactions[0].description == "REF A/  88,B"


def test_a_file_of_one_line_with_neither_terminators_nor_fixed_records_is_refused_saying_why():
    records = [line.removesuffix("/") for line in corpus("two_accounts.bai2").decode().split("\n") if line]
    error = rejection("".join(records).encode())
    assert error.message.startswith("line 1: the file is one line of")
    assert "where its records end is not known" in error.message
    assert error.details["line"] == 1 and error.details["found"].startswith("'01,121000248")


def test_a_one_line_file_whose_records_line_numbers_count_records_names_the_record_that_disagrees():
    broken = corpus("one_line_slashes.bai2").replace(b"49,6712550,", b"49,6712551,", 1)
    assert broken != corpus("one_line_slashes.bai2")
    error = rejection(broken)
    assert error.details["found"] == 6712551 and error.message.startswith("BAI2 controls disagree")
    assert error.details["line"] == parse_line_of(corpus("two_accounts.bai2"), b"49,6712550,")


def parse_line_of(data: bytes, prefix: bytes) -> int:
    return next(n for n, line in enumerate(data.split(b"\n"), start=1) if line.startswith(prefix))


@pytest.mark.parametrize("account_lines", [
    # The 03 breaks after an amount: the 88 opens with the summary's item count and funds type.
    ["03,1,USD,010,500/", "88,,,015,600,,/"],
    # ... after a type code: the 88 opens with its amount.
    ["03,1,USD,010,500,,,015/", "88,600,,/"],
    # ... after the item count, the 88 opens with the funds type.
    ["03,1,USD,010,500,,,015,600,/", "88,,/"],
    # ... after the account number: the 88 opens with the currency.
    ["03,1/", "88,USD,010,500,,,015,600,,/"],
])
def test_an_88_may_carry_on_a_summary_of_a_03_between_any_two_fields(account_lines):
    # Given an account whose 03 the bank broke at a field boundary, each line ended with "/"
    data = lines("01,A,B,260302,0600,1,,,2", "02,B,A,1,260301,,USD,2", *account_lines, "49,1100,3", "98,1100,1,5",
                 "99,1100,1,7")
    # When it is read, Then its balances are the summaries the bank wrote
    [balance] = parse_bai2(data).balances
    assert (balance.opening_booked, balance.closing_booked) == (500, 600)


def test_a_split_summary_of_another_parsers_corpus_is_read():
    # Given moov-io/bai2's X9 sample whose 03 goes on in two 88s mid-summary (as version 2)
    data = corpus("moov_split_summary.bai2")
    # When it is read, Then every summary counts in the account's total and the file agrees with its trailers
    parsed = parse_bai2(data)
    [balance] = parsed.balances
    assert (balance.opening_booked, balance.closing_booked) == (0, 0)
    assert parsed.transactions == [] and parsed.accounts == ["1234567890"]


def test_an_account_reported_twice_in_a_group_gives_two_statement_days_with_their_own_ids_every_time():
    # Given moov-io/bai2's sample1: one group holding two 03s of one account (one per value day)
    data = corpus("moov_sample1.bai2")
    # When it is read twice
    first, again = parse_bai2(data), parse_bai2(data)
    # Then each 03 is a statement day of its own id, the same on every read
    ids = [b.statement_id for b in first.balances]
    assert len(ids) == 2 and len(set(ids)) == 2
    assert ids == [b.statement_id for b in again.balances]
    # And two identical transactions (same type, amount and day, no bank reference) are two records
    twins = [t for t in first.transactions if (t.metadata["type_code"], t.amount) == ("108", 2500)]
    assert len(twins) == 2 and twins[0].external_id != twins[1].external_id
    assert [t.external_id for t in first.transactions] == [t.external_id for t in again.transactions]
