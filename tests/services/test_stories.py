"""Story use cases (services/stories.py) on the fakes: the races with the deletes of what a story chains."""
import pytest

from chalicelib.domain.errors import Conflict, NotFound, ValidationFailed
from chalicelib.domain.stories import LinkInput
from chalicelib.services import stories
from chalicelib.services.data_streams import delete_stream
from chalicelib.services.reconciliations import delete_reconciliation
from tests.services.conftest import ENV, new_reconciliation, streams


def test_a_story_held_before_a_reconciliation_delete_marks_it_refuses_the_delete(ports):
    streams(ports, "bank", "ledger")
    recon = new_reconciliation(ports)
    links = [LinkInput(index=0, reconciliation_id=recon.id, position=1)]
    # The save has held the reconciliation but not written the story yet: the delete still refuses.
    pending = stories.create_story(ports, ENV, name="S", links=links)
    ports.stories.remove(pending)
    ports.stories.hold(pending)
    with pytest.raises(Conflict, match="being saved"):
        delete_reconciliation(ports, ENV, recon.id)
    assert ports.reconciliations.get(ENV, recon.id).deleting is False  # the mark was taken back


def test_a_story_saved_after_the_delete_marked_the_reconciliation_is_refused(ports):
    streams(ports, "bank", "ledger")
    recon = new_reconciliation(ports)
    ports.reconciliations.mark_deleting(ENV, recon.id)
    with pytest.raises(ValidationFailed) as refused:
        stories.create_story(ports, ENV, name="S", links=[LinkInput(index=0, reconciliation_id=recon.id,
                                                                      position=1)])
    assert refused.value.errors[0].field == "links[0].reconciliation_id"
    assert ports.stories.users_of_reconciliation(ENV, recon.id) == []  # nothing held


def test_a_stream_delete_refused_by_a_story_takes_its_mark_back(ports):
    streams(ports, "bank", "ledger", "psp")
    first = new_reconciliation(ports)
    ledger = ports.data_streams.get(ENV, "ledger")
    second = new_reconciliation(ports, name="Second")
    ports.reconciliations.save(second.changed(second.updated_at, side_a=["ledger"], side_b=["psp"]),
                               previous=second)
    story = stories.create_story(ports, ENV, name="S", links=[
        LinkInput(index=0, reconciliation_id=first.id, position=1),
        LinkInput(index=1, reconciliation_id=second.id, position=2, shared_data_stream_id=ledger.id)])
    for reconciliation in (first, ports.reconciliations.get(ENV, second.id)):
        ports.reconciliations.save(reconciliation.changed(reconciliation.updated_at, side_a=["bank"], side_b=["psp"]),
                                   previous=reconciliation)
    with pytest.raises(Conflict, match=f"story {story.id}"):
        delete_stream(ports, ENV, "ledger")
    assert ports.data_streams.get(ENV, "ledger").deleting is False


def test_an_edit_that_lost_the_race_keeps_what_the_winning_edit_holds(ports):
    streams(ports, "bank", "ledger")
    first = new_reconciliation(ports)
    second = new_reconciliation(ports, name="Second")
    story = stories.create_story(ports, ENV, name="S", links=[LinkInput(index=0, reconciliation_id=first.id,
                                                                          position=1)])
    both = [LinkInput(index=0, reconciliation_id=second.id, position=1)]
    stale = ports.stories.get(ENV, story.id)
    stories.update_story(ports, ENV, story.id, links=both)  # edit A wins, holding `second` at version 2
    reads = [stale]  # edit B read the story before A saved; what it reads after is the stored story
    get = ports.stories.get
    ports.stories.get = lambda environment, story_id: reads.pop() if reads else get(environment, story_id)
    with pytest.raises(Conflict):
        stories.update_story(ports, ENV, story.id, links=both)  # B holds `second` at version 2 too, then loses

    assert [u.story_id for u in ports.stories.users_of_reconciliation(ENV, second.id)] == [story.id]
    with pytest.raises(Conflict, match=f"story {story.id}"):
        delete_reconciliation(ports, ENV, second.id)


def test_a_delete_that_finds_another_confirmed_goes_on_rather_than_showing_it_again(ports):
    streams(ports, "bank", "ledger")
    recon = new_reconciliation(ports)
    saving = stories.create_story(ports, ENV, name="S", links=[LinkInput(index=0, reconciliation_id=recon.id,
                                                                         position=1)])
    ports.stories.remove(saving)  # a save still in flight: its usage held, its story not written
    ports.reconciliations.mark_deleting(ENV, recon.id)  # delete A had found no story, and is removing it
    ports.reconciliations.confirm_deleting(ENV, recon.id)
    ports.stories.hold(saving)

    delete_reconciliation(ports, ENV, recon.id)  # delete B (a retry) sees the save, yet goes on with A

    assert ports.reconciliations.find_including_deleting(ENV, recon.id) is None


def test_a_delete_that_read_the_story_before_an_edit_saved_frees_what_the_edit_holds(ports):
    streams(ports, "bank", "ledger")
    first = new_reconciliation(ports)
    second = new_reconciliation(ports, name="Second")
    story = stories.create_story(ports, ENV, name="S", links=[LinkInput(index=0, reconciliation_id=first.id,
                                                                          position=1)])
    remove = ports.stories.remove
    edits = [lambda: stories.update_story(ports, ENV, story.id, links=[
        LinkInput(index=0, reconciliation_id=second.id, position=1)])]

    def remove_after_an_edit(read):  # the PATCH saves between the delete's read and its write
        if edits:
            edits.pop()()
        remove(read)
    ports.stories.remove = remove_after_an_edit

    stories.delete_story(ports, ENV, story.id)

    with pytest.raises(NotFound):
        ports.stories.get(ENV, story.id)
    assert ports.stories.users_of_reconciliation(ENV, second.id) == []  # no orphan usage of the edit
    assert ports.stories.users_of_reconciliation(ENV, first.id) == []
    delete_reconciliation(ports, ENV, second.id)
    assert ports.reconciliations.find_including_deleting(ENV, second.id) is None
