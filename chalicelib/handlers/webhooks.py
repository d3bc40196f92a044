"""SQS entry points of webhooks: the event queue (the event bus's rule puts each domain event there,
in EventBridge's envelope) fans out to deliveries; the delivery queue carries one attempt each.
An exception makes SQS deliver the message again (the fan-out and the attempt are idempotent)."""
from __future__ import annotations

import json

from chalicelib.container import container
from chalicelib.domain.events import EVENT_SOURCE, Event
from chalicelib.observability import logger
from chalicelib.services import webhooks


def handle_webhook_event_messages(event) -> None:
    services = container()
    for record in event:
        envelope = json.loads(record.body)
        if envelope.get("source") != EVENT_SOURCE:  # the rule matches ours only; anything else is not an event
            logger.warning("webhook fan-out: not a domain event", extra={"source": str(envelope.get("source"))})
            continue
        detail = envelope["detail"]
        environment, domain_event = detail["environment"], Event.from_json(detail["event"])
        logger.thread_safe_append_keys(environment=environment, event_id=domain_event.id)
        try:
            made = webhooks.fan_out(services.ports, environment, domain_event)
            if made:
                logger.info("webhook deliveries queued", extra={"event_type": domain_event.type,
                                                                "deliveries": len(made)})
        finally:
            logger.thread_safe_remove_keys(["environment", "event_id"])


def handle_webhook_delivery_messages(event) -> None:
    services = container()
    for record in event:
        message = json.loads(record.body)
        environment, endpoint_id, delivery_id = (message["environment"], int(message["endpoint_id"]),
                                                 int(message["delivery_id"]))
        logger.thread_safe_append_keys(environment=environment, webhook_endpoint_id=endpoint_id,
                                       webhook_delivery_id=delivery_id)
        try:
            done = webhooks.deliver(services.ports, environment, endpoint_id, delivery_id)
            if done is not None:
                logger.info("webhook delivery", extra={"status": done.status.value, "attempts": done.attempts,
                                                       "status_code": done.last_status_code})
        finally:
            logger.thread_safe_remove_keys(["environment", "webhook_endpoint_id", "webhook_delivery_id"])
