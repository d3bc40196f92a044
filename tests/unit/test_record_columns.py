"""Record columns read from DynamoDB's typed values hold what the item deserializer would give."""
from chalicelib.adapters.dynamodb.record_columns import record_columns
from chalicelib.adapters.dynamodb.table import deserialize, serialize

ITEMS = [
    {"id": 12, "amount": -250075, "decimal_places": 2, "file_import_id": 3, "direction": "debit", "date": "2026-11-02",
     "currency": "USD", "description": "Payout 1", "external_id": "x-1", "data_stream_key": "bank",
     "status": "partially_reconciled", "matched_in": {4, 2}, "metadata": '{"ref":"a"}', "gsi5pk": "ignored"},
    {"id": 10 ** 15, "amount": 0, "decimal_places": 0, "direction": "credit", "date": "2026-01-31", "currency": "JPY",
     "data_stream_key": "ledger", "status": "unreconciled"},
]


def test_each_attribute_becomes_a_column_with_the_values_the_deserializer_reads():
    typed = [serialize(item) for item in ITEMS]
    typed[1]["description"] = {"NULL": True}  # written as NULL rather than left out

    columns = record_columns(typed, with_metadata=True)

    plain = [deserialize(item) for item in typed]
    for name in ("id", "amount", "decimal_places", "file_import_id", "direction", "date", "currency", "description",
                 "external_id", "data_stream_key", "status", "metadata"):
        assert columns[name] == [item.get(name) for item in plain], name
    assert columns["matched_in"] == [[2, 4], []]
    assert "gsi5pk" not in columns


def test_metadata_is_read_only_when_asked_for():
    assert "metadata" not in record_columns([serialize(ITEMS[0])])


def test_an_empty_page_gives_empty_columns():
    assert set(map(len, record_columns([]).values())) == {0}


def test_the_columns_a_run_reads_are_all_held_by_the_open_records_index():
    from chalicelib.adapters.dynamodb.record_columns import record_attributes
    from chalicelib.adapters.dynamodb.records import OPEN_RECORD_ATTRIBUTES

    assert set(record_attributes(with_metadata=True)) <= set(OPEN_RECORD_ATTRIBUTES)
