"""Multi-item changes are ordered writes that a retry can finish after a crash part-way."""
from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb import keys, property_definitions
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.data_streams import PropertyType, StreamType
from chalicelib.domain.errors import Conflict
from chalicelib.services.data_streams import create_stream
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
