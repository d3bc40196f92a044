"""SQS entry point of the bulk queue: one message names one ingestion job, one bulk action or one
export (the three share the queue and its function: the engine layer, 15 minutes); the service does
the rest."""
from __future__ import annotations

import json

from chalicelib.container import container
from chalicelib.handlers.deliveries import deliver, receive_count
from chalicelib.observability import logger
from chalicelib.services.ingestion.bulk import process_job
from chalicelib.services.ingestion.lifecycle import fail


def handle_bulk_messages(event) -> None:
    """See handlers/deliveries.py: a job failing on its message's last delivery is failed with the
    reason, so that no job stays `processing` for ever and its client learns why."""
    for record in event:
        message = json.loads(record.body)
        if message.get("kind") == "bulk_action":
            from chalicelib.handlers.bulk_actions import handle_bulk_action_message
            handle_bulk_action_message(message, receive_count(record))
        elif "export_id" in message:
            from chalicelib.handlers.exports import handle_export_message
            handle_export_message(message, receive_count(record))
        else:
            _handle(message, receive_count(record))


def _handle(message: dict, attempts: int) -> None:
    services = container()
    environment, job_id = message["environment"], int(message["job_id"])
    logger.thread_safe_append_keys(environment=environment, job_id=job_id)

    def work() -> None:
        job = process_job(services.ports, environment, job_id)
        if job is not None:
            logger.info("bulk job handled", extra={"status": job.status.value, "processed": job.processed_items})

    try:
        deliver(message, attempts, services.settings.bulk_max_receives, services.ports.bulk_queue.send, work,
                lambda error: fail(services.ports, environment, job_id, error, attempts), "bulk job")
    finally:
        logger.thread_safe_remove_keys(["environment", "job_id"])
