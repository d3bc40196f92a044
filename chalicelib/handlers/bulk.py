"""SQS entry point of bulk ingestion: one message names one job; the service does the rest."""
from __future__ import annotations

import json

from chalicelib.container import container
from chalicelib.observability import logger
from chalicelib.services.ingestion.bulk import process_job
from chalicelib.services.ingestion.lifecycle import fail


def handle_bulk_messages(event) -> None:
    """Lambda (or the local runtime) hands over a batch; an exception makes SQS deliver it again.

    On the last delivery before the dead-letter queue, the job is failed instead, so that no
    job stays `processing` for ever and its client learns why.
    """
    services = container()
    for record in event:
        message = json.loads(record.body)
        environment, job_id = message["environment"], int(message["job_id"])
        attempts = int(record.to_dict().get("attributes", {}).get("ApproximateReceiveCount", "1"))
        logger.thread_safe_append_keys(environment=environment, job_id=job_id)
        try:
            job = process_job(services.ports, environment, job_id)
            if job is not None:
                logger.info("bulk job handled", extra={"status": job.status.value, "processed": job.processed_items})
        except Exception as error:
            # A stopping process (its services going away under it) says nothing of the job: the
            # message stays with the queue for the next start (on its last delivery, a new one does).
            if services.ports.stopping():
                if attempts >= services.settings.bulk_max_receives:
                    services.ports.bulk_queue.send(message)
                raise
            if attempts < services.settings.bulk_max_receives:
                raise
            logger.exception("bulk job failed on its last delivery", extra={"attempts": attempts})
            fail(services.ports, environment, job_id, error, attempts)
        finally:
            logger.thread_safe_remove_keys(["environment", "job_id"])
