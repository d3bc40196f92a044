"""Runs the state machines of infra/statemachines/*.asl.json in-process, in local mode and in tests.

moto accepts the definitions but cannot run our Lambda tasks without Docker, so this small
driver interprets the states our definitions use (Task, Choice, Pass, Succeed, Fail, with Retry,
Catch and ResultPath; a Task's function named by its Resource, or by the Parameters of the
`lambda:invoke` integration and of its `.waitForTaskToken` form, which waits for SendTaskSuccess
at most TimeoutSeconds) and calls each Task's function in-process: the same functions, in the
order the ASL gives, that Step Functions calls on AWS. A definition that uses anything else is
refused when the driver is built, rather than run half understood.

A Map state (a Distributed Map's too) runs its ItemProcessor's states for each item: the items
of its ItemReader (a JSON array in S3, read through the stack's S3 client) or at its ItemsPath,
each shaped by its ItemSelector (`$$.Map.Item.Value`, `$$.Map.Item.Index`), on threads: at most
MaxConcurrency (or the one at MaxConcurrencyPath) and at most the machine's CPUs at once. An item
retries and catches as its states say; one that fails all the same fails the Map (no failure
tolerated: States.ExceedToleratedFailureThreshold, naming the item), once the items already
started have ended, and starts no other. The Map's result is the items' outputs, in order.
"""
from __future__ import annotations

import importlib
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chalice.local import LambdaContext

from chalicelib.domain.executions import MAP_ITEM_FAILED

STATEMACHINES_DIR = Path(__file__).resolve().parents[2] / "infra" / "statemachines"
MAX_TRANSITIONS = 100_000
LAMBDA_INVOKE = "arn:aws:states:::lambda:invoke"
WAIT_FOR_TASK_TOKEN = f"{LAMBDA_INVOKE}.waitForTaskToken"
LAMBDA_INTEGRATIONS = (LAMBDA_INVOKE, WAIT_FOR_TASK_TOKEN)  # their Parameters name the function
# How often a wait for a task token looks whether the stack is stopping.
TOKEN_POLL_SECONDS = 0.1

_FIELDS = {
    "Task": {"Resource", "Parameters", "ResultPath", "TimeoutSeconds", "TimeoutSecondsPath", "Retry", "Catch",
             "Next", "End"},
    "Choice": {"Choices", "Default"},
    "Pass": {"Result", "ResultPath", "Next", "End"},
    "Succeed": set(),
    "Fail": {"Error", "Cause"},
    "Map": {"ItemReader", "ItemsPath", "ItemSelector", "ItemProcessor", "MaxConcurrency", "MaxConcurrencyPath",
            "ToleratedFailurePercentage", "Label", "ResultPath", "Catch", "Next", "End"},
}
S3_GET_OBJECT = "arn:aws:states:::s3:getObject"
MAP_FAILED = MAP_ITEM_FAILED


class ExecutionFailed(Exception):
    pass


class ExecutionPaused(Exception):
    """The process is stopping: the execution ends between two states, at a checkpoint, and the
    stack resumes its work when it starts again (services/resumption.py)."""


class StatesError(Exception):
    """An error Step Functions itself names (`States.Timeout`, `States.Runtime`, ...)."""

    def __init__(self, name: str, cause: str) -> None:
        super().__init__(f"{name}: {cause}")
        self.name = name
        self.cause = cause


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


def _select(path: str, document: Any, context: dict[str, Any]) -> Any:
    """A `.$` field's value: a path into the state's input, or (`$$.`) into the context object."""
    source, relative = (context, path[1:]) if path.startswith("$$") else (document, path)
    try:
        return _path(source, relative)
    except (KeyError, TypeError):
        raise StatesError("States.Runtime", f"the path {path} matches nothing in the state's input") from None


def _parameters(template: Any, document: Any, context: dict[str, Any]) -> Any:
    """`Parameters` with each `"key.$": path` replaced by `"key": <the value at path>`."""
    if isinstance(template, list):
        return [_parameters(item, document, context) for item in template]
    if not isinstance(template, dict):
        return template
    return {key.removesuffix(".$"): _select(value, document, context) if key.endswith(".$")
            else _parameters(value, document, context) for key, value in template.items()}


