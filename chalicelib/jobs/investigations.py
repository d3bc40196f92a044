"""SQS entry point of investigations: one message names one investigation."""
from __future__ import annotations

import json

from chalicelib.container import container
from chalicelib.observability import logger
from chalicelib.services import investigations


def handle_investigation_messages(event) -> None:
    """An exception makes SQS deliver the message again; on the last delivery the investigation
    is failed with the reason instead, so that none stays running for ever."""
    services = container()
    for record in event:
        message = json.loads(record.body)
        environment, investigation_id = message["environment"], int(message["investigation_id"])
        attempts = int(record.to_dict().get("attributes", {}).get("ApproximateReceiveCount", "1"))
        logger.thread_safe_append_keys(environment=environment, investigation_id=investigation_id)
        try:
            done = investigations.run(services.ports, environment, investigation_id)
            logger.info("investigation handled", extra={"status": done.status.value})
        except Exception as error:
            if services.ports.stopping():  # not a failure: the work goes on at the next start
                if attempts >= services.settings.investigation_max_receives:
                    services.ports.investigation_queue.send(message)
                raise
            if attempts < services.settings.investigation_max_receives:
                raise
            logger.exception("investigation failed on its last delivery", extra={"attempts": attempts})
            investigations.fail(services.ports, environment, investigation_id, error)
        finally:
            logger.thread_safe_remove_keys(["environment", "investigation_id"])
