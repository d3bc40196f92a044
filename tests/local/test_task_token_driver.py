"""The local Step Functions driver (chalicelib/local/statemachines.py) runs what the browser-run
machine needs as Step Functions does: a Task's ResultPath, the `lambda:invoke.waitForTaskToken`
integration (its Parameters, `$$.Task.Token`, its timeout into a Catch as States.Timeout), and the
local task tokens that resume it. Each machine here is a small definition with scripted functions."""
from __future__ import annotations

import threading
import time

import pytest

from chalicelib.local.statemachines import (
    WAIT_FOR_TASK_TOKEN,
    LocalStateMachine,
    LocalTaskTokens,
    LocalWorkflows,
    StatesError,
)

AWAIT = {"Type": "Task", "Resource": WAIT_FOR_TASK_TOKEN,
         "Parameters": {"FunctionName": "${Pause}",
                        "Payload": {"run_id.$": "$.run_id", "token.$": "$$.Task.Token", "fixed": "as written"}},
         "TimeoutSecondsPath": "$.timeout", "ResultPath": "$.sent",
         "Catch": [{"ErrorEquals": ["States.Timeout"], "ResultPath": "$.error", "Next": "Expired"}],
         "Next": "After"}
WAITING = {"StartAt": "Await", "States": {
    "Await": AWAIT,
    "After": {"Type": "Task", "Resource": "${After}", "ResultPath": "$.after", "End": True},
    "Expired": {"Type": "Task", "Resource": "${Expired}", "End": True}}}


class Scripted:
    """The functions of a machine, recording what each was given."""

    def __init__(self, pause=None) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.paused = threading.Event()
        self._pause = pause

    def functions(self) -> dict:
        def pause(event, context):
            self.calls.append(("Pause", event))
            if self._pause:
                self._pause(event)
            self.paused.set()
            return {"ignored": "the task's result is what is sent for its token"}

        def record(name):
            def function(event, context):
                self.calls.append((name, event))
                return {"by": name}
            return function

        return {"Pause": pause, "After": record("After"), "Expired": record("Expired")}

    def token(self) -> str:
        assert self.paused.wait(5)
        return next(event["token"] for name, event in self.calls if name == "Pause")


def started(definition: dict, scripted: Scripted, payload: dict, tokens: LocalTaskTokens | None = None):
    """The machine running on a thread; the result (or the error) lands in the returned dict."""
    machine = LocalStateMachine(definition, scripted.functions(), {}, retry_delay_scale=0, task_tokens=tokens)
    outcome: dict = {}

    def run():
        try:
            outcome["output"] = machine.run(payload, "run-1")
        except Exception as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return machine, thread, outcome


def test_a_task_token_wait_resumes_on_send_success_and_the_execution_goes_on_to_the_next_state():
    scripted, tokens = Scripted(), LocalTaskTokens()
    machine, thread, outcome = started(WAITING, scripted, {"run_id": 7, "timeout": 30}, tokens)
    token = scripted.token()
    time.sleep(0.2)
    assert thread.is_alive()  # waiting for the token

    assert tokens.send_success(token, {"code": "sent"}) is True

    thread.join(5)
    assert outcome == {"output": {"run_id": 7, "timeout": 30, "sent": {"code": "sent"}, "after": {"by": "After"}}}
    assert scripted.calls == [("Pause", {"run_id": 7, "token": token, "fixed": "as written"}),
                              ("After", {"run_id": 7, "timeout": 30, "sent": {"code": "sent"}})]
    assert tokens.send_success(token, {"code": "again"}) is False  # its task is over


def test_a_wait_with_no_send_times_out_into_the_catch_as_states_timeout():
    scripted, tokens = Scripted(), LocalTaskTokens()
    started_at = time.monotonic()
    machine, thread, outcome = started(WAITING, scripted, {"run_id": 7, "timeout": 1}, tokens)
    token = scripted.token()

    thread.join(10)

    assert 1 <= time.monotonic() - started_at < 5
    [(name, given)] = [call for call in scripted.calls if call[0] != "Pause"]
    assert name == "Expired" and given["run_id"] == 7 and given["error"]["Error"] == "States.Timeout"
    assert outcome == {"output": {"by": "Expired"}}
    assert tokens.send_success(token, {"code": "too late"}) is False


