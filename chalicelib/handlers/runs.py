"""Entry points of reconciliation runs: the tasks of infra/statemachines/reconciliation_run.asl.json."""
from __future__ import annotations

from typing import Any

from chalicelib.container import container
from chalicelib.observability import logger
from chalicelib.services import reconciliation_runs


def _task(event: dict[str, Any], step) -> dict[str, Any]:
    environment, run_id = event["environment"], int(event["run_id"])
    logger.thread_safe_append_keys(environment=environment, run_id=run_id)
    try:
        return {"environment": environment, "run_id": run_id, "next": step(container().ports, environment, run_id)}
    finally:
        logger.thread_safe_remove_keys(["environment", "run_id"])


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
