"""Reconciliation stories: reconciliations chained in order so that money can be followed end to
end. The chain's rules (positions, roles, the shared data stream of each continuation) and the
rule about the usage items that keep a story's reconciliations and shared streams from being
deleted."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from chalicelib.domain.data_streams import DataStream
from chalicelib.domain.errors import FieldError, ValidationFailed
from chalicelib.domain.reconciliations import STALE_USAGE_AGE, Reconciliation

MAX_LINKS = 20


class LinkRole(StrEnum):
    ORIGIN = "origin"
    CONTINUATION = "continuation"


@dataclass(frozen=True)
class LinkInput:
    """A link as a client gave it; `index` is its place in the body (errors name `links[index]`)."""
    index: int
    reconciliation_id: int
    position: int
    shared_data_stream_id: int | None = None
    role: LinkRole | None = None


@dataclass(frozen=True)
class StoryLink:
    id: int
    position: int
    role: LinkRole
    reconciliation_id: int
    # The stream's key (immutable) finds it; its id is what the API shows. None on the origin.
    shared_stream_key: str | None = None
    shared_stream_id: int | None = None


@dataclass(frozen=True)
class Story:
    environment: str
    id: int
    name: str
    links: tuple[StoryLink, ...]
    created_at: datetime
    updated_at: datetime
    version: int = 1

    @property
    def reconciliation_ids(self) -> tuple[int, ...]:
        return tuple(link.reconciliation_id for link in self.links)

    @property
    def shared_stream_keys(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(link.shared_stream_key for link in self.links if link.shared_stream_key))

    def uses_reconciliation(self, reconciliation_id: int) -> bool:
        return reconciliation_id in self.reconciliation_ids

    def shares_stream(self, stream_key: str) -> bool:
        return stream_key in self.shared_stream_keys

    def changed(self, now: datetime, *, name: str | None = None,
                links: tuple[StoryLink, ...] | None = None) -> Story:
        """This story with a PATCH applied (None leaves a field unchanged)."""
        return replace(self, name=self.name if name is None else name, links=self.links if links is None else links,
                       updated_at=now, version=self.version + 1)


@dataclass(frozen=True)
class StoryUser:
    """A story that holds a reconciliation or a data stream (its name is None while its write is in flight)."""
    story_id: int
    name: str | None

    def __str__(self) -> str:
        return f"story {self.story_id}" + (f" ('{self.name}')" if self.name else " (being saved)")


def check_chain(links: Sequence[LinkInput]) -> list[LinkInput]:
    """The links in chain order, once their shape is right: at least one, positions 1..n each once,
    the first the origin without a shared stream, every other a continuation with one, no
    reconciliation twice."""
    errors: list[FieldError] = []
    if not links:
        raise ValidationFailed.on("links", "must hold at least one link")
    if len(links) > MAX_LINKS:
        raise ValidationFailed.on("links", f"must hold at most {MAX_LINKS} links")
    seen_positions: dict[int, int] = {}
    for link in links:
        field = f"links[{link.index}]"
        if not 1 <= link.position <= len(links):
            errors.append(FieldError(f"{field}.position",
                                     f"must be between 1 and {len(links)}: positions are 1-based and dense"))
        elif link.position in seen_positions:
            errors.append(FieldError(f"{field}.position", f"{link.position} is also the position of "
                                                          f"links[{seen_positions[link.position]}]"))
        else:
            seen_positions[link.position] = link.index
    seen_reconciliations: dict[int, int] = {}
    for link in links:
        field = f"links[{link.index}]"
        if link.reconciliation_id in seen_reconciliations:
            errors.append(FieldError(f"{field}.reconciliation_id",
                                     f"reconciliation {link.reconciliation_id} is already in the story "
                                     f"(links[{seen_reconciliations[link.reconciliation_id]}]); "
                                     "a reconciliation appears at most once"))
        else:
            seen_reconciliations[link.reconciliation_id] = link.index
        if link.position == 1:
            if link.role not in (None, LinkRole.ORIGIN):
                errors.append(FieldError(f"{field}.role", "the first link's role is 'origin'"))
            if link.shared_data_stream_id is not None:
                errors.append(FieldError(f"{field}.shared_data_stream_id",
                                         "the origin (position 1) has no shared data stream"))
        else:
            if link.role not in (None, LinkRole.CONTINUATION):
                errors.append(FieldError(f"{field}.role", "only the first link is the 'origin'; "
                                                          "every other link is a 'continuation'"))
            if link.shared_data_stream_id is None:
                errors.append(FieldError(f"{field}.shared_data_stream_id",
                                         "is required: the data stream this link shares with the previous one"))
    if errors:
        raise ValidationFailed(errors)
    return sorted(links, key=lambda link: link.position)


def resolve_chain(ordered: Sequence[LinkInput], reconciliations: Mapping[int, Reconciliation],
                  streams: Mapping[str, DataStream], link_ids: Sequence[int]) -> tuple[StoryLink, ...]:
    """The stored links of a chain already in order (check_chain): every reconciliation must exist,
    and each continuation's shared stream must be used by its reconciliation and the previous
    one (on either side). `streams` holds the visible streams of those reconciliations, by key."""
    errors: list[FieldError] = []
    by_id = {s.id: s for s in streams.values()}
    links: list[StoryLink] = []
    previous: Reconciliation | None = None
    for link, link_id in zip(ordered, link_ids, strict=True):
        field = f"links[{link.index}]"
        reconciliation = reconciliations.get(link.reconciliation_id)
        if reconciliation is None:
            errors.append(FieldError(f"{field}.reconciliation_id", f"no reconciliation {link.reconciliation_id}"))
        stream: DataStream | None = None
        if link.shared_data_stream_id is not None:
            stream = by_id.get(link.shared_data_stream_id)
            users = [r for r in (previous, reconciliation) if r is not None]
            if stream is None or not all(r.uses(stream.key) for r in users):
                errors.append(FieldError(
                    f"{field}.shared_data_stream_id",
                    f"data stream {link.shared_data_stream_id} is not used by both reconciliation "
                    f"{link.reconciliation_id} and the previous link's reconciliation "
                    f"{ordered[link.position - 2].reconciliation_id}"))
        links.append(StoryLink(
            id=link_id, position=link.position, role=LinkRole.ORIGIN if link.position == 1 else LinkRole.CONTINUATION,
            reconciliation_id=link.reconciliation_id, shared_stream_key=stream.key if stream else None,
            shared_stream_id=stream.id if stream else None))
        previous = reconciliation
    if errors:
        raise ValidationFailed(errors)
    return tuple(links)


def usage_holds(story: Story | None, in_use: bool, written_at: datetime, now: datetime) -> bool:
    """Whether a story's usage item still keeps its reconciliation or stream from being deleted.

    It does while the story uses it (`in_use`). A usage whose story is missing or no longer uses
    it is either in flight (a save writes its usages first) or left by a crash: it holds only while
    younger than STALE_USAGE_AGE, so a crash never blocks a delete for ever.
    """
    if story is not None and in_use:
        return True
    return now - written_at < STALE_USAGE_AGE
