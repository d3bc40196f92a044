"""SQS entry point of bulk ingestion: one message names one job; the service does the rest."""
from __future__ import annotations

import json

from chalicelib.container import container
from chalicelib.observability import logger
from chalicelib.services.bulk_ingestion import process_job


def handle_bulk_messages(event) -> None:
    """Lambda (or the local runtime) hands over a batch; an exception makes SQS deliver it again."""
    for record in event:
        message = json.loads(record.body)
        logger.append_keys(environment=message["environment"], job_id=message["job_id"])
        try:
            job = process_job(container().ingestion, message["environment"], int(message["job_id"]))
            if job is not None:
                logger.info("bulk job handled", extra={"status": job.status.value, "processed": job.processed_items})
        finally:
            logger.remove_keys(["environment", "job_id"])
