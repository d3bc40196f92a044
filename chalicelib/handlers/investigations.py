"""SQS entry point of investigations: one message names one investigation."""
from __future__ import annotations

import json

from chalicelib.container import container
from chalicelib.handlers.deliveries import deliver, receive_count
from chalicelib.observability import logger
from chalicelib.services import investigations


def handle_investigation_messages(event) -> None:
    """See handlers/deliveries.py: an investigation failing on its message's last delivery is failed
    with the reason."""
    for record in event:
        _handle(json.loads(record.body), receive_count(record))


def _handle(message: dict, attempts: int) -> None:
    services = container()
    environment, investigation_id = message["environment"], int(message["investigation_id"])
    logger.thread_safe_append_keys(environment=environment, investigation_id=investigation_id)

    def work() -> None:
        done = investigations.run(services.ports, environment, investigation_id)
        logger.info("investigation handled", extra={"status": done.status.value})

    try:
        deliver(message, attempts, services.settings.investigation_max_receives,
                services.ports.investigation_queue.send, work,
                lambda error: investigations.fail(services.ports, environment, investigation_id, error),
                "investigation")
    finally:
        logger.thread_safe_remove_keys(["environment", "investigation_id"])
