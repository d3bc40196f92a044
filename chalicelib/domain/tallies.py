"""Money by currency, and the tally of one stream of a reconciliation: what a story's summary
shows of each link without reading the records on each request.

A tally is written by the exception refresh (after every run, and by the sweeper), which reads
every open record of the reconciliation's streams anyway. Its `total` comes from the analytics
mirror, and only records of imports the mirror has published count on either side, so that
`total - open` is exactly what was matched (an import still being written counts nowhere yet).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from chalicelib.domain.matches import Side


class Booked(Protocol):
    """What money needs of a record (a Record, an OpenRecord, a mirror row)."""
    @property
    def amount(self) -> int: ...
    @property
    def currency(self) -> str: ...
    @property
    def decimal_places(self) -> int: ...
    @property
    def date(self) -> str: ...
    @property
    def direction(self) -> object: ...  # Direction, or its value


@dataclass(frozen=True)
class CurrencyAmounts:
    """Records of one currency: how many, and their credits and debits in minor units at
    `decimal_places` (the largest of the records: exact), with the oldest date when it is kept."""
    currency: str
    count: int = 0
    credits: int = 0
    debits: int = 0
    decimal_places: int = 0
    oldest_date: str | None = None

    def at(self, scale: int) -> CurrencyAmounts:
        """The same money at `scale` decimal places (never fewer than it has)."""
        if scale <= self.decimal_places:
            return self
        factor = 10 ** (scale - self.decimal_places)
        return replace(self, credits=self.credits * factor, debits=self.debits * factor, decimal_places=scale)

    def plus(self, other: CurrencyAmounts) -> CurrencyAmounts:
        scale = max(self.decimal_places, other.decimal_places)
        a, b = self.at(scale), other.at(scale)
        return CurrencyAmounts(self.currency, a.count + b.count, a.credits + b.credits, a.debits + b.debits, scale,
                               _oldest(a.oldest_date, b.oldest_date))

    def minus(self, other: CurrencyAmounts) -> CurrencyAmounts:
        """What is left of this money once `other`, a part of it, is taken out (no oldest date:
        the remainder's is not known)."""
        scale = max(self.decimal_places, other.decimal_places)
        a, b = self.at(scale), other.at(scale)
        return CurrencyAmounts(self.currency, a.count - b.count, a.credits - b.credits, a.debits - b.debits, scale)


Money = Mapping[str, CurrencyAmounts]  # by currency


def _oldest(a: str | None, b: str | None) -> str | None:
    return min(d for d in (a, b) if d is not None) if a is not None or b is not None else None


def _is_credit(direction: object) -> bool:
    return getattr(direction, "value", direction) == "credit"


def money_of(records: Iterable[Booked], oldest: bool = False) -> dict[str, CurrencyAmounts]:
    """The records' money by currency (with their oldest date when `oldest`)."""
    money: dict[str, CurrencyAmounts] = {}
    for r in records:
        credit = _is_credit(r.direction)
        one = CurrencyAmounts(r.currency, 1, r.amount if credit else 0, 0 if credit else r.amount, r.decimal_places,
                              r.date if oldest else None)
        money[r.currency] = money[r.currency].plus(one) if r.currency in money else one
    return money


def combined(*parts: Money) -> dict[str, CurrencyAmounts]:
    money: dict[str, CurrencyAmounts] = {}
    for part in parts:
        for currency, amounts in part.items():
            money[currency] = money[currency].plus(amounts) if currency in money else amounts
    return money


def less(money: Money, part: Money) -> dict[str, CurrencyAmounts]:
    """`money` with `part` (a subset of the same records) taken out; currencies left with nothing
    go. Never below zero: a `part` that is not a subset (see StreamTally.inconsistent) leaves 0."""
    left = (a.minus(part[c]) if c in part else a for c, a in money.items())
    clamped = (replace(a, count=max(a.count, 0), credits=max(a.credits, 0), debits=max(a.debits, 0)) for a in left)
    return {a.currency: a for a in clamped if (a.count, a.credits, a.debits) != (0, 0, 0)}


@dataclass(frozen=True)
class MirroredMoney:
    """A stream's money in the analytics mirror: its published imports, less deleted records."""
    money: Money = field(default_factory=dict)
    imports: frozenset[int] = frozenset()


@dataclass(frozen=True)
class StreamTally:
    """One stream of a reconciliation as the last exception refresh saw it."""
    environment: str
    reconciliation_id: int
    data_stream_key: str
    computed_at: datetime
    total: Money = field(default_factory=dict)  # every record of the stream (published imports)
    open: Money = field(default_factory=dict)  # not matched in this reconciliation (with their oldest date)
    # Open here but matched in another reconciliation, by that reconciliation: in a story, what
    # passed the previous link on the shared stream and is still unmatched in this one.
    open_matched_in: Mapping[int, Money] = field(default_factory=dict)

    @property
    def matched(self) -> dict[str, CurrencyAmounts]:
        return less(self.total, self.open)

    @property
    def inconsistent(self) -> bool:
        """Open money beyond the total: the mirror misses records the table has (a lost part)."""
        def over(a: CurrencyAmounts) -> bool:
            total = self.total.get(a.currency)
            if total is None:
                return True
            scale = max(a.decimal_places, total.decimal_places)
            mine, theirs = a.at(scale), total.at(scale)
            return mine.count > theirs.count or mine.credits > theirs.credits or mine.debits > theirs.debits
        return any(over(a) for a in self.open.values())


class OpenInTally(Booked, Protocol):
    @property
    def file_import_id(self) -> int | None: ...
    @property
    def matched_in(self) -> frozenset[int]: ...


def tally_stream(environment: str, reconciliation_id: int, stream_key: str, *, total: Money,
                 published_imports: Iterable[int], open_records: Iterable[OpenInTally],
                 now: datetime) -> StreamTally:
    """The stream's tally from its mirror totals and its open records in the reconciliation; open
    records of an import the mirror has not published yet count nowhere (see the module docstring)."""
    published = set(published_imports)
    counted = [r for r in open_records if r.file_import_id in published]
    elsewhere: dict[int, list[OpenInTally]] = {}
    for record in counted:
        for other in record.matched_in - {reconciliation_id}:
            elsewhere.setdefault(other, []).append(record)
    return StreamTally(environment, reconciliation_id, stream_key, now, total=dict(total),
                       open=money_of(counted, oldest=True),
                       open_matched_in={other: money_of(rs, oldest=True) for other, rs in elsewhere.items()})


def money_plain(money: Money) -> dict[str, dict[str, int | str]]:
    """Money as plain values (JSON, a DynamoDB map), read back by `money_from_plain`."""
    return {c: {"count": a.count, "credits": a.credits, "debits": a.debits, "decimal_places": a.decimal_places,
                **({"oldest_date": a.oldest_date} if a.oldest_date else {})} for c, a in money.items()}


def money_from_plain(plain: Mapping[str, Mapping[str, object]]) -> dict[str, CurrencyAmounts]:
    return {c: CurrencyAmounts(c, int(str(a["count"])), int(str(a["credits"])), int(str(a["debits"])),
                               int(str(a["decimal_places"])),
                               str(a["oldest_date"]) if a.get("oldest_date") else None)
            for c, a in plain.items()}


@dataclass(frozen=True)
class StreamFigures:
    data_stream_key: str
    side: Side
    matched: Money
    unmatched: Money


@dataclass(frozen=True)
class LinkFigures:
    """A story link's money from its reconciliation's tallies."""
    computed_at: datetime | None  # of its oldest stream tally; None until every stream has one
    streams: tuple[StreamFigures, ...]
    side_a_matched: Money
    side_a_unmatched: Money
    side_b_matched: Money
    side_b_unmatched: Money
    # A continuation's shared stream: open here, matched in the previous link's reconciliation.
    from_previous: Money | None = None


def link_figures(side_a_keys: Iterable[str], side_b_keys: Iterable[str], tallies: Iterable[StreamTally],
                 previous_reconciliation_id: int | None = None, shared_stream_key: str | None = None) -> LinkFigures:
    """Sum each side's streams (a stream without a tally yet counts nothing, and leaves
    `computed_at` None); a tally of a stream the reconciliation no longer uses is ignored."""
    by_key = {t.data_stream_key: t for t in tallies}
    sides: list[tuple[Side, str]] = [("a", key) for key in side_a_keys] + [("b", key) for key in side_b_keys]
    streams = tuple(StreamFigures(key, side, by_key[key].matched, by_key[key].open)
                    for side, key in sides if key in by_key)

    def side_sum(side: str, what: str) -> dict[str, CurrencyAmounts]:
        return combined(*(getattr(s, what) for s in streams if s.side == side))

    complete = all(key in by_key for _, key in sides)
    shared = by_key.get(shared_stream_key) if shared_stream_key else None
    from_previous = None
    if shared_stream_key and previous_reconciliation_id is not None:
        from_previous = dict(shared.open_matched_in.get(previous_reconciliation_id, {})) if shared else {}
    return LinkFigures(
        computed_at=min((by_key[key].computed_at for _, key in sides), default=None) if complete and sides else None,
        streams=streams, side_a_matched=side_sum("a", "matched"), side_a_unmatched=side_sum("a", "unmatched"),
        side_b_matched=side_sum("b", "matched"), side_b_unmatched=side_sum("b", "unmatched"),
        from_previous=from_previous)
