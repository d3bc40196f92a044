"""The environment's overview (GET /v1/overview): its reconciliations with their open exceptions and
runs, what changed since a day ago, and the imports in progress. Reads, never writes: the exception
summaries once (the queue's own index read), each reconciliation's newest runs (several at a time),
and the environment's active jobs."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from chalicelib.domain.clock import utc_now
from chalicelib.domain.ingestion import IngestionJob, JobSource
from chalicelib.domain.overview import ReconciliationOverview, by_reconciliation, overview_of
from chalicelib.domain.reconciliations import Reconciliation
from chalicelib.domain.runs import Run
from chalicelib.services.ports import Ports

SINCE = timedelta(days=1)
MAX_RECONCILIATIONS = 100  # the front page's; `more` says when there are others
RUNS_READ = 50  # each reconciliation's newest runs: enough for a day of hourly runs and the one before
READ_THREADS = 8


@dataclass(frozen=True)
class Overview:
    since: datetime
    reconciliations: list[tuple[Reconciliation, ReconciliationOverview]]
    more_reconciliations: bool
    imports_in_progress: list[IngestionJob]


def overview(ports: Ports, environment: str, now: datetime | None = None) -> Overview:
    since = (now or utc_now()) - SINCE
    reconciliations, cursor = ports.reconciliations.list_page(environment, MAX_RECONCILIATIONS, None)
    summaries = by_reconciliation(ports.exceptions.summaries(environment))

    def runs_of(reconciliation: Reconciliation) -> list[Run]:
        return ports.runs.list_page(environment, reconciliation.id, RUNS_READ, None)[0]

    with ThreadPoolExecutor(READ_THREADS) as pool:
        runs = list(pool.map(runs_of, reconciliations))
    imports = [j for j in ports.ingestion_jobs.active_in(environment) if j.source is not JobSource.BULK_API]
    rows = [(r, overview_of(r.id, summaries.get(r.id, []), r_runs, since)) for r, r_runs in zip(reconciliations, runs)]
    return Overview(since, rows, cursor is not None, imports)
