"""CSV injection: a cell a spreadsheet would take for a formula is neutralised with a leading
quote (OWASP's rule) in every CSV the service writes or mails; plain numbers stay numbers."""
import pytest

from chalicelib.domain.csv_cells import neutralised_cell, spreadsheet_safe


@pytest.mark.parametrize("cell", ["=1+1", "+SUM(A1:A2)", "-2+3", "@cmd", "\t=1", "\r=1",
                                  '=HYPERLINK("http://evil.test","click")', "-", "+", "--12",
                                  # after leading blanks a spreadsheet drops (OWASP: tab, CR, LF lead too)
                                  " =1+1", "\n=cmd", "\r\n@SUM(1)", "  \t+cmd", "\u00a0=1", "\n", "\0=1",
                                  " \0 -2+3"])
def test_a_cell_that_starts_like_a_formula_gets_a_leading_quote(cell):
    assert neutralised_cell(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["-12.50", "+5", "-0.5", "-.5", "-1e3", "12", "", "payout", "'=1", "a=1",
                                  " -12.50", "  ", " payout", "x =1"])
def test_plain_numbers_text_and_cells_already_neutralised_stay_as_they_are(cell):
    assert neutralised_cell(cell) == cell


def test_a_csv_file_has_each_formula_cell_neutralised_and_keeps_its_numbers_and_quoting():
    written = 'id,amount,note\r\n1,-12.50,"=HYPERLINK(""http://x"",""y"")"\r\n2,40.05,"@SUM(1,2)"\r\n'

    safe = spreadsheet_safe("payouts.CSV", written.encode())

    assert safe.decode() == ('id,amount,note\r\n1,-12.50,"\'=HYPERLINK(""http://x"",""y"")"\r\n'
                             '2,40.05,"\'@SUM(1,2)"\r\n')


def test_a_csv_file_has_a_formula_after_leading_blanks_neutralised():
    assert spreadsheet_safe("a.csv", b'id,note\n1, =1+1\n2,"\n=cmd"\n') == b'id,note\n1,\' =1+1\n2,"\'\n=cmd"\n'


def test_a_tab_separated_file_is_neutralised_by_its_tabs():
    assert spreadsheet_safe("a.tsv", b"id\tnote\n1\t+cmd\n2\t-3\n") == b"id\tnote\n1\t'+cmd\n2\t-3\n"


def test_a_safe_csv_and_files_of_other_kinds_are_left_byte_for_byte():
    assert spreadsheet_safe("a.csv", b'id, amount\n"1",  -3\n') == b'id, amount\n"1",  -3\n'
    assert spreadsheet_safe("notes.txt", b"=1+1\n") == b"=1+1\n"
    assert spreadsheet_safe("a.csv", b"\xff=1,2") == b"\xff=1,2"  # not text: nothing to read as cells
