"""Reading a cursor-paged listing whole, one page at a time."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


def every(page: Callable[[str | None], tuple[list[T], str | None]]) -> Iterator[T]:
    """Every item of a cursor-paged listing (`page(cursor)` -> items, next cursor or None), a page
    read as the caller gets to it: a caller that stops early reads no page further."""
    cursor: str | None = None
    while True:
        items, cursor = page(cursor)
        yield from items
        if cursor is None:
            return
