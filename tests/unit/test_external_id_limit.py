"""An external_id is limited in UTF-8 bytes (its guard's sort key and the chunk's results are counted in
bytes), and a failed row's result quotes it as valid text within the same limit."""
from __future__ import annotations

import pytest

from chalicelib.domain.records import MAX_EXTERNAL_ID, fits_external_id, shown_external_id


@pytest.mark.parametrize("external_id, fits", [
    ("x" * 255, True), ("x" * 256, False),
    ("\u20ac" * 85, True), ("\u20ac" * 86, False),  # three bytes each: 255 and 258
    ("\U0001F4B6" * 63, True), ("\U0001F4B6" * 64, False),  # four bytes each: 252 and 256
    ("ok\ud800", False),  # a lone surrogate: no UTF-8 can carry it
])
def test_the_limit_counts_utf8_bytes(external_id, fits):
    assert fits_external_id(external_id) is fits


@pytest.mark.parametrize("raw", ["x" * 1000, "\u20ac" * 200, "\U0001F4B6" * 100, "a" + "\u20ac" * 120, "bad\ud800"])
def test_a_quoted_external_id_is_valid_utf8_within_the_limit(raw):
    shown = shown_external_id(raw)

    encoded = shown.encode("utf-8")  # raises if it is not valid text
    assert len(encoded) <= MAX_EXTERNAL_ID
    assert shown.endswith("...") or "\ud800" in raw