def test_states_task_failed_does_not_catch_a_timeout_and_states_all_does():
    for names, caught in ((["States.TaskFailed"], False), (["States.ALL"], True)):
        definition = {"StartAt": "Await", "States": {
            "Await": {**AWAIT, "Catch": [{"ErrorEquals": names, "ResultPath": "$.error", "Next": "Expired"}]},
            "After": {"Type": "Succeed"}, "Expired": {"Type": "Task", "Resource": "${Expired}", "End": True}}}
        machine, thread, outcome = started(definition, Scripted(), {"run_id": 1, "timeout": 1})
        thread.join(10)
        if caught:
            assert outcome == {"output": {"by": "Expired"}}
        else:
            assert isinstance(outcome["error"], StatesError) and outcome["error"].name == "States.Timeout"


def test_send_success_on_an_unknown_token_returns_false():
    tokens = LocalTaskTokens()
    assert tokens.send_success("no-such-token", {}) is False
    assert tokens.send_success("", {}) is False


def test_a_token_sent_while_its_task_function_still_runs_is_kept():
    """As browser_runs.pause does when the code came before the token: it sends it on at once."""
    tokens = LocalTaskTokens()
    answers = []
    scripted = Scripted(pause=lambda event: answers.append(tokens.send_success(event["token"], {"early": True})))
    machine, thread, outcome = started(WAITING, scripted, {"run_id": 3, "timeout": 30}, tokens)

    thread.join(5)

    assert answers == [True]
    assert outcome["output"]["sent"] == {"early": True} and outcome["output"]["after"] == {"by": "After"}


def test_a_retried_wait_hands_its_function_a_new_token_and_the_first_one_is_dead():
    class Flaky(Exception):
        pass

    tokens = LocalTaskTokens()
    calls = []

    def pause(event):
        calls.append(event["token"])
        if len(calls) == 1:
            raise Flaky("the first call fails")

    definition = {"StartAt": "Await", "States": {
        "Await": {**AWAIT, "Retry": [{"ErrorEquals": ["Flaky"], "MaxAttempts": 2}]},
        "After": {"Type": "Succeed"}, "Expired": {"Type": "Succeed"}}}
    scripted = Scripted(pause=pause)
    machine, thread, outcome = started(definition, scripted, {"run_id": 3, "timeout": 30}, tokens)
    assert scripted.paused.wait(5)

    first, second = calls
    assert first != second
    assert tokens.send_success(first, {}) is False
    assert tokens.send_success(second, {"ok": 1}) is True
    thread.join(5)
    assert outcome["output"]["sent"] == {"ok": 1}


def test_a_stop_ends_a_wait_for_a_task_token_at_once_and_its_token_with_it():
    stopping, tokens, log = threading.Event(), LocalTaskTokens(), []
    scripted = Scripted()
    machine = LocalStateMachine(WAITING, scripted.functions(), {}, stopping=stopping, task_tokens=tokens)
    workflows = LocalWorkflows(machine, log=log.append)
    workflows.start("browser-run-1", {"run_id": 1, "timeout": 600})
    token = scripted.token()

    assert workflows.stop(grace_seconds=2) == []

    assert log == ["execution browser-run-1 paused while waiting for a task token; "
                   "it resumes when the stack starts again"]
    assert tokens.send_success(token, {}) is False


