"""Investigations of exceptions (services/investigations.py) on the fakes: started, run (the search
itself, called as the investigation queue's worker calls it), failed, swept, accepted."""
from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.reconciliation_exceptions import RecordFilter
from chalicelib.services import investigations
from chalicelib.services.matches import create_manual_match
from chalicelib.services.reconciliation_exceptions import ExceptionQuery, list_exceptions, refresh
from chalicelib.services.reconciliation_rules import create_rule
from chalicelib.services.reconciliations import update_reconciliation
from chalicelib.services.records import delete_record
from tests.services.conftest import ENV, days_ago, new_reconciliation, record, streams
from tests.support.crashes import Replaced

RULE = {"name": "Amount within 3 days", "priority": 1, "conditions": [
    {"field": "amount", "operator": "equals"}, {"field": "date", "operator": "within", "days": 3}]}


def bank_exception_id(ports):
    [row] = list_exceptions(ports, ENV, ExceptionQuery(data_stream_key="bank"), 0, 50)[0]
    return row.id


@pytest.fixture
def exception(ports, ingest, reconciliation):
    """The bank's 1,250.00 was booked by the ledger 6 days later with a typo in the reference:
    outside the rule's window, so both sit in exceptions; a decoy of another amount too."""
    create_rule(ports, ENV, reconciliation.id, RULE)
    bank = ingest(record("bank", 1, 125000, days_ago(20), description="ACME PAYOUT",
                         metadata={"reference": "INV-4411"}))
    ledger = ingest(record("ledger", 1, 125000, days_ago(14), description="Acme payout",
                           metadata={"reference": "INV-4441"}),
                    record("ledger", 2, 99000, days_ago(20), description="Other customer"))
    refresh(ports, ENV, reconciliation.id)  # what a run that matched nothing (6 days apart) leaves
    return {"id": bank_exception_id(ports), "bank": bank, "ledger": ledger, "reconciliation": reconciliation}


def start(ports, exception_id, record_filter=None):
    """What POST .../investigations does (202: queued, not run)."""
    return investigations.start(ports, ENV, exception_id, record_filter or RecordFilter())


def latest(ports, exception):
    """The exception's newest investigation (the detail's `investigation`)."""
    return ports.investigations.of_exception(ENV, exception["id"], 1)[0]


# Moved from tests/integration/test_investigations_api.py -----------------------------------------

def test_only_a_completed_investigation_of_that_exception_can_be_accepted(ports, exception):
    started = start(ports, exception["id"])  # still pending: nothing ran it
    with pytest.raises(Conflict):
        investigations.accept(ports, ENV, exception["id"], started.id)
    with pytest.raises(NotFound):
        investigations.accept(ports, ENV, exception["id"], 999999)
    with pytest.raises(NotFound):
        start(ports, 999999)


def test_an_investigation_that_fails_on_its_last_delivery_is_failed_with_its_reason(ports, exception):
    started = start(ports, exception["id"])
    investigations.fail(ports, ENV, started.id, RuntimeError("out of memory"))

    failed = latest(ports, exception)
    assert failed.status == "failed" and "out of memory" in failed.error_message


def test_one_investigation_the_sweep_cannot_end_stops_no_other_and_is_counted(ports, exception):
    first = start(ports, exception["id"])
    ledger_exception = next(row.id for row in list_exceptions(ports, ENV, ExceptionQuery(data_stream_key="ledger"),
                                                              0, 50)[0])
    second = start(ports, ledger_exception)

    def unreadable(environment, investigation_id):
        if investigation_id == first.id:
            raise RuntimeError("the table is throttling")
        return ports.investigations.get(environment, investigation_id)

    throttled = replace(ports, investigations=Replaced(ports.investigations, get=unreadable))
    assert investigations.sweep(throttled, now=utc_now() + timedelta(hours=2)) == {"failed": 1, "errors": 1}
    assert [i.id for i in ports.investigations.active()] == [first.id]
    assert ports.investigations.get(ENV, second.id).status == "failed"
    assert investigations.sweep(ports, now=utc_now() + timedelta(hours=2)) == {"failed": 1, "errors": 0}
    assert ports.investigations.active() == []


def test_an_investigation_no_worker_finished_is_failed_by_the_sweeper(ports, exception):
    started = start(ports, exception["id"])  # its message is never delivered
    assert investigations.sweep(ports) == {"failed": 0, "errors": 0}
    assert investigations.sweep(ports, now=utc_now() + timedelta(hours=2)) == {"failed": 1, "errors": 0}
    swept = latest(ports, exception)
    assert swept.id == started.id and swept.status == "failed"
    assert ports.investigations.active() == []


# What accepting matches: exactly the suggestion, and only while it still holds --------------------

