"""Record items turned into columns a page at a time, straight from DynamoDB's typed values
({"N": "12"}), so that a reader of a million records never holds a dict per record."""
from __future__ import annotations

from typing import Any

NUMBERS = ("id", "amount", "decimal_places", "file_import_id")
TEXTS = ("direction", "date", "currency", "description", "external_id", "data_stream_key")
NUMBER_SETS = ("matched_in",)


def record_attributes(with_metadata: bool = False) -> tuple[str, ...]:
    """What `record_columns` reads, `status` aside (the open-records index does not hold it): the
    only attributes worth fetching, about half an item's bytes."""
    return NUMBERS + TEXTS + NUMBER_SETS + (("metadata",) if with_metadata else ())


def record_columns(items: list[dict[str, Any]], with_metadata: bool = False) -> dict[str, list[Any]]:
    """The attributes a run reads, one list each (absent or NULL is None; a number set is a sorted
    list, empty when absent). `metadata` stays its stored JSON text."""
    columns: dict[str, list[Any]] = {}
    for name in NUMBERS:
        columns[name] = [int(v["N"]) if (v := item.get(name)) is not None and "N" in v else None for item in items]
    for name in TEXTS + ("status",) + (("metadata",) if with_metadata else ()):
        columns[name] = [v.get("S") if (v := item.get(name)) is not None else None for item in items]
    for name in NUMBER_SETS:
        columns[name] = [sorted(map(int, v["NS"])) if (v := item.get(name)) is not None and "NS" in v else []
                         for item in items]
    return columns
