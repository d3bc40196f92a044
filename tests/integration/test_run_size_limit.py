"""A run with more open records than it may load (what one match function holds, or, fanned out in
partitions, RECON_MAX_FANOUT_RUN_RECORDS) fails at once, saying so, rather than running out of
memory on every retry. Here both limits are the same: tests/integration/test_run_fanout.py has the
runs between them."""
from dataclasses import replace

from chalicelib.domain.clock import utc_now
from tests.integration.conftest import record
from tests.integration.test_reconciliation_runs import add_rule, start


class CountedLoads:
    """The claims port, counting the reads of open records a run's load makes."""

    def __init__(self, claims) -> None:
        self._claims, self.loads = claims, 0

    def __getattr__(self, name):
        return getattr(self._claims, name)

    def open_record_columns(self, *args, **kwargs):
        self.loads += 1
        return self._claims.open_record_columns(*args, **kwargs)


def test_a_run_over_the_open_records_limit_fails_at_once_naming_the_limit(api, services, ingest, reconciliation):
    # Given 5 open records, and runs that may match at most 4 (streams not yet counted)
    add_rule(api, reconciliation)
    ingest(*[record("bank", n, 1000 + n) for n in range(3)])
    ingest(*[record("ledger", n, 1000 + n) for n in range(2)])
    loads = CountedLoads(services.claims)
    services.ports = replace(services.ports, limits=replace(services.ports.limits, run_records=4, fanout_records=4), claims=loads)

    # When a run starts
    run = start(api, reconciliation)

    # Then it fails at once, not retried, with the count and the limit; nothing is matched
    assert run["status"] == "failed", run
    assert "5 open records (3 on side A, 2 on side B)" in run["error_message"]
    assert "at most 4" in run["error_message"]
    assert loads.loads <= 2  # one read of each side at most: no retry
    assert api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"] == []

    # And once the limit allows them, the same records are matched
    services.ports = replace(services.ports, limits=replace(services.ports.limits, run_records=5, fanout_records=5))
    assert start(api, reconciliation)["status"] == "completed"


def test_a_run_of_streams_counted_over_the_limit_is_refused_before_loading_a_record(
        api, services, ingest, reconciliation):
    # Given streams whose counts exceed the limit
    add_rule(api, reconciliation)
    ingest(*[record("bank", n, 1000 + n) for n in range(3)])
    ingest(*[record("ledger", n, 1000 + n) for n in range(2)])
    for key, count in (("bank", 3), ("ledger", 2)):
        services.data_streams.set_records_count("acme", key, count, utc_now())
    loads = CountedLoads(services.claims)
    services.ports = replace(services.ports, limits=replace(services.ports.limits, run_records=4, fanout_records=4), claims=loads)

    # When a run starts
    run = start(api, reconciliation)

    # Then it fails, its open records counted, none loaded
    assert run["status"] == "failed" and "at most 4" in run["error_message"], run
    assert "5 open records" in run["error_message"]
    assert loads.loads == 0
