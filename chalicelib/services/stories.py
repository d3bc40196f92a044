"""Reconciliation story use cases: chain reconciliations, change the chain, delete it.

A save is race-safe against the deletes of what it chains: it holds (writes the usage items of)
every reconciliation and shared stream first, then reads and checks them, then writes the story.
A delete of a reconciliation or stream marks it `deleting` first and reads the usages after
(services/reconciliations.py, services/data_streams.py), so one of the two always sees the other.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

from chalicelib.domain.clock import utc_now
from chalicelib.domain.data_streams import DataStream
from chalicelib.domain.errors import Conflict, DomainError, NotFound
from chalicelib.domain.reconciliations import Reconciliation
from chalicelib.domain.stories import LinkInput, Story, StoryLink, StoryUser, check_chain, resolve_chain
from chalicelib.services import audit
from chalicelib.services.ports import Ports


def create_story(ports: Ports, environment: str, *, name: str, links: Sequence[LinkInput]) -> Story:
    chain = _chain(ports, environment, links)
    now = utc_now()
    story = Story(environment=environment, id=ports.stories.next_id(environment), name=name, links=chain,
                  created_at=now, updated_at=now)
    _held_and_checked(ports, story, links)
    ports.stories.add(story)
    return story


def update_story(ports: Ports, environment: str, story_id: int, *, name: str | None = None,
                 links: Sequence[LinkInput] | None = None) -> Story:
    """Apply a PATCH: `links`, when given, replaces the whole chain; otherwise only the name changes."""
    current = ports.stories.get(environment, story_id)
    chain = _chain(ports, environment, links) if links is not None else None
    updated = current.changed(utc_now(), name=name, links=chain)
    if links is not None:
        _held_and_checked(ports, updated, links)
    try:
        ports.stories.save(updated, previous=current)
    except DomainError:
        if links is not None:
            _release_unsaved(ports, updated)
        raise
    audit.note_change(current, updated)
    return updated


DELETE_ATTEMPTS = 5


def delete_story(ports: Ports, environment: str, story_id: int) -> None:
    """Remove the story as last read; an edit saved in between (a Conflict) means reading it again,
    so the usages released are those of the story actually deleted and none is left orphaned."""
    for attempt in range(DELETE_ATTEMPTS):
        try:
            ports.stories.remove(ports.stories.get(environment, story_id))
            return
        except Conflict:
            if attempt == DELETE_ATTEMPTS - 1:
                raise


def chained_reconciliations(ports: Ports, environment: str, ids: Iterable[int]) -> dict[int, Reconciliation]:
    """The reconciliations a story chains, as they are now, by id: one whose delete a story refused
    a moment ago may still be marked, and is read anyway."""
    wanted = set(ids)
    found = ports.reconciliations.visible(environment, wanted)
    for missing in wanted - set(found):
        reconciliation = ports.reconciliations.find_including_deleting(environment, missing)
        if reconciliation is not None:
            found[missing] = reconciliation
    return found


def chained_streams(ports: Ports, environment: str, keys: Iterable[str]) -> dict[str, DataStream]:
    """The data streams a story shows, as they are now, by key (read as `chained_reconciliations`)."""
    wanted = set(keys)
    found = ports.data_streams.get_many(environment, wanted)
    for missing in wanted - set(found):
        stream = ports.data_streams.find_including_deleting(environment, missing)
        if stream is not None:
            found[missing] = stream
    return found


def refuse_if_used(users: list[StoryUser], what: str) -> None:
    """409 naming the stories that hold a reconciliation or a data stream being deleted."""
    if users:
        raise Conflict(f"{what} is used by " + ", ".join(str(u) for u in users)
                       + "; remove it from the story first")


Key = TypeVar("Key", contravariant=True)


class DeletingMarks(Protocol[Key]):
    """The store of what a delete marks `deleting` before it reads the stories (data streams by
    key, reconciliations by id)."""
    def unmark_deleting(self, environment: str, key: Key, /) -> bool: ...
    def confirm_deleting(self, environment: str, key: Key, /) -> None: ...


def confirm_unless_in_a_story(marks: DeletingMarks[Key], environment: str, key: Key, users: list[StoryUser],
                              what: str) -> None:
    """A delete's step after its mark, given the stories that hold the item (read after the mark):
    with none, the mark is confirmed and no refused delete takes it back any more. With some, the
    mark is taken back and the delete refused (409), unless another delete confirmed it: that one
    is going on, and this one helps it."""
    if users and marks.unmark_deleting(environment, key):
        refuse_if_used(users, what)
    marks.confirm_deleting(environment, key)


def _chain(ports: Ports, environment: str, links: Sequence[LinkInput],
           link_ids: Sequence[int] | None = None) -> tuple[StoryLink, ...]:
    """The stored links of the chain the client gave, checked against what exists now (422 otherwise)."""
    ordered = check_chain(links)
    reconciliations = ports.reconciliations.visible(environment, [link.reconciliation_id for link in ordered])
    streams = ports.data_streams.get_many(environment, (k for r in reconciliations.values() for k in r.stream_keys))
    if link_ids is not None:
        return resolve_chain(ordered, reconciliations, streams, link_ids)
    # Ids are taken only for a chain that holds: a refused request uses up none.
    checked = resolve_chain(ordered, reconciliations, streams, [0] * len(ordered))
    ids = ports.stories.next_link_ids(environment, len(checked))
    return tuple(replace(link, id=link_id) for link, link_id in zip(checked, ids, strict=True))


def _held_and_checked(ports: Ports, story: Story, links: Sequence[LinkInput]) -> None:
    """Hold what the story chains, then check the chain again: a reconciliation or stream whose
    delete began meanwhile is no longer visible, and the save is refused (its usages released)."""
    ports.stories.hold(story)
    try:
        _chain(ports, story.environment, links, link_ids=[link.id for link in story.links])
    except DomainError:
        _release_unsaved(ports, story)
        raise


def _release_unsaved(ports: Ports, story: Story) -> None:
    """Drop the usages a save that did not happen held, but those the story as stored now needs:
    an edit that won meanwhile may have held the same ones at the same version."""
    try:
        stored: Story | None = ports.stories.get(story.environment, story.id)
    except NotFound:
        stored = None
    ports.stories.release(story, keep=stored)
