"""The wrapper of a state machine's task on one job or run (handlers/files.py, handlers/runs.py):
its ids in every log line meanwhile, and its step's answer handed on as the next state's input."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.container import container
from chalicelib.observability import logger
from chalicelib.services.ports import Ports


def workflow_task(event: dict[str, Any], id_key: str, step: Callable[[Ports, str, int], Any]) -> dict[str, Any]:
    """`step(ports, environment, id)` for the `id_key` (job_id, run_id) the state machine passed;
    `next`, its answer, picks the state machine's next state. An answer that is a dict holds `next`
    and what the next state reads besides (a Map's manifest)."""
    environment, entity_id = event["environment"], int(event[id_key])
    logger.thread_safe_append_keys(environment=environment, **{id_key: entity_id})
    try:
        answer = step(container().ports, environment, entity_id)
        return {"environment": environment, id_key: entity_id,
                **(answer if isinstance(answer, dict) else {"next": answer})}
    finally:
        logger.thread_safe_remove_keys(["environment", id_key])
