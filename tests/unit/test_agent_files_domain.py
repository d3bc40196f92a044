"""The rules of agents' files: safe names, content types, and which output files a delivery mails."""
from __future__ import annotations

import pytest

from chalicelib.domain.agents.definition import Delivery
from chalicelib.domain.agents.files import (
    MAX_FILENAME,
    BadFilename,
    content_type_for,
    safe_filename,
)


@pytest.mark.parametrize("given, safe", [
    ("report.csv", "report.csv"),
    ("Q3 payouts (final).xlsx", "Q3 payouts (final).xlsx"),  # spaces and brackets stay
    ("../../etc/passwd", "passwd"),
    ("/abs/path/to/out.csv", "out.csv"),
    ("C:\\x\\y.csv", "y.csv"),
    ("..\\..\\windows\\win.ini", "win.ini"),
    ("a/../b.csv", "b.csv"),
    ("ｆｉｌｅ／ｎａｍｅ.csv", "name.csv"),  # full-width: NFKC first, so the slash separates
    ("cafe\u0301.csv", "café.csv"),  # composed
    ("line\nbreak\r\n.csv", "line break .csv"),
    ("tab\there.csv", "tab here.csv"),
    ("nul\x00byte\x07.csv", "nulbyte.csv"),
    ("\x1b[31mred.csv", "[31mred.csv"),
    ("invoice\u202efdp.exe", "invoicefdp.exe"),  # a bidi override could show it as invoice-exe.pdf
    ("zero\u200bwidth.csv", "zerowidth.csv"),
    ("  many    spaces  .csv  ", "many spaces .csv"),
    ("no\u00a0break.csv", "no break.csv"),
    (".env", "env"),  # no hidden files
    ("..hidden.csv", "hidden.csv"),
    ("trailing.", "trailing"),
    ("what?<is>this:*|\".csv", "what__is_this____.csv"),
    ("x", "x"),
])
def test_a_name_is_made_safe(given, safe):
    assert safe_filename(given) == safe


@pytest.mark.parametrize("given, problem", [
    ("", "empty"),
    ("   ", "empty"),
    (".", "no usable characters"),
    ("..", "no usable characters"),
    ("...", "no usable characters"),
    ("../..", "no usable characters"),
    ("\x00\x01\x02", "no usable characters"),
    ("\u202e", "no usable characters"),
    ("dir/", "folder"),
    ("C:\\temp\\", "folder"),
    ("../", "folder"),
])
def test_a_name_with_nothing_usable_is_refused_saying_why(given, problem):
    with pytest.raises(BadFilename, match=problem):
        safe_filename(given)


def test_a_bad_name_is_a_value_error():
    assert issubclass(BadFilename, ValueError)


@pytest.mark.parametrize("given, safe", [
    ("a" * 200 + ".csv", "a" * (MAX_FILENAME - 4) + ".csv"),
    ("b" * 200, "b" * MAX_FILENAME),
    ("c" * 120 + ".tar", "c" * 116 + ".tar"),
    ("d" * 300 + ".thisisnotanextension", ("d" * 300 + ".thisisnotanextension")[:MAX_FILENAME]),
    ("e" * 115 + "     " + "f" * 10 + ".csv", "e" * 115 + ".csv"),  # no space left before the dot
    ("é" * 130 + ".json", "é" * 115 + ".json"),  # characters, not bytes
    ("g" * MAX_FILENAME, "g" * MAX_FILENAME),
])
def test_a_long_name_is_cut_to_the_limit_keeping_its_extension(given, safe):
    assert safe_filename(given) == safe
    assert len(safe_filename(given)) <= MAX_FILENAME


@pytest.mark.parametrize("filename, content_type", [
    ("r.csv", "text/csv; charset=utf-8"),
    ("R.CSV", "text/csv; charset=utf-8"),
    ("notes.txt", "text/plain; charset=utf-8"),
    ("notes.md", "text/markdown; charset=utf-8"),
    ("data.json", "application/json"),
    ("rows.jsonl", "application/x-ndjson"),
    ("book.xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    ("frame.parquet", "application/vnd.apache.parquet"),
    ("a.pdf", "application/pdf"),
    ("r.csv.gz", "application/gzip"),  # what the bytes are, not what they unpack to
    ("noextension", "application/octet-stream"),
    ("weird.zzzq", "application/octet-stream"),
    (".md", "application/octet-stream"),
    ("data:text/html,x", "application/octet-stream"),  # not read as a data: URL
])
def test_the_content_type_follows_the_extension(filename, content_type):
    assert content_type_for(filename) == content_type


NAMES = ["Report-01.csv", "report-02.CSV", "report-1.csv", "summary.txt", "a.csv", "B.csv", "c.csv", "notes.md"]


@pytest.mark.parametrize("pattern, chosen", [
    ("*", NAMES),
    ("*.CSV", ["Report-01.csv", "report-02.CSV", "report-1.csv", "a.csv", "B.csv", "c.csv"]),
    ("*.csv", ["Report-01.csv", "report-02.CSV", "report-1.csv", "a.csv", "B.csv", "c.csv"]),
    ("report-??.csv", ["Report-01.csv", "report-02.CSV"]),
    ("REPORT-?.csv", ["report-1.csv"]),
    ("[ab]*", ["a.csv", "B.csv"]),
    ("[AB]*", ["a.csv", "B.csv"]),
    ("[!ab]*.csv", ["Report-01.csv", "report-02.CSV", "report-1.csv", "c.csv"]),
    ("summary.txt", ["summary.txt"]),
    ("*.pdf", []),
    ("notes", []),  # a glob matches the whole name
])
def test_a_delivery_mails_the_files_its_glob_selects_in_any_case(pattern, chosen):
    rule = Delivery(enabled=True, recipients=("ops@example.com",), file_pattern=pattern)
    assert [name for name in NAMES if rule.delivers(name)] == chosen
