"""An export's message, from the bulk queue (handlers/bulk.py: its function has the engine layer,
15 minutes and the data bucket's export prefix)."""
from __future__ import annotations

from chalicelib.container import container
from chalicelib.handlers.deliveries import deliver
from chalicelib.observability import logger
from chalicelib.services import exports


def handle_export_message(message: dict, attempts: int) -> None:
    """See handlers/deliveries.py: an export failing on its message's last delivery ends failed."""
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