def test_result_path_null_keeps_the_input_and_a_path_puts_the_result_under_it_as_on_aws():
    definition = {"StartAt": "Replace", "States": {
        "Replace": {"Type": "Task", "Resource": "${Answer}", "Next": "Keep"},  # no ResultPath: "$"
        "Keep": {"Type": "Task", "Resource": "${Answer}", "ResultPath": None, "Next": "Under"},
        "Under": {"Type": "Task", "Resource": "${Answer}", "ResultPath": "$.outcome", "Next": "Deeper"},
        "Deeper": {"Type": "Task", "Resource": "${Answer}", "ResultPath": "$.outcome.again", "End": True}}}
    seen = []

    def answer(event, context):
        seen.append(event)
        return {"status": "completed"} if len(seen) > 1 else {"kept": "only this", "outcome": {"status": "old"}}

    output = LocalStateMachine(definition, {"Answer": answer}, {}).run({"run_id": 1})

    assert seen == [{"run_id": 1},
                    {"kept": "only this", "outcome": {"status": "old"}},  # the first result replaced the input
                    {"kept": "only this", "outcome": {"status": "old"}},  # null: the input went on as it was
                    {"kept": "only this", "outcome": {"status": "completed"}}]  # $.outcome: replaced, the rest kept
    assert output == {"kept": "only this", "outcome": {"status": "completed", "again": {"status": "completed"}}}


def test_a_result_path_into_an_input_that_is_no_object_is_a_states_error():
    definition = {"StartAt": "Under", "States": {
        "Under": {"Type": "Task", "Resource": "${Answer}", "ResultPath": "$.outcome", "End": True}}}
    with pytest.raises(StatesError) as raised:
        LocalStateMachine(definition, {"Answer": lambda event, context: 1}, {}).run(["a", "list"])
    assert raised.value.name == "States.ResultPathMatchFailure"


def test_lambda_invoke_without_the_wait_gives_the_invoke_response_with_the_payload():
    definition = {"StartAt": "Invoke", "States": {"Invoke": {
        "Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "ResultPath": "$.invoked",
        "Parameters": {"FunctionName": "${Echo}", "Payload": {"x.$": "$.x", "state.$": "$$.State.Name"}},
        "End": True}}}
    output = LocalStateMachine(definition, {"Echo": lambda event, context: event}, {}).run({"x": 1})
    assert output == {"x": 1, "invoked": {"ExecutedVersion": "$LATEST", "Payload": {"x": 1, "state": "Invoke"},
                                          "StatusCode": 200}}


def test_a_path_that_matches_nothing_fails_the_execution_past_any_catch():
    """States.Runtime, as on AWS: even a Catch of States.ALL does not take it."""
    definition = {"StartAt": "Await", "States": {
        "Await": {**AWAIT, "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Expired"}]},
        "After": {"Type": "Succeed"}, "Expired": {"Type": "Task", "Resource": "${Expired}", "End": True}}}
    scripted, tokens = Scripted(), LocalTaskTokens()
    machine = LocalStateMachine(definition, scripted.functions(), {}, task_tokens=tokens)
    with pytest.raises(StatesError) as raised:
        machine.run({"timeout": 30})  # no run_id for the Payload
    assert raised.value.name == "States.Runtime" and scripted.calls == []
    with pytest.raises(StatesError, match="positive integer"):
        machine.run({"run_id": 1, "timeout": "30"})


def test_what_the_driver_would_not_run_as_step_functions_does_is_refused_when_it_is_built():
    task = {"Type": "Task", "Resource": "${Work}", "End": True}
    for state, refused in (
        ({**task, "InputPath": "$.x"}, "InputPath"),
        ({**task, "TimeoutSeconds": 5}, "times out only a wait"),
        ({**task, "Resource": "arn:aws:states:::sqs:sendMessage"}, "Lambda functions only"),
        ({**task, "Resource": WAIT_FOR_TASK_TOKEN, "Parameters": {"Payload": {}}}, "FunctionName"),
        ({**task, "Resource": WAIT_FOR_TASK_TOKEN, "Parameters": {"FunctionName": "${Work}",
                                                                 "Payload": {"a.$": "States.Format('{}', $.x)"}}},
         "intrinsic"),
        ({**task, "Resource": "${Missing}"}, "no function Missing"),
        ({"Type": "Parallel", "End": True}, "type Parallel"),
        ({"Type": "Map", "End": True}, "ItemReader or at an ItemsPath"),
    ):
        with pytest.raises(ValueError, match=refused):
            LocalStateMachine({"StartAt": "S", "States": {"S": state}}, {"Work": lambda e, c: e}, {})
