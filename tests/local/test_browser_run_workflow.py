"""infra/statemachines/browser_run.asl.json, as infra/workflows.yaml wires it, run by the local driver
with scripted functions in place of the app's and the browser worker's: an attempt that asks for a
code pauses the run on a task token until the code is sent, no code in time expires the run, and
an attempt that raises gives the run up with the error."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from chalicelib.local.provision import IMAGE_FUNCTIONS, WORKFLOWS_TEMPLATE_PATH, function_of_parameter, load_template
from chalicelib.local.statemachines import LocalTaskTokens, imported_handler, local_workflows

PARAMETERS, REGION = {"DataBucketName": "b"}, "us-east-1"
RUN = {"environment": "acme", "agent_id": "portal-bot", "run_id": 4}


class Portal:
    """The run's functions, scripted: each attempt returns the next status (or raises an exception)."""

    def __init__(self, *attempts) -> None:
        self.attempts = list(attempts)
        self.calls: list[tuple[str, dict]] = []
        self.paused = threading.Event()
        self.ended = threading.Event()

    @property
    def handler_map(self) -> dict:
        def attempt(event, context):
            self.calls.append(("attempt", event))
            outcome = self.attempts.pop(0)
            if isinstance(outcome, Exception):
                raise outcome
            return {"status": outcome}

        def pause(event, context):
            self.calls.append(("pause", event))
            self.paused.set()
            return {}

        def end(name):
            def function(event, context):
                self.calls.append((name, event))
                self.ended.set()
                return {}
            return function

        return {"browser_run_attempt": attempt, "browser_run_pause": pause, "browser_run_expire": end("expire"),
                "browser_run_fail": end("fail")}

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def wait_for(self, calls: int) -> None:
        deadline = time.monotonic() + 5
        while len(self.calls) < calls and time.monotonic() < deadline:
            time.sleep(0.01)


def run(portal: Portal, verification_timeout_seconds: int = 30):
    """The run's execution started on its own thread; what the driver logs (a pause, a failure) in `log`."""
    tokens, log = LocalTaskTokens(), []
    workflows = local_workflows(portal, PARAMETERS, REGION, log=log.append, retry_delay_scale=0,
                                machine="BrowserRunStateMachine", task_tokens=tokens)
    workflows.start("browser-run-acme-4", {**RUN, "verification_timeout_seconds": verification_timeout_seconds})
    return workflows, tokens, log


def test_a_run_asked_for_a_code_pauses_until_the_code_is_sent_and_its_next_attempt_completes():
    portal = Portal("waiting_for_verification", "completed")
    workflows, tokens, log = run(portal)
    assert portal.paused.wait(5)
    [(_, paused)] = [call for call in portal.calls if call[0] == "pause"]
    assert paused == {**RUN, "task_token": paused["task_token"]} and paused["task_token"]
    assert portal.names() == ["attempt", "pause"]

    assert tokens.send_success(paused["task_token"], {}) is True

    portal.wait_for(3)
    assert workflows.stop(grace_seconds=5) == [] and log == []  # it ended (Done), not paused by the stop
    assert portal.names() == ["attempt", "pause", "attempt"]
    second = portal.calls[2][1]
    assert second == {**RUN, "verification_timeout_seconds": 30, "outcome": {"status": "waiting_for_verification"}}


def test_a_code_never_sent_expires_the_run():
    portal = Portal("waiting_for_verification")
    workflows, tokens, log = run(portal, verification_timeout_seconds=1)
    assert portal.ended.wait(10)

    assert portal.names() == ["attempt", "pause", "expire"]
    expired = portal.calls[2][1]
    assert {k: expired[k] for k in RUN} == RUN and expired["error"]["Error"] == "States.Timeout"
    assert tokens.send_success(portal.calls[1][1]["task_token"], {}) is False
    assert workflows.stop(grace_seconds=5) == [] and log == []


def test_an_attempt_that_raises_gives_the_run_up_with_the_error():
    portal = Portal(RuntimeError("Chromium crashed"))
    workflows, _, log = run(portal)
    assert portal.ended.wait(5)

    assert portal.names() == ["attempt", "fail"]
    assert portal.calls[1][1] == {**RUN, "verification_timeout_seconds": 30,
                                  "error": {"Error": "RuntimeError", "Cause": "Chromium crashed"}}
    assert workflows.stop(grace_seconds=5) == [] and log == []


def test_a_run_that_completes_or_fails_at_its_first_attempt_ends_there():
    for status in ("completed", "failed"):
        portal, log = Portal(status), []
        workflows = local_workflows(portal, PARAMETERS, REGION, log=log.append, synchronous=True,
                                    machine="BrowserRunStateMachine")
        workflows.start("browser-run-acme-4", {**RUN, "verification_timeout_seconds": 30})
        assert portal.names() == ["attempt"] and log == []


def test_each_task_of_the_browser_run_is_an_app_function_or_the_browser_worker():
    from app import app

    template = load_template(WORKFLOWS_TEMPLATE_PATH)
    references = template["Resources"]["BrowserRunStateMachine"]["Properties"]["DefinitionSubstitutions"]
    functions = {key: function_of_parameter(ref["Ref"]) for key, ref in references.items()}
    assert functions == {"BrowserRunAttemptFunction": "browser_run_attempt", "BrowserRunPauseFunction":
                         "browser_run_pause", "BrowserRunExpireFunction": "browser_run_expire",
                         "BrowserRunFailFunction": "browser_run_fail"}
    assert {f for f in functions.values() if f not in app.handler_map} == {"browser_run_attempt"} == set(IMAGE_FUNCTIONS)
    assert IMAGE_FUNCTIONS["browser_run_attempt"] == "chalicelib.handlers.browser.attempt_handler"
    statement = template["Resources"]["StateMachineRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][0]
    assert {ref["Ref"] for ref in references.values()} <= {ref["Ref"] for ref in statement["Resource"]}


def test_an_image_functions_handler_is_imported_only_when_a_task_calls_it():
    handler = imported_handler("tests.local.no_such_module.attempt_handler")  # built: nothing imported yet
    with pytest.raises(ModuleNotFoundError):
        handler({}, None)
    assert imported_handler(f"{__name__}.echo")({"a": 1}, "context") == ({"a": 1}, "context")


def echo(event, context):
    return event, context


def test_the_local_driver_runs_the_browser_worker_in_process_in_place_of_its_image(services):
    """With the app's functions (it has no browser_run_attempt), the attempt task runs
    chalicelib.handlers.browser.attempt_handler: here, for a run that is not stored, it answers that
    the run is gone, and the execution ends without giving up."""
    portal, log = Portal(), []
    handlers = {name: function for name, function in portal.handler_map.items() if name != "browser_run_attempt"}
    workflows = local_workflows(SimpleNamespace(handler_map=handlers), PARAMETERS, REGION, log=log.append,
                                synchronous=True, machine="BrowserRunStateMachine")

    workflows.start("browser-run-acme-4", {**RUN, "verification_timeout_seconds": 30})

    assert portal.calls == [] and log == []
