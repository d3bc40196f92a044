"""Following one record through a story's chain (GET /reconciliation_stories/{id}/trace): the pure
part. The service (services/story_trace.py) reads; this module decides what the reads mean.

A hop is one link of the chain and where the records entering it lead there: the match holding
them (its records are the match's members), or a break (records open in that reconciliation).
Entering records are grouped into leads; a link step shows at most MAX_STEP_HOPS of them, breaks
first so that the cap never hides one, and summarises the rest without following them.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from chalicelib.domain.matches import Match, MatchStatus
from chalicelib.domain.records import Direction, HeldRecord, Record
from chalicelib.domain.tallies import Booked, CurrencyAmounts, Money, money_of

MAX_HOP_RECORDS = 20  # records shown per hop; its count and totals cover all of them
MAX_STEP_HOPS = 10  # hops shown per link step; the others go into next_omitted, not followed
MAX_FOLLOWED_HOPS = 200  # hops built per trace, so that a pathological story cannot run away
MAX_BREAK_RECORD_IDS = 20


class TraceDirection(StrEnum):
    START = "start"
    UPSTREAM = "upstream"  # towards link 1
    DOWNSTREAM = "downstream"


class BreakReason(StrEnum):
    UNMATCHED = "unmatched"
    PROPOSED = "proposed"  # a match nobody confirmed yet: flagged, and the trace goes on through it
    EXCEPTION = "exception"  # open records an exception of the reconciliation holds


def currency_totals(records: Iterable[Booked]) -> tuple[CurrencyAmounts, ...]:
    """Totals per currency, by currency code."""
    money = money_of(records)
    return tuple(money[currency] for currency in sorted(money))


# The response's shape --------------------------------------------------------------------------

@dataclass(frozen=True)
class HopLink:
    id: int
    position: int
    role: str
    reconciliation_id: int
    reconciliation_name: str


@dataclass(frozen=True)
class StreamRef:
    id: int
    name: str


@dataclass(frozen=True)
class HopMatch:
    id: int
    status: str
    reconciliation_rule_id: int | None
    record_count: int


@dataclass(frozen=True)
class HopBreak:
    reason: BreakReason
    exception_id: int | None = None


@dataclass(frozen=True)
class HopRecords:
    data: tuple[Record, ...]  # at most MAX_HOP_RECORDS
    count: int
    totals: tuple[CurrencyAmounts, ...]


@dataclass(frozen=True)
class Omitted:
    """The hops of a step left out (not followed): how many, the records the trace reached them by,
    and how many of them are breaks, by reason."""
    hops: int
    records: int
    totals: tuple[CurrencyAmounts, ...]
    breaks: Mapping[str, int]


@dataclass(frozen=True)
class Hop:
    link: HopLink
    direction: TraceDirection
    via_data_stream: StreamRef | None  # the shared stream the hop was entered through (None on a start hop)
    match: HopMatch | None
    break_: HopBreak | None
    records: HopRecords
    next: tuple[Hop, ...] = ()
    next_omitted: Omitted | None = None


@dataclass(frozen=True)
class TraceBreak:
    link_position: int
    reconciliation_id: int
    reason: BreakReason
    match_id: int | None
    exception_id: int | None
    record_ids: tuple[int, ...]


@dataclass(frozen=True)
class StoryTrace:
    story_id: int
    record: Record
    truncated: bool  # MAX_FOLLOWED_HOPS was reached: some hops are summarised though within the caps
    hops: tuple[Hop, ...]  # the start hops, by position
    breaks: tuple[TraceBreak, ...]  # every break of the hops shown, in tree order


# Leads: where the records entering a link go there ----------------------------------------------

@dataclass(frozen=True, slots=True)
class Passing:
    """A record the trace passes through: its money and what holds it in each reconciliation, all a
    link step needs of the records entering it (10,000 charges of a payout are read as this, by a
    projected read; the few a hop shows are read whole)."""
    id: int
    data_stream_key: str
    date: str
    amount: int
    direction: Direction
    currency: str
    decimal_places: int
    match_ids: Mapping[int, int]  # reconciliation -> the match holding it there
    exception_ids: Mapping[int, int]  # reconciliation -> the exception holding it there

    @classmethod
    def of(cls, held: HeldRecord) -> Passing:
        r = held.record
        return cls(id=r.id, data_stream_key=r.data_stream_key, date=r.date, amount=r.amount, direction=r.direction,
                   currency=r.currency, decimal_places=r.decimal_places, match_ids=held.match_ids,
                   exception_ids=held.exception_ids)

    def match_in(self, reconciliation_id: int) -> int | None:
        return self.match_ids.get(reconciliation_id)

    def exception_in(self, reconciliation_id: int) -> int | None:
        return self.exception_ids.get(reconciliation_id)


Entering = HeldRecord | Passing  # a record entering a link, read whole or projected


@dataclass(frozen=True, slots=True)
class MatchState:
    """A match as a trace reads the many that records entering a link lead to (projected): whether
    it holds its records (see is_live), and what a hop shows of it."""
    id: int
    reconciliation_id: int
    status: MatchStatus
    reconciliation_rule_id: int | None
    record_count: int
    unmatching: bool = False
    pending_since: datetime | None = None

    @classmethod
    def of(cls, match: Match) -> MatchState:
        return cls(id=match.id, reconciliation_id=match.reconciliation_id, status=match.status,
                   reconciliation_rule_id=match.reconciliation_rule_id, record_count=match.record_count,
                   unmatching=match.unmatching, pending_since=match.pending_since)


Found = Match | MatchState  # a match read whole or projected


def booked(entry: Entering) -> Record | Passing:
    """The record itself (whole or projected): its id and money."""
    return entry.record if isinstance(entry, HeldRecord) else entry


@dataclass(frozen=True)
class Lead:
    """Records entering a link that go the same way there: into one live match, or into one break
    of records open there (unmatched, or held by one exception)."""
    entering: tuple[Entering, ...]
    match: Found | None = None
    break_: HopBreak | None = None

    @property
    def reason(self) -> BreakReason | None:
        if self.match is not None:
            return BreakReason.PROPOSED if self.match.status is MatchStatus.PROPOSED else None
        return self.break_.reason if self.break_ else None

    def order(self) -> tuple[int, int]:
        """Open records first (unmatched, then by exception), proposed matches next, then the others,
        each by id: a break never goes behind the cap while a plain match is shown."""
        if self.match is None:
            exception_id = self.break_.exception_id if self.break_ else None
            return 0, exception_id or 0  # unmatched (no exception) before the exceptions
        return (1 if self.match.status is MatchStatus.PROPOSED else 2), self.match.id


def is_live(match: Found | None, reconciliation_id: int) -> bool:
    """A match that holds its records: committed, not being unmatched, of that reconciliation."""
    return (match is not None and not match.unmatching and match.pending_since is None
            and match.reconciliation_id == reconciliation_id)


def leads(entering: Iterable[Entering], reconciliation_id: int, matches: Mapping[int, Found]) -> list[Lead]:
    """Group the records entering a link by what holds them in its reconciliation, in display order.
    `matches` are those of the records' match ids that were found; a record whose match is missing
    or not live counts as open there."""
    by_match: dict[int, list[Entering]] = defaultdict(list)
    open_by_exception: dict[int | None, list[Entering]] = defaultdict(list)
    for held in entering:
        match_id = held.match_in(reconciliation_id)
        if match_id is not None and is_live(matches.get(match_id), reconciliation_id):
            by_match[match_id].append(held)
        else:
            open_by_exception[held.exception_in(reconciliation_id)].append(held)
    found = [Lead(tuple(records), match=matches[match_id]) for match_id, records in by_match.items()]
    found += [Lead(tuple(records), break_=_open_break(exception_id))
              for exception_id, records in open_by_exception.items()]
    return sorted(found, key=Lead.order)


def _open_break(exception_id: int | None) -> HopBreak:
    if exception_id is None:
        return HopBreak(BreakReason.UNMATCHED)
    return HopBreak(BreakReason.EXCEPTION, exception_id)


def omitted(left: Sequence[Lead]) -> Omitted | None:
    """The summary of the leads a step leaves out (None when it leaves none out)."""
    if not left:
        return None
    records = [booked(entry) for lead in left for entry in lead.entering]
    breaks = {reason.value: sum(1 for lead in left if lead.reason is reason) for reason in BreakReason}
    return Omitted(hops=len(left), records=len(records), totals=currency_totals(records), breaks=breaks)


# Hops ----------------------------------------------------------------------------------------

def shown_order(record_ids: Iterable[int], entering_ids: Iterable[int]) -> list[int]:
    """The order a hop shows its records in: those the trace came in by first, then the others by id."""
    first = set(entering_ids)
    ids = list(record_ids)  # a payout's 10,001: two plain sorts, not a key per id
    return sorted(i for i in ids if i in first) + sorted(i for i in ids if i not in first)


def hop_records(records: Iterable[Record], entering_ids: Iterable[int]) -> HopRecords:
    """A hop's records, all of them read: MAX_HOP_RECORDS shown (see shown_order), all counted and totalled."""
    by_id = {r.id: r for r in records}
    shown = shown_order(by_id, entering_ids)[:MAX_HOP_RECORDS]
    return HopRecords(data=tuple(by_id[i] for i in shown), count=len(by_id), totals=currency_totals(by_id.values()))


