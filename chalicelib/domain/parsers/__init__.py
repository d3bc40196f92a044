"""File parsers: CSV and NACHA to record items (the same dicts the bulk API accepts)."""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


class FileRejected(Exception):
    """The file as a whole cannot be imported; nothing of it may be written."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


@dataclass(slots=True)
class ParsedRow:
    """One row of a file: the record item it becomes, or why it fails (the row fails alone)."""
    line: int
    item: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class ParsedFile:
    rows: list[ParsedRow]
    summary: dict[str, Any] = field(default_factory=dict)


def claim_unique(candidate: str, taken: set[str]) -> str:
    """`candidate`, or the first of `candidate-2`, `candidate-3`, ... not in `taken`: the id a file's
    repeated reference gets (the same on every import of the file). Added to `taken`."""
    claimed = candidate
    if claimed in taken:
        repeat = 2
        while f"{candidate}-{repeat}" in taken:
            repeat += 1
        claimed = f"{candidate}-{repeat}"
    taken.add(claimed)
    return claimed


@contextmanager
def without_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a parser builds millions of small objects
    (none of them cyclic): its repeated full scans otherwise cost more than the parsing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
