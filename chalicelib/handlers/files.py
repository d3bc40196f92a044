"""Entry points of file imports: the state machine's tasks and the S3 "Object Created" event."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.container import container
from chalicelib.handlers.tasks import workflow_task
from chalicelib.observability import logger
from chalicelib.services.ingestion import drops, files
from chalicelib.services.ports import Ports


def _task(event: dict[str, Any], step: Callable[[Ports, str, int], Any]) -> dict[str, Any]:
    return workflow_task(event, "job_id", step)


def prepare_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, files.prepare)


def chunks_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, files.write_chunks)


def finish_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, files.finish)


def give_up_task(event: dict[str, Any]) -> dict[str, Any]:
    return _task(event, lambda ports, env, job_id: files.give_up(ports, env, job_id, event.get("error")))


def handle_object_created(event) -> None:
    """EventBridge delivers S3 "Object Created" (the bucket has EventBridge notifications on)."""
    detail = event.detail
    key = detail.get("object", {}).get("key", "")
    size = detail.get("object", {}).get("size")
    job = drops.on_object_created(container().ports, key, detail.get("object", {}).get("etag", ""),
                                         size if isinstance(size, int) else None)
    if job is not None:
        logger.info("object created", extra={"key": key, "job_id": job.id, "status": job.status.value})
