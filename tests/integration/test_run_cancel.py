"""Cancelling a run (issue 32, point 5): through the API and the local state machine driver, on moto.
A pending run ends at once; a running one at its next step, keeping the matches it committed and
undoing the others; a fanned-out run's remaining partitions do nothing; the sweeper ends a run
whose execution died with a cancel requested."""
from dataclasses import replace
from datetime import timedelta

from chalicelib.domain.clock import utc_now
from chalicelib.domain.runs import STUCK_AFTER, RunStatus
from chalicelib.services import reconciliation_runs
from tests.integration.conftest import record
from tests.integration.test_reconciliation_runs import RULE, add_rule, matches_of, start
from tests.integration.test_run_fanout import Watched, interrupted_at_its_first_partition
from tests.support.crashes import one_by_one

ENV = "acme"
AMOUNT = {"name": "Amount", "priority": 1, "cardinality": "one_to_one",
          "conditions": [{"field": "amount", "operator": "equals"}]}


class NoExecutions:
    """Run workflows that start nothing: the run stays pending, as one waiting for its execution."""

    def start(self, execution_name, payload):
        pass


def cancel_url(reconciliation, run_id):
    return f"/v1/reconciliations/{reconciliation['id']}/runs/{run_id}/cancel"


def run_of(api, reconciliation, run_id):
    return api.get(f"/v1/reconciliations/{reconciliation['id']}/runs/{run_id}").json_body


def slot_holder(api, reconciliation):
    return api.get(f"/v1/reconciliations/{reconciliation['id']}").json_body["current_run"]


def pending_run(api, services, reconciliation):
    services.ports = replace(services.ports, run_workflows=NoExecutions())
    response = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs")
    assert response.status_code == 202 and response.json_body["status"] == "pending"
    return response.json_body


def test_a_pending_run_cancelled_ends_at_once_and_a_repeat_only_moves_its_time(api, services, reconciliation):
    # Given a run waiting for its execution
    run = pending_run(api, services, reconciliation)

    # When it is cancelled, twice
    first = api.post(cancel_url(reconciliation, run["id"]))
    again = api.post(cancel_url(reconciliation, run["id"]))

    # Then it is cancelled at once, the repeat answering the same with a later request time
    assert first.status_code == 202 and first.json_body["status"] == "cancelled", first.json_body
    assert first.json_body["cancellation_requested_at"] and first.json_body["completed_at"]
    assert again.status_code == 202 and again.json_body["status"] == "cancelled"
    assert again.json_body["cancellation_requested_at"] >= first.json_body["cancellation_requested_at"]
    assert run_of(api, reconciliation, run["id"])["status"] == "cancelled"
    assert slot_holder(api, reconciliation) is None
    # and its execution, should it begin late, does nothing
    assert reconciliation_runs.load(services.ports, ENV, run["id"]) == "done"


def test_a_finished_run_refuses_a_cancel_and_unknown_runs_are_not_found(api, ingest, reconciliation):
    add_rule(api, reconciliation)
    ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 1000))
    run = start(api, reconciliation)
    assert run["status"] == "completed"

    refused = api.post(cancel_url(reconciliation, run["id"]))

    assert refused.status_code == 409 and "completed" in refused.json_body["message"], refused.json_body
    assert run_of(api, reconciliation, run["id"])["cancellation_requested_at"] is None
    assert api.post(cancel_url(reconciliation, 404)).status_code == 404
    assert api.post(f"/v1/reconciliations/{reconciliation['id'] + 1}/runs/{run['id']}/cancel").status_code == 404


def test_a_run_cancelled_between_persist_calls_keeps_what_it_committed(api, services, ingest, reconciliation):
    # Given 12 pairs, a match a chunk: three persist calls of four chunks each; the cancel comes as
    # the first call counts its last chunk
    add_rule(api, reconciliation, AMOUNT)
    ingest(*[record("bank", n, 1000 + n) for n in range(12)])
    ingest(*[record("ledger", n, 1000 + n) for n in range(12)])
    services.ports = replace(services.ports, limits=replace(services.ports.limits, chunk_records=2))
    real = services.ports
    counted = []

    def cancel_after_the_first_call(name, args):
        if name == "save_chunk":
            counted.append(args[1])
            if len(counted) == 4:
                reconciliation_runs.cancel(real, ENV, reconciliation["id"], args[0].id)
    services.ports = replace(real, runs=Watched(real.runs, cancel_after_the_first_call))

    # When it runs
    run = start(api, reconciliation)

    # Then it ended cancelled at its next persist call: the four chunks written stay, no other was begun
    assert run["status"] == "cancelled" and run["cancellation_requested_at"], run
    assert 40 < run["progress"] < 100 and run["matched_records"] == 8
    matches = matches_of(api, reconciliation)
    assert len(matches) == 4 and all(m["status"] == "confirmed" for m in matches)
    unreconciled = api.get("/v1/records?status=unreconciled&limit=100").json_body["data"]
    assert len(unreconciled) == 16
    # and its slot is free: a new run matches the rest
    services.ports = real
    assert slot_holder(api, reconciliation) is None
    assert start(api, reconciliation)["status"] == "completed"
    assert len(matches_of(api, reconciliation)) == 12


