"""Runs the state machines of infra/statemachines/*.asl.json in-process, in local mode and in tests.

moto accepts the definitions but cannot run our Lambda tasks without Docker, so this small
driver interprets the states our definitions use (Task, Choice, Pass, Succeed, Fail, with
Retry and Catch) and calls each Task's Chalice `lambda_function` in-process: the same
functions, in the order the ASL gives, that Step Functions calls on AWS.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chalice.local import LambdaContext

STATEMACHINES_DIR = Path(__file__).resolve().parents[2] / "infra" / "statemachines"
MAX_TRANSITIONS = 100_000


class ExecutionFailed(Exception):
    pass


class ExecutionPaused(Exception):
    """The process is stopping: the execution ends between two states, at a checkpoint, and the
    stack resumes its work when it starts again (services/resumption.py)."""


def load_definition(name: str) -> dict[str, Any]:
    return json.loads((STATEMACHINES_DIR / f"{name}.asl.json").read_text())


def _path(document: Any, path: str) -> Any:
    if path == "$":
        return document
    value = document
    for part in path.removeprefix("$.").split("."):
        value = value[part]
    return value


def _choice_matches(rule: dict[str, Any], document: Any) -> bool:
    if "And" in rule:
        return all(_choice_matches(r, document) for r in rule["And"])
    if "Or" in rule:
        return any(_choice_matches(r, document) for r in rule["Or"])
    if "Not" in rule:
        return not _choice_matches(rule["Not"], document)
    try:
        value = _path(document, rule["Variable"])
    except (KeyError, TypeError):
        return False
    for operator, compare in (("StringEquals", lambda a, b: a == b), ("BooleanEquals", lambda a, b: a is b),
                              ("NumericEquals", lambda a, b: a == b)):
        if operator in rule:
            return compare(value, rule[operator])
    raise ValueError(f"unsupported Choice rule {rule}")


def _task_resource_name(resource: str) -> str:
    """'${ChunkFunction}' or 'arn:...:function:recon-local-file_import_chunks' -> the function's name."""
    return resource.removeprefix("${").removesuffix("}").rsplit(":", 1)[-1]


class LocalStateMachine:
    def __init__(self, definition: dict[str, Any], functions: dict[str, Callable[[Any, Any], Any]],
                 substitutions: dict[str, str], retry_delay_scale: float = 1.0,
                 stopping: threading.Event | None = None) -> None:
        self._definition = definition
        self._functions = functions
        self._substitutions = substitutions
        self._retry_delay_scale = retry_delay_scale
        self.stopping = stopping or threading.Event()

    def _function(self, resource: str) -> Callable[[Any, Any], Any]:
        key = _task_resource_name(resource)
        return self._functions[self._substitutions.get(key, key)]

    def run(self, payload: Any) -> Any:
        states = self._definition["States"]
        name = self._definition["StartAt"]
        document = payload
        for _ in range(MAX_TRANSITIONS):
            if self.stopping.is_set():
                raise ExecutionPaused(f"paused before state {name}")
            state = states[name]
            kind = state["Type"]
            if kind == "Succeed":
                return document
            if kind == "Fail":
                raise ExecutionFailed(f"{state.get('Error', 'Failed')}: {state.get('Cause', '')}")
            if kind == "Pass":
                document = state.get("Result", document)
            elif kind == "Choice":
                name = next((rule["Next"] for rule in state["Choices"] if _choice_matches(rule, document)),
                            state.get("Default"))
                if name is None:
                    raise ExecutionFailed("no Choice rule matched and no Default")
                continue
            elif kind == "Task":
                try:
                    document = self._run_task(state, document)
                except Exception as error:
                    catcher = next((c for c in state.get("Catch", []) if _error_matches(c["ErrorEquals"], error)),
                                   None)
                    if catcher is None:
                        raise
                    failure = {"Error": type(error).__name__, "Cause": str(error)}
                    document = _put(document, catcher.get("ResultPath", "$"), failure)
                    name = catcher["Next"]
                    continue
            else:
                raise ValueError(f"state type {kind} is not supported by the local driver")
            if state.get("End"):
                return document
            name = state["Next"]
        raise ExecutionFailed(f"more than {MAX_TRANSITIONS} transitions")

    def _run_task(self, state: dict[str, Any], document: Any) -> Any:
        function = self._function(state["Resource"])
        retriers = state.get("Retry", [])
        attempts: dict[int, int] = {}
        while True:
            try:
                context = LambdaContext(function_name=_task_resource_name(state["Resource"]), memory_size=1024,
                                        max_runtime_ms=900_000)
                return function(document, context)
            except Exception as error:
                index = next((i for i, r in enumerate(retriers) if _error_matches(r["ErrorEquals"], error)), None)
                if index is None:
                    raise
                retrier = retriers[index]
                attempts[index] = attempts.get(index, 0) + 1
                if attempts[index] > retrier.get("MaxAttempts", 3):
                    raise
                delay = retrier.get("IntervalSeconds", 1) * retrier.get("BackoffRate", 2.0) ** (attempts[index] - 1)
                if self.stopping.wait(delay * self._retry_delay_scale):
                    raise ExecutionPaused("paused while waiting to retry a task") from error


