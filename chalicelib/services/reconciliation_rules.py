"""Reconciliation rule use cases: the priority waterfall a reconciliation's runs apply."""
from __future__ import annotations

from typing import Any, Mapping

from chalicelib.domain.clock import utc_now
from chalicelib.domain.rules import Rule, validate_rule
from chalicelib.services.ports import ReconciliationRules, Reconciliations


def create_rule(rules: ReconciliationRules, reconciliations: Reconciliations, environment: str,
                reconciliation_id: int, body: Mapping[str, Any]) -> Rule:
    reconciliations.get(environment, reconciliation_id)
    definition = validate_rule(body)
    now = utc_now()
    rule = Rule(environment=environment, id=rules.next_id(environment), reconciliation_id=reconciliation_id,
                definition=definition, created_at=now, updated_at=now)
    rules.add(rule)
    return rule


def rules_of(rules: ReconciliationRules, reconciliations: Reconciliations, environment: str,
             reconciliation_id: int) -> list[Rule]:
    reconciliations.get(environment, reconciliation_id)
    return rules.list_of(environment, reconciliation_id)


def update_rule(rules: ReconciliationRules, environment: str, rule_id: int, changes: Mapping[str, Any]) -> Rule:
    current = rules.get(environment, rule_id)
    updated = current.with_definition(current.definition.patched(changes), utc_now())
    rules.save(updated, previous=current)
    return updated


def delete_rule(rules: ReconciliationRules, environment: str, rule_id: int) -> None:
    rules.remove(rules.get(environment, rule_id))
