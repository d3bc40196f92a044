"""Bulk actions' messages on the bulk queue (`kind: bulk_action`): one message names one action;
the service works it (services/bulk_actions.py). handlers/bulk.py hands them over."""
from __future__ import annotations

from chalicelib.container import container
from chalicelib.handlers.deliveries import deliver
from chalicelib.observability import logger
from chalicelib.services import bulk_actions


def handle_bulk_action_message(message: dict, attempts: int) -> None:
    """See handlers/deliveries.py: an action failing on its message's last delivery is failed with
    the reason, so that none stays `processing` for ever."""
    services = container()
    environment, action_id = message["environment"], int(message["bulk_action_id"])
    logger.thread_safe_append_keys(environment=environment, bulk_action_id=action_id)

    def work() -> None:
        action = bulk_actions.process(services.ports, environment, action_id)
        if action is not None:
            logger.info("bulk action handled", extra={"status": action.status.value,
                                                      "processed": action.processed_items})

    try:
        deliver(message, attempts, services.settings.bulk_max_receives, services.ports.bulk_queue.send, work,
                lambda error: bulk_actions.fail(services.ports, environment, action_id, error), "bulk action")
    finally:
        logger.thread_safe_remove_keys(["environment", "bulk_action_id"])
