"""GET /overview: the environment at a glance (the web app's front page) in one request."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router
from chalicelib.api.schemas.overview import (
    AmountOut,
    ChangesOut,
    ImportInProgressOut,
    OpenExceptionsOut,
    OverviewOut,
    ReconciliationOverviewOut,
)
from chalicelib.api.schemas.runs import RunOut
from chalicelib.api.service_levels import aging_out
from chalicelib.api.views import ingestion_job_out
from chalicelib.container import container
from chalicelib.services import overview as service
from chalicelib.services import service_levels as sla

router = Router("overview")


@router.route("GET", "/overview", summary="The environment at a glance: each reconciliation's last run, open "
              "exceptions (count and amount per currency) and what changed in the last day; imports in progress",
              response=OverviewOut)
def get_overview(request: ApiRequest) -> OverviewOut:
    ports = container().ports
    found = service.overview(ports, request.environment)
    runs = ports.runs.get_many(request.environment, (
        i for r, _ in found.reconciliations for i in (r.current_run_id or r.last_run_id,) if i is not None))
    agings = sla.agings(ports, request.environment) if ports.service_levels is not None else {}
    rows = []
    for reconciliation, summary in found.reconciliations:
        shown = runs.get(reconciliation.current_run_id or reconciliation.last_run_id or 0)
        opened = summary.open_exceptions
        rows.append(ReconciliationOverviewOut(
            id=reconciliation.id, name=reconciliation.name, run_type=reconciliation.run_type.value,
            last_run=RunOut.model_validate(shown) if shown else None,
            run_before=RunOut.model_validate(summary.run_before) if summary.run_before else None,
            open_exceptions=OpenExceptionsOut(count=opened.count, investigating=opened.investigating,
                                              mixed_currency=opened.mixed_currency,
                                              amounts=[AmountOut.model_validate(a) for a in opened.amounts]),
            since=ChangesOut.model_validate(summary.changes), aging=aging_out(agings.get(reconciliation.id))))
    return OverviewOut(since=found.since, reconciliations=rows, more_reconciliations=found.more_reconciliations,
                       imports_in_progress=[ingestion_job_out(ImportInProgressOut, j)
                                            for j in found.imports_in_progress])
