"""No partition of the open-records index takes more than its share of a stream's records."""
from collections import Counter
from datetime import UTC, datetime

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.records import RecordRepository
from chalicelib.domain.records import Direction, Record, RecordStatus


def test_a_streams_new_records_spread_evenly_over_sixteen_open_index_partitions():
    # Given a stream's records as ingestion writes them
    items = [RecordRepository.to_item(Record("acme", record_id, "bank", 1, "2026-11-02", 100, Direction.CREDIT,
                                             "USD", 2, RecordStatus.UNRECONCILED, datetime(2026, 11, 2, tzinfo=UTC)))
             for record_id in range(1, 16_001)]

    # When their open-index partitions are counted
    partitions = Counter(item["gsi5pk"] for item in items)

    # Then there are sixteen, none over a sixteenth, all among those the readers read
    assert len(partitions) == keys.OPEN_RECORD_SHARDS == 16
    assert max(partitions.values()) <= len(items) / 16
    assert set(partitions) < set(keys.open_records_of_stream_partitions("acme", "bank"))
