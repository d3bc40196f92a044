"""Data streams: unique keys, newest-first pages, versioned saves, counts and recount requests."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain.data_streams import StreamType
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from tests.contract.builders import ENV, OTHER_ENV, T0, T0_MS, stream


class TestDataStreamRepository:
    def test_add_then_get_reads_what_was_stored(self, data_streams):
        added = stream(3, "bank", description="Main account", bank_account_id="acc-1", program_id=9,
                       records_count=12)
        data_streams.add(added)
        assert data_streams.get(ENV, "bank") == replace(added, created_at=T0_MS)
        assert data_streams.next_id(ENV) == 1

    def test_a_key_is_unique_in_its_environment(self, data_streams):
        data_streams.add(stream(1, "bank"))
        with pytest.raises(Conflict):
            data_streams.add(stream(2, "bank"))
        data_streams.add(stream(2, "bank", environment=OTHER_ENV))
        assert data_streams.get(ENV, "bank").id == 1
        assert data_streams.get(OTHER_ENV, "bank").id == 2

    def test_a_stream_is_found_by_its_id_in_its_environment_while_visible(self, data_streams):
        data_streams.add(stream(3, "bank"))
        data_streams.add(stream(3, "bank", environment=OTHER_ENV))
        data_streams.add(stream(4, "ledger"))
        assert data_streams.find_by_id(ENV, 3).key == "bank" and data_streams.find_by_id(ENV, 5) is None
        data_streams.mark_deleting(ENV, "bank")
        assert data_streams.find_by_id(ENV, 3) is None
        assert data_streams.find_by_id(OTHER_ENV, 3).environment == OTHER_ENV

    def test_missing_and_impossible_keys(self, data_streams):
        with pytest.raises(NotFound):
            data_streams.get(ENV, "nothing")
        assert data_streams.find_including_deleting(ENV, "nothing") is None
        assert data_streams.find_including_deleting(ENV, "Not A Key!") is None

    def test_list_page_is_newest_first_with_a_cursor_while_more_follow(self, data_streams):
        for stream_id in (2, 5, 1, 4, 3):
            data_streams.add(stream(stream_id))
        data_streams.add(stream(9, environment=OTHER_ENV))
        pages, cursor = [], None
        while True:
            items, cursor = data_streams.list_page(ENV, 2, cursor)
            pages.append([s.id for s in items])
            if cursor is None:
                break
        assert pages == [[5, 4], [3, 2], [1]]
        items, cursor = data_streams.list_page(ENV, 5, None)
        assert ([s.id for s in items], cursor) == ([5, 4, 3, 2, 1], None)

    def test_a_cursor_resumes_after_its_item_even_when_newer_ones_arrived(self, data_streams):
        for stream_id in (1, 2, 3):
            data_streams.add(stream(stream_id))
        _, cursor = data_streams.list_page(ENV, 1, None)
        data_streams.add(stream(4))
        items, cursor = data_streams.list_page(ENV, 1, cursor)
        assert [s.id for s in items] == [2]
        assert cursor is not None

    def test_a_cursor_of_another_list_or_garbage_is_a_bad_request(self, data_streams):
        for stream_id in (1, 2):
            data_streams.add(stream(stream_id))
            data_streams.add(stream(stream_id, environment=OTHER_ENV))
        _, cursor = data_streams.list_page(OTHER_ENV, 1, None)
        with pytest.raises(BadRequest):
            data_streams.list_page(ENV, 1, cursor)
        with pytest.raises(BadRequest):
            data_streams.list_page(ENV, 1, "not-a-cursor")

    def test_a_stream_being_deleted_is_hidden_but_still_listed(self, data_streams):
        data_streams.add(stream(1, "bank"))
        data_streams.add(stream(2, "ledger"))
        data_streams.mark_deleting(ENV, "bank")
        data_streams.mark_deleting(ENV, "bank")  # again: allowed
        with pytest.raises(NotFound):
            data_streams.get(ENV, "bank")
        assert data_streams.find_including_deleting(ENV, "bank").deleting
        assert list(data_streams.get_many(ENV, ["bank", "ledger"])) == ["ledger"]
        assert [(s.key, s.deleting) for s in data_streams.list_page(ENV, 10, None)[0]] == [
            ("ledger", False), ("bank", True)]
        with pytest.raises(NotFound):
            data_streams.mark_deleting(ENV, "nothing")

    def test_get_many_skips_missing_impossible_and_repeated_keys(self, data_streams):
        data_streams.add(stream(1, "bank"))
        data_streams.add(stream(2, "ledger"))
        found = data_streams.get_many(ENV, ["ledger", "bank", "ledger", "missing", "NOT VALID"])
        assert sorted(found) == ["bank", "ledger"]
        assert found["ledger"].id == 2

    def test_save_needs_the_next_version_and_keeps_other_fields(self, data_streams):
        data_streams.add(stream(1, "bank", description="old", records_count=7))
        current = data_streams.get(ENV, "bank")
        data_streams.save(current.renamed("Bank", None, description_given=True))
        saved = data_streams.get(ENV, "bank")
        assert (saved.name, saved.description, saved.version, saved.records_count) == ("Bank", None, 2, 7)
        with pytest.raises(Conflict):
            data_streams.save(current.renamed("Stale", None, description_given=False))  # version 2 again
        with pytest.raises(Conflict):
            data_streams.save(stream(5, "nothing", version=2))
        data_streams.mark_deleting(ENV, "bank")
        with pytest.raises(Conflict):
            data_streams.save(saved.renamed("Late", None, description_given=False))

    def test_a_records_count_from_an_older_recount_is_refused(self, data_streams):
        data_streams.add(stream(1, "bank"))
        assert data_streams.set_records_count(ENV, "bank", 10, T0)
        assert not data_streams.set_records_count(ENV, "bank", 5, T0 - timedelta(seconds=1))
        # Within the same millisecond as the stored one: not later, so refused.
        assert not data_streams.set_records_count(ENV, "bank", 6, T0.replace(microsecond=987999))
        assert data_streams.set_records_count(ENV, "bank", 12, T0 + timedelta(seconds=1))
        assert data_streams.get(ENV, "bank").records_count == 12
        assert not data_streams.set_records_count(ENV, "missing", 1, T0)

    def test_recount_requests_of_every_environment_until_answered(self, data_streams):
        for environment, key in ((OTHER_ENV, "b"), (ENV, "z"), (ENV, "a")):
            data_streams.add(stream(1, key, environment=environment))
            data_streams.request_recount(environment, key, T0)
        data_streams.request_recount(ENV, "missing", T0)  # ignored
        assert data_streams.recount_requests() == [(ENV, "a"), (ENV, "z"), (OTHER_ENV, "b")]
        data_streams.request_recount(ENV, "a", T0 + timedelta(seconds=5))  # a later request
        data_streams.clear_recount_request(ENV, "a", T0 + timedelta(seconds=1))  # answers the first only
        data_streams.clear_recount_request(ENV, "z", T0)
        data_streams.clear_recount_request(ENV, "missing", T0)
        assert data_streams.recount_requests() == [(ENV, "a"), (OTHER_ENV, "b")]

    def test_the_blocks_of_a_streams_changed_records_are_noted_in_its_environment(self, data_streams):
        for environment, key in ((ENV, "bank"), (ENV, "ledger"), (OTHER_ENV, "bank")):
            data_streams.add(stream(1, key, environment=environment))
        assert data_streams.changed_since_import(ENV, "bank") == frozenset()

        data_streams.note_records_changed(ENV, {"bank": [5, 16_390, 7], "missing": [1], "no such key!": [1]})
        data_streams.note_records_changed(ENV, {"bank": [16_384, 40_000]})  # a block noted already, and one more
        assert data_streams.changed_since_import(ENV, "bank") == {0, 1, 2}
        assert data_streams.changed_since_import(ENV, "ledger") == frozenset()
        assert data_streams.changed_since_import(OTHER_ENV, "bank") == frozenset()
        assert data_streams.find_including_deleting(ENV, "missing") is None  # no stream made by the change

        data_streams.save(data_streams.get(ENV, "bank").renamed("Bank", None, description_given=False))
        assert data_streams.changed_since_import(ENV, "bank") == {0, 1, 2}  # a save keeps them
        data_streams.mark_deleting(ENV, "ledger")
        assert data_streams.changed_since_import(ENV, "ledger") is None
        assert data_streams.changed_since_import(ENV, "x") is None

        # A stream of the same key made after a delete starts with none
        data_streams.remove(ENV, "bank")
        data_streams.add(stream(2, "bank"))
        assert data_streams.changed_since_import(ENV, "bank") == frozenset()

    def test_a_stream_made_where_blocks_are_not_noted_is_as_imported_until_its_first_change(self, backend):
        # (a deployed stage, while functions of a release before the blocks may run: settings.note_changed_blocks)
        data_streams = backend.data_streams_noting_no_blocks()
        data_streams.add(stream(1, "bank"))
        assert data_streams.changed_since_import(ENV, "bank") == frozenset()  # nothing changed: the mirror's whole

        data_streams.note_records_changed(ENV, {"bank": [5]})
        assert data_streams.changed_since_import(ENV, "bank") is None  # changed, and where is not known

    def test_a_stream_made_before_the_blocks_is_noted_from_a_mark_and_trusted_once_its_past_is(self, backend):
        # Given a stream of a deployed stage made before blocks were noted, whose records changed since
        data_streams = backend.data_streams_noting_no_blocks()
        for environment, key in ((ENV, "bank"), (ENV, "ledger"), (OTHER_ENV, "bank")):
            data_streams.add(stream(1, key, environment=environment))
        data_streams.note_records_changed(ENV, {"bank": [5]})  # where: not known
        assert data_streams.changed_since_import(ENV, "bank") is None

        # When its noting begins, a change after it is noted, but nothing is trusted yet
        began = data_streams.begin_noting_changes(ENV, "bank", T0)
        assert began == T0_MS  # (stored to the millisecond)
        assert data_streams.begin_noting_changes(ENV, "bank", T0 + timedelta(minutes=1)) == T0_MS  # the first mark's
        data_streams.note_records_changed(ENV, {"bank": [40_000]})
        assert data_streams.changed_since_import(ENV, "bank") is None

        # Then the blocks its past changed, found later, are trusted with those noted meanwhile
        assert not data_streams.finish_noting_changes(ENV, "bank", T0 + timedelta(minutes=1), [0])  # not its mark
        assert data_streams.finish_noting_changes(ENV, "bank", began, [0])
        assert data_streams.changed_since_import(ENV, "bank") == {0, 2}
        assert data_streams.begin_noting_changes(ENV, "bank", T0) is None  # noted already
        # And no other stream is touched
        assert data_streams.changed_since_import(ENV, "ledger") == frozenset()
        assert data_streams.changed_since_import(OTHER_ENV, "bank") == frozenset()

    def test_a_stream_being_deleted_is_not_marked_for_noting_nor_trusted(self, backend):
        data_streams = backend.data_streams_noting_no_blocks()
        for key in ("bank", "ledger"):
            data_streams.add(stream(1, key))
        began = data_streams.begin_noting_changes(ENV, "ledger", T0)
        data_streams.mark_deleting(ENV, "bank")
        data_streams.mark_deleting(ENV, "ledger")
        assert data_streams.begin_noting_changes(ENV, "bank", T0) is None
        assert data_streams.begin_noting_changes(ENV, "missing", T0) is None
        assert began is not None and not data_streams.finish_noting_changes(ENV, "ledger", began, [1])
        assert data_streams.changed_since_import(ENV, "ledger") is None

    def test_remove_deletes_and_may_repeat(self, data_streams):
        data_streams.add(stream(1, "bank"))
        data_streams.remove(ENV, "bank")
        data_streams.remove(ENV, "bank")
        assert data_streams.find_including_deleting(ENV, "bank") is None
        assert data_streams.list_page(ENV, 10, None) == ([], None)


class TestBankAccountGuard:
    """One bank_feed stream per bank account (as statements are routed: compared normalised)."""

    def feed(self, stream_id: int, key: str, account: str, environment: str = ENV):
        return stream(stream_id, key, environment=environment, type=StreamType.BANK_FEED, bank_account_id=account)

    def test_a_second_bank_feed_of_an_account_is_refused_naming_the_stream_that_holds_it(self, data_streams):
        # Given a bank_feed stream holding an account
        data_streams.add(self.feed(1, "main", "DE89 3704 0044 0532 0130 00"))
        # When another claims the same account, written another way
        with pytest.raises(Conflict, match="'main'"):
            data_streams.add(self.feed(2, "copy", "de89370400440532013000"))
        # Then it was not written; other accounts and other environments are free
        assert data_streams.find_including_deleting(ENV, "copy") is None
        data_streams.add(self.feed(3, "other", "DE02 1203 0000 0000 2020 51"))
        data_streams.add(self.feed(4, "main", "DE89 3704 0044 0532 0130 00", environment=OTHER_ENV))

    def test_racing_creates_of_one_account_leave_one_winner(self, data_streams):
        # Given eight creates of streams claiming one account at once
        def create(n: int) -> bool:
            try:
                data_streams.add(self.feed(n, f"feed-{n}", "acct-7"))
            except Conflict:
                return False
            return True

        with ThreadPoolExecutor(8) as pool:
            won = list(pool.map(create, range(1, 9)))
        # Then exactly one was written
        assert won.count(True) == 1
        assert [s.key for s in data_streams.bank_feeds(ENV)] == [f"feed-{won.index(True) + 1}"]

    def test_a_stream_with_a_taken_key_frees_the_account_it_claimed(self, data_streams):
        data_streams.add(self.feed(1, "main", "acct-1"))
        with pytest.raises(Conflict):
            data_streams.add(self.feed(2, "main", "acct-2"))  # the key is taken
        data_streams.add(self.feed(3, "other", "acct-2"))  # so acct-2 was left free

    def test_changing_a_streams_account_moves_its_claim(self, data_streams):
        # Given two bank_feed streams
        data_streams.add(self.feed(1, "main", "acct-1"))
        data_streams.add(self.feed(2, "spare", "acct-2"))
        main = data_streams.get(ENV, "main")
        # When one moves onto the other's account, it is refused
        with pytest.raises(Conflict, match="'spare'"):
            data_streams.save(replace(main, bank_account_id="ACCT-2", version=2), previous=main)
        assert data_streams.get(ENV, "main").bank_account_id == "acct-1"
        # When it moves to a free account, its old one is free and the new one held
        data_streams.save(replace(main, bank_account_id="acct-3", version=2), previous=main)
        assert data_streams.get(ENV, "main").bank_account_id == "acct-3"
        data_streams.add(self.feed(3, "reuse", "acct-1"))
        with pytest.raises(Conflict, match="'main'"):
            data_streams.add(self.feed(4, "late", "acct-3"))

    def test_removing_a_stream_frees_its_account(self, data_streams):
        data_streams.add(self.feed(1, "main", "acct-1"))
        data_streams.mark_deleting(ENV, "main")
        with pytest.raises(Conflict, match="'main'"):  # still held while its delete goes on
            data_streams.add(self.feed(2, "next", "acct-1"))
        data_streams.remove(ENV, "main")
        data_streams.add(self.feed(3, "next", "acct-1"))
        assert [s.key for s in data_streams.bank_feeds(ENV)] == ["next"]