def test_a_run_cancelled_as_a_persist_call_fails_part_way_undoes_what_was_not_committed(
        api, services, ingest, reconciliation):
    # Given 12 pairs, a match a chunk, and a claim of the second persist call that fails once, the
    # cancel asked just before: the retried call sees the cancel first
    add_rule(api, reconciliation, AMOUNT)
    bank = ingest(*[record("bank", n, 1000 + n) for n in range(12)])
    ledger = ingest(*[record("ledger", n, 1000 + n) for n in range(12)])
    services.ports = replace(services.ports, limits=replace(services.ports.limits, chunk_records=2))
    real = services.ports
    claims = []

    def fail_once_cancelled(name, args):
        if name == "claim_record":
            claims.append(args)
            if len(claims) == 11:  # the second call's chunks: some claimed, none whole
                [active] = real.runs.active()
                reconciliation_runs.cancel(real, ENV, reconciliation["id"], active.id)
                raise ConnectionError("DynamoDB dropped the connection")
    services.ports = replace(real, claims=Watched(one_by_one(real.claims), fail_once_cancelled))

    # When it runs
    run = start(api, reconciliation)

    # Then it is cancelled; every match left is whole and committed, every other record open again
    assert run["status"] == "cancelled", run
    matches = matches_of(api, reconciliation)
    assert 4 <= len(matches) < 12
    in_matches = set()
    for match in matches:
        records = api.get(f"/v1/reconciliation_matches/{match['id']}").json_body["records"]
        assert len(records) == 2 and {r["status"] for r in records} == {"reconciled"}
        in_matches |= {r["id"] for r in records}
    for record_id in set(bank + ledger) - in_matches:
        assert api.get(f"/v1/records/{record_id}").json_body["status"] == "unreconciled", record_id
    # and a new run matches the rest
    services.ports = real
    assert slot_holder(api, reconciliation) is None
    assert start(api, reconciliation)["status"] == "completed"
    assert len(matches_of(api, reconciliation)) == 12


def test_a_run_cancelled_during_the_map_matches_no_further_partition(api, services, ingest, reconciliation):
    # Given a run forced to fan out, cancelled while its first partition is read, when it runs
    run, read, real = interrupted_at_its_first_partition(
        api, services, ingest, reconciliation,
        lambda ports, active: reconciliation_runs.cancel(ports, ENV, reconciliation["id"], active.id))

    # Then the partitions after it were not read, the merge ended the run cancelled, nothing is matched
    assert run["status"] == "cancelled" and run["error_message"] is None, run
    assert len(read) == 1 and run["progress"] < 40
    assert matches_of(api, reconciliation) == []
    assert slot_holder(api, reconciliation) is None
    services.ports = real
    assert start(api, reconciliation)["status"] == "completed"


def test_a_run_whose_execution_died_with_a_cancel_requested_is_swept_cancelled(api, services, reconciliation):
    # Given a running run whose execution died, then was asked to stop
    add_rule(api, reconciliation, RULE)
    run = pending_run(api, services, reconciliation)
    ports = services.ports
    ports.runs.move(ports.runs.get(ENV, run["id"]), RunStatus.RUNNING, started_at=utc_now())
    asked = api.post(cancel_url(reconciliation, run["id"]))
    assert asked.status_code == 202 and asked.json_body["status"] == "running"

    # When the sweeper finds it stuck
    counts = reconciliation_runs.sweep(ports, now=utc_now() + STUCK_AFTER + timedelta(minutes=1))

    # Then it ends cancelled, never restarted, and its slot is free
    assert counts["restarted"] == 0 and counts["errors"] == 0
    assert run_of(api, reconciliation, run["id"])["status"] == "cancelled"
    assert slot_holder(api, reconciliation) is None


def test_a_cancel_is_audited_with_its_runs_reconciliation(api, services, reconciliation):
    from tests.integration.test_audit_events import entries, summary_of

    run = pending_run(api, services, reconciliation)
    assert api.post(cancel_url(reconciliation, run["id"])).status_code == 202

    [asked] = [e for e in entries(api, f"?resource_type=reconciliation_run&resource_id={run['id']}")
               if e["action"] == "reconciliation_run.cancellation_requested"]
    assert summary_of(asked) == {"reconciliation_id": str(reconciliation["id"]), "status": "cancelled"}
