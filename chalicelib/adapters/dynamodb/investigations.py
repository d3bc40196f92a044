"""Investigations in DynamoDB: one item each, listed per exception newest first (gsi1)."""
from __future__ import annotations

from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, StatusMoves
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso
from chalicelib.domain.errors import NotFound, TransitionRefused
from chalicelib.domain.investigations.investigation import INVESTIGATION_STATUSES, Investigation, InvestigationStatus


class InvestigationRepository(StatusMoves[Investigation, InvestigationStatus]):
    statuses, noun, key = INVESTIGATION_STATUSES, "investigation", staticmethod(keys.investigation)

    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def add(self, investigation: Investigation) -> None:
        self._table.put_new(self._to_item(investigation))

    def get(self, environment: str, investigation_id: int) -> Investigation:
        item = self._table.get(keys.investigation(environment, investigation_id))
        if item is None:
            raise NotFound(f"investigation {investigation_id} not found")
        return self._from_item(item)

    def of_exception(self, environment: str, exception_id: int, limit: int) -> list[Investigation]:
        page = self._table.query_page(keys.GSI1, keys.investigations_of_exception_pk(environment, exception_id),
                                      limit=limit)
        return [self._from_item(i) for i in page.items]

    def active(self) -> list[Investigation]:
        """Pending and running investigations of every environment (for the sweeper)."""
        items = self._table.index_items(keys.GSI2, keys.ACTIVE_INVESTIGATIONS_PK)
        return [self._from_item(i) for i in items]

    def mark_accepted(self, investigation: Investigation, match_id: int) -> None:
        """Once: a second accept finds the mark (and is told which match it made)."""
        try:
            self._table.update(keys.investigation(investigation.environment, investigation.id),
                               "SET accepted_match_id = :m", condition="attribute_not_exists(accepted_match_id)",
                               values={":m": match_id})
        except ConditionFailed:
            raise TransitionRefused(f"investigation {investigation.id} was accepted already") from None

    @staticmethod
    def _to_item(investigation: Investigation) -> dict[str, Any]:
        return {
            **keys.investigation(investigation.environment, investigation.id),
            **keys.investigation_index(investigation.environment, investigation.exception_id, investigation.id),
            **keys.active_investigation_index(investigation.environment, investigation.id),
            "entity": "investigation", "environment": investigation.environment, "id": investigation.id,
            "exception_id": investigation.exception_id, "reconciliation_id": investigation.reconciliation_id,
            "status": investigation.status.value, "created_at": iso(investigation.created_at),
            "filter_params": investigation.filter_params or None,
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> Investigation:
        confidence = item.get("confidence_score")
        return Investigation(
            environment=item["environment"], id=item["id"], exception_id=item["exception_id"],
            reconciliation_id=item["reconciliation_id"], status=InvestigationStatus(item["status"]),
            created_at=parse_iso(item["created_at"]), filter_params=item.get("filter_params") or {},
            completed_at=parse_optional_iso(item.get("completed_at")),
            candidate_records_searched=item.get("candidate_records_searched", 0),
            suggested_record_ids=tuple(item.get("suggested_record_ids") or ()),
            target_record_ids=tuple(item.get("target_record_ids") or ()),
            suggested_difference=item.get("suggested_difference"),
            confidence_score=float(confidence) if confidence is not None else None,
            recommendation_text=item.get("recommendation_text"), error_message=item.get("error_message"),
            accepted_match_id=item.get("accepted_match_id"),
        )

