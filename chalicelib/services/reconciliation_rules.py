"""Reconciliation rule use cases: the priority waterfall a reconciliation's runs apply."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict
from chalicelib.domain.rules import Rule, validate_rule
from chalicelib.services import audit, rate_streams
from chalicelib.services.ports import Ports, ReconciliationRules


def create_rule(ports: Ports, environment: str, reconciliation_id: int, body: Mapping[str, Any]) -> Rule:
    ports.reconciliations.get(environment, reconciliation_id)
    definition = validate_rule(body)
    rate_streams.check_rule_streams(ports, environment, definition)
    now = utc_now()
    rule = Rule(environment=environment, id=ports.reconciliation_rules.next_id(environment),
                reconciliation_id=reconciliation_id, definition=definition, created_at=now, updated_at=now)
    ports.reconciliation_rules.add(rule)
    return rule


def rules_of(ports: Ports, environment: str, reconciliation_id: int) -> list[Rule]:
    ports.reconciliations.get(environment, reconciliation_id)
    return ports.reconciliation_rules.list_of(environment, reconciliation_id)


def update_rule(rules: ReconciliationRules, environment: str, rule_id: int, changes: Mapping[str, Any]) -> Rule:
    current = rules.get(environment, rule_id)
    if current.proposal is not None and "active" in changes:  # a suggestion runs once accepted, at a priority
        raise Conflict(f"reconciliation rule {rule_id} is {current.status.value}: accept it to make it active "
                       f"(POST /v1/reconciliation_rules/{rule_id}/accept)")
    updated = current.with_definition(current.definition.patched(changes), utc_now())
    rules.save(updated, previous=current)
    audit.note_change(current, updated)
    return updated


def delete_rule(rules: ReconciliationRules, environment: str, rule_id: int) -> None:
    rules.remove(rules.get(environment, rule_id))
