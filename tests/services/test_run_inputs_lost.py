"""A run whose working files are lost (services/reconciliation_runs.py on the fakes): the phase
that needs them says so (RunInputsLost, which the state machine does not retry), and the fail
phase undoes from the table alone. tests/integration/test_run_crash_points.py kills a run at
each step of its writes on moto."""
import json
from dataclasses import replace

import pytest

from chalicelib.domain.records import RecordStatus
from chalicelib.domain.runs import RunInputsLost, RunStatus
from chalicelib.services.reconciliation_rules import create_rule
from chalicelib.services.reconciliation_runs import give_up, load, match, persist, start_run
from tests.services.conftest import ENV, record
from tests.support.crashes import Dies, Killed, one_by_one

RULE = {"name": "Amount", "priority": 1, "cardinality": "one_to_one",
        "conditions": [{"field": "amount", "operator": "equals"}]}


@pytest.fixture
def loaded(ports, ingest, reconciliation):
    """Six pairs of records and a run that loaded them, planning chunks of two matches."""
    create_rule(ports, ENV, reconciliation.id, RULE)
    record_ids = ingest(*[record("bank", n, 1000 + n) for n in range(6)])
    record_ids += ingest(*[record("ledger", n, 1000 + n) for n in range(6)])
    ports = replace(ports, limits=replace(ports.limits, chunk_records=4))
    run = start_run(ports, ENV, reconciliation.id)
    assert load(ports, ENV, run.id) == "match"
    return ports, run, record_ids


def claims(ports, reconciliation, record_ids) -> dict[int, int]:
    """The records claimed in the reconciliation, and the match holding each; a record holds a
    claim whole (its match, `matched_in`, its status) or not at all."""
    held = {}
    for h in ports.claims.held_records(ENV, record_ids):
        claimed = (h.match_in(reconciliation.id) is not None, reconciliation.id in h.matched_in,
                   h.record.status is RecordStatus.RECONCILED)
        assert claimed in ((False, False, False), (True, True, True))
        if claimed[0]:
            held[h.record.id] = h.match_in(reconciliation.id)
    return held


def test_a_run_that_lost_its_input_before_its_plan_fails_holding_nothing(loaded, reconciliation):
    ports, run, record_ids = loaded
    ports.run_files.objects.clear()

    with pytest.raises(RunInputsLost, match="side_a.parquet is gone"):
        match(ports, ENV, run.id)
    give_up(ports, ENV, run.id, {"Error": "RunInputsLost", "Cause": "side_a.parquet is gone"})

    assert ports.runs.get(ENV, run.id).status is RunStatus.FAILED
    assert claims(ports, reconciliation, record_ids) == {}
    assert ports.reconciliations.get(ENV, reconciliation.id).current_run_id is None


def test_a_run_killed_mid_chunk_whose_plan_is_lost_is_undone_from_the_table(loaded, reconciliation):
    ports, run, record_ids = loaded
    assert match(ports, ENV, run.id) == "persist"
    assert persist(ports, ENV, run.id) == "persist"  # chunk 0: two matches, committed
    with pytest.raises(Killed):  # chunk 1: its members written, three of its four claims made
        persist(replace(ports, claims=Dies(one_by_one(ports.claims), "claim_record", 4)), ENV, run.id)
    planned = ports.runs.get(ENV, run.id)
    chunk_1 = planned.chunk_match_ids(1)
    assert len(set(claims(ports, reconciliation, record_ids).values()) & set(chunk_1)) == 2
    ports.run_files.objects.clear()

    with pytest.raises(RunInputsLost, match="matches-"):
        persist(ports, ENV, run.id)
    give_up(ports, ENV, run.id, "lost")

    committed = set(planned.chunk_match_ids(0))
    assert ports.matches.existing_ids(ENV, range(planned.first_match_id, planned.first_match_id + 6)) == committed
    assert set(claims(ports, reconciliation, record_ids).values()) == committed  # chunk 1's claims released
    assert all(ports.matches.members(ENV, i) == [] for i in chunk_1)  # and its members gone
    assert ports.runs.get(ENV, run.id).status is RunStatus.FAILED
    assert ports.reconciliations.get(ENV, reconciliation.id).current_run_id is None


def test_a_run_failed_by_an_aws_error_says_why_without_naming_the_deployment(loaded, reconciliation):
    ports, run, _ = loaded
    cause = json.dumps({"errorType": "ClientError", "errorMessage": (
        "An error occurred (AccessDenied) when calling the GetObject operation: User: arn:aws:sts::123456789012:"
        "assumed-role/recon-prod-runs/recon-prod is not authorized to perform: s3:GetObject")})

    give_up(ports, ENV, run.id, {"Error": "ClientError", "Cause": cause})

    assert ports.runs.get(ENV, run.id).error_message == (
        "ClientError: An error occurred (AccessDenied) when calling the GetObject operation: User: <hidden> is not "
        "authorized to perform: s3:GetObject")
