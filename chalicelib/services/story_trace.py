"""Following one record through a story's chain: the reads (domain/story_trace.py decides what
they mean).

The reads go by link step, never by record: the records entering a step are already read (the
traced record, or the members of the match the trace came from), their matches are read in one
batch, and only the hops shown are read further (each match's members in one query, their
records), several requests at a time. Many ids are read as dense runs by ranges of an index (a
run's matches and an import's records have consecutive ids; eventually consistent), the rest
with BatchGetItem. A record read whole is not read again.

A hop counts and totals all its records. For a big match (a payout of 10,000 charges) that means
reading them all, so the first trace through it keeps their money beside its members (a match's
members and their amounts never change): the next reads the members and only the records it
shows. The records entering a step must still be read, all of them, to find their matches: when
they are many (more than WHOLE_UP_TO) only their money and what holds them are read, by a
projected read (`Passing`), and the few that a hop then shows are read whole.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TypeVar

from chalicelib.domain.errors import NotFound, ValidationFailed
from chalicelib.domain.matches import KEEP_MONEY_FROM, MatchMember
from chalicelib.domain.reconciliations import Reconciliation
from chalicelib.domain.records import HeldRecord
from chalicelib.domain.stories import Story, StoryLink
from chalicelib.domain.story_trace import (
    DENSE_RUN,
    MAX_FOLLOWED_HOPS,
    MAX_HOP_RECORDS,
    MAX_STEP_HOPS,
    RANGE_IDS,
    Hop,
    HopLink,
    HopRecords,
    Lead,
    MatchState,
    Passing,
    StartLinks,
    StoryTrace,
    StreamRef,
    TraceDirection,
    booked,
    break_records,
    break_shown,
    breaks_in,
    dense_runs,
    hop,
    hop_records,
    leads,
    match_records,
    omitted,
    shown_order,
)
from chalicelib.domain.tallies import Money
from chalicelib.observability import logger
from chalicelib.services.ports import Ports
from chalicelib.services.stories import chained_reconciliations, chained_streams

READ_THREADS = 8  # requests in flight at once
IDS_PER_READ = 300  # ids a thread reads at a time (BatchGetItem takes 100 a request)
WHOLE_UP_TO = 200  # records a step goes on by, read whole; more are read projected (Passing)


@dataclass(frozen=True)
class TraceBounds:
    """How far a trace goes and how it reads; the defaults are the service's (tests make them small)."""
    followed_hops: int = MAX_FOLLOWED_HOPS
    whole_up_to: int = WHOLE_UP_TO
    keep_money_from: int = KEEP_MONEY_FROM  # a match with more members keeps its money once read whole
    dense_run: int = DENSE_RUN  # see dense_runs
    range_ids: int = RANGE_IDS

K = TypeVar("K")
V = TypeVar("V")


def trace_record(ports: Ports, environment: str, story_id: int, record_id: int,
                 bounds: TraceBounds = TraceBounds()) -> StoryTrace:
    """The story's hops from the links the record starts in, followed outwards (404 for an unknown
    story or record, 422 when the record's stream is in no link of the story)."""
    story = ports.stories.get(environment, story_id)
    traced = _traced_record(ports, environment, record_id)
    reconciliations = chained_reconciliations(ports, environment, story.reconciliation_ids)
    stream_key = traced.record.data_stream_key
    starts = frozenset(link.position for link in story.links
                       if link.reconciliation_id in reconciliations
                       and reconciliations[link.reconciliation_id].uses(stream_key))
    if not starts:
        raise ValidationFailed.on("record_id", f"record {record_id}'s data stream is not in this story")
    walk = _Walk(ports, environment, story, reconciliations, _shared_streams(ports, environment, story),
                 StartLinks(starts, len(story.links)), bounds)
    walk.known[traced.record.id] = traced
    walk.passing[traced.record.id] = Passing.of(traced)
    hops = tuple(walk.start(position, traced) for position in sorted(starts))
    return StoryTrace(story_id=story.id, record=traced.record, truncated=walk.truncated, hops=hops,
                      breaks=breaks_in(hops))


def _traced_record(ports: Ports, environment: str, record_id: int) -> HeldRecord:
    found = ports.claims.held_records(environment, [record_id])
    if not found or found[0].deleting:  # a record being deleted is gone for every reader
        raise NotFound(f"record {record_id} not found")
    return found[0]


def _shared_streams(ports: Ports, environment: str, story: Story) -> dict[str, StreamRef]:
    streams = chained_streams(ports, environment, story.shared_stream_keys)
    return {key: StreamRef(id=s.id, name=s.name) for key, s in streams.items()}


@dataclass(frozen=True)
class _MatchRead:
    members: list[MatchMember]
    records: HopRecords


def _ids(lead: Lead) -> list[int]:
    return [booked(entry).id for entry in lead.entering]


