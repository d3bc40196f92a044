"""Service level policies, routing rules and the routing state in DynamoDB; and the two marks
they leave on an exception's item: `overdue_notified_for` (the opening whose overdue event was
sent) and `routed_by` (the rule that assigned it)."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.event_ledger import owes
from chalicelib.adapters.dynamodb.reconciliation_exceptions import LISTING_ATTRIBUTES, _summary_of
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, in_parallel
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.reconciliation_exceptions import ACTIVE
from chalicelib.domain.routing import RoutingRule, RoutingState, Strategy
from chalicelib.domain.service_levels import ServiceLevelPolicy, Severity, SlaSummary
from chalicelib.domain.users import Role

SLA_ATTRIBUTES = (*LISTING_ATTRIBUTES, "created_at", "overdue_notified_for", "routed_by")
ACTIVE_GUARD_PREFIX = "EXCACTIVE#"  # keys.active_exception_guard's sort keys
ACTIVE_STATUSES = {s.value for s in ACTIVE}


class ServiceLevelRepository:
    def __init__(self, table: DynamoTable, counters) -> None:
        self._table = table
        self._counters = counters

    # Policies ---------------------------------------------------------------------------------

    def policy(self, environment: str, reconciliation_id: int) -> ServiceLevelPolicy | None:
        item = self._table.get(keys.service_level_policy(environment, reconciliation_id))
        return _policy(item) if item else None

    def policies_of(self, environment: str, reconciliation_ids: Iterable[int]) -> dict[int, ServiceLevelPolicy]:
        items = self._table.get_many(keys.service_level_policy(environment, i) for i in set(reconciliation_ids))
        return {p.reconciliation_id: p for p in map(_policy, items)}

    def save_policy(self, policy: ServiceLevelPolicy) -> None:
        """`policy.version` one past the stored one's (1: none stored); else Conflict."""
        item = {**keys.service_level_policy(policy.environment, policy.reconciliation_id),
                "entity": "service_level_policy", "environment": policy.environment,
                "reconciliation_id": policy.reconciliation_id, "amount_decimal_places": policy.amount_decimal_places,
                "amount_thresholds": {c: {s.value: v for s, v in levels.items()}
                                      for c, levels in policy.amount_thresholds.items()},
                "age_thresholds": {s.value: v for s, v in policy.age_thresholds.items()},
                "due_in_hours": {s.value: v for s, v in policy.due_in_hours.items()},
                "version": policy.version, "updated_at": iso(policy.updated_at) if policy.updated_at else None}
        try:
            if policy.version == 1:
                self._table.put(item, condition="attribute_not_exists(pk)")
            else:
                self._table.put(item, condition="#v = :expected", names={"#v": "version"},
                                values={":expected": policy.version - 1})
        except ConditionFailed:
            raise Conflict(f"the service level policy of reconciliation {policy.reconciliation_id} changed "
                           "meanwhile; read it again and retry") from None

    def delete_policy(self, environment: str, reconciliation_id: int) -> None:
        self._table.delete(keys.service_level_policy(environment, reconciliation_id))

    # Routing rules ----------------------------------------------------------------------------

    def next_rule_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "routing_rule")

    def rules_of(self, environment: str, reconciliation_id: int) -> list[RoutingRule]:
        items = self._table.query_all(keys.BASE_TABLE, keys.reconciliation(environment, reconciliation_id)["pk"],
                                      sort_prefix=keys.ROUTING_RULE_PREFIX, consistent=True)
        return [_rule(i) for i in items]

    def rule(self, environment: str, reconciliation_id: int, rule_id: int) -> RoutingRule:
        item = self._table.get(keys.routing_rule(environment, reconciliation_id, rule_id))
        if item is None:
            raise NotFound(f"routing rule {rule_id} not found on reconciliation {reconciliation_id}")
        return _rule(item)

    def add_rule(self, rule: RoutingRule) -> None:
        self._table.put_new(_rule_item(rule))

    def save_rule(self, rule: RoutingRule) -> None:
        try:
            self._table.put(_rule_item(rule), condition="#v = :expected", names={"#v": "version"},
                            values={":expected": rule.version - 1})
        except ConditionFailed:
            raise Conflict(f"routing rule {rule.id} changed meanwhile; read it again and retry") from None

    def remove_rule(self, rule: RoutingRule) -> None:
        self._table.delete(keys.routing_rule(rule.environment, rule.reconciliation_id, rule.id))

    # The routing state ------------------------------------------------------------------------

    def state(self, environment: str) -> RoutingState:
        item = self._table.get(keys.routing_state(environment))
        if item is None:
            return RoutingState()
        return RoutingState(version=int(item["version"]),
                            cursors={int(k): int(v) for k, v in (item.get("cursors") or {}).items()},
                            pending={int(k): (int(v["user_id"]), parse_iso(v["at"]))
                                     for k, v in (item.get("pending") or {}).items()})

    def advance(self, environment: str, seen: RoutingState, rule_id: int, cursor: int, exception_id: int,
                user_id: int, at: datetime, expired: Iterable[int] = ()) -> bool:
        """Write a pick: the rule's cursor, the pick pending until its assignment is written (and
        drop the `expired` picks), if the state is still at `seen.version`. False when another pick
        came first (read again and choose again)."""
        cursors = {str(k): v for k, v in seen.cursors.items()}
        cursors[str(rule_id)] = cursor
        gone = set(expired)
        pending = {str(k): {"user_id": u, "at": iso(when)} for k, (u, when) in seen.pending.items() if k not in gone}
        pending[str(exception_id)] = {"user_id": user_id, "at": iso(at)}
        item = {**keys.routing_state(environment), "entity": "routing_state", "version": seen.version + 1,
                "cursors": cursors, "pending": pending}
        try:
            if seen.version == 0:
                self._table.put(item, condition="attribute_not_exists(pk)")
            else:
                self._table.put(item, condition="#v = :seen", names={"#v": "version"}, values={":seen": seen.version})
        except ConditionFailed:
            return False
        return True

    def settle(self, environment: str, exception_id: int) -> None:
        """The pick's assignment is written (or given up): it leaves the pending picks, and the
        state's version moves on, so that a router holding an older read cannot write the pick
        back with its whole state (a ghost pick counted against the user until its lease ends)."""
        try:
            self._table.update(keys.routing_state(environment), "SET #v = #v + :one REMOVE pending.#e",
                               names={"#v": "version", "#e": str(exception_id)}, values={":one": 1},
                               condition="attribute_exists(pending.#e)")
        except ConditionFailed:
            pass

    # Exceptions, as service levels and routing see them ---------------------------------------

    def summaries(self, environment: str) -> list[SlaSummary]:
        """Every exception of the environment, newest first: one read of the queue's index."""
        items = self._table.query_all(keys.GSI1, keys.exceptions_index_pk(environment), projection=SLA_ATTRIBUTES)
        return sorted(map(_sla_summary, items), key=lambda s: -s.summary.id)

    def active_summaries(self, environment: str) -> list[SlaSummary]:
        """The open and investigating exceptions of the environment, newest first, without reading
        the closed ones: each reconciliation's active exception guards (one per stream, in its own
        partition: `keys.active_exception_guard`, taken before an exception is written or
        reopened) name them, then one batch read of those exceptions. A stale guard (its exception
        closed or never written) is left out by the exception's own status."""
        return self.active_summaries_of(environment, [int(i["id"]) for i in self._table.query_all(
            keys.GSI1, keys.reconciliations_index_pk(environment), projection="id")])

    def active_summaries_of(self, environment: str, reconciliation_ids: Iterable[int]) -> list[SlaSummary]:
        """`active_summaries` of the given reconciliations alone (the aging counts of one)."""
        partitions = [keys.reconciliation(environment, r)["pk"] for r in sorted(set(reconciliation_ids))]
        named = {int(g["exception_id"]) for g in in_parallel(partitions, lambda pk: self._table.query_all(
            keys.BASE_TABLE, pk, sort_prefix=ACTIVE_GUARD_PREFIX, projection="exception_id", consistent=True))}
        items = self._table.get_many((keys.reconciliation_exception(environment, i) for i in named),
                                     projection=SLA_ATTRIBUTES)
        found = [_sla_summary(i) for i in items if i.get("status") in ACTIVE_STATUSES]
        return sorted(found, key=lambda s: -s.summary.id)

    def mark_overdue_notified(self, environment: str, exception_id: int, opened_at: datetime,
                              pending_event: str | None) -> None:
        """Once per opening of the exception (Conflict when marked already, or gone)."""
        owed, owed_values = owes(pending_event)
        try:
            self._table.update(keys.reconciliation_exception(environment, exception_id),
                               "SET overdue_notified_for = :opened" + owed,
                               condition="attribute_exists(pk) AND opened_at = :opened AND "
                                         "(attribute_not_exists(overdue_notified_for) "
                                         "OR overdue_notified_for <> :opened)",
                               values={":opened": iso(opened_at), **owed_values})
        except ConditionFailed:
            raise Conflict(f"exception {exception_id}'s overdue event was sent already") from None

    def mark_routed(self, environment: str, exception_id: int, rule_id: int) -> None:
        try:
            self._table.update(keys.reconciliation_exception(environment, exception_id), "SET routed_by = :r",
                               condition="attribute_exists(pk)", values={":r": rule_id})
        except ConditionFailed:
            pass

    def all_reconciliations(self) -> list[tuple[str, int]]:
        """(environment, id) of every reconciliation of every environment (the sweeper's index)."""
        return [(e["environment"], int(e["id"])) for e in self._table.query_all(keys.GSI2, keys.ALL_RECONCILIATIONS_PK)]


