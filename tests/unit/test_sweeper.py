"""The sweeper does all the work it can, then fails when a step failed: the invocation counts in
the function's Errors metric (its alarm, infra/template.yaml SweepStuckJobsErrorsAlarm), where a
swallowed failure left it at 0."""
from __future__ import annotations

from functools import partial

import pytest

from chalicelib.handlers import sweeper
from tests.fakes import fake_ports


class RecordedSteps:
    """The sweep's steps, by name and in order, each replaced by a recorder that fails when its name
    is in `failing`, and counts an item it could not sweep when its name is in `erring`."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.failing: set[str] = set()
        self.erring: set[str] = set()  # steps that swept, but could not sweep one of their items
        self.steps = tuple((name, partial(self._step, name)) for name, _ in sweeper.SWEEP_STEPS)

    def _step(self, name: str, ports) -> int | dict[str, int]:
        self.ran.append(name)
        if name in self.failing:
            raise RuntimeError(f"{name} throttled")
        return {"failed": 1, "errors": 1} if name in self.erring else 1


@pytest.fixture
def steps() -> RecordedSteps:
    return RecordedSteps()


def test_a_failed_step_stops_no_other_and_the_sweep_fails_after_all_ran_naming_it(steps):
    steps.failing.update({"recounted_streams", "refreshed_exceptions"})
    with pytest.raises(sweeper.SweepFailed) as failed:
        sweeper.sweep_task(fake_ports(), steps.steps)
    assert steps.ran == [name for name, _ in sweeper.SWEEP_STEPS]  # every step had its turn, in order
    assert failed.value.failed == ["recounted_streams", "refreshed_exceptions"]
    assert "recounted_streams, refreshed_exceptions" in str(failed.value)


def test_a_step_that_could_not_sweep_an_item_fails_the_sweep_after_all_ran(steps):
    steps.erring.add("abandoned_investigations")
    with pytest.raises(sweeper.SweepFailed) as failed:
        sweeper.sweep_task(fake_ports(), steps.steps)
    assert steps.ran == [name for name, _ in sweeper.SWEEP_STEPS]
    assert failed.value.failed == ["abandoned_investigations"]


def test_a_sweep_whose_steps_all_ran_well_succeeds(steps):
    sweeper.sweep_task(fake_ports(), steps.steps)
    assert steps.ran == [name for name, _ in sweeper.SWEEP_STEPS]


def test_the_scheduled_function_fails_with_the_sweep_so_lambda_counts_an_error(services):
    """What Lambda runs on the schedule: the app's handler, given EventBridge's scheduled event, over
    moto: an empty world sweeps cleanly; with the table gone, every step fails and so does the function."""
    from app import sweep_stuck_jobs

    event = {"version": "0", "id": "e1", "detail-type": "Scheduled Event", "source": "aws.events",
             "account": "123456789012", "time": "2026-01-01T00:00:00Z", "region": "us-east-1",
             "resources": ["arn:aws:events:us-east-1:123456789012:rule/recon-prod-sweep_stuck_jobs"], "detail": {}}
    sweep_stuck_jobs(event, None)
    services.aws.dynamodb.delete_table(TableName=services.settings.table_name)
    with pytest.raises(sweeper.SweepFailed) as failed:
        sweep_stuck_jobs(event, None)
    assert "imports" in failed.value.failed and "runs" in failed.value.failed