def _put(document: Any, path: str | None, value: Any) -> Any:
    """The state's output: `value` placed in its input at a ResultPath (None: the input as it was)."""
    if path is None:
        return document
    if path == "$":
        return value
    if not isinstance(document, dict):
        raise StatesError("States.ResultPathMatchFailure", f"the input is no object to hold {path}")
    head, _, rest = path.removeprefix("$.").partition(".")
    result = dict(document)
    result[head] = _put(result.get(head, {}), f"$.{rest}", value) if rest else value
    return result


def _error_name(error: Exception) -> str:
    return error.name if isinstance(error, StatesError) else type(error).__name__


def _error_matches(names: list[str], error: Exception) -> bool:
    """As Step Functions matches a Retry's or a Catch's ErrorEquals: States.ALL matches every error
    but States.Runtime (which fails the execution), States.TaskFailed every one but States.Timeout."""
    name = _error_name(error)
    if name == "States.Runtime":
        return False
    return name in names or "States.ALL" in names or ("States.TaskFailed" in names and name != "States.Timeout")


def _check(definition: dict[str, Any]) -> None:
    """Refuse what the driver would not run as Step Functions does."""
    for name, state in definition["States"].items():
        kind = state["Type"]
        if kind not in _FIELDS:
            raise ValueError(f"state {name}: type {kind} is not supported by the local driver")
        unknown = set(state) - _FIELDS[kind] - {"Type", "Comment"}
        if unknown:
            raise ValueError(f"state {name}: {', '.join(sorted(unknown))} not supported by the local driver")
        if kind == "Map":
            _check_map(name, state)
        if kind != "Task":
            continue
        resource = state["Resource"]
        if resource in LAMBDA_INTEGRATIONS:
            if "FunctionName" not in state.get("Parameters", {}):
                raise ValueError(f"state {name}: {resource} needs Parameters.FunctionName")
        elif resource.startswith("arn:aws:states:::"):
            raise ValueError(f"state {name}: the local driver runs Lambda functions only, not {resource}")
        if resource != WAIT_FOR_TASK_TOKEN and {"TimeoutSeconds", "TimeoutSecondsPath"} & set(state):
            raise ValueError(f"state {name}: the local driver times out only a wait for a task token")
        _check_paths(name, state.get("Parameters", {}))


def _check_map(name: str, state: dict[str, Any]) -> None:
    reader = state.get("ItemReader")
    if (reader is None) == ("ItemsPath" not in state):
        raise ValueError(f"state {name}: a Map reads its items with an ItemReader or at an ItemsPath, one of them")
    if reader is not None:
        if set(reader) - {"Resource", "ReaderConfig", "Parameters"}:
            raise ValueError(f"state {name}: the local driver reads an ItemReader's Resource, ReaderConfig, Parameters")
        if reader.get("Resource") != S3_GET_OBJECT or reader.get("ReaderConfig") != {"InputType": "JSON"}:
            raise ValueError(f"state {name}: the local driver reads items from a JSON array in S3 only "
                             f"({S3_GET_OBJECT}, ReaderConfig InputType JSON)")
        _check_paths(name, reader.get("Parameters", {}))
    if state.get("ToleratedFailurePercentage", 0) != 0:
        raise ValueError(f"state {name}: the local driver tolerates no failed item (ToleratedFailurePercentage 0)")
    if {"MaxConcurrency", "MaxConcurrencyPath"} <= set(state):
        raise ValueError(f"state {name}: MaxConcurrency or MaxConcurrencyPath, not both")
    processor = state["ItemProcessor"]
    if set(processor) - {"ProcessorConfig", "StartAt", "States"}:
        raise ValueError(f"state {name}: the local driver runs an ItemProcessor's ProcessorConfig, StartAt, States")
    if processor.get("ProcessorConfig", {}).get("Mode", "INLINE") not in ("INLINE", "DISTRIBUTED"):
        raise ValueError(f"state {name}: ProcessorConfig Mode is INLINE or DISTRIBUTED")
    _check_paths(name, state.get("ItemSelector", {}))
    _check(processor)


