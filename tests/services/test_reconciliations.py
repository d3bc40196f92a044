"""Reconciliation use cases (services/reconciliations.py) on the fakes."""
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.matches import MatchStatus
from chalicelib.domain.reconciliations import ReconciliationRunning, RunType
from chalicelib.services.matches import create_manual_match, reconcile_left_behind
from chalicelib.services.reconciliation_rules import create_rule
from chalicelib.services.reconciliations import (
    create_reconciliation,
    delete_reconciliation,
    sweep_leaving,
    update_reconciliation,
)
from tests.services.conftest import ENV, matched_by_a_run, new_reconciliation, record, streams


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


# A reconciliation that stops using a stream -------------------------------------------------------

@pytest.fixture
def shared_bank(ports, ingest):
    """Bank in two reconciliations: to the ledger (matched there, by hand and proposed) and to fees
    (matched there in part)."""
    streams(ports, "bank", "ledger", "fees")
    to_ledger = new_reconciliation(ports, "Bank to ledger")
    to_fees = new_reconciliation(ports, "Bank to fees", side_b=("fees",))
    bank = ingest(record("bank", 1, 100), record("bank", 2, 200), record("bank", 3, 300), record("bank", 4, 400))
    ledger = ingest(record("ledger", 1, 100), record("ledger", 2, 200), record("ledger", 3, 300))
    fees = ingest(record("fees", 2, 200))
    create_manual_match(ports, ENV, to_ledger.id, [bank[0], ledger[0]], False, None)
    create_manual_match(ports, ENV, to_ledger.id, [bank[1], ledger[1]], False, None)
    create_manual_match(ports, ENV, to_fees.id, [bank[1], fees[0]], False, None)
    rule = create_rule(ports, ENV, to_ledger.id, {"name": "Amount", "priority": 1, "auto_confirm": False,
                                                  "conditions": [{"field": "amount", "operator": "equals"}]})
    matched_by_a_run(ports, to_ledger, rule, [bank[2]], [ledger[2]], MatchStatus.PROPOSED)
    statuses = [ports.records.get(ENV, r).status.value for r in bank]
    assert statuses == ["partially_reconciled", "reconciled", "pending_confirmation", "unreconciled"]
    return to_ledger, to_fees, bank


def _statuses(ports, ids):
    return [ports.records.get(ENV, r).status.value for r in ids]


def test_deleting_a_reconciliation_reconciles_what_every_other_one_using_the_stream_matched(ports, shared_bank):
    _, to_fees, bank = shared_bank

    delete_reconciliation(ports, ENV, to_fees.id)

    # the first: matched by the ledger alone, now the only reconciliation of bank; the second:
    # given back by fees, still matched by the ledger; the others: not matched there
    assert _statuses(ports, bank) == ["reconciled", "reconciled", "pending_confirmation", "unreconciled"]
    assert bank[0] not in {r.id for r in ports.claims.open_records(ENV, "bank", 999, adopted=True)}
    assert reconcile_left_behind(ports, ENV, to_fees.id, ["bank"]) == 0  # a repeat: nothing left


def test_taking_a_stream_out_of_a_reconciliation_reconciles_what_the_others_matched(ports, shared_bank):
    _, to_fees, bank = shared_bank
    streams(ports, "cash")

    update_reconciliation(ports, ENV, to_fees.id, side_a=["cash"])

    assert _statuses(ports, bank) == ["reconciled", "reconciled", "pending_confirmation", "unreconciled"]


def test_records_of_a_stream_nobody_else_uses_keep_what_the_delete_left_them(ports, shared_bank):
    to_ledger, _, bank = shared_bank
    ledger = [h.record.id for h in ports.claims.held_records(ENV, range(1, 20)) if h.record.data_stream_key == "ledger"]

    delete_reconciliation(ports, ENV, to_ledger.id)

    assert _statuses(ports, bank) == ["unreconciled", "reconciled", "unreconciled", "unreconciled"]
    assert _statuses(ports, ledger) == ["unreconciled"] * 3


def _an_edit_that_stops_after_its_save(ports, monkeypatch, reconciliation_id, **change):
    def dies(*args, **kwargs):
        raise RuntimeError("the request died after the save")

    with monkeypatch.context() as patched:
        patched.setattr(ports.claims, "forget_adoptions", dies)
        with pytest.raises(RuntimeError):
            update_reconciliation(ports, ENV, reconciliation_id, **change)


def test_an_edit_that_stopped_after_its_save_is_finished_by_the_next_edit(ports, shared_bank, monkeypatch):
    _, to_fees, bank = shared_bank
    streams(ports, "cash")

    _an_edit_that_stops_after_its_save(ports, monkeypatch, to_fees.id, side_a=["cash"])

    saved = ports.reconciliations.get(ENV, to_fees.id)
    assert saved.side_a_stream_keys == ("cash",) and saved.leaving_stream_keys == {"bank"}
    assert saved.exceptions_refresh_pending  # requested by the save itself: bank's exception resolves
    assert _statuses(ports, bank)[0] == "partially_reconciled"  # fees no longer uses bank: left to finish

    update_reconciliation(ports, ENV, to_fees.id, side_a=["bank"])  # and the stream comes back

    assert _statuses(ports, bank) == ["reconciled", "reconciled", "pending_confirmation", "unreconciled"]
    assert ports.reconciliations.get(ENV, to_fees.id).leaving_stream_keys == frozenset()


def test_the_sweeper_finishes_an_edit_that_stopped_after_its_save_once_no_request_can_still_be_at_it(
        ports, shared_bank, monkeypatch):
    _, to_fees, bank = shared_bank
    streams(ports, "cash")
    _an_edit_that_stops_after_its_save(ports, monkeypatch, to_fees.id, side_a=["cash"])
    saved = ports.reconciliations.get(ENV, to_fees.id)
    saved_at = saved.updated_at

    assert sweep_leaving(ports, saved_at + timedelta(minutes=5))["finished"] == 0  # its own request may still be at it
    ports.reconciliations.mark_exceptions_refreshed(ENV, to_fees.id, saved_at + timedelta(minutes=1),
                                                    saved.exceptions_refresh_requests)  # the refresh the save asked
    assert sweep_leaving(ports, saved_at + timedelta(minutes=20))["finished"] == 0  # refreshed: not due for an hour
    assert _statuses(ports, bank)[0] == "partially_reconciled"

    assert sweep_leaving(ports, saved_at + timedelta(minutes=62)) == {"finished": 1, "errors": 0}

    assert _statuses(ports, bank) == ["reconciled", "reconciled", "pending_confirmation", "unreconciled"]
    assert ports.reconciliations.get(ENV, to_fees.id).leaving_stream_keys == frozenset()
    assert sweep_leaving(ports, saved_at + timedelta(minutes=125))["finished"] == 0
