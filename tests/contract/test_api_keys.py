"""API keys: stored by hash, listed by id, revoked once, touched at most once per resolution."""
from __future__ import annotations

from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb.table import ConditionFailed
from chalicelib.domain.errors import NotFound
from tests.contract.builders import ENV, OTHER_ENV, T0, T0_MS, api_key


class TestApiKeyRepository:
    def test_add_then_find_by_hash_reads_what_was_stored(self, api_keys):
        api_keys.add(api_key(4, label="ci", last_used_at=T0, revoked_at=T0))
        found = api_keys.find_by_hash("hash-4")
        # Use and revocation are never written by `add`; times come back to the millisecond.
        assert found == api_key(4, label="ci", created_at=T0_MS)
        assert found.active
        assert api_keys.find_by_hash("hash-unknown") is None

    def test_next_id_is_one_counter_for_every_environment(self, api_keys, counters):
        assert [api_keys.next_id(), api_keys.next_id()] == [1, 2]
        assert counters.next_id(ENV, "api_key") == 1  # not an environment's counter
        assert api_keys.next_id() == 3

    def test_list_is_every_key_by_id(self, api_keys):
        for key_id, environment in ((3, ENV), (1, OTHER_ENV), (2, ENV)):
            api_keys.add(api_key(key_id, environment))
        assert [(k.id, k.environment) for k in api_keys.list()] == [(1, OTHER_ENV), (2, ENV), (3, ENV)]

    def test_a_second_key_with_the_same_hash_is_refused(self, api_keys):
        api_keys.add(api_key(1))
        with pytest.raises(ConditionFailed):
            api_keys.add(api_key(2, key_hash="hash-1"))
        assert [k.id for k in api_keys.list()] == [1]

    def test_revoke_sets_the_time_once(self, api_keys, clock):
        api_keys.add(api_key(1))
        first = api_keys.revoke(1)
        assert first.revoked_at == clock.now.replace(microsecond=123000)
        assert not first.active
        clock.advance(minutes=5)
        assert api_keys.revoke(1).revoked_at == first.revoked_at
        assert api_keys.find_by_hash("hash-1").revoked_at == first.revoked_at

    def test_revoke_of_an_unknown_id_is_not_found(self, api_keys):
        api_keys.add(api_key(1))
        with pytest.raises(NotFound):
            api_keys.revoke(9)

    def test_touch_records_use_at_most_once_per_resolution(self, api_keys, clock):
        api_keys.add(api_key(1))
        resolution = timedelta(minutes=10)
        first_use = clock.now.replace(microsecond=123000)
        api_keys.touch(api_keys.find_by_hash("hash-1"), resolution)
        assert api_keys.find_by_hash("hash-1").last_used_at == first_use
        clock.advance(minutes=9)
        api_keys.touch(api_key(1), resolution)  # a caller holding a copy read before the first use
        assert api_keys.find_by_hash("hash-1").last_used_at == first_use
        clock.advance(minutes=2)
        api_keys.touch(api_keys.find_by_hash("hash-1"), resolution)
        assert api_keys.find_by_hash("hash-1").last_used_at == first_use + timedelta(minutes=11)

    def test_touch_of_a_key_not_stored_writes_nothing(self, api_keys):
        api_keys.touch(api_key(5), timedelta(minutes=1))
        assert api_keys.find_by_hash("hash-5") is None
        assert api_keys.list() == []
