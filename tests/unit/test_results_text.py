"""A bulk request's results item keeps its rows as one JSON text: every result reads back as it was
written, from the text and from the list items stored before it, and a chunk whose text would grow
past the limit (escaped quotes, control characters) keeps the list."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.adapters.dynamodb.jobs import (
    RESULTS_TEXT_LIMIT,
    _result_of,
    _result_row,
    _results_attribute,
    result_rows,
)
from chalicelib.domain.ingestion import ItemResult, ItemStatus

optional_text = st.none() | st.text(max_size=40)
results = st.builds(ItemResult, index=st.integers(0, 10 ** 6), status=st.sampled_from(ItemStatus),
                    external_id=optional_text, record_id=st.none() | st.integers(1, 10 ** 12),
                    error=optional_text, line=st.none() | st.integers(1, 10 ** 7))


@settings(max_examples=200, deadline=None)
@given(st.lists(results, max_size=30).map(tuple))
def test_results_read_back_as_written(written):
    stored = _results_attribute(written)
    assert isinstance(stored, str)
    assert [_result_of(row) for row in result_rows({"results": stored}, "results")] == list(written)


def test_results_stored_as_lists_before_read_the_same():
    written = (ItemResult(0, ItemStatus.SUCCESSFUL, "a", 7), ItemResult(1, ItemStatus.FAILED, None, None, "bad", 3))
    old_item = {"results": [_result_row(r) for r in written]}
    assert [_result_of(row) for row in result_rows(old_item, "results")] == list(written)
    assert result_rows({}, "results") == [] and result_rows({"problems": None}, "problems") == []


def test_a_text_past_the_limit_keeps_the_list():
    # 500 rows whose external_id and error are all quotes: JSON doubles every one of them.
    quotes = '"' * 255
    written = tuple(ItemResult(i, ItemStatus.FAILED, quotes, None, f"external_id: '{quotes}' already exists")
                    for i in range(500))
    stored = _results_attribute(written)
    assert isinstance(stored, list)
    assert [_result_of(row) for row in result_rows({"results": stored}, "results")] == list(written)
    assert len(_results_attribute(written[:10]).encode()) <= RESULTS_TEXT_LIMIT