@pytest.fixture
def with_prenote(ports, ingest):
    """Side B holds the ledger and an ACH stream; the ACH stream has a zero-amount prenote that
    carries the bank payment's reference (the issue's case)."""
    streams(ports, "bank", "ledger", "ach")
    reconciliation = new_reconciliation(ports, "Bank to books", side_b=("ledger", "ach"))
    create_rule(ports, ENV, reconciliation.id, RULE)
    bank = ingest(record("bank", 1, 125000, days_ago(20), description="ACME PAYOUT",
                         metadata={"reference": "INV-4411"}))
    ledger = ingest(record("ledger", 1, 125000, days_ago(14), description="Acme payout",
                           metadata={"reference": "INV-4441"}))
    prenote = ingest(record("ach", 1, 0, days_ago(21), description="ACME PRENOTE", metadata={"reference": "INV-4411"}))
    refresh(ports, ENV, reconciliation.id)  # what a run that matched nothing leaves
    return {"id": bank_exception_id(ports), "bank": bank, "ledger": ledger, "prenote": prenote,
            "reconciliation": reconciliation}


def investigated(ports, exception):
    """Started, then run as the investigation queue's worker runs it."""
    started = start(ports, exception["id"])
    investigation = investigations.run(ports, ENV, started.id)
    assert investigation.status == "completed", investigation
    return investigation


def accept(ports, exception, investigation):
    return investigations.accept(ports, ENV, exception["id"], investigation.id)


def test_accepting_is_refused_when_a_suggested_record_was_matched_since(ports, ingest, with_prenote):
    investigation = investigated(ports, with_prenote)
    [other] = ingest(record("bank", 2, 125000, days_ago(14)))
    create_manual_match(ports, ENV, with_prenote["reconciliation"].id, [other, with_prenote["ledger"][0]], False, None)

    with pytest.raises(Conflict) as refused:
        accept(ports, with_prenote, investigation)

    assert f"record {with_prenote['ledger'][0]} of the suggestion was matched since" in refused.value.message


def test_accepting_is_refused_when_a_suggested_record_was_deleted_since(ports, with_prenote):
    investigation = investigated(ports, with_prenote)
    delete_record(ports, ENV, with_prenote["ledger"][0])

    with pytest.raises(Conflict) as refused:
        accept(ports, with_prenote, investigation)

    assert "was deleted since the investigation" in refused.value.message


def test_accepting_is_refused_with_409_when_the_reconciliation_no_longer_uses_a_suggested_stream(ports, with_prenote):
    investigation = investigated(ports, with_prenote)
    update_reconciliation(ports, ENV, with_prenote["reconciliation"].id, side_b=["ach"])

    with pytest.raises(Conflict) as refused:
        accept(ports, with_prenote, investigation)

    assert "no longer fits reconciliation" in refused.value.message


def test_accepting_is_refused_when_the_suggestion_no_longer_has_its_stated_difference(ports, with_prenote):
    investigation = investigated(ports, with_prenote)
    row = ports.records.store.row(ENV, with_prenote["ledger"][0])
    row.record = replace(row.record, amount=124000)  # as if the record had been corrected since

    with pytest.raises(Conflict) as refused:
        accept(ports, with_prenote, investigation)

    assert "no longer balances as stated" in refused.value.message and "by 1000 now" in refused.value.message
    assert ports.records.get(ENV, with_prenote["ledger"][0]).status == "unreconciled"


# Added ---------------------------------------------------------------------------------------------

def test_starting_moves_an_open_exception_to_investigating_and_queues_the_investigation(ports, exception):
    started = start(ports, exception["id"], RecordFilter(direction="credit"))

    assert started.status == "pending" and started.filter_params == {"direction": "credit"}
    assert ports.exceptions.get(ENV, exception["id"]).status == "investigating"
    assert ports.investigation_queue.messages == [{"environment": ENV, "investigation_id": started.id}]


def test_an_investigation_of_a_ledger_short_by_a_fee_on_twenty_records_suggests_all_twenty_counterparts(
        ports, ingest, reconciliation):
    """The issue's case: the bank received each payment less a card fee a day later with the same
    reference, and a payment of the ledger's exact amount two weeks earlier (a decoy) beside each."""
    create_rule(ports, ENV, reconciliation.id, RULE)
    amounts = [20_000 + 7_919 * n for n in range(20)]
    ledger = ingest(*(record("ledger", n, amount, days_ago(30), description="Acme invoice",
                             metadata={"reference": f"INV-{9100 + n}"}) for n, amount in enumerate(amounts)))
    counterparts = ingest(*(record("bank", n, amount - (amount * 29 // 1000 + 30), days_ago(29),
                                   description="ACME PAYMENT", metadata={"reference": f"INV-{9100 + n}"})
                            for n, amount in enumerate(amounts)))
    decoys = ingest(*(record("bank", 100 + n, amount, days_ago(44), description="ACME PAYMENT")
                      for n, amount in enumerate(amounts)))
    refresh(ports, ENV, reconciliation.id)
    [row] = list_exceptions(ports, ENV, ExceptionQuery(data_stream_key="ledger"), 0, 50)[0]

    investigation = investigations.run(ports, ENV, start(ports, row.id).id)

    assert investigation.status == "completed"
    assert sorted(investigation.target_record_ids) == sorted(ledger)
    assert sorted(investigation.suggested_record_ids) == sorted(counterparts)
    assert not set(decoys) & set(investigation.suggested_record_ids)
    assert "10 more pairings are suggested and not described here" in investigation.recommendation_text
    assert "100%" not in investigation.recommendation_text
