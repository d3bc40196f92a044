"""People's unmatch decisions (domain/unmatch_decisions.py): kept at an unmatch, before its members
go (services/matches.py `unmatch`), read by learned rules (services/rule_suggestions.py)."""
from __future__ import annotations

from collections.abc import Iterable

from chalicelib.domain.clock import utc_now
from chalicelib.domain.matches import Match, MatchMember
from chalicelib.domain.unmatch_decisions import MAX_READ, UnmatchDecision, counts_as_a_decision, decision_of
from chalicelib.services import audit
from chalicelib.services.ports import Ports


def keep(ports: Ports, match: Match, members: Iterable[MatchMember], decided_by: str | None = None,
         approved_by: str | None = None) -> UnmatchDecision | None:
    """Keep the unmatch of `match` as its decider's decision (`decided_by`, else the request's
    actor), once: a retried unmatch finds it kept. Nothing is kept for an unmatch nobody decided:
    outside a request (a job, the sweeper), by a system actor, or by a reconciliation's delete.
    Returns the decision kept (or found kept), None when there is none to keep."""
    store = ports.unmatch_decisions
    actor = decided_by or audit.acting()
    if store is None or actor is None or not counts_as_a_decision(actor):
        return None
    held = [(m.side, m.record_id) for m in members]
    if not held:
        return None
    reconciliation = ports.reconciliations.find_including_deleting(match.environment, match.reconciliation_id)
    if reconciliation is None or reconciliation.deleting:  # its delete unmatches everything: no decision
        return None
    decision = decision_of(match.environment, match.reconciliation_id, match.id, held, actor, utc_now(),
                           match.status.value, match.reconciliation_rule_id, approved_by)
    store.keep(decision)
    return decision


def newest(ports: Ports, environment: str, reconciliation_id: int, limit: int = MAX_READ) -> list[UnmatchDecision]:
    """The reconciliation's kept decisions, newest match first, at most `limit` (none when not kept)."""
    if ports.unmatch_decisions is None:
        return []
    return ports.unmatch_decisions.newest_of(environment, reconciliation_id, limit)
