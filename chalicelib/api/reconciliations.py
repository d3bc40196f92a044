"""Routes of /reconciliations and of their rules (/reconciliations/{id}/rules, /reconciliation_rules)."""
from __future__ import annotations

from collections.abc import Iterable

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.common import CursorQuery
from chalicelib.api.schemas.data_streams import DataStreamOut
from chalicelib.api.schemas.reconciliation_rules import (
    NewRuleBody,
    ReconciliationRuleList,
    ReconciliationRuleOut,
    RuleBody,
    RuleListQuery,
)
from chalicelib.api.schemas.reconciliations import (
    CreateReconciliation,
    ReconciliationOut,
    ReconciliationPage,
    UpdateReconciliation,
)
from chalicelib.api.schemas.runs import RunOut
from chalicelib.container import container
from chalicelib.domain.data_streams import DataStream
from chalicelib.domain.reconciliations import Reconciliation, RunType
from chalicelib.domain.rules import Rule
from chalicelib.services import rate_streams, reconciliation_runs
from chalicelib.services import reconciliation_rules as rule_service
from chalicelib.services import reconciliations as service

router = Router("reconciliations")
RULES = "/reconciliation_rules"


# Rendering ------------------------------------------------------------------------------

def reconciliations_out(reconciliations: list[Reconciliation], environment: str) -> list[ReconciliationOut]:
    """Render reconciliations with their streams, read in one batch for all of them."""
    ports = container().ports
    streams = ports.data_streams.get_many(environment, (k for r in reconciliations for k in r.stream_keys))
    runs = ports.runs.get_many(environment, (i for r in reconciliations for i in (r.current_run_id, r.last_run_id)
                                             if i is not None))

    def run(run_id: int | None) -> RunOut | None:
        return RunOut.model_validate(runs[run_id]) if run_id in runs else None

    def side(stream_keys: Iterable[str]) -> list[DataStreamOut]:
        found: list[DataStream] = [streams[k] for k in stream_keys if k in streams]
        return [DataStreamOut.model_validate(s) for s in found]

    return [
        ReconciliationOut.from_entity(
            r, side_a_streams=side(r.side_a_stream_keys), side_b_streams=side(r.side_b_stream_keys),
            current_run=run(r.current_run_id), last_run=run(r.last_run_id),
        )
        for r in reconciliations
    ]


def rule_out(rule: Rule) -> ReconciliationRuleOut:
    return ReconciliationRuleOut(id=rule.id, reconciliation_id=rule.reconciliation_id,
                                 **rule.definition.as_body(), status=rule.status.value, source=rule.source.value,
                                 evidence=rule.evidence, created_at=rule.created_at,
                                 updated_at=rule.updated_at or rule.created_at)


# Reconciliations ------------------------------------------------------------------------

@router.route("POST", "/reconciliations", summary="Create a reconciliation of side-A and side-B data streams",
              status=201, body=CreateReconciliation, response=ReconciliationOut, errors=(422,))
def create_reconciliation(request: ApiRequest) -> ReconciliationOut:
    body: CreateReconciliation = request.body
    ports = container().ports
    reconciliation = service.create_reconciliation(
        ports, request.environment, name=body.name, run_type=RunType(body.run_type),
        side_a=body.side_a_stream_keys, side_b=body.side_b_stream_keys, exception_after_days=body.exception_after_days,
    )
    reconciliation_runs.after_reconciliation_saved(ports, request.environment, reconciliation.id)
    return reconciliations_out([reconciliation], request.environment)[0]


@router.route("GET", "/reconciliations", summary="List reconciliations, newest first",
              query=CursorQuery, response=ReconciliationPage, errors=(400, 422))
def list_reconciliations(request: ApiRequest) -> ReconciliationPage:
    query: CursorQuery = request.query
    page, cursor = container().ports.reconciliations.list_page(request.environment, query.limit, query.cursor)
    return ReconciliationPage(data=reconciliations_out(page, request.environment), next_cursor=cursor,
                              limit=query.limit)


@router.route("GET", "/reconciliations/{id}", summary="Get a reconciliation", response=ReconciliationOut,
              errors=(404,))