def _states_of(definition: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every state of the definition, a Map's ItemProcessor's states too."""
    for name, state in definition["States"].items():
        yield name, state
        if state["Type"] == "Map":
            yield from _states_of(state["ItemProcessor"])


def _check_paths(name: str, template: Any) -> None:
    if isinstance(template, list):
        for item in template:
            _check_paths(name, item)
    elif isinstance(template, dict):
        for key, value in template.items():
            if key.endswith(".$") and not (isinstance(value, str) and value.startswith("$")):
                raise ValueError(f"state {name}: {key} is no path (intrinsic functions are not supported locally)")
            _check_paths(name, value)


@dataclass
class _Wait:
    answered: threading.Event = field(default_factory=threading.Event)
    output: Any = None


class LocalTaskTokens:
    """The task tokens of the local stack (the TaskTokens port): the driver opens one when it
    starts a `.waitForTaskToken` task and waits on it; `send_success` hands the task its output."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waits: dict[str, _Wait] = {}

    def open(self) -> str:
        token = secrets.token_urlsafe(48)
        with self._lock:
            self._waits[token] = _Wait()
        return token

    def send_success(self, token: str, output: dict) -> bool:
        with self._lock:
            wait = self._waits.get(token)
            if wait is None or wait.answered.is_set():
                return False  # timed out, its execution ended, or answered already
            wait.output = output
            wait.answered.set()
            return True

    def wait(self, token: str, deadline: float, stopping: threading.Event) -> Any:
        """The output sent for `token`: States.Timeout once `deadline` (time.monotonic()) passes
        first, ExecutionPaused once `stopping` is set first."""
        with self._lock:
            wait = self._waits[token]
        while not wait.answered.wait(max(0.0, min(TOKEN_POLL_SECONDS, deadline - time.monotonic()))):
            if stopping.is_set() and self._close_unanswered(token):
                raise ExecutionPaused("paused while waiting for a task token")
            if time.monotonic() >= deadline and self._close_unanswered(token):
                raise StatesError("States.Timeout", "no SendTaskSuccess for the task's token within its timeout")
        return wait.output

    def close(self, token: str) -> None:
        with self._lock:
            self._waits.pop(token, None)

    def _close_unanswered(self, token: str) -> bool:
        """Close the token unless an output came meanwhile (then the task has it, as the sender was told)."""
        with self._lock:
            wait = self._waits.get(token)
            if wait is not None and wait.answered.is_set():
                return False
            self._waits.pop(token, None)
            return True


def s3_object(bucket: str, key: str) -> bytes:
    """An object of the stack's S3 (the local AWS, or moto in tests), through the container's client."""
    from chalicelib.container import container

    return container().aws.s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def imported_handler(path: str) -> Callable[[Any, Any], Any]:
    """The function at 'package.module.function', imported at its first call: the local stack
    starts without the module (the browser worker's needs a browser only when a run uses it)."""
    module, _, name = path.rpartition(".")

    def handler(event: Any, context: Any) -> Any:
        return getattr(importlib.import_module(module), name)(event, context)

    return handler


class LocalStateMachine:
    def __init__(self, definition: dict[str, Any], functions: dict[str, Callable[[Any, Any], Any]],
                 substitutions: dict[str, str], retry_delay_scale: float = 1.0,
                 stopping: threading.Event | None = None, task_tokens: LocalTaskTokens | None = None,
                 objects: Callable[[str, str], bytes] = s3_object, cpus: int | None = None) -> None:
        _check(definition)
        self._definition = definition
        self._functions = functions
        self._substitutions = substitutions
        self._retry_delay_scale = retry_delay_scale
        self.stopping = stopping or threading.Event()
        self.task_tokens = task_tokens or LocalTaskTokens()
        self._objects = objects  # (bucket, key) -> bytes: what a Map's ItemReader reads
        self._cpus = cpus or os.cpu_count() or 1
        for name, state in _states_of(definition):
            if state["Type"] == "Task":
                key = self._function_key(self._function_resource(state))
                if key not in functions:
                    raise ValueError(f"state {name}: no function {key} to run")

    def _function_key(self, resource: str) -> str:
        key = _task_resource_name(resource)
        return self._substitutions.get(key, key)

    @staticmethod
    def _function_resource(state: dict[str, Any]) -> str:
        if state["Resource"] in LAMBDA_INTEGRATIONS:
            return state["Parameters"]["FunctionName"]
        return state["Resource"]

    def run(self, payload: Any, execution_name: str = "local") -> Any:
        return self._run_states(self._definition, payload, {"Name": execution_name, "Input": payload})

    def _run_states(self, definition: dict[str, Any], payload: Any, execution: dict[str, Any]) -> Any:
        """Run states from StartAt: the execution's, or a Map's ItemProcessor's for one item."""
        states = definition["States"]
        name = definition["StartAt"]
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
                document = _put(document, state.get("ResultPath", "$"), state.get("Result", document))
            elif kind == "Choice":
                name = next((rule["Next"] for rule in state["Choices"] if _choice_matches(rule, document)),
                            state.get("Default"))
                if name is None:
                    raise ExecutionFailed("no Choice rule matched and no Default")
                continue
            else:
                try:
                    if kind == "Map":
                        result = self._run_map(name, state, document, execution)
                    else:
                        result = self._run_task(name, state, document, execution)
                    document = _put(document, state.get("ResultPath", "$"), result)
                except ExecutionPaused:
                    raise
                except Exception as error:
                    catcher = next((c for c in state.get("Catch", []) if _error_matches(c["ErrorEquals"], error)),
                                   None)
                    if catcher is None:
                        raise
                    failure = {"Error": _error_name(error),
                               "Cause": error.cause if isinstance(error, StatesError) else str(error)}
                    document = _put(document, catcher.get("ResultPath", "$"), failure)
                    name = catcher["Next"]
                    continue
            if state.get("End"):
                return document
            name = state["Next"]
        raise ExecutionFailed(f"more than {MAX_TRANSITIONS} transitions")

    def _run_map(self, name: str, state: dict[str, Any], document: Any, execution: dict[str, Any]) -> list[Any]:
        context: dict[str, Any] = {"Execution": execution, "State": {"Name": name}}
        items = self._items(state, document, context)
        if not isinstance(items, list):
            raise StatesError("States.Runtime", f"state {name}: the items are no JSON array")
        failed = threading.Event()  # an item failed for good: no other starts
        outputs: list[Any] = [None] * len(items)
        errors: list[tuple[int, Exception]] = []
        label = state.get("Label", name)

        def one(index: int) -> None:
            if failed.is_set() or self.stopping.is_set():
                return
            item_context = {**context, "Map": {"Item": {"Index": index, "Value": items[index]}}}
            try:  # an ItemSelector that cannot be applied fails its item, as any error in it does
                selected = (_parameters(state["ItemSelector"], document, item_context) if "ItemSelector" in state
                            else items[index])
                outputs[index] = self._run_states(state["ItemProcessor"], selected, {
                    "Name": f"{execution['Name']}/{label}:{index}", "Input": selected})
            except ExecutionPaused:
                return
            except Exception as error:
                errors.append((index, error))
                failed.set()

        with ThreadPoolExecutor(self._map_concurrency(state, document), thread_name_prefix=f"map-{label}") as pool:
            list(pool.map(one, range(len(items))))
        if self.stopping.is_set():
            raise ExecutionPaused(f"paused while running Map {name}")
        if errors:
            index, error = min(errors, key=lambda e: e[0])
            cause = error.cause if isinstance(error, StatesError) else str(error)
            raise StatesError(MAP_FAILED, f"Map {name}: item {index} ({json.dumps(items[index])}) failed: "
                                          f"{_error_name(error)}: {cause}")
        return outputs

    def _items(self, state: dict[str, Any], document: Any, context: dict[str, Any]) -> Any:
        if "ItemsPath" in state:
            return _select(state["ItemsPath"], document, context)
        where = _parameters(state["ItemReader"].get("Parameters", {}), document, context)
        try:
            return json.loads(self._objects(where["Bucket"], where["Key"]))
        except Exception as error:  # as AWS's map run fails on an object it cannot read
            raise StatesError("States.ItemReaderFailed", f"s3://{where.get('Bucket')}/{where.get('Key')}: "
                                                          f"{error}") from error

    def _map_concurrency(self, state: dict[str, Any], document: Any) -> int:
        """MaxConcurrency (0: no bound, as on AWS), or the one at MaxConcurrencyPath; at most the CPUs."""
        limit = (_select(state["MaxConcurrencyPath"], document, {}) if "MaxConcurrencyPath" in state
                 else state.get("MaxConcurrency", 0))
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise StatesError("States.Runtime", f"MaxConcurrency {limit!r} is not a non-negative integer")
        return min(limit or self._cpus, self._cpus)

    def _run_task(self, name: str, state: dict[str, Any], document: Any, execution: dict[str, Any]) -> Any:
        retriers = state.get("Retry", [])
        attempts: dict[int, int] = {}
        while True:
            try:
                return self._attempt(name, state, document, execution, sum(attempts.values()))
            except ExecutionPaused:
                raise
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

    def _attempt(self, name: str, state: dict[str, Any], document: Any, execution: dict[str, Any],
                 retry_count: int) -> Any:
        """One try of a Task. A `.waitForTaskToken` one opens a token (before its function is called,
        so that an early send is kept; a retry opens another, as on AWS) and ends with the output
        sent for it."""
        context: dict[str, Any] = {"Execution": execution, "State": {"Name": name, "RetryCount": retry_count}}
        resource = state["Resource"]
        if resource != WAIT_FOR_TASK_TOKEN:
            parameters = _parameters(state["Parameters"], document, context) if "Parameters" in state else document
            if resource == LAMBDA_INVOKE:
                output = self._invoke(parameters["FunctionName"], parameters.get("Payload", {}))
                return {"ExecutedVersion": "$LATEST", "Payload": output, "StatusCode": 200}
            return self._invoke(resource, parameters)
        token = self.task_tokens.open()
        try:
            deadline = time.monotonic() + self._timeout(state, document)
            parameters = _parameters(state["Parameters"], document, {**context, "Task": {"Token": token}})
            self._invoke(parameters["FunctionName"], parameters.get("Payload", {}))
            return self.task_tokens.wait(token, deadline, self.stopping)
        finally:
            self.task_tokens.close(token)

    def _timeout(self, state: dict[str, Any], document: Any) -> float:
        """TimeoutSeconds, or the one at TimeoutSecondsPath (a positive integer, as AWS requires);
        Step Functions' default is 99999999 s."""
        if "TimeoutSecondsPath" not in state:
            return state.get("TimeoutSeconds", 99_999_999)
        seconds = _select(state["TimeoutSecondsPath"], document, {})
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds <= 0:
            raise StatesError("States.Runtime", f"TimeoutSecondsPath gives {seconds!r}, not a positive integer")
        return seconds

    def _invoke(self, resource: str, payload: Any) -> Any:
        context = LambdaContext(function_name=_task_resource_name(resource), memory_size=1024, max_runtime_ms=900_000)
        return self._functions[self._function_key(resource)](payload, context)


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
            self._machine.run(payload, execution_name)
        except ExecutionPaused as paused:
            self._log(f"execution {execution_name} {paused}; it resumes when the stack starts again")
        except Exception as error:
            self._log(f"execution {execution_name} failed: {error!r}")
        finally:
            with self._lock:
                self._running.discard(execution_name)

    def request_stop(self) -> None:
        """Every execution stops at its next state (a task in progress finishes first, a wait for a
        task token ends at once)."""
        self._machine.stopping.set()

    def stop(self, grace_seconds: float) -> list[str]:
        """`request_stop`, then wait for the executions at most `grace_seconds`. Returns those
        still running then."""
        self.request_stop()
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
                    machine: str = "FileImportStateMachine", stopping: threading.Event | None = None,
                    task_tokens: LocalTaskTokens | None = None) -> LocalWorkflows:
    """A state machine of infra/workflows.yaml (its resource name), its tasks bound to this app's
    lambda functions, and an image function's task to its handler (IMAGE_FUNCTIONS), in-process."""
    from chalicelib.local.provision import (
        IMAGE_FUNCTIONS,
        function_of_parameter,
        state_machine_definition,
        workflows_resolver,
    )

    template, resolver = workflows_resolver(parameters, region)
    definition, _ = state_machine_definition(template, resolver, machine)
    # Each substitution is a Ref to a `<Function>Arn` parameter: the function is in its name.
    references = template["Resources"][machine]["Properties"]["DefinitionSubstitutions"]
    functions = {key: function for key, ref in references.items()
                 if (function := function_of_parameter(ref["Ref"])) is not None}
    # An image function, which the app does not define, runs its handler in its place.
    handlers = {**{name: imported_handler(path) for name, path in IMAGE_FUNCTIONS.items()}, **app.handler_map}
    state_machine = LocalStateMachine(definition, handlers, functions, retry_delay_scale, stopping, task_tokens)
    return LocalWorkflows(state_machine, log=log, synchronous=synchronous)
