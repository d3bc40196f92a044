"""Work resumed at once when the executions that ran it are known to be dead: the local stack
runs its state machines in its own process, so at its start every file import and run still in
flight lost its execution with the previous process (a Ctrl-C or a crash). Each resumes from its
checkpoint (an import's written chunks, a run's persisted chunks), as a restart by the sweeper
would, without waiting for the sweeper's thresholds, and without counting against its restarts:
the process died, not the work. Each resume is claimed once (the heartbeat moves).

Queued work (bulk requests, investigations) needs nothing here: its messages are kept on disk
and delivered again at the start, as SQS delivers again what a dead consumer had received.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from chalicelib.domain.clock import utc_now
from chalicelib.observability import logger
from chalicelib.services import browser_runs, reconciliation_runs
from chalicelib.services.ingestion import sweeper
from chalicelib.services.ports import Ports
from chalicelib.services.sweeping import Item


@dataclass
class Resumed:
    file_imports: list[tuple[str, int]] = field(default_factory=list)
    runs: list[tuple[str, int]] = field(default_factory=list)
    browser_runs: list[tuple[str, int]] = field(default_factory=list)

    def describe(self) -> str:
        parts = [f"{len(ids)} {what}" for what, ids in (
            ("file import(s)", self.file_imports), ("reconciliation run(s)", self.runs),
            ("browser agent run(s)", self.browser_runs)) if ids]
        return "resumed " + ", ".join(parts) if parts else "no file import or run was in flight"


def resume_interrupted(ports: Ports) -> Resumed:
    """Start again every file import and run that is pending or running (an import still waiting
    for its upload is left waiting). One that cannot be resumed is logged and left to the
    sweeper; it stops no other."""
    resumed = Resumed()
    now = utc_now()
    # Both read before anything starts: a resumed import that ends at once may start a run of its own.
    jobs, runs = ports.ingestion_jobs.active(), ports.runs.active()
    resumed.file_imports = _restart_each(ports, "file import", (
        job for job in jobs if job.is_file and not job.finished and not sweeper.waiting_for_upload(ports, job)),
        sweeper.restart, now)
    resumed.runs = _restart_each(ports, "run", runs, reconciliation_runs.restart, now)
    with _logged("browser agent runs", "*", 0):
        resumed.browser_runs = browser_runs.resume_in_flight(ports, now)
    return resumed


def _restart_each(ports: Ports, what: str, work: Iterable[Item], restart: Callable[[Ports, Item, datetime], bool],
                  resumed_at: datetime) -> list[tuple[str, int]]:
    """`restart` each of `work` as resumed at `resumed_at`; those it claimed, as (environment, id). One that
    fails is logged as `what` and left to the sweeper; it stops no other."""
    restarted = []
    for item in work:
        with _logged(what, item.environment, item.id):
            if restart(ports, item, resumed_at):
                restarted.append((item.environment, item.id))
    return restarted


@contextmanager
def _logged(what: str, environment: str, entity_id: int) -> Iterator[None]:
    """Log a failure to resume one piece of work, and go on with the others."""
    try:
        yield
    except Exception:
        logger.exception("resuming interrupted work failed",
                         extra={"what": what, "environment": environment, "id": entity_id})
