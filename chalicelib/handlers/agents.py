"""SQS entry point of agent runs: one message starts or carries one run. EventBridge Scheduler
sends `{environment, agent_id, trigger: "schedule"}`; the API, file drops and other agents send
the run they queued (`run_id`)."""
from __future__ import annotations

import json

from chalicelib.api.agent_tools import workbench
from chalicelib.container import container
from chalicelib.handlers.deliveries import deliver, receive_count
from chalicelib.observability import logger
from chalicelib.services import agent_runs


def handle_agent_run_messages(event) -> None:
    """See handlers/deliveries.py: a run failing on its message's last delivery is failed with the reason."""
    for record in event:
        _handle(json.loads(record.body), receive_count(record))


def _handle(message: dict, attempts: int) -> None:
    services = container()
    logger.thread_safe_append_keys(environment=message.get("environment"), agent_id=message.get("agent_id"),
                                   agent_run_id=message.get("run_id"))
    try:
        deliver(message, attempts, services.settings.agent_run_max_receives, services.ports.agent_run_queue.send,
                lambda: agent_runs.handle_message(services.ports, message, workbench),
                lambda error: agent_runs.fail_message(services.ports, message, error), "agent run")
    finally:
        logger.thread_safe_remove_keys(["environment", "agent_id", "agent_run_id"])
