"""The four status tables, pinned move by move: every allowed move, every other pair refused, the
finished statuses (no way out) and the sources of each target (the "from" statuses of a
conditional move), as literal tables so that a change of any of them shows here."""
from datetime import UTC, datetime
from itertools import product

import pytest

from chalicelib.domain.errors import TransitionRefused
from chalicelib.domain.ingestion import JOB_STATUSES, JobStatus
from chalicelib.domain.investigations.investigation import INVESTIGATION_STATUSES, InvestigationStatus
from chalicelib.domain.reconciliation_exceptions import (
    EXCEPTION_STATUSES,
    ExceptionStatus,
    ReconciliationException,
)
from chalicelib.domain.runs import RUN_STATUSES, RunStatus

J, R, INV, X = JobStatus, RunStatus, InvestigationStatus, ExceptionStatus

# entity: (statuses, {source: targets}, finished)
EXPECTED = {
    "ingestion job": (J, {
        J.PENDING: {J.PROCESSING, J.FAILED, J.CANCELLED},
        J.PROCESSING: {J.REPLICATING, J.COMPLETED, J.FAILED, J.CANCELLED},
        J.REPLICATING: {J.COMPLETED, J.FAILED},
    }, {J.COMPLETED, J.FAILED, J.CANCELLED}),
    "run": (R, {
        R.PENDING: {R.RUNNING, R.FAILED, R.CANCELLED},
        R.RUNNING: {R.COMPLETED, R.FAILED, R.CANCELLED},
    }, {R.COMPLETED, R.FAILED, R.CANCELLED}),
    "investigation": (INV, {
        INV.PENDING: {INV.RUNNING, INV.FAILED},
        INV.RUNNING: {INV.COMPLETED, INV.FAILED},
    }, {INV.COMPLETED, INV.FAILED}),
    "exception": (X, {
        X.OPEN: {X.INVESTIGATING, X.DISMISSED, X.RESOLVED},
        X.INVESTIGATING: {X.OPEN, X.DISMISSED, X.RESOLVED},
        X.DISMISSED: {X.OPEN},
        X.RESOLVED: {X.OPEN},
    }, set()),
}

# How each entity's table is asked: can_move(a, b), the finished statuses, sources_of(target).
ACTUAL = {entity: (machine.can_move, machine.finished, machine.sources_of) for entity, machine in {
    "ingestion job": JOB_STATUSES, "run": RUN_STATUSES, "investigation": INVESTIGATION_STATUSES,
    "exception": EXCEPTION_STATUSES,
}.items()}

PAIRS = [(entity, a, b) for entity, (statuses, _, _) in EXPECTED.items() for a, b in product(statuses, repeat=2)]


@pytest.mark.parametrize("entity, source, target", PAIRS, ids=lambda v: getattr(v, "value", v))
def test_a_move_is_allowed_exactly_when_the_table_lists_it(entity, source, target):
    _, moves, _ = EXPECTED[entity]
    can_move, _, _ = ACTUAL[entity]
    assert can_move(source, target) is (target in moves.get(source, set()))


@pytest.mark.parametrize("entity, source, target", [
    ("ingestion job", J.COMPLETED, J.PROCESSING), ("ingestion job", J.REPLICATING, J.CANCELLED),
    ("ingestion job", J.PENDING, J.COMPLETED), ("ingestion job", J.PROCESSING, J.PENDING),
    ("run", R.PENDING, R.COMPLETED), ("run", R.FAILED, R.RUNNING), ("run", R.RUNNING, R.PENDING),
    ("run", R.CANCELLED, R.RUNNING), ("run", R.COMPLETED, R.CANCELLED),
    ("investigation", INV.PENDING, INV.COMPLETED), ("investigation", INV.COMPLETED, INV.FAILED),
    ("exception", X.DISMISSED, X.RESOLVED), ("exception", X.RESOLVED, X.INVESTIGATING),
    ("exception", X.OPEN, X.OPEN),
])
def test_forbidden_moves_are_refused(entity, source, target):
    can_move, _, _ = ACTUAL[entity]
    assert not can_move(source, target)


@pytest.mark.parametrize("entity", EXPECTED)
def test_finished_statuses_are_those_with_no_way_out(entity):
    _, finished, _ = ACTUAL[entity]
    assert set(finished) == EXPECTED[entity][2]


@pytest.mark.parametrize("entity", EXPECTED)
def test_sources_of_each_target_in_status_order(entity):
    statuses, moves, _ = EXPECTED[entity]
    _, _, sources_of = ACTUAL[entity]
    for target in statuses:
        assert tuple(sources_of(target)) == tuple(s for s in statuses if target in moves.get(s, set())), target


def test_an_exception_moves_along_its_table_and_stays_put_when_moved_to_its_own_status():
    now = datetime(2024, 5, 1, tzinfo=UTC)
    exception = ReconciliationException(
        environment="acme", id=1, reconciliation_id=2, data_stream_key="bank", data_stream_id=3, title="t",
        description="d", status=X.OPEN, created_at=now, updated_at=now, opened_at=now)
    assert exception.moved(X.OPEN, now) is exception
    resolved = exception.moved(X.RESOLVED, now)
    assert (resolved.status, resolved.closed_at) == (X.RESOLVED, now)
    with pytest.raises(TransitionRefused, match="an exception that is resolved cannot become dismissed"):
        resolved.moved(X.DISMISSED, now)
    reopened = resolved.moved(X.OPEN, now)
    assert (reopened.status, reopened.closed_at) == (X.OPEN, None)
