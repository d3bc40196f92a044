"""The one-minute sweeper: nothing stays pending or running for ever, no stream count waits long,
no event stays unsent, no request whose process died stays out of the audit trail."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from chalicelib.container import container
from chalicelib.observability import logger
from chalicelib.services import (
    approvals,
    audit,
    bulk_actions,
    data_streams,
    events,
    exports,
    investigations,
    matches,
    reconciliation_exceptions,
    reconciliation_runs,
    reconciliations,
    service_levels,
    webhooks,
)
from chalicelib.services.ingestion import sweeper as ingestion_sweeper
from chalicelib.services.ports import Ports


class SweepFailed(Exception):
    """Raised once every step has had its turn, naming those that failed (each logged with its
    traceback): the invocation then counts in the function's Errors metric, which its alarm watches
    (infra/template.yaml, docs/runbook.md). EventBridge's asynchronous invocation retries a failed
    sweep twice; a sweep is repeatable, and sweeps overlap anyway when one takes over a minute."""

    def __init__(self, failed: list[str]) -> None:
        super().__init__(f"{len(failed)} sweep step(s) failed: {', '.join(failed)} (see the log above for each)")
        self.failed = failed


# Each step on its own, in this order: what is owed to clients and auditors (events, audit entries)
# goes first, since the exception refresh can take minutes.
SweepStep = tuple[str, Callable[[Ports], int | dict[str, int]]]
SWEEP_STEPS: tuple[SweepStep, ...] = (
    ("published_parked_events", events.publish_parked),
    ("unfinished_requests_audited", audit.record_unfinished),
    ("imports", ingestion_sweeper.sweep),
    ("recounted_streams", data_streams.sweep_recounts),
    ("runs", reconciliation_runs.sweep),
    ("rolled_back_matches", matches.sweep_pending),
    ("finished_stream_removals", reconciliations.sweep_leaving),  # read among those due a refresh: before it
    ("refreshed_exceptions", reconciliation_exceptions.sweep),
    ("abandoned_investigations", investigations.sweep),
    ("queued_webhook_deliveries", webhooks.sweep),
    ("bulk_actions", bulk_actions.sweep),
    ("exports", lambda ports: exports.sweep(replace(container().export_ports, ports=ports))),
    ("expired_approvals", approvals.sweep),
    ("service_levels", service_levels.sweep),
)


def sweep_task(ports: Ports | None = None, steps: Sequence[SweepStep] = SWEEP_STEPS) -> None:
    """Each step on its own: one that fails (a throttled read, say), or that could not sweep some
    of its items (each logged, counted in its `errors`), stops no other; the sweep then fails
    (SweepFailed) so that the failure shows in the function's metrics."""
    ports = ports or container().ports
    counts: dict[str, int] = {}
    failed: list[str] = []
    for name, step in steps:
        try:
            done = step(ports)
        except Exception:
            logger.exception("a sweep step failed", extra={"step": name})
            failed.append(name)
            continue
        if isinstance(done, dict):
            counts.update({f"{name}_{k}": n for k, n in done.items()})
            if done.get("errors"):
                failed.append(name)
        else:
            counts[name] = done
    if any(counts.values()):
        logger.info("swept", extra=counts)
    if failed:
        raise SweepFailed(failed)
