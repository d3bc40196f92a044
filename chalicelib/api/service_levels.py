"""Routes of a reconciliation's service levels (/reconciliations/{id}/service_levels) and routing
rules (/reconciliations/{id}/routing_rules); docs/service-levels.md."""
from __future__ import annotations

from typing import Any

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.service_levels import (
    AgeThresholds,
    AgingMoneyOut,
    AgingOut,
    AmountThresholds,
    DueInHours,
    RoutingRuleBody,
    RoutingRuleList,
    RoutingRuleOut,
    ServiceLevelsBody,
    ServiceLevelsOut,
    TeamBody,
    TeamByRole,
    TeamByUsers,
    TeamOut,
    UpdateRoutingRuleBody,
)
from chalicelib.container import container
from chalicelib.domain.routing import RoutingRule, Strategy
from chalicelib.domain.service_levels import Aging, ServiceLevelPolicy, Severity
from chalicelib.domain.users import Role
from chalicelib.services import routing as routing_service
from chalicelib.services import service_levels as service

router = Router("service_levels")
BASE = "/reconciliations/{id}/service_levels"
RULES = "/reconciliations/{id}/routing_rules"


def _levels(model: Any) -> dict[Severity, int]:
    return {Severity(name): value for name, value in model.model_dump().items() if value is not None}


def _team_role(team: TeamBody) -> Role | None:
    return Role(team.role) if isinstance(team, TeamByRole) else None


def _team_user_ids(team: TeamBody) -> list[int]:
    return list(dict.fromkeys(team.user_ids)) if isinstance(team, TeamByUsers) else []  # once each, in order


def policy_out(policy: ServiceLevelPolicy) -> ServiceLevelsOut:
    def named(levels: dict[Severity, int]) -> dict[str, int]:
        return {s.value: v for s, v in levels.items()}
    return ServiceLevelsOut(
        reconciliation_id=policy.reconciliation_id, default=policy.is_default,
        amount_decimal_places=policy.amount_decimal_places,
        amount_thresholds={c: AmountThresholds(**named(levels)) for c, levels in policy.amount_thresholds.items()},
        age_thresholds=AgeThresholds(**named(policy.age_thresholds)),
        due_in_hours=DueInHours(**named(policy.due_in_hours)), version=policy.version, updated_at=policy.updated_at)


def rule_out(rule: RoutingRule) -> RoutingRuleOut:
    return RoutingRuleOut(
        id=rule.id, reconciliation_id=rule.reconciliation_id, name=rule.name, strategy=rule.strategy.value,
        position=rule.position, team=TeamOut(role=rule.team_role.value if rule.team_role else None,
                                             user_ids=list(rule.team_user_ids)),
        data_stream_key=rule.data_stream_key, severity=rule.severity.value if rule.severity else None,
        enabled=rule.enabled, created_at=rule.created_at, updated_at=rule.updated_at, version=rule.version)


@router.route("GET", BASE, summary="The reconciliation's service level policy (the defaults when it has none of its "
              "own)", response=ServiceLevelsOut, errors=(404,))
def get_service_levels(request: ApiRequest, id: str) -> ServiceLevelsOut:
    return policy_out(service.get_policy(container().ports, request.environment, numeric_id(id, "reconciliation")))


@router.route("PUT", BASE, summary="Replace the reconciliation's service level policy: severity thresholds (amount, "
              "age) and a due time per severity", body=ServiceLevelsBody, response=ServiceLevelsOut,
              errors=(404, 409, 422))
def put_service_levels(request: ApiRequest, id: str) -> ServiceLevelsOut:
    body: ServiceLevelsBody = request.body
    policy = service.put_policy(
        container().ports, request.environment, numeric_id(id, "reconciliation"),
        amount_decimal_places=body.amount_decimal_places,
        amount_thresholds={c: _levels(levels) for c, levels in body.amount_thresholds.items()},
        age_thresholds=_levels(body.age_thresholds), due_in_hours=_levels(body.due_in_hours),
        expected_version=body.expected_version)
    return policy_out(policy)


@router.route("DELETE", BASE, summary="Back to the default service level policy", response=ServiceLevelsOut,
              errors=(404,))
def delete_service_levels(request: ApiRequest, id: str) -> ServiceLevelsOut:
    return policy_out(service.reset_policy(container().ports, request.environment, numeric_id(id, "reconciliation")))


