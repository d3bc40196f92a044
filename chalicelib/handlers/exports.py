"""SQS entry point of exports. Their messages ride the bulk queue (the bulk worker's function has
the engine layer, 15 minutes and the data bucket's export prefix): `is_export` tells them apart."""
from __future__ import annotations

import json
from typing import Any

from chalicelib.container import container
from chalicelib.handlers.deliveries import deliver, receive_count
from chalicelib.observability import logger
from chalicelib.services import exports


def is_export(body: str) -> bool:
    try:
        message = json.loads(body)
    except ValueError:
        return False
    return isinstance(message, dict) and "export_id" in message


def handle_export_messages(event: Any) -> None:
    """See handlers/deliveries.py: an export failing on its message's last delivery ends failed."""
    for record in event:
        _handle(json.loads(record.body), receive_count(record))


def _handle(message: dict, attempts: int) -> None:
    services = container()
    xp = services.export_ports
    environment, export_id = message["environment"], int(message["export_id"])
    logger.thread_safe_append_keys(environment=environment, export_id=export_id)

    def work() -> None:
        export = exports.run(xp, environment, export_id)
        if export is not None:
            logger.info("export handled", extra={"status": export.status.value, "rows": export.rows_written})

    try:
        deliver(message, attempts, services.settings.bulk_max_receives, xp.queue.send, work,
                lambda error: exports.fail(xp, environment, export_id, error), "export")
    finally:
        logger.thread_safe_remove_keys(["environment", "export_id"])
