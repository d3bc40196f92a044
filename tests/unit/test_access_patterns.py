"""docs/access-patterns.md describes the keys the builders of keys.py make: each row's builder,
called with sample arguments, makes the row's pk and sk, and every builder has its row."""
import inspect
import itertools
import re
from datetime import date
from pathlib import Path

import pytest

from chalicelib.adapters.dynamodb import keys

DOC = Path(__file__).resolve().parents[2] / "docs" / "access-patterns.md"
HEADER = "| item | key | pk | sk | built by |"
ENVIRONMENT, STREAM = "acme", "bank"
# Arguments by parameter name where the name alone does not say enough; ints are told apart by
# value (11, 22, ... in the order of the parameters), other values come from their type or name.
SAMPLES = {"environment": ENVIRONMENT, "stream_key": STREAM, "key": STREAM, "status": "partially_reconciled",
           "mark": "event-1#token-1", "entity": "api_key"}
# The placeholders that name the id of another item, by the builder's parameter that carries it;
# `<id>` is the item's own, the int parameter no other placeholder names.
OTHER_IDS = {"recon": "reconciliation_id", "job": "job_id", "match": "match_id", "exc": "exception_id",
             "record": "record_id", "comment": "comment_id", "priority": "priority", "seq": "seq",
             "story": "story_id", "endpoint": "endpoint_id"}


def rows() -> list[dict[str, str]]:
    """Every row of the doc's item tables, by column name (backticks dropped)."""
    found, columns = [], None
    for line in DOC.read_text().splitlines():
        if line.startswith(HEADER):
            columns = [c.strip() for c in line.strip("|").split("|")]
        elif columns and line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
            found.append(dict(zip(columns, cells, strict=True)))
        elif not line.startswith("|"):
            columns = None
    return found


def pattern(shape: str, arguments: dict[str, object]) -> re.Pattern[str]:
    """A documented key shape as a regular expression for a builder's `arguments`: `{E}`, `<env>`
    and `<stream>` stand for the samples, ids for their zero-padded argument, `<a..b>` for a shard
    in that range, any other placeholder for a part without `#`."""
    names = re.findall(r"<([^>]+)>", shape)
    own_ids = [v for name, v in arguments.items()
               if isinstance(v, int) and name not in {OTHER_IDS.get(n) for n in names}]

    def placeholder(name: str) -> str:
        if name in ("env", "stream"):
            return re.escape({"env": ENVIRONMENT, "stream": STREAM}[name])
        if name == "chunk":
            return str(arguments["chunk"]).zfill(6)
        if name in OTHER_IDS:
            return str(arguments[OTHER_IDS[name]]).zfill(keys.ID_WIDTH)
        if name == "id":
            return "|".join(str(v).zfill(keys.ID_WIDTH) for v in own_ids) or "(?!)"
        if shard := re.fullmatch(r"(\d+)\.\.(\d+)", name):
            return "|".join(str(n) for n in range(int(shard[1]), int(shard[2]) + 1))
        return "[^#]+"

    parts = re.split(r"<([^>]+)>", shape.replace("{E}", "E#<env>"))  # text, placeholder, text, ...
    return re.compile("".join(f"(?:{placeholder(part)})" if n % 2 else re.escape(part) for n, part in enumerate(parts)))


def arguments_of(builder) -> dict[str, object]:
    ints = itertools.count(11, 11)
    return {p.name: SAMPLES[p.name] if p.name in SAMPLES else
            next(ints) if p.annotation == "int" else
            date(2024, 5, 31) if p.annotation == "date" else p.name.replace("_", "-")
            for p in inspect.signature(builder).parameters.values()}


def index_named(key: str) -> keys.Index:
    if key == "table":
        return keys.BASE_TABLE
    [index] = [i for i in keys.GLOBAL_SECONDARY_INDEXES if i.name == key]
    return index


def test_the_doc_has_its_tables():
    assert len(rows()) > 50


@pytest.mark.parametrize("row", rows(), ids=lambda row: f"{row['built by']}-{row['key']}")
def test_each_row_is_the_key_its_builder_makes(row):
    builder = getattr(keys, row["built by"])
    arguments = arguments_of(builder)
    index, key = index_named(row["key"]), builder(**arguments)
    assert pattern(row["pk"], arguments).fullmatch(key[index.partition_key]), (row["pk"], key)
    assert pattern(row["sk"], arguments).fullmatch(key[index.sort_key]), (row["sk"], key)


def test_every_builder_of_a_key_has_its_row():
    builders = {name for name, function in inspect.getmembers(keys, inspect.isfunction)
                if not name.startswith("_") and inspect.signature(function).return_annotation == "dict[str, str]"}
    assert "record" in builders  # the annotations are read as text (keys.py defers them)
    assert builders - {row["built by"] for row in rows()} == set()


def test_a_shape_admits_only_its_own_keys():
    shard = pattern("{E}#DS#<stream>#REC#<0..15>", {})
    assert shard.fullmatch("E#acme#DS#bank#REC#15")
    assert not shard.fullmatch("E#acme#DS#bank#REC#16") and not shard.fullmatch("E#acme#DS#bank#REC")
    assert not shard.fullmatch("E#other#DS#bank#REC#1")
    rule = pattern("<priority>#<id>", {"environment": "acme", "priority": 11, "rule_id": 22})
    assert rule.fullmatch("000000000011#000000000022") and not rule.fullmatch("000000000022#000000000011")