@router.route("GET", BASE + "/aging", summary="The reconciliation's open exceptions by aging bucket and severity, "
              "and how many are overdue", response=AgingOut, errors=(404,))
def get_aging(request: ApiRequest, id: str) -> AgingOut:
    ports = container().ports
    reconciliation_id = numeric_id(id, "reconciliation")
    ports.reconciliations.get(request.environment, reconciliation_id)
    return _aging(service.aging_of(ports, request.environment, reconciliation_id))


def aging_out(found: Aging | None) -> AgingOut | None:
    """The overview's: None for a reconciliation with no open exception."""
    return _aging(found) if found is not None else None


def _aging(found: Aging) -> AgingOut:
    return AgingOut(count=found.count, overdue=found.overdue,
                    by_age_bucket={b.value: n for b, n in found.by_age_bucket.items()},
                    by_severity={s.value: n for s, n in found.by_severity.items()},
                    amounts_by_age_bucket={b.value: [AgingMoneyOut(currency=m.currency, decimal_places=m.decimal_places,
                                                                   amount=m.amount, count=m.count) for m in money]
                                           for b, money in found.money_by_age_bucket.items()},
                    unpriced=found.unpriced)


@router.route("GET", RULES, summary="The reconciliation's routing rules, in the order they are tried",
              response=RoutingRuleList, errors=(404,))
def list_routing_rules(request: ApiRequest, id: str) -> RoutingRuleList:
    rules = routing_service.list_rules(container().ports, request.environment, numeric_id(id, "reconciliation"))
    return RoutingRuleList(data=[rule_out(r) for r in rules])


@router.route("POST", RULES, summary="Add a routing rule: the exceptions the refresh opens go to its team, in turn or "
              "to the least loaded", status=201, body=RoutingRuleBody, response=RoutingRuleOut, errors=(404, 422))
def add_routing_rule(request: ApiRequest, id: str) -> RoutingRuleOut:
    body: RoutingRuleBody = request.body
    rule = routing_service.add_rule(
        container().ports, request.environment, numeric_id(id, "reconciliation"), name=body.name,
        strategy=Strategy(body.strategy), position=body.position,
        team_role=_team_role(body.team), team_user_ids=_team_user_ids(body.team),
        data_stream_key=body.data_stream_key, severity=Severity(body.severity) if body.severity else None,
        enabled=body.enabled)
    return rule_out(rule)


@router.route("GET", RULES + "/{rule_id}", summary="A routing rule", response=RoutingRuleOut, errors=(404,))
def get_routing_rule(request: ApiRequest, id: str, rule_id: str) -> RoutingRuleOut:
    return rule_out(routing_service.get_rule(container().ports, request.environment, numeric_id(id, "reconciliation"),
                                             numeric_id(rule_id, "routing rule")))


@router.route("PATCH", RULES + "/{rule_id}", summary="Change a routing rule (a team given replaces the team)",
              body=UpdateRoutingRuleBody, response=RoutingRuleOut, errors=(404, 409, 422))
def update_routing_rule(request: ApiRequest, id: str, rule_id: str) -> RoutingRuleOut:
    body: UpdateRoutingRuleBody = request.body
    given = body.model_fields_set
    changes: dict[str, Any] = {}
    for name in ("name", "position", "enabled"):
        if name in given and getattr(body, name) is not None:
            changes[name] = getattr(body, name)
    if "strategy" in given and body.strategy is not None:
        changes["strategy"] = Strategy(body.strategy)
    if "team" in given and body.team is not None:
        changes["team_role"] = _team_role(body.team)
        changes["team_user_ids"] = _team_user_ids(body.team)
    if "data_stream_key" in given:
        changes["data_stream_key"] = body.data_stream_key
    if "severity" in given:
        changes["severity"] = Severity(body.severity) if body.severity else None
    rule = routing_service.update_rule(container().ports, request.environment, numeric_id(id, "reconciliation"),
                                       numeric_id(rule_id, "routing rule"), changes)
    return rule_out(rule)


@router.route("DELETE", RULES + "/{rule_id}", summary="Delete a routing rule (what it assigned stays assigned)",
              status=204, errors=(404,))
def delete_routing_rule(request: ApiRequest, id: str, rule_id: str) -> None:
    routing_service.delete_rule(container().ports, request.environment, numeric_id(id, "reconciliation"),
                                numeric_id(rule_id, "routing rule"))
