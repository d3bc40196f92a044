"""Entry points of reconciliation runs: the tasks of infra/statemachines/reconciliation_run.asl.json."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.handlers.tasks import workflow_task
from chalicelib.services import reconciliation_runs, run_partitions
from chalicelib.services.ports import Ports


def _task(event: dict[str, Any], step: Callable[[Ports, str, int], Any]) -> dict[str, Any]:
    return workflow_task(event, "run_id", step)


def load_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, reconciliation_runs.load)


def match_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, reconciliation_runs.match)


def merge_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, run_partitions.merge)


def partition_task(event: dict[str, Any]) -> dict[str, Any]:
    """One item of the Distributed Map: {environment, run_id, round, partition}, and `error` when
    the item's Catch hands over the error of its last retry (kept: the run's error names it)."""
    round_, partition = int(event["round"]), int(event["partition"])
    if "error" in event:
        return _task(event, lambda ports, env, run_id: run_partitions.partition_failed(
            ports, env, run_id, round_, partition, event["error"]))
    return _task(event, lambda ports, env, run_id: run_partitions.match_partition(
        ports, env, run_id, round_, partition))


def persist_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, lambda ports, env, run_id: reconciliation_runs.persist(
        ports, env, run_id, chunks=reconciliation_runs.PERSIST_CHUNKS))


def exceptions_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, reconciliation_runs.refresh_exceptions)


def finish_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, reconciliation_runs.finish)


def give_up_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, lambda ports, env, run_id: reconciliation_runs.give_up(ports, env, run_id, event.get("error")))
