"""An export page given as a polars frame is written byte for byte as the csv module writes the same
rows (`csv_bytes`): the same quoting, the same empty cells, and every cell a spreadsheet would run as
a formula neutralised by the same rule, whatever the text holds."""
from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain.csv_cells import FORMULA_STARTS
from chalicelib.domain.exports import csv_bytes, frame_csv_bytes

# Texts rich in what matters here: formula starts, blanks of every kind, quotes, separators, line breaks.
_ALPHABET = st.sampled_from(list(FORMULA_STARTS) + [" ", "\u00a0", "\u2003", "\x1c", "\x0b", '"', ",", "'", "a",
                                                    "Z", "7", ".", "é", "€", "\U0001f4b8"])
TEXTS = st.one_of(st.none(), st.text(_ALPHABET, max_size=8), st.text(max_size=12))
INTS = st.one_of(st.none(), st.integers(min_value=-2**63, max_value=2**63 - 1))
ROWS = st.lists(st.tuples(INTS, TEXTS, TEXTS, INTS), max_size=30)


def frame_of(rows: list[tuple]) -> pl.DataFrame:
    columns = list(zip(*rows, strict=True)) if rows else [(), (), (), ()]
    return pl.DataFrame({"id": list(columns[0]), "a": list(columns[1]), "b": list(columns[2]),
                         "n": list(columns[3])}, schema={"id": pl.Int64, "a": pl.Utf8, "b": pl.Utf8, "n": pl.Int64})


@settings(max_examples=400, deadline=None)
@given(ROWS)
def test_a_frame_is_written_as_its_rows_would_be(rows):
    assert frame_csv_bytes(frame_of(rows)) == csv_bytes(rows)


def test_formula_cells_are_neutralised_and_plain_numbers_kept():
    rows = [(1, "=SUM(A1)", "-12.50", None), (2, " @cmd", "", 3), (3, "payment 7", "\t=x", -4)]
    written = frame_csv_bytes(frame_of(rows))
    assert written == csv_bytes(rows)
    assert written == b"1,'=SUM(A1),-12.50,\r\n2,' @cmd,,3\r\n3,payment 7,'\t=x,-4\r\n"
