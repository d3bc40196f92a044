"""A partial rule in a run that fans out (services/run_partitions.py, services/partial_payments.py), on
the fakes, phase by phase: each partition allocates in the records' own minor units (kept beside the
engine's scaled amounts), a retried partition keeps its outcome, the merge keeps the shares for the
persist phase, and partition files without the records' own amounts (written before) skip the pass
rather than allocate scaled amounts."""
from dataclasses import replace

import polars as pl
import pytest

from chalicelib.domain.matching.partial import OWN_AMOUNT
from chalicelib.services import run_partitions
from chalicelib.services.reconciliation_runs import load, start_run
from tests.services.conftest import ENV, new_reconciliation, record, streams
from tests.services.test_reconciliation_runs import add_rule
from tests.services.test_run_partitions import match_round

WHOLE = {"name": "Exact", "priority": 1, "cardinality": "one_to_one",
         "conditions": [{"field": "description", "operator": "equals"}, {"field": "amount", "operator": "equals"}]}
PARTIAL = {"name": "Instalments", "priority": 2, "cardinality": "many_to_one", "allocation": "partial",
           "conditions": [{"field": "description", "operator": "equals"}]}


@pytest.fixture
def fanned_out(ports, ingest):
    """Twelve invoices of 10.00 + n in USD (2 places), each paid 3.00 then refunded 0.40, one USD record
    kept with 3 places (so the engine's USD amounts are scaled x 10), and, in JPY (no places), a payment
    of 300 for an invoice of 1,000: a run forced to fan out, loaded."""
    streams(ports, "bank", "ledger")
    reconciliation = new_reconciliation(ports)
    add_rule(ports, reconciliation, WHOLE)
    partial = add_rule(ports, reconciliation, PARTIAL)
    ingest(*[record("ledger", n, 1000 + n, direction="debit", description=f"INV-{n}") for n in range(12)],
           record("ledger", 99, 1000, direction="debit", description="JPY-1", currency="JPY", decimal_places=0),
           # a USD amount kept with three places: the engine brings every USD amount to three (x 10)
           record("ledger", 98, 12345, direction="debit", description="MILLS", decimal_places=3))
    ingest(*[r for n in range(12) for r in (record("bank", 2 * n, 300, "2026-11-03", description=f"INV-{n}"),
                                            record("bank", 2 * n + 1, 40, "2026-11-04", direction="debit",
                                                   description=f"INV-{n}"))],
           record("bank", 99, 300, "2026-11-03", description="JPY-1", currency="JPY", decimal_places=0))
    ports = replace(ports, limits=replace(ports.limits, run_records=16, partition_records=8))
    run = start_run(ports, ENV, reconciliation.id)
    return ports, run.id, load(ports, ENV, run.id), partial


def shares_of(ports, run_id):
    """The plan's shares (record -> share), as the persist phase reads them."""
    run = ports.runs.get(ENV, run_id)
    members = ports.run_files.read_frame(ENV, run_id, f"members-{run.first_match_id}")
    return dict(members.filter(pl.col("share").is_not_null()).select("record_id", "share").rows())


def test_each_partition_allocates_in_the_records_own_units_and_the_merge_keeps_the_shares(fanned_out):
    ports, run_id, loaded, partial = fanned_out
    assert loaded["next"] == "fan_out"
    items = ports.run_files.read_json(ENV, run_id, "partitions/0/manifest")
    assert len(items) >= 2
    part = ports.run_files.read_frame(ENV, run_id, f"partitions/0/{items[0]['partition']}/b")
    assert {OWN_AMOUNT, "decimal_places"} <= set(part.columns)
    usd = part.filter(pl.col("currency") == "USD", pl.col("decimal_places") == 2)
    assert (usd["amount"] == usd[OWN_AMOUNT] * 10).all() and usd.height

    match_round(ports, run_id, loaded)
    match_round(ports, run_id, loaded)  # retried: each partition finds its outcome
    assert run_partitions.merge(ports, ENV, run_id) == "persist"

    run = ports.runs.get(ENV, run_id)
    assert run.rule_summary[str(partial.id)] == 12 * 3 + 2 and "partial_skipped" not in run.rule_summary
    shares = shares_of(ports, run_id)
    assert sorted(shares.values()) == sorted([260] * 12 + [300])  # 3.00 - 0.40 each; 300 yen, not 300 x 100


def test_partition_files_without_the_records_own_amounts_skip_the_pass(fanned_out):
    ports, run_id, loaded, partial = fanned_out
    # Given partition files as a run fanned out before kept them: the engine's scaled amounts only
    for key in [k for k in ports.run_files.objects if "/partitions/0/" in k and k.endswith(("/a.parquet", "/b.parquet"))]:
        name = key.split(f"/{run_id}/", 1)[1].removesuffix(".parquet")
        frame = ports.run_files.read_frame(ENV, run_id, name)
        ports.run_files.write_frame(ENV, run_id, name, frame.drop(OWN_AMOUNT, "decimal_places"))

    match_round(ports, run_id, loaded)

    # Then nothing is allocated (in scaled units or any): the run has no match to persist
    assert run_partitions.merge(ports, ENV, run_id) == "finish"
    assert ports.runs.get(ENV, run_id).rule_summary[str(partial.id)] == 0
