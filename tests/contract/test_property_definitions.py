"""Property definitions: a key once per stream (a guard), lists by stream, stale guards reclaimed."""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.data_streams import PropertyType
from chalicelib.domain.errors import Conflict, NotFound
from tests.contract.builders import ENV, OTHER_ENV, T0_MS, definition


class TestPropertyDefinitionRepository:
    def test_add_then_get(self, property_definitions):
        added = definition(4, "ref", "bank", type=PropertyType.NUMBER, optional=False)
        property_definitions.add(added)
        assert property_definitions.get(ENV, 4) == replace(added, created_at=T0_MS)
        with pytest.raises(NotFound):
            property_definitions.get(OTHER_ENV, 4)
        assert property_definitions.next_id(ENV) == 1

    def test_a_key_is_taken_once_per_stream(self, property_definitions):
        property_definitions.add(definition(1, "ref", "bank"))
        with pytest.raises(Conflict):
            property_definitions.add(definition(2, "ref", "bank"))
        property_definitions.add(definition(3, "ref", "ledger"))
        property_definitions.add(definition(4, "ref", "bank", environment=OTHER_ENV))
        with pytest.raises(NotFound):
            property_definitions.get(ENV, 2)

    def test_list_orders_by_stream_key_then_id(self, property_definitions):
        for definition_id, key, stream_key in ((5, "a", "bank"), (2, "b", "bank"), (3, "a", "bank-eu"),
                                               (1, "a", "ledger"), (4, "c", "bank")):
            property_definitions.add(definition(definition_id, key, stream_key))
        property_definitions.add(definition(6, "a", "bank", environment=OTHER_ENV))
        assert [d.id for d in property_definitions.list(ENV)] == [2, 4, 5, 3, 1]
        assert [d.id for d in property_definitions.list(ENV, "bank")] == [2, 4, 5]  # not bank-eu's
        assert property_definitions.list(ENV, "nothing") == []
        assert property_definitions.list(ENV, "NOT A KEY") == []

    def test_remove_frees_the_key(self, property_definitions):
        property_definitions.add(definition(1, "ref", "bank"))
        property_definitions.remove(property_definitions.get(ENV, 1))
        with pytest.raises(NotFound):
            property_definitions.get(ENV, 1)
        property_definitions.add(definition(2, "ref", "bank"))
        assert [d.id for d in property_definitions.list(ENV, "bank")] == [2]

    def test_save_replaces_an_existing_definition_only(self, property_definitions):
        property_definitions.add(definition(1, "ref", "bank"))
        property_definitions.save(definition(1, "ref", "bank", name="Reference", optional=False))
        saved = property_definitions.get(ENV, 1)
        assert (saved.name, saved.optional) == ("Reference", False)
        with pytest.raises(NotFound):
            property_definitions.save(definition(2, "other", "bank"))

    def test_remove_all_of_stream_frees_every_key_of_that_stream_only(self, property_definitions):
        property_definitions.add(definition(1, "a", "bank"))
        property_definitions.add(definition(2, "b", "bank"))
        property_definitions.add(definition(3, "a", "ledger"))
        property_definitions.remove_all_of_stream(ENV, "bank")
        assert [d.id for d in property_definitions.list(ENV)] == [3]
        property_definitions.add(definition(4, "a", "bank"))
        with pytest.raises(Conflict):
            property_definitions.add(definition(5, "a", "ledger"))

    def test_a_guard_left_without_its_definition_is_reclaimed_once_stale(self, property_definitions, clock):
        property_definitions.add(definition(1, "ref", "bank"))
        # Removing a copy that names another key deletes the definition but leaves the "ref" guard.
        property_definitions.remove(definition(1, "other", "bank"))
        clock.advance(seconds=30)
        with pytest.raises(Conflict):
            property_definitions.add(definition(2, "ref", "bank"))
        clock.advance(seconds=31)
        property_definitions.add(definition(2, "ref", "bank"))
        assert property_definitions.get(ENV, 2).key == "ref"
