"""Routes of reconciliation runs, and the dry run of a rule (the same loading and engine, no writes)."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.common import CursorQuery
from chalicelib.api.schemas.runs import DryRunOut, DryRunQuery, RunOut, RunPage
from chalicelib.container import container
from chalicelib.domain.errors import NotFound
from chalicelib.services import reconciliation_runs

router = Router("runs")


@router.route("POST", "/reconciliations/{id}/runs", summary="Start a batch run (409 while one is pending or running)",
              status=202, response=RunOut, errors=(404, 409))
def start_run(request: ApiRequest, id: str) -> RunOut:
    run = reconciliation_runs.start_run(container().ports, request.environment, numeric_id(id, "reconciliation"))
    return RunOut.model_validate(container().ports.runs.get(request.environment, run.id))


@router.route("GET", "/reconciliations/{id}/runs", summary="Runs of a reconciliation, newest first",
              query=CursorQuery, response=RunPage, errors=(400, 404, 422))
def list_runs(request: ApiRequest, id: str) -> RunPage:
    query: CursorQuery = request.query
    ports = container().ports
    reconciliation = ports.reconciliations.get(request.environment, numeric_id(id, "reconciliation"))
    runs, cursor = ports.runs.list_page(request.environment, reconciliation.id, query.limit, query.cursor)
    return RunPage(data=[RunOut.model_validate(r) for r in runs], next_cursor=cursor, limit=query.limit)


@router.route("GET", "/reconciliations/{id}/runs/{run_id}", summary="A run: status, progress and rule summary",
              response=RunOut, errors=(404,))
def get_run(request: ApiRequest, id: str, run_id: str) -> RunOut:
    run = container().ports.runs.get(request.environment, numeric_id(run_id, "run"))
    if run.reconciliation_id != numeric_id(id, "reconciliation"):
        raise NotFound(f"run {run_id} not found in reconciliation {id}")
    return RunOut.model_validate(run)


@router.route("POST", "/reconciliations/{id}/runs/{run_id}/cancel",
              summary="Cancel a pending or running run: it ends cancelled, keeping the matches it committed "
                      "(409 once completed or failed)",
              status=202, response=RunOut, errors=(404, 409))
def cancel_run(request: ApiRequest, id: str, run_id: str) -> RunOut:
    run = reconciliation_runs.cancel(container().ports, request.environment, numeric_id(id, "reconciliation"),
                                     numeric_id(run_id, "run"))
    return RunOut.model_validate(run)


@router.route("POST", "/reconciliation_rules/{id}/dry_run",
              summary="What the rule would match now; writes nothing (409 above the dry run's open-records limit)",
              query=DryRunQuery, response=DryRunOut, errors=(400, 404, 409, 422))
def dry_run(request: ApiRequest, id: str) -> DryRunOut:
    query: DryRunQuery = request.query
    return DryRunOut(**reconciliation_runs.dry_run(container().ports, request.environment,
                                                   numeric_id(id, "reconciliation rule"),
                                                   all_near_misses=query.near_misses))
