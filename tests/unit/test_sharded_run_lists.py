"""The lists a run's persist writes into are sharded: no partition key takes more than 1/16 of a
run's claims (the matched records' status list, gsi4) or of its match items (the
reconciliation's match list, gsi1), so a run is not held to one partition's 1,000 writes a second."""
from collections import Counter

from chalicelib.adapters.dynamodb import keys

RECORDS = range(1_000_001, 1_020_001)  # a run's 20,000 matched records
MATCHES = range(500_001, 510_001)      # and its 10,000 matches


def test_a_runs_claims_spread_over_the_status_list_so_that_none_takes_more_than_a_sixteenth():
    # When every record of the run is claimed (reconciled, or partially)
    for status in ("reconciled", "partially_reconciled"):
        partitions = Counter(keys.record_indexes("acme", i, "bank", status)["gsi4pk"] for i in RECORDS)

        # Then no partition of the status list takes more than 1/16 of them, and a reader finds each
        assert max(partitions.values()) <= len(RECORDS) / 16
        assert set(partitions) <= set(keys.records_with_status_partitions("acme", status))


def test_a_runs_match_items_spread_over_the_match_list_so_that_none_takes_more_than_a_sixteenth():
    # When every match of the run is written
    partitions = Counter(keys.match_index("acme", 7, i)["gsi1pk"] for i in MATCHES)

    # Then no partition of the reconciliation's match list takes more than 1/16 of them
    assert max(partitions.values()) <= len(MATCHES) / 16
    assert set(partitions) <= set(keys.matches_of_reconciliation_partitions("acme", 7))


def test_the_lists_read_the_unsharded_partition_written_before_the_shards():
    assert keys.records_with_status_pk("acme", "reconciled") in keys.records_with_status_partitions("acme", "reconciled")
    assert keys.matches_of_reconciliation_pk("acme", 7) in keys.matches_of_reconciliation_partitions("acme", 7)
