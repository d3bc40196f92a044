"""The local Step Functions driver stops an execution between two states when the stack stops, so
that the work stops at a checkpoint (the task in progress finishes first)."""
import threading

from chalicelib.local.statemachines import LocalStateMachine, LocalWorkflows

LOOP = {"StartAt": "Step", "States": {
    "Step": {"Type": "Task", "Resource": "${Step}", "Next": "More"},
    "More": {"Type": "Choice", "Choices": [{"Variable": "$.left", "NumericEquals": 0, "Next": "Done"}],
             "Default": "Step"},
    "Done": {"Type": "Succeed"}}}


def test_a_stop_ends_each_execution_after_the_task_in_progress_and_before_the_next():
    stopping = threading.Event()
    in_task, release, steps, log = threading.Event(), threading.Event(), [], []

    def step(document, context):
        steps.append(document["left"])
        in_task.set()
        release.wait(5)
        return {"left": document["left"] - 1}

    workflows = LocalWorkflows(LocalStateMachine(LOOP, {"Step": step}, {}, stopping=stopping), log=log.append)
    workflows.start("import-1", {"left": 5})
    assert in_task.wait(5)

    stopping.set()
    release.set()
    assert workflows.stop(grace_seconds=5) == []

    assert steps == [5]  # the task in hand finished; no other began
    assert log == ["execution import-1 paused before state More; it resumes when the stack starts again"]


def test_stop_names_the_executions_still_in_a_task_when_the_grace_runs_out():
    release = threading.Event()
    started = threading.Event()

    def step(document, context):
        started.set()
        release.wait(5)
        return {"left": 0}

    workflows = LocalWorkflows(LocalStateMachine(LOOP, {"Step": step}, {}), log=lambda _: None)
    workflows.start("run-7", {"left": 1})
    assert started.wait(5)
    assert workflows.stop(grace_seconds=0.1) == ["run-7"]
    release.set()
