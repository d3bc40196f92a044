"""Multi-item changes are ordered writes that a retry can finish after a crash part-way."""
from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb import keys, property_definitions
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.data_streams import PropertyType, StreamType
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.services.data_streams import create_stream, delete_stream, recount_records, sweep_recounts
from chalicelib.services.property_definitions import create_definition


def _abandoned_guard(services, age: timedelta, definition_id: int = 999):
    """What a create leaves when it dies after reserving the key and before writing the definition."""
    services.table.put({**keys.property_key_guard("acme", "bank", "ref"), "entity": "property_key_guard",
                        "definition_id": definition_id, "created_at": iso(utc_now() - age)})


@pytest.fixture
def bank(services):
    return create_stream(services.data_streams, "acme", key="bank", name="Bank", type_=StreamType.API)


def _define(services):
    return create_definition(services.ports, "acme", key="ref", name="Ref", type_=PropertyType.STRING,
                             data_stream_key="bank", optional=False)


def test_a_stale_guard_left_by_a_crashed_create_is_reclaimed(services, bank):
    _abandoned_guard(services, age=property_definitions.STALE_GUARD_AGE + timedelta(seconds=5))
    definition = _define(services)
    assert services.property_definitions.get("acme", definition.id).key == "ref"


def test_a_young_guard_may_belong_to_a_create_in_flight_and_is_respected(services, bank):
    _abandoned_guard(services, age=timedelta(seconds=1))
    with pytest.raises(Conflict):
        _define(services)


def test_a_delete_that_crashed_part_way_is_finished_by_the_retry(services, bank):
    definition = _define(services)
    services.data_streams.mark_deleting("acme", "bank")  # the crash came right after this write
    with pytest.raises(NotFound):
        services.data_streams.get("acme", "bank")
    with pytest.raises(Conflict):
        create_stream(services.data_streams, "acme", key="bank", name="Too soon", type_=StreamType.API)
    delete_stream(services.ports, "acme", "bank")
    with pytest.raises(NotFound):
        services.property_definitions.get("acme", definition.id)
    assert services.data_streams.find_including_deleting("acme", "bank") is None


class _SlowMirror:
    """A mirror read that lasts while other writers act: `during` runs mid-count."""

    def __init__(self, mirror, count: int, during) -> None:
        self._mirror, self._count, self._during = mirror, count, during

    def count_records(self, environment, key):
        self._during()
        return self._count


def test_a_recount_that_began_earlier_never_overwrites_a_later_one(services, bank):
    later = utc_now() + timedelta(seconds=1)

    def a_later_recount_lands_first():
        assert services.data_streams.set_records_count("acme", "bank", 7, later)

    recount_records(replace(services.ports, mirror=_SlowMirror(services.mirror, 5, a_later_recount_lands_first)),
                    "acme", "bank")
    assert services.data_streams.get("acme", "bank").records_count == 7


def test_a_delete_asking_for_a_recount_while_one_reads_keeps_its_request(services, bank):
    def a_delete_asks_meanwhile():
        services.data_streams.request_recount("acme", "bank", utc_now() + timedelta(seconds=1))

    recount_records(replace(services.ports, mirror=_SlowMirror(services.mirror, 5, a_delete_asks_meanwhile)),
                    "acme", "bank")
    assert services.data_streams.recount_requests() == [("acme", "bank")]
    assert sweep_recounts(services.ports) == 1
    assert services.data_streams.get("acme", "bank").records_count == 0
    assert services.data_streams.recount_requests() == []


def test_a_recount_cut_short_is_finished_by_the_sweeper(services, bank):
    class Dies(_SlowMirror):
        def count_records(self, environment, key):
            raise RuntimeError("Lambda timed out")

    with pytest.raises(RuntimeError):
        recount_records(replace(services.ports, mirror=Dies(services.mirror, 0, None)), "acme", "bank")
    services.mirror.tombstone("acme", "bank", 4, 1)  # a tombstone of an import never published counts nothing
    assert sweep_recounts(services.ports) == 1
    assert services.data_streams.recount_requests() == []
