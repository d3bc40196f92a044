"""The ranges of a stream's guarded external_ids: none for a stream that keeps none, empty once
tracked, widened by the writer lease's holder only on a stream that keeps them, and only over the
ranges it read (another writer's widening is never lost)."""
from tests.contract.builders import ENV, OTHER_ENV


def test_ranges_are_kept_only_for_a_tracked_stream_and_tracking_again_keeps_them(records):
    assert records.external_id_ranges(ENV, "bank") is None
    assert records.put_external_id_ranges(ENV, "bank", [("a", "b")], [])  # not tracked: nothing kept
    assert records.external_id_ranges(ENV, "bank") is None

    records.track_external_ids(ENV, "bank")
    assert records.external_id_ranges(ENV, "bank") == []
    assert records.put_external_id_ranges(ENV, "bank", [("pay-1", "pay-3"), ("zz", "zz")], [])
    records.track_external_ids(ENV, "bank")  # a stream of the same key created again: they stay

    assert records.external_id_ranges(ENV, "bank") == [("pay-1", "pay-3"), ("zz", "zz")]
    assert records.external_id_ranges(ENV, "ledger") is None
    assert records.external_id_ranges(OTHER_ENV, "bank") is None


def test_a_widening_over_ranges_that_changed_since_they_were_read_is_refused(records):
    records.track_external_ids(ENV, "bank")
    read = records.external_id_ranges(ENV, "bank")
    assert records.put_external_id_ranges(ENV, "bank", [("a-1", "a-9")], read)  # one writer
    # Another, whose lease lapsed under it, read them before that write
    assert not records.put_external_id_ranges(ENV, "bank", [("b-1", "b-9")], read)
    assert records.external_id_ranges(ENV, "bank") == [("a-1", "a-9")]  # the first writer's stays
    assert records.put_external_id_ranges(ENV, "bank", [("a-1", "a-9"), ("b-1", "b-9")], [("a-1", "a-9")])
    assert records.external_id_ranges(ENV, "bank") == [("a-1", "a-9"), ("b-1", "b-9")]
