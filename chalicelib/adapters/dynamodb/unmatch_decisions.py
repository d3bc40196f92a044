"""People's unmatch decisions in DynamoDB (domain/unmatch_decisions.py): one item per unmatched
match in its reconciliation's partition of them (`keys.unmatch_decision`), written once (a
conditional put: a retried unmatch finds it there), removed by the table's TTL (`expires_at`)."""
from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable
from chalicelib.domain.clock import iso, parse_iso, utc_now
from chalicelib.domain.unmatch_decisions import UnmatchDecision

PAGE = 1_000  # decisions a query asks for (about 0.5 MB)


class UnmatchDecisionRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def keep(self, decision: UnmatchDecision) -> bool:
        """Keep the decision unless the match's is kept already (then nothing changes: the first
        write stands). True when this call wrote it."""
        item = {**keys.unmatch_decision(decision.environment, decision.reconciliation_id, decision.match_id),
                "entity": "unmatch_decision", "match_id": decision.match_id,
                "side_a": list(decision.side_a_record_ids), "side_b": list(decision.side_b_record_ids),
                "decided_by": decision.decided_by, "decided_at": iso(decision.decided_at),
                "match_status": decision.match_status, "reconciliation_rule_id": decision.reconciliation_rule_id,
                "approved_by": decision.approved_by, "truncated": decision.truncated,
                "expires_at": int(decision.expires_at.timestamp())}
        try:
            self._table.put(item, condition="attribute_not_exists(pk)")
        except ConditionFailed:
            return False
        return True

    def newest_of(self, environment: str, reconciliation_id: int, limit: int) -> list[UnmatchDecision]:
        """At most `limit` of the reconciliation's decisions, newest match first, read consistently (an
        unmatch of a moment ago counts); one past its expiry (which TTL removes within days) is left out."""
        now = int(utc_now().timestamp())
        return [self._from_item(environment, reconciliation_id, item)
                for item in islice((i for i in self._pages(environment, reconciliation_id)
                                    if int(i.get("expires_at") or 0) > now), limit)]

    def _pages(self, environment: str, reconciliation_id: int) -> Iterator[dict[str, Any]]:
        cursor = None
        while True:
            page = self._table.query_page(keys.BASE_TABLE, keys.unmatch_decisions_pk(environment, reconciliation_id),
                                          limit=PAGE, cursor=cursor, newest_first=True, consistent=True)
            yield from page.items
            if page.cursor is None:
                return
            cursor = page.cursor

    @staticmethod
    def _from_item(environment: str, reconciliation_id: int, item: dict[str, Any]) -> UnmatchDecision:
        rule_id = item.get("reconciliation_rule_id")
        return UnmatchDecision(
            environment=environment, reconciliation_id=reconciliation_id, match_id=int(item["match_id"]),
            side_a_record_ids=tuple(int(i) for i in item.get("side_a") or ()),
            side_b_record_ids=tuple(int(i) for i in item.get("side_b") or ()),
            decided_by=item["decided_by"], decided_at=parse_iso(item["decided_at"]),
            match_status=item["match_status"], reconciliation_rule_id=None if rule_id is None else int(rule_id),
            approved_by=item.get("approved_by"), truncated=bool(item.get("truncated")))
