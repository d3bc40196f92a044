"""An exception's near misses (services/near_misses.py) on the in-memory fakes: which records, which
side, and an exception whose reconciliation is being deleted."""
from __future__ import annotations

import pytest

from chalicelib.domain.matches import MatchStatus
from chalicelib.services.near_misses import of_exception
from chalicelib.services.reconciliation_exceptions import ExceptionQuery, list_exceptions, refresh
from chalicelib.services.reconciliation_rules import create_rule
from tests.services.conftest import ENV, days_ago, matched_by_a_run, record

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "within", "tolerance": 10},
                                                        {"field": "date", "operator": "within", "days": 3}]}


@pytest.fixture
def ran(ports, ingest, reconciliation):
    rule = create_rule(ports, ENV, reconciliation.id, RULE)
    bank = ingest(*(record("bank", n, 1000 * n, days_ago(20)) for n in range(1, 25)))
    ledger = ingest(record("ledger", 1, 1050, days_ago(20)), record("ledger", 2, 2000, days_ago(30)))
    refresh(ports, ENV, reconciliation.id)
    return {"rule": rule, "bank": bank, "ledger": ledger, "reconciliation": reconciliation}


def exception_of(ports, stream):
    [row] = [e for e in list_exceptions(ports, ENV, ExceptionQuery(data_stream_key=stream), 0, 50)[0]]
    return row


def test_the_20_newest_records_are_explained_against_the_other_sides_open_records(ports, ran):
    answer = of_exception(ports, ENV, exception_of(ports, "bank"))

    assert (answer["side"], answer["records"], answer["refused"]) == ("a", 20, None)
    assert [e["record_id"] for e in answer["data"]] == sorted(ran["bank"], reverse=True)[:20]
    assert {e["candidate_record_id"] for e in answer["data"]} <= set(ran["ledger"])
    [first] = [e for e in of_exception(ports, ENV, exception_of(ports, "bank"), limit=24)["data"]
               if e["record_id"] == ran["bank"][0]]
    assert first["candidate_record_id"] == ran["ledger"][0]
    assert first["failed_conditions"][0]["message"] == "amount off by 0.50 USD, 0.40 USD more than the 0.10 USD allowed"


def test_the_20_newest_are_taken_among_the_records_still_open(ports, ingest, ran):
    newest = sorted(ran["bank"], reverse=True)
    # A proposed match holds the 3 newest: they stay the exception's (pending confirmation), not open
    held = ingest(*(record("ledger", 10 + n, 500, days_ago(20)) for n in range(3)))
    matched_by_a_run(ports, ran["reconciliation"], ran["rule"], newest[:3], held, MatchStatus.PROPOSED)
    refresh(ports, ENV, ran["reconciliation"].id)
    exception = exception_of(ports, "bank")
    assert {r.record_id for r in ports.exceptions.records(exception)} >= set(newest[:3])

    answer = of_exception(ports, ENV, exception)

    assert answer["records"] == 20 and [e["record_id"] for e in answer["data"]] == newest[3:23]


def test_the_ledgers_exception_is_explained_from_side_b(ports, ran):
    answer = of_exception(ports, ENV, exception_of(ports, "ledger"))

    assert answer["side"] == "b" and [e["record_id"] for e in answer["data"]] == sorted(ran["ledger"], reverse=True)


def test_an_exception_of_a_reconciliation_being_deleted_says_so(ports, ran):
    exception = exception_of(ports, "bank")
    ports.reconciliations.mark_deleting(ENV, ran["reconciliation"].id)

    answer = of_exception(ports, ENV, exception)

    assert answer["data"] == [] and answer["refused"] == f"reconciliation {ran['reconciliation'].id} no longer exists"