def _sla_summary(item: dict[str, Any]) -> SlaSummary:
    return SlaSummary(summary=_summary_of(item), created_at=parse_optional_iso(item.get("created_at")),
                      overdue_notified_for=item.get("overdue_notified_for"),
                      routed_by=int(item["routed_by"]) if item.get("routed_by") is not None else None)


def _policy(item: dict[str, Any]) -> ServiceLevelPolicy:
    return ServiceLevelPolicy(
        environment=item["environment"], reconciliation_id=int(item["reconciliation_id"]),
        amount_decimal_places=int(item.get("amount_decimal_places", 2)),
        amount_thresholds={c: {Severity(s): int(v) for s, v in levels.items()}
                           for c, levels in (item.get("amount_thresholds") or {}).items()},
        age_thresholds={Severity(s): int(v) for s, v in (item.get("age_thresholds") or {}).items()},
        due_in_hours={Severity(s): int(v) for s, v in (item.get("due_in_hours") or {}).items()},
        version=int(item.get("version", 1)), updated_at=parse_optional_iso(item.get("updated_at")))


def _rule_item(rule: RoutingRule) -> dict[str, Any]:
    return {**keys.routing_rule(rule.environment, rule.reconciliation_id, rule.id), "entity": "routing_rule",
            "environment": rule.environment, "id": rule.id, "reconciliation_id": rule.reconciliation_id,
            "name": rule.name, "strategy": rule.strategy.value, "position": rule.position,
            "team_role": rule.team_role.value if rule.team_role else None, "team_user_ids": list(rule.team_user_ids),
            "data_stream_key": rule.data_stream_key, "severity": rule.severity.value if rule.severity else None,
            "enabled": rule.enabled, "created_at": iso(rule.created_at) if rule.created_at else None,
            "updated_at": iso(rule.updated_at) if rule.updated_at else None, "version": rule.version}


def _rule(item: dict[str, Any]) -> RoutingRule:
    return RoutingRule(
        environment=item["environment"], id=int(item["id"]), reconciliation_id=int(item["reconciliation_id"]),
        name=item["name"], strategy=Strategy(item["strategy"]), position=int(item.get("position", 0)),
        team_role=Role(item["team_role"]) if item.get("team_role") else None,
        team_user_ids=tuple(int(i) for i in item.get("team_user_ids") or ()),
        data_stream_key=item.get("data_stream_key"),
        severity=Severity(item["severity"]) if item.get("severity") else None,
        enabled=bool(item.get("enabled", True)), created_at=parse_optional_iso(item.get("created_at")),
        updated_at=parse_optional_iso(item.get("updated_at")), version=int(item.get("version", 1)))
