"""Reconciliation use cases (services/reconciliations.py) on the fakes."""
import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.reconciliations import ReconciliationRunning, RunType
from chalicelib.services.reconciliations import create_reconciliation
from tests.services.conftest import ENV, streams


def start_a_run(ports, reconciliation_id, run_id=77):
    """What the runs do when a run takes the reconciliation's slot."""
    assert ports.runs.claim_slot(ENV, reconciliation_id, run_id)


# Moved from tests/integration/test_reconciliations_api.py -----------------------------------------

def test_a_run_starting_between_the_read_and_the_write_still_refuses_the_change(ports):
    streams(ports, "bank", "ledger", "psp", "fees")
    created = create_reconciliation(ports, ENV, name="R",
                                    run_type=RunType.BATCH, side_a=["bank"], side_b=["ledger"],
                                    exception_after_days=3)
    read = ports.reconciliations.get(ENV, created.id)
    start_a_run(ports, created.id)
    with pytest.raises(ReconciliationRunning):
        ports.reconciliations.save(read.changed(utc_now(), name="late"), previous=read)
