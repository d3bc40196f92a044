"""CSV injection: a cell a spreadsheet would run as a formula is neutralised (OWASP's rule: a
leading single quote) in every CSV or TSV file the service writes or mails. A plain number such
as `-12.50` or `+5` stays as it is: a spreadsheet reads it as that number, never as a formula.

OWASP's CSV Injection page names the cells that begin with `=`, `+`, `-`, `@`, a tab, a carriage
return or a line feed (ASVS 1.2.10 adds the null character). A spreadsheet also drops leading
blanks before it reads a cell, so a formula after spaces, tabs or line breaks (` =1+1`,
`"\n=cmd"`) is one too: those cells are quoted as well."""
from __future__ import annotations

import csv
import io
import re

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "\0")
_FORMULA_SIGNS = ("=", "+", "-", "@")
_LEADING_BLANKS = re.compile(r"^[\s\0]+")  # Unicode whitespace (spaces, tabs, line breaks, no-break spaces), NUL
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_DELIMITERS = {".csv": ",", ".tsv": "\t", ".tab": "\t"}
BOM = "\ufeff"


def runs_as_formula(cell: str) -> bool:
    """Whether a spreadsheet could take the text cell for a formula: it begins with one of
    FORMULA_STARTS, or with blanks and then a formula sign; a plain number (`-12.50`) never is."""
    if cell.startswith(FORMULA_STARTS):
        return not _PLAIN_NUMBER.fullmatch(cell)
    if cell[:1].isspace():
        rest = cell[_LEADING_BLANKS.match(cell).end():]  # type: ignore[union-attr]  # a blank leads: it matches
        return rest.startswith(_FORMULA_SIGNS) and not _PLAIN_NUMBER.fullmatch(rest)
    return False


def neutralised_cell(cell: str) -> str:
    return "'" + cell if runs_as_formula(cell) else cell


def spreadsheet_safe(filename: str, data: bytes) -> bytes:
    """The file with its formula cells neutralised when its name says CSV or TSV; any other file,
    a CSV that needs nothing, or bytes that are not UTF-8 text, unchanged byte for byte. A file
    changed is written again with minimal quoting, its line ending and final newline kept."""
    delimiter = _DELIMITERS.get(filename[filename.rfind("."):].lower()) if "." in filename else None
    if delimiter is None:
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    bom = BOM if text.startswith(BOM) else ""  # a spreadsheet drops it and reads the cell after it
    text = text[len(bom):]
    try:
        rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    except csv.Error:  # not CSV as the reader takes it: each line split at its delimiters
        rows = [line.split(delimiter) for line in text.splitlines()]
    safe = [[neutralised_cell(cell) for cell in row] for row in rows]
    if safe == rows:
        return data
    ending = "\r\n" if "\r\n" in text else "\n"
    out = io.StringIO(newline="")
    csv.writer(out, delimiter=delimiter, lineterminator=ending).writerows(safe)
    written = out.getvalue()
    if not text.endswith(("\n", "\r")):
        written = written.removesuffix(ending)
    return (bom + written).encode("utf-8")
