"""Entry points of reconciliation runs: the tasks of infra/statemachines/reconciliation_run.asl.json."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.handlers.tasks import workflow_task
from chalicelib.services import reconciliation_runs
from chalicelib.services.ports import Ports


def _task(event: dict[str, Any], step: Callable[[Ports, str, int], Any]) -> dict[str, Any]:
    return workflow_task(event, "run_id", step)


def load_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, reconciliation_runs.load)


def match_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, reconciliation_runs.match)


def persist_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, lambda ports, env, run_id: reconciliation_runs.persist(
        ports, env, run_id, chunks=reconciliation_runs.PERSIST_CHUNKS))


def exceptions_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, reconciliation_runs.refresh_exceptions)


def finish_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, reconciliation_runs.finish)


def give_up_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, lambda ports, env, run_id: reconciliation_runs.give_up(ports, env, run_id, event.get("error")))
