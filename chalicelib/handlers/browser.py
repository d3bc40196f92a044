"""Entry points of the browser-run workflow (infra/statemachines/browser_run.asl.json).

`attempt_handler` is the browser worker: on AWS a container-image function with Chromium
(infra/browser/Dockerfile), locally called in-process by the state machine driver. The others are
small Chalice functions (app.py): the pause that keeps the task token, the expiry of a code never
given, and the failure of a task that gave up."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.container import container
from chalicelib.observability import logger
from chalicelib.services import browser_runs

KEYS = ["environment", "agent_id", "agent_run_id"]


def _task(event: dict[str, Any], step: Callable[..., Any], **extra: Any) -> Any:
    """Run one task of a run, its ids in every log line meanwhile (as `tasks.workflow_task` does for
    imports and runs; here three ids go in and the step's own result comes out)."""
    environment, agent_id, run_id = str(event["environment"]), str(event["agent_id"]), int(event["run_id"])
    logger.thread_safe_append_keys(environment=environment, agent_id=agent_id, agent_run_id=run_id)
    try:
        return step(container().ports, environment, agent_id, run_id, **extra)
    finally:
        logger.thread_safe_remove_keys(KEYS)


def attempt_handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return _task(event, browser_runs.attempt)  # type: ignore[no-any-return]


def pause_task(event: dict[str, Any]) -> dict[str, Any]:
    _task(event, browser_runs.pause, task_token=str(event["task_token"]))
    return {}


def expire_task(event: dict[str, Any]) -> dict[str, Any]:
    _task(event, browser_runs.expire)
    return {}


def fail_task(event: dict[str, Any]) -> dict[str, Any]:
    _task(event, browser_runs.give_up, error=event.get("error"))
    return {}
