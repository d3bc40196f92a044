"""Counters: one atomic count per (environment, entity)."""
from __future__ import annotations

from tests.contract.builders import ENV, OTHER_ENV


class TestCounters:
    def test_next_id_counts_up_from_one(self, counters):
        assert [counters.next_id(ENV, "run") for _ in range(3)] == [1, 2, 3]

    def test_each_environment_and_entity_counts_alone(self, counters):
        counters.next_id(ENV, "run")
        counters.next_id(ENV, "run")
        assert counters.next_id(ENV, "data_stream") == 1
        assert counters.next_id(OTHER_ENV, "run") == 1
        assert counters.next_id(ENV, "run") == 3

    def test_next_ids_reserves_a_block_after_the_last_id(self, counters):
        assert counters.next_id(ENV, "record") == 1
        assert counters.next_ids(ENV, "record", 3) == range(2, 5)
        assert counters.next_id(ENV, "record") == 5

    def test_next_ids_of_a_new_counter_starts_at_one(self, counters):
        assert list(counters.next_ids(ENV, "match", 4)) == [1, 2, 3, 4]

    def test_blocks_follow_each_other(self, counters):
        assert counters.next_ids(ENV, "match", 2) == range(1, 3)
        assert counters.next_ids(ENV, "match", 3) == range(3, 6)
        assert counters.next_ids(OTHER_ENV, "match", 1) == range(1, 2)
