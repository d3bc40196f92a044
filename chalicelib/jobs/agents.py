"""SQS entry point of agent runs: one message starts or carries one run. EventBridge Scheduler
sends `{environment, agent_id, trigger: "schedule"}`; the API, file drops and other agents send
the run they queued (`run_id`)."""
from __future__ import annotations

import json

from chalicelib.api.agent_tools import workbench
from chalicelib.container import container
from chalicelib.observability import logger
from chalicelib.services import agent_runs


def handle_agent_run_messages(event) -> None:
    """An exception makes SQS deliver the message again; on the last delivery the run is failed
    with the reason instead, so that none stays running for ever."""
    services = container()
    for record in event:
        message = json.loads(record.body)
        attempts = int(record.to_dict().get("attributes", {}).get("ApproximateReceiveCount", "1"))
        logger.thread_safe_append_keys(environment=message.get("environment"), agent_id=message.get("agent_id"),
                                       agent_run_id=message.get("run_id"))
        try:
            agent_runs.handle_message(services.ports, message, workbench)
        except Exception as error:
            if services.ports.stopping():  # not a failure: the work goes on at the next start
                if attempts >= services.settings.agent_run_max_receives:
                    services.ports.agent_run_queue.send(message)
                raise
            if attempts < services.settings.agent_run_max_receives:
                raise
            logger.exception("agent run failed on its last delivery", extra={"attempts": attempts})
            agent_runs.fail_message(services.ports, message, error)
        finally:
            logger.thread_safe_remove_keys(["environment", "agent_id", "agent_run_id"])
