"""Approvals and approval policies in DynamoDB (keys.approval, keys.approval_policy).

An approval has a partition of its own; its status moves are conditional writes (StatusMoves) from
the statuses domain/approvals.py allows, and a finished one leaves the sweeper's sparse list of
active approvals in the same write. A policy is one item in its reconciliation's partition.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.event_ledger import owing
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, Filter, StatusMoves
from chalicelib.domain.approvals import (
    ANY_CURRENCY,
    APPROVAL_STATUSES,
    Approval,
    ApprovalAction,
    ApprovalPolicy,
    ApprovalStatus,
)
from chalicelib.domain.clock import iso, optional_iso, parse_iso, parse_optional_iso
from chalicelib.domain.errors import NotFound, TransitionRefused


class ApprovalRepository(StatusMoves[Approval, ApprovalStatus]):
    statuses, noun, key = APPROVAL_STATUSES, "approval", staticmethod(keys.approval)

    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    # Approvals ----------------------------------------------------------------------------------

    def move_owing(self, approval: Approval, /, target: ApprovalStatus, pending_event: str | None,
                   **fields: object) -> Approval:
        """StatusMoves' move, marking the event the move owes (`pending_event`, the outbox of
        services/events.py `save_and_emit`) in the same conditional write."""
        sources = self.statuses.sources_of(target)
        if not sources:
            raise TransitionRefused(f"approval {approval.id} cannot move to {target.value}")
        try:
            item = self._table.move_status(self.key(approval.environment, approval.id), target.value, sources, fields,
                                           leave_index=keys.GSI2 if target in self.statuses.finished else None,
                                           pending_event=pending_event)
        except ConditionFailed:
            raise TransitionRefused(f"approval {approval.id} cannot move to {target.value}") from None
        return self._from_item(item)

    def claim_target(self, environment: str, dedupe_key: str, approval_id: int,
                     now: datetime) -> tuple[int, datetime] | None:
        """Make `approval_id` the holder of the target's guard (a conditional put on its absence):
        None when it is, else the holder's id and when it claimed the guard."""
        key = keys.approval_target(environment, dedupe_key)
        try:
            self._table.put({**key, "entity": "approval_target", "approval_id": approval_id, "claimed_at": iso(now)},
                            condition="attribute_not_exists(pk)")
            return None
        except ConditionFailed:
            item = self._table.get(key)
            if item is None:  # given up meanwhile: claim it again
                return self.claim_target(environment, dedupe_key, approval_id, now)
            return int(item["approval_id"]), parse_iso(item["claimed_at"])

    def take_over_target(self, environment: str, dedupe_key: str, stale_id: int, approval_id: int,
                         now: datetime) -> bool:
        """Take the guard from an approval no longer pending (False: it changed hands meanwhile)."""
        try:
            self._table.put({**keys.approval_target(environment, dedupe_key), "entity": "approval_target",
                             "approval_id": approval_id, "claimed_at": iso(now)},
                            condition="approval_id = :stale", values={":stale": stale_id})
            return True
        except ConditionFailed:
            return False

    def release_target(self, environment: str, dedupe_key: str, approval_id: int) -> None:
        """Give the guard up (a request that could not store its approval), if it holds it."""
        self._table.release_guard(keys.approval_target(environment, dedupe_key), "approval_id", approval_id)

    def add(self, approval: Approval, pending_event: str | None = None) -> None:
        self._table.put_new({**self._to_item(approval), **owing(pending_event)})

    def find(self, environment: str, approval_id: int) -> Approval | None:
        item = self._table.get(keys.approval(environment, approval_id))
        return self._from_item(item) if item else None

    def get(self, environment: str, approval_id: int) -> Approval:
        found = self.find(environment, approval_id)
        if found is None:
            raise NotFound(f"approval {approval_id} not found")
        return found

    def list_page(self, environment: str, limit: int, cursor: str | None, *, status: ApprovalStatus | None = None,
                  reconciliation_id: int | None = None,
                  requested_by: str | None = None) -> tuple[list[Approval], str | None]:
        """The environment's approvals, newest first, filtered by storage."""
        clauses, names, values = [], {}, {}
        for n, (name, value) in enumerate((("status", status.value if status else None),
                                           ("reconciliation_id", reconciliation_id))):
            if value is not None:
                clauses.append(f"#f{n} = :f{n}")
                names[f"#f{n}"], values[f":f{n}"] = name, value
        if requested_by is not None:  # the person, or the credential their request was sent with
            clauses.append("(#fby = :fby OR #fwith = :fby)")
            names.update({"#fby": "requested_by", "#fwith": "requested_with"})
            values[":fby"] = requested_by
        page = self._table.query_page(keys.GSI1, keys.approvals_index_pk(environment), limit=limit, cursor=cursor,
                                      filter=Filter(" AND ".join(clauses), names, values) if clauses else None)
        return [self._from_item(i) for i in page.items], page.cursor

    def active(self, environment: str | None = None) -> list[Approval]:
        """Pending and executing approvals of every environment (the sweeper's), or of one (its
        entries' sort keys begin with the environment), read whole from the table."""
        if environment is None:
            return [self._from_item(i) for i in self._table.index_items(keys.GSI2, keys.ACTIVE_APPROVALS_PK)]
        entries = list(self._table.query_all(keys.GSI2, keys.ACTIVE_APPROVALS_PK,
                                             sort_prefix=keys.active_approvals_of(environment)))
        items = self._table.get_many({"pk": e["pk"], "sk": e["sk"]} for e in entries)
        return sorted((self._from_item(i) for i in items if i.get(keys.GSI2.partition_key) == keys.ACTIVE_APPROVALS_PK),
                      key=lambda a: a.id)

    # Policies -----------------------------------------------------------------------------------

    def policy(self, environment: str, reconciliation_id: int) -> ApprovalPolicy:
        """The reconciliation's policy; the default (no approvals) when none was set."""
        item = self._table.get(keys.approval_policy(environment, reconciliation_id))
        if item is None:
            return ApprovalPolicy(environment, reconciliation_id)
        return ApprovalPolicy(
            environment=environment, reconciliation_id=reconciliation_id,
            actions=frozenset(ApprovalAction(a) for a in item.get("actions") or ()),
            thresholds=({str(c): int(t) for c, t in item["thresholds"].items()} if item.get("thresholds") is not None
                        else {ANY_CURRENCY: int(item["threshold"])}),  # a policy stored before thresholds per currency
            threshold_decimal_places=int(item["threshold_decimal_places"]),
            expires_after_minutes=int(item["expires_after_minutes"]),
            updated_at=parse_optional_iso(item.get("updated_at")), updated_by=item.get("updated_by"))

    def save_policy(self, policy: ApprovalPolicy) -> None:
        """Put the policy whole (the last write wins: an admin's setting)."""
        self._table.put({**keys.approval_policy(policy.environment, policy.reconciliation_id),
                         "entity": "approval_policy", "environment": policy.environment,
                         "reconciliation_id": policy.reconciliation_id,
                         "actions": sorted(a.value for a in policy.actions), "thresholds": dict(policy.thresholds),
                         "threshold": policy.threshold,
                         "threshold_decimal_places": policy.threshold_decimal_places,
                         "expires_after_minutes": policy.expires_after_minutes,
                         "updated_at": optional_iso(policy.updated_at), "updated_by": policy.updated_by})

    # Items --------------------------------------------------------------------------------------

    @staticmethod
    def _to_item(approval: Approval) -> dict[str, Any]:
        return {
            **keys.approval(approval.environment, approval.id),
            **keys.approval_index(approval.environment, approval.id),
            **keys.active_approval_index(approval.environment, approval.id),
            "entity": "approval", "environment": approval.environment, "id": approval.id,
            "reconciliation_id": approval.reconciliation_id, "action": approval.action.value,
            "params": approval.params, "description": approval.description, "amount": approval.amount,
            "amount_decimal_places": approval.amount_decimal_places, "currency": approval.currency,
            "threshold": approval.threshold, "threshold_decimal_places": approval.threshold_decimal_places,
            "status": approval.status.value, "requested_by": approval.requested_by,
            "requested_at": iso(approval.requested_at), "expires_at": iso(approval.expires_at),
            "target_type": approval.target_type, "target_id": approval.target_id,
            "requested_with": approval.requested_with,
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> Approval:
        def optional_int(name: str) -> int | None:
            return int(item[name]) if item.get(name) is not None else None

        return Approval(
            environment=item["environment"], id=int(item["id"]), reconciliation_id=int(item["reconciliation_id"]),
            action=ApprovalAction(item["action"]), params=dict(item.get("params") or {}),
            description=item["description"], amount=int(item["amount"]),
            amount_decimal_places=int(item["amount_decimal_places"]), currency=item.get("currency"),
            threshold=optional_int("threshold"), threshold_decimal_places=int(item["threshold_decimal_places"]),
            status=ApprovalStatus(item["status"]), requested_by=item["requested_by"],
            requested_at=parse_iso(item["requested_at"]), expires_at=parse_iso(item["expires_at"]),
            decided_by=item.get("decided_by"), decided_at=parse_optional_iso(item.get("decided_at")),
            rejection_reason=item.get("rejection_reason"), failure_reason=item.get("failure_reason"),
            result=dict(item.get("result") or {}), completed_at=parse_optional_iso(item.get("completed_at")),
            target_type=item.get("target_type"), target_id=optional_int("target_id"),
            requested_with=item.get("requested_with"))
