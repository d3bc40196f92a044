"""The one-minute sweeper: nothing stays pending or running for ever, no stream count waits long,
no event stays unsent, no request whose process died stays out of the audit trail."""
from __future__ import annotations

from collections.abc import Callable

from chalicelib.container import container
from chalicelib.observability import logger
from chalicelib.services import (
    audit,
    data_streams,
    events,
    investigations,
    matches,
    reconciliation_exceptions,
    reconciliation_runs,
    webhooks,
)
from chalicelib.services.ingestion import sweeper as ingestion_sweeper


class SweepFailed(Exception):
    """Raised once every step has had its turn, naming those that failed (each logged with its
    traceback): the invocation then counts in the function's Errors metric, which its alarm watches
    (infra/template.yaml, docs/runbook.md). EventBridge's asynchronous invocation retries a failed
    sweep twice; a sweep is repeatable, and sweeps overlap anyway when one takes over a minute."""

    def __init__(self, failed: list[str]) -> None:
        super().__init__(f"{len(failed)} sweep step(s) failed: {', '.join(failed)} (see the log above for each)")
        self.failed = failed


def sweep_task() -> None:
    """Each step on its own: one that fails (a throttled read, say) is logged and stops no other;
    the sweep then fails (SweepFailed) so that the failure shows in the function's metrics.
    What is owed to clients and auditors (events, audit entries) goes first: the exception refresh
    can take minutes."""
    ports = container().ports
    counts: dict[str, int] = {}
    steps: list[tuple[str, Callable[[], int | dict[str, int]]]] = [
        ("published_parked_events", lambda: events.publish_parked(ports)),
        ("unfinished_requests_audited", lambda: audit.record_unfinished(ports)),
        ("imports", lambda: ingestion_sweeper.sweep(ports)),
        ("recounted_streams", lambda: data_streams.sweep_recounts(ports)),
        ("runs", lambda: reconciliation_runs.sweep(ports)),
        ("rolled_back_matches", lambda: matches.sweep_pending(ports)),
        ("refreshed_exceptions", lambda: reconciliation_exceptions.sweep(ports)),
        ("abandoned_investigations", lambda: investigations.sweep(ports)),
        ("queued_webhook_deliveries", lambda: webhooks.sweep(ports)),
    ]
    failed: list[str] = []
    for name, step in steps:
        try:
            done = step()
        except Exception:
            logger.exception("a sweep step failed", extra={"step": name})
            failed.append(name)
            continue
        if isinstance(done, dict):
            counts.update({f"{name}_{k}": n for k, n in done.items()})
        else:
            counts[name] = done
    if any(counts.values()):
        logger.info("swept", extra=counts)
    if failed:
        raise SweepFailed(failed)
