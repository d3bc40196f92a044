"""What a run keeps of each step: short enough that a run's steps stay within one DynamoDB item."""
import json
from datetime import UTC, datetime

from chalicelib.domain.agents.runs import INPUT_CHARS, PREVIEW_CHARS, Step

AT = datetime(2026, 11, 23, tzinfo=UTC)


def test_a_small_input_and_result_are_kept_as_given():
    step = Step.of("sql", {"query": "SELECT 1", "limit": 2.5}, False, "1 row", AT)
    assert (step.input, step.result_preview) == ({"query": "SELECT 1", "limit": 2.5}, "1 row")


def test_long_texts_are_cut_and_a_wide_input_is_kept_as_its_json_cut_short():
    step = Step.of("write_output_file", {"filename": "a.csv", "content": "x" * 10_000}, False, "y" * 5_000, AT)
    assert len(step.input["content"]) == PREVIEW_CHARS and len(step.result_preview) == PREVIEW_CHARS
    wide = Step.of("sql", {f"key{i}": "v" * 300 for i in range(50)}, True, "", AT)
    assert isinstance(wide.input, str) and len(wide.input) == INPUT_CHARS and wide.input.startswith('{"key0"')
    assert len(json.dumps(wide.input)) < INPUT_CHARS + 100
