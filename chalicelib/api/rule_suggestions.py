"""Routes of rule suggestions (docs/learned-rules.md): compute them from a reconciliation's
decisions, then accept (an active rule at a priority) or dismiss each proposed rule. The proposed
rules are listed with GET /reconciliations/{id}/rules?status=proposed."""
from __future__ import annotations

from chalicelib.api.reconciliations import rule_out
from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.reconciliation_rules import ReconciliationRuleOut
from chalicelib.api.schemas.rule_suggestions import AcceptRuleBody, RuleSuggestionsOut, SuggestRulesBody
from chalicelib.container import container
from chalicelib.services import reconciliation_runs, rule_suggestions

router = Router("rule_suggestions")


@router.route("POST", "/reconciliations/{id}/rule_suggestions",
              summary="Suggest rules from the reconciliation's manual matches and accepted investigations "
                      "(replaces its earlier proposed rules; 409 above the dry run's open-records limit)",
              body=SuggestRulesBody, response=RuleSuggestionsOut, errors=(404, 409, 422))
def suggest_rules(request: ApiRequest, id: str) -> RuleSuggestionsOut:
    body: SuggestRulesBody = request.body
    found = rule_suggestions.suggest(container().ports, request.environment, numeric_id(id, "reconciliation"),
                                     max_decisions=body.max_decisions, max_suggestions=body.max_suggestions)
    return RuleSuggestionsOut(reconciliation_id=found.reconciliation_id, decisions_read=found.decisions_read,
                              decisions_by_kind=found.decisions_by_kind, matches_scanned=found.matches_scanned,
                              scan_complete=found.scan_complete, open_records=found.open_records,
                              replaced=found.replaced, data=[rule_out(r) for r in found.rules])


@router.route("POST", "/reconciliation_rules/{id}/accept",
              summary="Accept a proposed rule: it becomes active at the priority given (409 when taken)",
              body=AcceptRuleBody, response=ReconciliationRuleOut, errors=(404, 409, 422))
def accept_rule(request: ApiRequest, id: str) -> ReconciliationRuleOut:
    body: AcceptRuleBody = request.body
    ports = container().ports
    rule = rule_suggestions.accept(ports, request.environment, numeric_id(id, "reconciliation rule"), body.given())
    reconciliation_runs.after_rule_saved(ports, request.environment, rule)
    return rule_out(rule)


@router.route("POST", "/reconciliation_rules/{id}/dismiss",
              summary="Dismiss a proposed rule: kept dismissed, never run, not proposed again",
              response=ReconciliationRuleOut, errors=(404, 409))
def dismiss_rule(request: ApiRequest, id: str) -> ReconciliationRuleOut:
    return rule_out(rule_suggestions.dismiss(container().ports, request.environment,
                                             numeric_id(id, "reconciliation rule")))