@dataclass
class _Walk:
    """One trace under way: what was read so far, and how many hops it built."""
    ports: Ports
    environment: str
    story: Story
    reconciliations: dict[int, Reconciliation]
    streams: dict[str, StreamRef]
    starts: StartLinks
    bounds: TraceBounds
    known: dict[int, HeldRecord] = field(default_factory=dict)  # read whole
    passing: dict[int, Passing] = field(default_factory=dict)  # every record read, whole or projected
    followed: int = 0
    truncated: bool = False
    shown_matches: set[int] = field(default_factory=set)  # a match two branches reach is shown under the first

    def start(self, position: int, traced: HeldRecord) -> Hop:
        [lead] = self._leads(self._link(position), [self.passing[traced.record.id]])  # one record goes one way
        self.followed += 1
        if lead.match is not None:
            self.shown_matches.add(lead.match.id)
        ways = self.starts.directions(position)
        read = self._read_matches([lead], self._onward_streams(position, ways))
        return self._follow(position, TraceDirection.START, None, lead, read, ways)

    def _step(self, position: int, direction: TraceDirection, via_key: str,
              entering: Sequence[Passing]) -> tuple[list[Hop], list[Lead]]:
        """The hops the records entering link `position` lead to, each followed on, and the leads
        left out (beyond MAX_STEP_HOPS, or beyond the budget of `bounds.followed_hops`)."""
        found = [lead for lead in self._leads(self._link(position), entering)
                 if lead.match is None or lead.match.id not in self.shown_matches]
        room = max(0, self.bounds.followed_hops - self.followed)
        if room < min(len(found), MAX_STEP_HOPS):
            self.truncated = True
        shown, left = found[:min(MAX_STEP_HOPS, room)], found[min(MAX_STEP_HOPS, room):]
        self.followed += len(shown)
        self.shown_matches.update(lead.match.id for lead in shown if lead.match is not None)
        read = self._read_matches(shown, self._onward_streams(position, (direction,)))
        via = self.streams.get(via_key)
        hops = [self._follow(position, direction, via, lead, read, (direction,)) for lead in shown]
        return hops, left

    def _follow(self, position: int, direction: TraceDirection, via: StreamRef | None, lead: Lead,
                read: dict[int, _MatchRead], ways: Sequence[TraceDirection]) -> Hop:
        """The hop of a lead, and the hops its match leads to in the links next to it (a break stops)."""
        info = self._hop_link(self._link(position))
        if lead.match is None:
            shown = {i: self.known[i].record for i in break_shown(lead.entering)}
            return hop(info, direction, via, lead, break_records(lead.entering, shown))
        its = read[lead.match.id]
        next_hops: list[Hop] = []
        left: list[Lead] = []
        for way in ways:
            shared = self._shared_stream(position, way)
            entering = [self.passing[m.record_id] for m in its.members
                        if m.data_stream_key == shared and m.record_id in self.passing]
            if shared is None or not entering:
                continue  # the chain ends, or the match has no record on the shared stream: this path ends
            hops, step_left = self._step(position - 1 if way is TraceDirection.UPSTREAM else position + 1, way,
                                         shared, entering)
            next_hops += hops
            left += step_left
        return replace(hop(info, direction, via, lead, its.records), next=tuple(next_hops),
                       next_omitted=omitted(left))

    def _shared_stream(self, position: int, way: TraceDirection) -> str | None:
        """The stream the trace leaves link `position` by, that way (None past either end of the chain)."""
        if way is TraceDirection.UPSTREAM:
            return self._link(position).shared_stream_key if position > 1 else None
        return self._link(position + 1).shared_stream_key if position < len(self.story.links) else None

    def _onward_streams(self, position: int, ways: Iterable[TraceDirection]) -> set[str]:
        return {key for way in ways if (key := self._shared_stream(position, way)) is not None}

    # Reads ------------------------------------------------------------------------------------

    def _leads(self, link: StoryLink, entering: Sequence[Passing]) -> list[Lead]:
        """Where the entering records go in the link, their matches read in one batch."""
        match_ids = {i for held in entering if (i := held.match_in(link.reconciliation_id)) is not None}
        matches: dict[int, MatchState] = {}
        for part in self._ranged(list(match_ids), lambda low, high: self.ports.matches.matches_between(
                                     self.environment, link.reconciliation_id, low, high),
                                 lambda ids: {i: MatchState.of(m) for i, m in
                                              self.ports.matches.find_many(self.environment, ids).items()}):
            matches.update((i, m) for i, m in part.items() if i in match_ids)
        return leads(entering, link.reconciliation_id, matches)

    def _read_matches(self, shown: Sequence[Lead], onward: set[str]) -> dict[int, _MatchRead]:
        """The members of the shown matches (a query each, several at a time) and the records the
        hops need: all of a match's while its money is not known (then kept for the next trace),
        else only those it shows, whole, and those the trace goes on by (on an `onward` stream),
        projected when they are many; a break's records that it shows, whole."""
        matches = [(lead, lead.match.id) for lead in shown if lead.match is not None]
        found = _each_in_parallel(lambda pair: self.ports.matches.members_and_money(self.environment, pair[1]),
                                  matches)
        whole: set[int] = set()
        going_on: set[int] = set()
        stream_of: dict[int, str] = {}
        for lead in shown:
            if lead.match is None:
                whole.update(break_shown(lead.entering))
                stream_of.update((r.id, r.data_stream_key) for r in map(booked, lead.entering))
        for (lead, _), (members, money) in zip(matches, found, strict=True):
            member_ids = [m.record_id for m in members]
            stream_of.update((m.record_id, m.data_stream_key) for m in members)
            if money is None:
                whole.update(member_ids)
            else:
                whole.update(shown_order(member_ids, _ids(lead))[:MAX_HOP_RECORDS])
                going_on.update(m.record_id for m in members if m.data_stream_key in onward)
        going_on -= whole | set(self.passing)
        if len(going_on) <= self.bounds.whole_up_to:
            whole |= going_on
        else:
            self._read_records(going_on, stream_of, whole=False)
        self._read_records(whole, stream_of)
        return {match_id: self._match_read(lead, match_id, members, money)
                for (lead, match_id), (members, money) in zip(matches, found, strict=True)}

    def _match_read(self, lead: Lead, match_id: int, members: list[MatchMember], money: Money | None) -> _MatchRead:
        """A match's members and records; its money kept when it was not and is worth keeping."""
        member_ids = [m.record_id for m in members]
        records = {i: self.known[i].record for i in member_ids if i in self.known}
        if money is not None:
            return _MatchRead(members, match_records(member_ids, records, _ids(lead), money))
        read = hop_records(records.values(), _ids(lead))
        if len(member_ids) > self.bounds.keep_money_from and len(records) == len(member_ids):
            try:
                self.ports.matches.keep_money(self.environment, match_id, {m.currency: m for m in read.totals})
            except Exception:  # only a later trace's speed depends on it: this one answers anyway
                logger.exception("keeping a match's money failed", extra={"match_id": match_id})
        return _MatchRead(members, read)

    def _read_records(self, record_ids: Iterable[int], stream_of: dict[int, str], whole: bool = True) -> None:
        """The records not read yet (`whole`, or else projected as Passing): dense runs of a
        stream's ids by ranges of its record index, the others by key."""
        by_stream: dict[str, list[int]] = {}
        for record_id in set(record_ids) - set(self.known if whole else self.passing):
            by_stream.setdefault(stream_of[record_id], []).append(record_id)
        wanted = {i for ids in by_stream.values() for i in ids}
        claims = self.ports.claims
        held_by = [link.reconciliation_id for link in self.story.links]
        for stream_key, ids in by_stream.items():
            if not whole:
                for passed in self._ranged(ids, partial(claims.passing_between, self.environment, stream_key,
                                                        reconciliation_ids=held_by),
                                           lambda part: claims.passing(self.environment, part, held_by)):
                    self.passing.update((p.id, p) for p in passed if p.id in wanted)
                continue
            for part in self._ranged(ids, partial(claims.held_records_between, self.environment, stream_key),
                                     partial(claims.held_records, self.environment)):
                for held in part:
                    if held.record.id in wanted:
                        self.known[held.record.id] = held
                        self.passing[held.record.id] = Passing.of(held)

    def _ranged(self, ids: Sequence[int], by_range: Callable[[int, int], V],
                by_keys: Callable[[list[int]], V]) -> list[V]:
        """Read ids as dense runs by range and the rest by key (IDS_PER_READ at a time), READ_THREADS
        reads in flight: a run's matches and an import's records have ids one after the other, and a
        range costs a fraction of reading each id by key."""
        runs, rest = dense_runs(ids, min_run=self.bounds.dense_run, per_range=self.bounds.range_ids)
        reads: list[Callable[[], V]] = [partial(by_range, low, high) for low, high in runs]
        reads += [partial(by_keys, list(rest[start:start + IDS_PER_READ]))
                  for start in range(0, len(rest), IDS_PER_READ)]
        return _each_in_parallel(lambda read: read(), reads)

    def _link(self, position: int) -> StoryLink:
        return next(link for link in self.story.links if link.position == position)

    def _hop_link(self, link: StoryLink) -> HopLink:
        reconciliation = self.reconciliations.get(link.reconciliation_id)
        return HopLink(id=link.id, position=link.position, role=link.role.value,
                       reconciliation_id=link.reconciliation_id,
                       reconciliation_name=reconciliation.name if reconciliation else "")


def _each_in_parallel(read: Callable[[K], V], items: Sequence[K]) -> list[V]:
    """`read` of each item, in order, READ_THREADS at a time (in this thread when there is one)."""
    if len(items) <= 1:
        return [read(item) for item in items]
    with ThreadPoolExecutor(min(READ_THREADS, len(items))) as pool:
        return list(pool.map(read, items))
