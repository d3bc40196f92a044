"""Service tests: the use cases of chalicelib/services on the in-memory fakes of tests/fakes (no
AWS, no API, no state machine: `FakeWorkflows` records the executions started and runs none).
Data is built through the services, as a client's requests would build it."""
from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from chalicelib.domain.clock import clock_in_use, utc_now
from chalicelib.domain.data_streams import StreamType
from chalicelib.domain.ingestion import ItemStatus, OnConflict
from chalicelib.domain.matches import Match, MatchMember, MatchStatus
from chalicelib.domain.reconciliations import Reconciliation, RunType
from chalicelib.domain.rules import Rule
from chalicelib.services.data_streams import create_stream
from chalicelib.services.ingestion.bulk import process_job, submit_bulk
from chalicelib.services.matches import used_by, write_matches
from chalicelib.services.ports import Ports
from chalicelib.services.reconciliations import create_reconciliation
from tests.fakes import fake_ports
from tests.fakes.clock import FrozenClock

ENV = "acme"


def record(stream, n, amount, day="2026-11-02", direction="credit", **fields):
    """A bulk item (as tests/integration/conftest.py's)."""
    return {"data_stream_key": stream, "external_id": f"{stream}-{n}", "amount": amount, "date": day,
            "direction": direction, **fields}


def days_ago(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


def streams(ports: Ports, *keys: str) -> None:
    for key in keys:
        create_stream(ports.data_streams, ENV, key=key, name=key.title(), type_=StreamType.API)


def new_reconciliation(ports: Ports, name: str = "Bank to ledger", run_type: RunType = RunType.BATCH,
                       side_a=("bank",), side_b=("ledger",)) -> Reconciliation:
    return create_reconciliation(ports, ENV, name=name, run_type=run_type, side_a=list(side_a), side_b=list(side_b),
                                 exception_after_days=3)


def matched_by_a_run(ports: Ports, reconciliation: Reconciliation, rule: Rule, side_a: list[int], side_b: list[int],
                     status: MatchStatus = MatchStatus.CONFIRMED) -> Match:
    """A match as a run's persist phase writes it (members, claims, commit marker)."""
    match = Match(environment=ENV, id=ports.counters.next_id(ENV, "match"), reconciliation_id=reconciliation.id,
                  status=status, group_key="", record_count=len(side_a) + len(side_b), created_at=utc_now(),
                  reconciliation_rule_id=rule.id)
    members = [MatchMember(side, record_id, ports.records.get(ENV, record_id).data_stream_key)
               for side, ids in (("a", side_a), ("b", side_b)) for record_id in ids]
    uses = used_by(ports.reconciliations, ENV, {m.data_stream_key for m in members})
    assert write_matches(ports, [(match, members)], uses) == [match]
    return match


@pytest.fixture
def ports() -> Ports:
    return fake_ports()


@pytest.fixture
def clock() -> Iterator[FrozenClock]:
    """`utc_now` frozen at the present (to the microsecond), moved by `clock.advance(...)`."""
    with clock_in_use(FrozenClock(utc_now())) as frozen:
        yield frozen


@pytest.fixture
def ingest(ports):
    """Submit a bulk request and process it (as the worker would); the ids of the records written."""
    def ingest(*records):
        job = submit_bulk(ports, ENV, list(records), OnConflict.SKIP, None)
        process_job(ports, ENV, job.id)
        results = ports.ingestion_jobs.results(ENV, job.id)
        assert all(r.status is ItemStatus.SUCCESSFUL for r in results), results
        return [r.record_id for r in results]
    return ingest


@pytest.fixture
def reconciliation(ports) -> Reconciliation:
    """Streams bank and ledger, and a batch reconciliation between them (as tests/integration's)."""
    streams(ports, "bank", "ledger")
    return new_reconciliation(ports)
