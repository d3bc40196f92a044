"""People's unmatch decisions, as `adapters/dynamodb/unmatch_decisions.py` keeps them: once per
match (the first write stands), newest match first, an expired one left out."""
from __future__ import annotations

from dataclasses import replace

from chalicelib.domain.clock import utc_now
from chalicelib.domain.unmatch_decisions import UnmatchDecision


class FakeUnmatchDecisions:
    def __init__(self) -> None:
        self.kept: dict[tuple[str, int, int], UnmatchDecision] = {}

    def keep(self, decision: UnmatchDecision) -> bool:
        key = (decision.environment, decision.reconciliation_id, decision.match_id)
        if key in self.kept:
            return False
        # read back to the millisecond, as the table's ISO text keeps it
        at = decision.decided_at.replace(microsecond=decision.decided_at.microsecond // 1000 * 1000)
        self.kept[key] = replace(decision, decided_at=at)
        return True

    def newest_of(self, environment: str, reconciliation_id: int, limit: int) -> list[UnmatchDecision]:
        now = int(utc_now().timestamp())
        found = [d for (env, rid, _), d in sorted(self.kept.items(), key=lambda item: -item[0][2])
                 if (env, rid) == (environment, reconciliation_id) and int(d.expires_at.timestamp()) > now]
        return found[:limit]