def _error_matches(names: list[str], error: Exception) -> bool:
    return "States.ALL" in names or "States.TaskFailed" in names or type(error).__name__ in names


def _put(document: Any, path: str, value: Any) -> Any:
    if path == "$":
        return value
    if path is None:
        return document
    result = dict(document)
    result[path.removeprefix("$.")] = value
    return result


class LocalWorkflows:
    """The `start` of StepFunctionsWorkflows, run on a background thread in this process."""

    def __init__(self, machine: LocalStateMachine, log: Callable[[str], None] = print,
                 synchronous: bool = False) -> None:
        self._machine = machine
        self._log = log
        self._synchronous = synchronous
        self._running: set[str] = set()
        self._lock = threading.Lock()

    def start(self, execution_name: str, payload: dict) -> None:
        with self._lock:
            if execution_name in self._running:
                return  # like Step Functions: one running execution per name
            self._running.add(execution_name)
        if self._synchronous:
            self._execute(execution_name, payload)
        else:
            threading.Thread(target=self._execute, args=(execution_name, payload), daemon=True,
                             name=f"sfn-{execution_name}").start()

    def _execute(self, execution_name: str, payload: dict) -> None:
        try:
            self._machine.run(payload)
        except ExecutionPaused as paused:
            self._log(f"execution {execution_name} {paused}; it resumes when the stack starts again")
        except Exception as error:
            self._log(f"execution {execution_name} failed: {error!r}")
        finally:
            with self._lock:
                self._running.discard(execution_name)

    def stop(self, grace_seconds: float) -> list[str]:
        """Stop every execution at its next state (a task in progress finishes first); wait for
        them at most `grace_seconds`. Returns the executions still running then."""
        self._machine.stopping.set()
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline:
            with self._lock:
                if not self._running:
                    return []
            time.sleep(0.05)
        with self._lock:
            return sorted(self._running)


def local_workflows(app, parameters: dict[str, str], region: str, log: Callable[[str], None] = print,
                    synchronous: bool = False, retry_delay_scale: float = 1.0,
                    machine: str = "FileImportStateMachine", stopping: threading.Event | None = None) -> LocalWorkflows:
    """A state machine of infra/workflows.yaml (its resource name), its tasks bound to this app's
    lambda functions."""
    from chalicelib.local.provision import function_of_parameter, state_machine_definition, workflows_resolver

    template, resolver = workflows_resolver(parameters, region)
    definition, _ = state_machine_definition(template, resolver, machine)
    # Each substitution is a Ref to a `<Function>Arn` parameter: the function is in its name.
    references = template["Resources"][machine]["Properties"]["DefinitionSubstitutions"]
    functions = {key: function for key, ref in references.items()
                 if (function := function_of_parameter(ref["Ref"])) is not None}
    state_machine = LocalStateMachine(definition, app.handler_map, functions, retry_delay_scale, stopping)
    return LocalWorkflows(state_machine, log=log, synchronous=synchronous)
