"""The ranges of a stream's guarded external_ids: none for a stream that keeps none, empty once
tracked, widened by the writer lease's holder only on a stream that keeps them."""
from tests.contract.builders import ENV, OTHER_ENV


def test_ranges_are_kept_only_for_a_tracked_stream_and_tracking_again_keeps_them(records):
    assert records.external_id_ranges(ENV, "bank") is None
    records.put_external_id_ranges(ENV, "bank", [("a", "b")])  # not tracked: nothing kept
    assert records.external_id_ranges(ENV, "bank") is None

    records.track_external_ids(ENV, "bank")
    assert records.external_id_ranges(ENV, "bank") == []
    records.put_external_id_ranges(ENV, "bank", [("pay-1", "pay-3"), ("zz", "zz")])
    records.track_external_ids(ENV, "bank")  # a stream of the same key created again: they stay

    assert records.external_id_ranges(ENV, "bank") == [("pay-1", "pay-3"), ("zz", "zz")]
    assert records.external_id_ranges(ENV, "ledger") is None
    assert records.external_id_ranges(OTHER_ENV, "bank") is None
