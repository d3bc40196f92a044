"""A bank account's balances as its statements reported them: one statement day of a `bank_feed`
stream, and whether it follows on from the day before. A day whose opening booked balance is not
the previous day's closing booked balance is a gap: a statement is missing (or the bank restated
one), which a treasury team must see."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True)
class StatementDay:
    environment: str
    data_stream_key: str
    date: date
    statement_id: str
    account: str
    currency: str
    decimal_places: int
    opening_booked: int | None  # signed minor units: credit positive
    closing_booked: int | None
    closing_available: int | None
    file_import_id: int


def gaps(newest_first: Sequence[StatementDay], older: StatementDay | None = None) -> list[bool]:
    """For each day (newest first), whether its opening differs from the closing of the day after
    it in the list (the one before it in time); the last day is compared with `older`, the next
    day beyond the list, when there is one."""
    flags = []
    for i, day in enumerate(newest_first):
        previous = newest_first[i + 1] if i + 1 < len(newest_first) else older
        flags.append(previous is not None and day.opening_booked is not None
                     and previous.closing_booked is not None and day.opening_booked != previous.closing_booked)
    return flags
