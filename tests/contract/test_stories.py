"""Reconciliation stories (links inside the story, usage items holding reconciliations and shared
streams) and the unmark that lets a refused delete take its mark back."""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.stories import LinkRole, Story, StoryLink, StoryUser
from tests.contract.builders import ENV, OTHER_ENV, T0, T0_MS, reconciliation, stream


def story(story_id: int, environment: str = ENV, version: int = 1) -> Story:
    return Story(environment=environment, id=story_id, name=f"Story {story_id}", created_at=T0, updated_at=T0,
                 version=version, links=(
                     StoryLink(id=11, position=1, role=LinkRole.ORIGIN, reconciliation_id=1),
                     StoryLink(id=12, position=2, role=LinkRole.CONTINUATION, reconciliation_id=2,
                               shared_stream_key="ledger", shared_stream_id=5)))


def test_add_get_list(stories):
    for story_id in (1, 2, 3):
        stories.add(story(story_id))
    assert stories.get(ENV, 2) == replace(story(2), created_at=T0_MS, updated_at=T0_MS)
    with pytest.raises(NotFound):
        stories.get(OTHER_ENV, 2)
    page, cursor = stories.list_page(ENV, 2, None)
    assert [s.id for s in page] == [3, 2]
    page, cursor2 = stories.list_page(ENV, 2, cursor)
    assert ([s.id for s in page], cursor2) == ([1], None)
    assert stories.list_page(OTHER_ENV, 2, None) == ([], None)
    with pytest.raises(BadRequest):
        stories.list_page(OTHER_ENV, 2, cursor)
    assert list(stories.next_link_ids(ENV, 3)) == [1, 2, 3]


def test_usages_hold_while_the_story_uses_them(stories, clock):
    held = story(1)
    stories.hold(held)
    # In flight (no story yet): holds while young.
    assert stories.users_of_reconciliation(ENV, 2) == [StoryUser(1, None)]
    stories.add(held)
    assert stories.users_of_reconciliation(ENV, 1) == [StoryUser(1, "Story 1")]
    assert stories.users_of_stream(ENV, "ledger") == [StoryUser(1, "Story 1")]
    assert stories.users_of_stream(ENV, "bank") == [] and stories.users_of_reconciliation(OTHER_ENV, 1) == []
    # An edit drops reconciliation 2 and the shared stream: their usages go.
    edited = held.changed(clock.now, name="Renamed", links=held.links[:1])
    stories.hold(edited)
    stories.save(edited, previous=stories.get(ENV, 1))
    assert stories.get(ENV, 1).name == "Renamed" and len(stories.get(ENV, 1).links) == 1
    assert stories.users_of_reconciliation(ENV, 2) == [] and stories.users_of_stream(ENV, "ledger") == []
    with pytest.raises(Conflict):
        stories.save(edited, previous=held)  # not one past the stored version any more
    stories.remove(stories.get(ENV, 1))
    assert stories.users_of_reconciliation(ENV, 1) == []
    with pytest.raises(NotFound):
        stories.remove(edited)


def test_remove_holds_only_for_the_version_read(stories, clock):
    stories.hold(story(1))
    stories.add(story(1))
    read = stories.get(ENV, 1)  # the delete reads the story...
    # ...and an edit that replaces the links with reconciliation 3 saves before the delete writes.
    edited = read.changed(clock.now, links=(StoryLink(id=13, position=1, role=LinkRole.ORIGIN, reconciliation_id=3),))
    stories.hold(edited)
    stories.save(edited, previous=stories.get(ENV, 1))
    with pytest.raises(Conflict):
        stories.remove(read)
    assert stories.get(ENV, 1).version == 2  # the story stays, and so do the usages it holds
    assert stories.users_of_reconciliation(ENV, 3) == [StoryUser(1, "Story 1")]
    stories.remove(stories.get(ENV, 1))  # read again: the delete goes through and frees the edit's usages
    with pytest.raises(NotFound):
        stories.get(ENV, 1)
    for reconciliation_id in (1, 2, 3):  # an orphan usage, young, would still hold (as story 1, being saved)
        assert stories.users_of_reconciliation(ENV, reconciliation_id) == []
    assert stories.users_of_stream(ENV, "ledger") == []


def test_a_usage_left_by_a_crash_stops_holding_once_stale(stories, clock):
    stories.hold(story(4))
    assert stories.users_of_stream(ENV, "ledger") == [StoryUser(4, None)]
    clock.advance(minutes=3)
    assert stories.users_of_stream(ENV, "ledger") == []


def test_release_keeps_what_the_stored_story_needs(stories):
    stored = story(1)
    stories.hold(stored)
    stories.add(stored)
    attempt = stored.changed(T0, links=stored.links[:1])
    stories.release(stored, keep=attempt)
    assert stories.users_of_reconciliation(ENV, 1) == [StoryUser(1, "Story 1")]
    assert stories.users_of_reconciliation(ENV, 2) == []


def test_unmark_deleting_shows_a_reconciliation_and_a_stream_again(reconciliations, data_streams):
    reconciliations.add(reconciliation(1))
    reconciliations.mark_deleting(ENV, 1)
    assert reconciliations.unmark_deleting(ENV, 1)
    assert reconciliations.get(ENV, 1).deleting is False
    assert [r.id for r in reconciliations.list_page(ENV, 5, None)[0]] == [1]
    assert not reconciliations.unmark_deleting(ENV, 1)  # not marked: nothing to take back
    assert not reconciliations.unmark_deleting(ENV, 9)  # gone: nothing
    data_streams.add(stream(1, "bank"))
    data_streams.mark_deleting(ENV, "bank")
    assert data_streams.unmark_deleting(ENV, "bank")
    assert data_streams.get(ENV, "bank").deleting is False
    assert not data_streams.unmark_deleting(ENV, "nope")


def test_a_confirmed_delete_mark_is_never_taken_back(reconciliations, data_streams):
    reconciliations.add(reconciliation(1))
    reconciliations.mark_deleting(ENV, 1)
    reconciliations.confirm_deleting(ENV, 1)
    assert reconciliations.mark_deleting(ENV, 1).deleting  # a second delete marks again: it stays confirmed
    assert not reconciliations.unmark_deleting(ENV, 1)
    assert reconciliations.find_including_deleting(ENV, 1).deleting
    reconciliations.confirm_deleting(ENV, 9)  # gone: nothing
    data_streams.add(stream(1, "bank"))
    data_streams.confirm_deleting(ENV, "bank")  # not marked: nothing to confirm
    assert data_streams.get(ENV, "bank").deleting is False
    data_streams.mark_deleting(ENV, "bank")
    data_streams.confirm_deleting(ENV, "bank")
    data_streams.mark_deleting(ENV, "bank")
    assert not data_streams.unmark_deleting(ENV, "bank")
    assert data_streams.find_including_deleting(ENV, "bank").deleting