def break_records(entering: Iterable[Entering], records: Mapping[int, Record]) -> HopRecords:
    """A break's records, the open records entering it: counted and totalled from what the trace
    passed them by, MAX_HOP_RECORDS shown by id from `records` (those, at least, read whole)."""
    by_id = {r.id: r for r in map(booked, entering)}
    return HopRecords(data=tuple(records[i] for i in break_shown(entering)), count=len(by_id),
                      totals=currency_totals(by_id.values()))


def break_shown(entering: Iterable[Entering]) -> list[int]:
    """The ids of the records a break shows (see break_records)."""
    return shown_order({booked(entry).id for entry in entering}, ())[:MAX_HOP_RECORDS]


def match_records(member_ids: Sequence[int], records: Mapping[int, Record], entering_ids: Iterable[int],
                  money: Money) -> HopRecords:
    """A match's records when its money is known (kept from an earlier trace): only those shown are read."""
    shown = [i for i in shown_order(member_ids, entering_ids)[:MAX_HOP_RECORDS] if i in records]
    return HopRecords(data=tuple(records[i] for i in shown), count=len(member_ids),
                      totals=tuple(money[currency] for currency in sorted(money)))


def hop(link: HopLink, direction: TraceDirection, via: StreamRef | None, lead: Lead,
        records: HopRecords | None = None) -> Hop:
    """The hop of a lead, not followed yet: a match's `records` are its members' (match_records or
    hop_records), read; a break's the open records themselves (break_records; by default those of
    its entering records that were read whole)."""
    if lead.match is None:
        if records is None:
            records = break_records(lead.entering, {e.record.id: e.record for e in lead.entering
                                                    if isinstance(e, HeldRecord)})
        return Hop(link=link, direction=direction, via_data_stream=via, match=None, break_=lead.break_,
                   records=records)
    if records is None:
        raise ValueError("a match's hop needs its records")
    match = lead.match
    proposed = HopBreak(BreakReason.PROPOSED) if match.status is MatchStatus.PROPOSED else None
    return Hop(link=link, direction=direction, via_data_stream=via,
               match=HopMatch(id=match.id, status=match.status.value,
                              reconciliation_rule_id=match.reconciliation_rule_id, record_count=match.record_count),
               break_=proposed, records=records)


