"""The sweeper does all the work it can, then fails when a step failed: the invocation counts in
the function's Errors metric (its alarm, infra/template.yaml SweepStuckJobsErrorsAlarm), where a
swallowed failure left it at 0."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from chalicelib.handlers import sweeper
from tests.fakes import fake_ports

# Every step of the sweep, as sweep_task names it, and the service function it calls.
STEPS = {
    "published_parked_events": (sweeper.events, "publish_parked"),
    "unfinished_requests_audited": (sweeper.audit, "record_unfinished"),
    "imports": (sweeper.ingestion_sweeper, "sweep"),
    "recounted_streams": (sweeper.data_streams, "sweep_recounts"),
    "runs": (sweeper.reconciliation_runs, "sweep"),
    "rolled_back_matches": (sweeper.matches, "sweep_pending"),
    "refreshed_exceptions": (sweeper.reconciliation_exceptions, "sweep"),
    "abandoned_investigations": (sweeper.investigations, "sweep"),
    "queued_webhook_deliveries": (sweeper.webhooks, "sweep"),
}


@pytest.fixture
def steps(monkeypatch):
    """Each step replaced by a recorder that fails when its name is in `failing`."""
    ran: list[str] = []
    failing: set[str] = set()
    for name, (module, function) in STEPS.items():
        def step(ports, name=name):
            ran.append(name)
            if name in failing:
                raise RuntimeError(f"{name} throttled")
            return 1
        monkeypatch.setattr(module, function, step)
    monkeypatch.setattr(sweeper, "container", lambda: SimpleNamespace(ports=fake_ports()))
    return SimpleNamespace(ran=ran, failing=failing)


def test_a_failed_step_stops_no_other_and_the_sweep_fails_after_all_ran_naming_it(steps):
    steps.failing.update({"recounted_streams", "refreshed_exceptions"})
    with pytest.raises(sweeper.SweepFailed) as failed:
        sweeper.sweep_task()
    assert steps.ran == list(STEPS)  # every step had its turn, in order
    assert failed.value.failed == ["recounted_streams", "refreshed_exceptions"]
    assert "recounted_streams, refreshed_exceptions" in str(failed.value)


def test_a_sweep_whose_steps_all_ran_well_succeeds(steps):
    sweeper.sweep_task()
    assert steps.ran == list(STEPS)


def test_the_scheduled_function_fails_with_the_sweep_so_lambda_counts_an_error(steps):
    """What Lambda runs on the schedule: the app's handler, given EventBridge's scheduled event."""
    from app import sweep_stuck_jobs

    event = {"version": "0", "id": "e1", "detail-type": "Scheduled Event", "source": "aws.events",
             "account": "123456789012", "time": "2026-01-01T00:00:00Z", "region": "us-east-1",
             "resources": ["arn:aws:events:us-east-1:123456789012:rule/recon-prod-sweep_stuck_jobs"], "detail": {}}
    steps.failing.add("runs")
    with pytest.raises(sweeper.SweepFailed):
        sweep_stuck_jobs(event, None)
    steps.failing.clear()
    sweep_stuck_jobs(event, None)


def test_every_step_of_the_sweep_is_replaced_here():
    """STEPS names every step sweep_task runs: one added there is added here, or these tests miss it."""
    import inspect

    source = inspect.getsource(sweeper.sweep_task)
    assert [line.split('"')[1] for line in source.splitlines() if line.strip().startswith('("')] == list(STEPS)
