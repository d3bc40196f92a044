"""Entry points of the browser-run workflow (infra/statemachines/browser_run.asl.json).

`attempt_handler` is the browser worker: on AWS a container-image function with Chromium
(infra/browser/Dockerfile), locally called in-process by the state machine driver. The others are
small Chalice functions (app.py): the pause that keeps the task token, the expiry of a code never
given, and the failure of a task that gave up."""
from __future__ import annotations

from typing import Any

from chalicelib.container import container
from chalicelib.observability import logger
from chalicelib.services import browser_runs


def _ids(event: dict[str, Any]) -> tuple[str, str, int]:
    logger.thread_safe_append_keys(environment=event.get("environment"), agent_id=event.get("agent_id"),
                                   agent_run_id=event.get("run_id"))
    return str(event["environment"]), str(event["agent_id"]), int(event["run_id"])


def attempt_handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return browser_runs.attempt(container().ports, *_ids(event))


def pause_task(event: dict[str, Any]) -> dict[str, Any]:
    browser_runs.pause(container().ports, *_ids(event), task_token=str(event["task_token"]))
    return {}


def expire_task(event: dict[str, Any]) -> dict[str, Any]:
    browser_runs.expire(container().ports, *_ids(event))
    return {}


def fail_task(event: dict[str, Any]) -> dict[str, Any]:
    browser_runs.give_up(container().ports, *_ids(event), error=event.get("error"))
    return {}