def breaks_in(hops: Iterable[Hop]) -> tuple[TraceBreak, ...]:
    """Every break of these hops and of the hops they lead to, in tree order (a hop before its next)."""
    found: list[TraceBreak] = []

    def visit(current: Hop) -> None:
        if current.break_ is not None:
            found.append(TraceBreak(
                link_position=current.link.position, reconciliation_id=current.link.reconciliation_id,
                reason=current.break_.reason, match_id=current.match.id if current.match else None,
                exception_id=current.break_.exception_id,
                record_ids=tuple(r.id for r in current.records.data[:MAX_BREAK_RECORD_IDS])))
        for child in current.next:
            visit(child)

    for start in hops:
        visit(start)
    return tuple(found)


@dataclass(frozen=True)
class StartLinks:
    """The links a record starts in (those whose reconciliation uses its stream), and the ways out of
    each: upstream unless the link before is a start link too, downstream likewise (a record on a
    shared stream starts in both links it sits in and goes outwards from each)."""
    positions: frozenset[int]
    link_count: int

    def directions(self, position: int) -> tuple[TraceDirection, ...]:
        ways = []
        if position > 1 and position - 1 not in self.positions:
            ways.append(TraceDirection.UPSTREAM)
        if position < self.link_count and position + 1 not in self.positions:
            ways.append(TraceDirection.DOWNSTREAM)
        return tuple(ways)


# Reading many ids --------------------------------------------------------------------------------

DENSE_RUN = 200  # ids in a run worth one range read instead of reads by key
DENSE_GAP = 4  # the most a run's ids lie apart (a range reads what lies between, too)
RANGE_IDS = 2_500  # ids of one range read (several go in parallel)


def dense_runs(ids: Iterable[int], min_run: int = DENSE_RUN, max_gap: int = DENSE_GAP,
               per_range: int = RANGE_IDS) -> tuple[list[tuple[int, int]], list[int]]:
    """The ids as ranges (first, last) of dense runs, at most `per_range` ids each, and the ids
    left, which are better read one by one."""
    runs: list[tuple[int, int]] = []
    rest: list[int] = []
    current: list[int] = []

    def close() -> None:
        if len(current) >= min_run:
            runs.extend((part[0], part[-1]) for part in
                        (current[start:start + per_range] for start in range(0, len(current), per_range)))
        else:
            rest.extend(current)
        current.clear()

    for record_id in sorted(set(ids)):
        if current and record_id - current[-1] > max_gap:
            close()
        current.append(record_id)
    close()
    return runs, rest
