"""The one-minute sweeper: nothing stays pending or running for ever, no stream count waits long,
no event stays unsent, no request whose process died stays out of the audit trail."""
from __future__ import annotations

from chalicelib.container import container
from chalicelib.observability import logger
from chalicelib.services import (
    audit,
    data_streams,
    events,
    file_imports,
    investigations,
    matches,
    reconciliation_exceptions,
    reconciliation_runs,
    webhooks,
)


def sweep_task() -> None:
    ports = container().ports
    counts = file_imports.sweep(ports)
    counts["recounted_streams"] = data_streams.sweep_recounts(ports)
    counts.update({f"runs_{k}": n for k, n in reconciliation_runs.sweep(ports).items()})
    counts["rolled_back_matches"] = matches.sweep_pending(ports)
    counts["refreshed_exceptions"] = reconciliation_exceptions.sweep(ports)
    counts["abandoned_investigations"] = investigations.sweep(ports)
    counts["queued_webhook_deliveries"] = webhooks.sweep(ports)
    counts["published_parked_events"] = events.publish_parked(ports)
    counts["unfinished_requests_audited"] = audit.record_unfinished(ports)
    if any(counts.values()):
        logger.info("swept", extra=counts)