def get_reconciliation(request: ApiRequest, id: str) -> ReconciliationOut:
    reconciliation = container().ports.reconciliations.get(request.environment, numeric_id(id, "reconciliation"))
    return reconciliations_out([reconciliation], request.environment)[0]


@router.route("PATCH", "/reconciliations/{id}", summary="Change a reconciliation (not while a run is current)",
              body=UpdateReconciliation, response=ReconciliationOut, errors=(404, 409, 422))
def update_reconciliation(request: ApiRequest, id: str) -> ReconciliationOut:
    body: UpdateReconciliation = request.body
    ports = container().ports
    reconciliation = service.update_reconciliation(
        ports, request.environment, numeric_id(id, "reconciliation"), name=body.name,
        run_type=RunType(body.run_type) if body.run_type else None, side_a=body.side_a_stream_keys,
        side_b=body.side_b_stream_keys, exception_after_days=body.exception_after_days,
    )
    if reconciliation_runs.after_reconciliation_saved(ports, request.environment, reconciliation.id,
                                                      set(body.model_dump(exclude_none=True))):
        reconciliation = ports.reconciliations.get(request.environment, reconciliation.id)
    return reconciliations_out([reconciliation], request.environment)[0]


@router.route("DELETE", "/reconciliations/{id}", summary="Delete a reconciliation and its rules (not while a "
              "run is current)", status=204, errors=(404, 409))
def delete_reconciliation(request: ApiRequest, id: str) -> None:
    service.delete_reconciliation(container().ports, request.environment, numeric_id(id, "reconciliation"))


# Rules ----------------------------------------------------------------------------------

@router.route("POST", "/reconciliations/{id}/rules", summary="Add a matching rule to a reconciliation",
              status=201, body=NewRuleBody, response=ReconciliationRuleOut, errors=(404, 409, 422))
def create_rule(request: ApiRequest, id: str) -> ReconciliationRuleOut:
    body: RuleBody = request.body
    ports = container().ports
    rule = rule_service.create_rule(ports, request.environment, numeric_id(id, "reconciliation"), body.given())
    reconciliation_runs.after_rule_saved(ports, request.environment, rule)
    return rule_out(rule)


@router.route("GET", "/reconciliations/{id}/rules", summary="The rules of a reconciliation, by priority",
              query=RuleListQuery, response=ReconciliationRuleList, errors=(404, 422))
def list_rules(request: ApiRequest, id: str) -> ReconciliationRuleList:
    query: RuleListQuery = request.query
    rules = rule_service.rules_of(container().ports, request.environment, numeric_id(id, "reconciliation"))
    wanted = {query.status} if query.status else {"active", "inactive"}
    return ReconciliationRuleList(data=[rule_out(r) for r in rules if r.status.value in wanted])


@router.route("GET", RULES + "/{id}", summary="Get a reconciliation rule", response=ReconciliationRuleOut,
              errors=(404,))
def get_rule(request: ApiRequest, id: str) -> ReconciliationRuleOut:
    return rule_out(container().ports.reconciliation_rules.get(request.environment,
                                                               numeric_id(id, "reconciliation rule")))


@router.route("PATCH", RULES + "/{id}", summary="Change a reconciliation rule (fields not sent stay)",
              body=RuleBody, response=ReconciliationRuleOut, errors=(404, 409, 422))
def update_rule(request: ApiRequest, id: str) -> ReconciliationRuleOut:
    body: RuleBody = request.body
    ports = container().ports
    changes = body.given()
    rate_streams.check_conversion_change(ports, request.environment, changes)
    rule = rule_service.update_rule(ports.reconciliation_rules, request.environment,
                                    numeric_id(id, "reconciliation rule"), changes)
    reconciliation_runs.after_rule_saved(ports, request.environment, rule, set(changes))
    return rule_out(rule)


@router.route("DELETE", RULES + "/{id}", summary="Delete a reconciliation rule", status=204, errors=(404,))
def delete_rule(request: ApiRequest, id: str) -> None:
    rule_service.delete_rule(container().ports.reconciliation_rules, request.environment,
                             numeric_id(id, "reconciliation rule"))
