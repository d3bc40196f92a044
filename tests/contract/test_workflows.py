"""Starting workflows: one execution per name. On moto, StepFunctionsWorkflows meets Step Functions'
own answer to a repeated name (moto runs none of our tasks, but keeps the executions started); the
in-process driver is built from a one-Task definition whose task waits until the test lets it go."""
from __future__ import annotations

import threading
import time

from chalicelib.local.statemachines import LocalStateMachine, LocalWorkflows
from tests.fakes.workflows import FakeWorkflows

INPUT = {"environment": "acme", "job_id": 7}


class TestWorkflows:
    def test_a_repeated_name_starts_nothing_whatever_its_input(self, backend, workflows):
        workflows.start("acme-7-0", INPUT)
        workflows.start("acme-7-0", INPUT)  # the same name and input while it runs
        workflows.start("acme-7-0", {**INPUT, "job_id": 8})  # another input: ExecutionAlreadyExists, swallowed
        workflows.start("acme-7-1", {**INPUT, "attempt": 1})
        assert backend.executions() == {"acme-7-0": INPUT, "acme-7-1": {**INPUT, "attempt": 1}}


class Driver:
    """LocalWorkflows over a one-Task machine; each execution records its input, then waits for `release`."""

    def __init__(self, synchronous: bool = False) -> None:
        self.inputs: list[dict] = []
        self.finished = 0
        self.release = threading.Event()
        if synchronous:
            self.release.set()
        definition = {"StartAt": "Work", "States": {"Work": {"Type": "Task", "Resource": "${Work}", "End": True}}}
        machine = LocalStateMachine(definition, {"Work": self._work}, {}, retry_delay_scale=0)
        self.workflows = LocalWorkflows(machine, log=lambda _: None, synchronous=synchronous)

    def _work(self, document, context):
        self.inputs.append(document)
        self.release.wait(10)
        self.finished += 1
        return document

    def wait_until(self, finished: int) -> None:
        deadline = time.monotonic() + 10
        while self.finished < finished and time.monotonic() < deadline:
            time.sleep(0.005)
        assert self.finished == finished


class TestTheInProcessDriver:
    def test_a_name_repeated_while_it_runs_starts_nothing_as_in_the_fake(self):
        driver, fake = Driver(), FakeWorkflows()
        for workflows in (driver.workflows, fake):
            workflows.start("acme-7-0", INPUT)
            workflows.start("acme-7-0", {**INPUT, "job_id": 8})
            workflows.start("acme-8-0", {**INPUT, "job_id": 9})
        driver.release.set()
        driver.wait_until(2)
        assert sorted(driver.inputs, key=lambda i: i["job_id"]) == [i for _, i in fake.executions] == [
            INPUT, {**INPUT, "job_id": 9}]

    def test_a_finished_name_runs_again_in_the_driver_only(self):
        """The one difference: Step Functions (and the fake) never run a name twice; the driver runs
        a name again once its first execution finished, as every start does in the synchronous
        driver the integration tests use."""
        driver, fake = Driver(synchronous=True), FakeWorkflows()
        for workflows in (driver.workflows, fake):
            workflows.start("acme-7-0", INPUT)
            workflows.start("acme-7-0", INPUT)
        assert (len(driver.inputs), len(fake.executions), len(fake.requests)) == (2, 1, 2)
