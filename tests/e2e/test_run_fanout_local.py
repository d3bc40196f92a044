"""A run that fans out on the local stack (`make run`): its Distributed Map run by the local driver,
the partitions' files and manifest in the local S3, over HTTP like any other run."""
import pytest

from chalicelib.local.launcher import StackProcess
from tests.e2e.test_reconciliation_runs_local import _ingest_half_matched, _streams_and_reconciliation, _wait_run


@pytest.fixture(scope="module")
def small_stack(tmp_path_factory):
    """A stack whose runs fan out past 100 open records, in partitions of about 40."""
    running = StackProcess(tmp_path_factory.mktemp("fanout") / "data", api_key="rk_e2e-fanout-key",
                           extra_env={"RECON_MAX_RUN_RECORDS": "100", "RECON_RUN_PARTITION_RECORDS": "40"}).start()
    yield running
    running.stop()


def test_a_run_over_one_function_fans_out_and_matches_as_a_run_in_one_piece(small_stack):
    bank, ledger, reconciliation = _streams_and_reconciliation(small_stack)
    _ingest_half_matched(small_stack, bank, ledger)

    started = small_stack.request("POST", f"/reconciliations/{reconciliation['id']}/runs")
    assert started.status_code == 202, started.json()
    run = _wait_run(small_stack, reconciliation["id"], started.json()["id"])

    # The same answer as tests/e2e/test_reconciliation_runs_local.py's run in one piece of the same records
    assert (run["status"], run["total_records"], run["matched_records"]) == ("completed", 450, 300), run
    assert run["rule_summary"]["unmatched"] == {"side_a": 150, "side_b": 0}
    # and it went through the Map: 450 records in partitions of about 40, a manifest for them in the local S3
    runs = small_stack.data_dir / "s3" / "recon-local-data" / "runs" / "local" / str(run["id"])
    assert list(runs.glob("partitions/0/manifest.json*")), sorted(p.name for p in runs.rglob("*"))[:20]
    assert len(list(runs.glob("partitions/0/*/matches.parquet._S3rver_object"))) >= 10
