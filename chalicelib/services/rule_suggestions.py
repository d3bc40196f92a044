"""Rules suggested from people's decisions (docs/learned-rules.md): read a reconciliation's manual
matches (accepted investigations among them), learn the conditions that would have made them
(domain/rule_learning.py), measure each suggestion with the engine over the decisions and over the
open records, and keep the best as rules `proposed` (`source: learned`), which no run applies
until a person accepts one at a priority; dismissing one keeps it, so it is not proposed again.

Synchronous and bounded: at most MAX_DECISIONS decisions (newest first) among at most
MAX_MATCHES_SCANNED matches of the reconciliation, and the open records up to the dry run's limit
(409 above it, as a dry run). bench/rule_suggestions.py times it at the bounds.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.errors import Conflict, FieldError, NotFound, ValidationFailed
from chalicelib.domain.matches import Match, MatchStatus
from chalicelib.domain.reconciliations import Reconciliation
from chalicelib.domain.rules import MAX_PRIORITY, Rule, RuleDefinition, RuleSource, RuleStatus
from chalicelib.domain.unmatch_decisions import UnmatchDecision, unmatched_pairs
from chalicelib.services import audit, unmatch_decisions
from chalicelib.services.ports import Ports

MAX_DECISIONS = 1_000
MAX_MATCHES_SCANNED = 20_000
MAX_SUGGESTIONS = 5
DEFAULT_SUGGESTIONS = 3
PAGE = 500
MEMBER_THREADS = 8
INVESTIGATION_REASON = "Accepted investigation "  # services/investigations.py names the match so
MAX_UNMATCHED_RECORDS = 2_000  # records of people's unmatches read as negative pairs for the text conditions


@dataclass(frozen=True)
class Decision:
    match: Match
    kind: str  # "manual" or "investigation"
    rows: list[dict[str, Any]]  # the records, as decided_frame takes them


@dataclass(frozen=True)
class Suggestions:
    reconciliation_id: int
    decisions_read: int
    decisions_by_kind: dict[str, int]
    matches_scanned: int
    scan_complete: bool
    open_records: dict[str, int] | None
    rules: list[Rule]
    replaced: int


def suggest(ports: Ports, environment: str, reconciliation_id: int, *, max_decisions: int = MAX_DECISIONS,
            max_suggestions: int = DEFAULT_SUGGESTIONS) -> Suggestions:
    """Compute the suggestions and keep them (the previous proposals of the reconciliation go)."""
    from chalicelib.domain import rule_learning as learning
    from chalicelib.services.reconciliation_runs import TooManyOpenRecords, active_rules, open_frames

    _check_bounds(max_decisions, max_suggestions)
    reconciliation = ports.reconciliations.get(environment, reconciliation_id)
    decisions, scanned, complete = read_decisions(ports, environment, reconciliation, max_decisions)
    kinds = {"manual": sum(d.kind == "manual" for d in decisions),
             "investigation": sum(d.kind == "investigation" for d in decisions)}
    existing = ports.reconciliation_rules.list_of(environment, reconciliation_id)
    if not decisions:
        return Suggestions(reconciliation_id, 0, kinds, scanned, complete, None, [], 0)
    active = active_rules(ports, environment, reconciliation_id)
    read_by_active = {f for r in active for c in r.definition.conditions for f in (c.field, c.b_field)
                      if f.startswith("metadata.")}
    keys = sorted(set(learning.metadata_keys_of(row.get("metadata") or {} for d in decisions for row in d.rows))
                  | read_by_active)
    decided = learning.decided_frame((row for d in decisions for row in d.rows), keys)
    undone = unmatch_decisions.newest(ports, environment, reconciliation_id)
    pairs = unmatched_pairs(undone)
    unmatched = learning.decided_frame(unmatched_rows(ports, environment, undone), keys)
    learned = learning.learn(decided, unmatched=unmatched)
    candidates = learned.candidates(max_suggestions)
    try:
        open_a, open_b = open_frames(ports, environment, reconciliation,
                                     active + [learning.candidate_rule(c) for c in candidates], None,
                                     limit=ports.limits.dry_run_records)
    except TooManyOpenRecords:
        raise Conflict(f"reconciliation {reconciliation_id} has more than {ports.limits.dry_run_records:,} open "
                       "records; suggestions are dry-run over at most that many, as a dry run is") from None
    seen_currencies = len(set(decided["currency"].to_list()) | set(open_a["currency"].to_list())
                          | set(open_b["currency"].to_list()))
    seen_directions = len(set(decided["direction"].to_list()) | set(open_a["direction"].to_list())
                          | set(open_b["direction"].to_list()))
    if seen_currencies > 1 or seen_directions > 1:  # the open records say what the decisions could not
        learned = learning.learn(decided, currencies_seen=seen_currencies, directions_seen=seen_directions,
                                 unmatched=unmatched)
        candidates = learned.candidates(max_suggestions)
    known = {_shape(r.definition) for r in existing if r.proposal is not RuleStatus.PROPOSED}
    measured = []
    for position, definition in enumerate(candidates):
        if _shape(definition) in known:
            continue  # a rule of the reconciliation says it already, or a person dismissed it
        rule = learning.candidate_rule(definition)
        on_decisions = learning.decision_evidence(decided, rule)
        evidence = {
            "decisions_read": len(decisions), "decisions_by_kind": kinds,
            "matches_scanned": scanned, "scan_complete": complete, "unmatch_decisions_read": len(undone),
            "cardinalities": learned.observed.get("cardinalities"),
            "decisions_of_cardinality": learned.decisions_of_cardinality,
            "decisions_explained": on_decisions["explained"],
            "decisions_contradicted": on_decisions["contradicted"],
            "observed": {k: v for k, v in learned.observed.items() if k != "cardinalities"},
            "text_agreement": next((t.as_body() for t in learned.texts
                                    if t.condition in definition.conditions), None),
            "dry_run": learning.dry_run_evidence(open_a, open_b, decided, active, rule, unmatched=pairs),
        }
        measured.append((learning.ranking_key(evidence, definition), position, definition, evidence))
    measured.sort(key=lambda m: (m[0], m[1]))
    replaced = _drop_proposals(ports, existing)
    top = max((r.definition.priority for r in existing if r.holds_priority), default=0)
    now = utc_now()
    kept = []
    for rank, (_, _, definition, evidence) in enumerate(measured, start=1):
        priority = min(top + rank, MAX_PRIORITY)
        rule = Rule(environment=environment, id=ports.reconciliation_rules.next_id(environment),
                    reconciliation_id=reconciliation_id, definition=replace(definition, priority=priority),
                    created_at=now, updated_at=now, source=RuleSource.LEARNED, proposal=RuleStatus.PROPOSED,
                    evidence={"rank": rank, "computed_at": iso(now), **evidence})
        ports.reconciliation_rules.add(rule)
        kept.append(rule)
    audit.note(reconciliation_id=reconciliation_id, decisions_read=len(decisions), suggested=[r.id for r in kept],
               replaced=replaced)
    return Suggestions(reconciliation_id, len(decisions), kinds, scanned, complete,
                       {"side_a": open_a.height, "side_b": open_b.height}, kept, replaced)


def _check_bounds(max_decisions: int, max_suggestions: int) -> None:
    errors = []
    if not 1 <= max_decisions <= MAX_DECISIONS:
        errors.append(("max_decisions", f"must be from 1 to {MAX_DECISIONS}"))
    if not 1 <= max_suggestions <= MAX_SUGGESTIONS:
        errors.append(("max_suggestions", f"must be from 1 to {MAX_SUGGESTIONS}"))
    if errors:
        raise ValidationFailed([FieldError(name, message) for name, message in errors])


def _shape(definition: RuleDefinition) -> tuple[Any, ...]:
    """What makes two rules the same rule: their cardinality, grouping and conditions, in any order."""
    return (definition.cardinality, definition.group_by,
            frozenset(json.dumps(c.as_body(), sort_keys=True) for c in definition.conditions))


def _drop_proposals(ports: Ports, existing: list[Rule]) -> int:
    dropped = 0
    for rule in existing:
        if rule.proposal is RuleStatus.PROPOSED:
            try:  # read again: one accepted since the listing is a rule now, and stays
                current = ports.reconciliation_rules.get(rule.environment, rule.id)
                if current.proposal is not RuleStatus.PROPOSED:
                    continue
                ports.reconciliation_rules.remove(current)
                dropped += 1
            except NotFound:  # deleted meanwhile by someone: theirs stands
                continue
    return dropped


def read_decisions(ports: Ports, environment: str, reconciliation: Reconciliation,
                   max_decisions: int) -> tuple[list[Decision], int, bool]:
    """The newest manual matches of the reconciliation (a person's, or an accepted investigation's),
    at most `max_decisions` among at most MAX_MATCHES_SCANNED matches, with their records as they are
    stored; a match whose records are no longer all held by it is left out. Returns the decisions,
    the matches scanned and whether the scan reached the oldest match."""
    manual: list[Match] = []
    scanned, cursor, complete = 0, None, False
    while len(manual) < max_decisions and scanned < MAX_MATCHES_SCANNED:
        page, cursor = ports.matches.list_page(environment, reconciliation.id, min(PAGE, MAX_MATCHES_SCANNED - scanned),
                                               cursor, status=MatchStatus.CONFIRMED)
        scanned += len(page)
        manual.extend(m for m in page if m.reconciliation_rule_id is None)
        if cursor is None:
            complete = True
            break
    manual = manual[:max_decisions]
    with ThreadPoolExecutor(MEMBER_THREADS) as pool:
        members = list(pool.map(lambda m: ports.matches.members(environment, m.id), manual))
    held = {h.record.id: h for h in ports.claims.held_records(
        environment, [member.record_id for found in members for member in found])}
    decisions = []
    for number, (match, found) in enumerate(zip(manual, members, strict=True)):
        if not found or any(m.record_id not in held or held[m.record_id].match_in(reconciliation.id) != match.id
                            for m in found):
            continue
        rows = [_row(held[m.record_id].record, m.side, number) for m in found]
        kind = "investigation" if (match.reason or "").startswith(INVESTIGATION_REASON) else "manual"
        decisions.append(Decision(match, kind, rows))
    return decisions, scanned, complete


def unmatched_rows(ports: Ports, environment: str, undone: list[UnmatchDecision]) -> list[dict[str, Any]]:
    """The records of the matches people unmatched, as decided_frame takes them (`decision` numbers
    each unmatched match), newest first until MAX_UNMATCHED_RECORDS records: one batched read. A
    record deleted since is left out."""
    wanted: list[tuple[int, str, int]] = []
    for number, decision in enumerate(undone):
        ids = [(number, "a", i) for i in decision.side_a_record_ids] + [(number, "b", i)
                                                                         for i in decision.side_b_record_ids]
        if len(wanted) + len(ids) > MAX_UNMATCHED_RECORDS:
            break
        wanted.extend(ids)
    if not wanted:
        return []
    found = ports.records.find_many(environment, list({i for _, _, i in wanted}))
    return [_row(found[i], side, number) for number, side, i in wanted if i in found]


def _row(record: Any, side: str, decision: int) -> dict[str, Any]:
    return {"id": record.id, "decision": decision, "side": side, "amount": record.amount,
            "decimal_places": record.decimal_places, "direction": record.direction.value, "date": record.date,
            "currency": record.currency, "description": record.description, "external_id": record.external_id,
            "metadata": record.metadata, "data_stream_key": record.data_stream_key}


# Accepting and dismissing ---------------------------------------------------------------------------

def accept(ports: Ports, environment: str, rule_id: int, changes: Mapping[str, Any]) -> Rule:
    """The proposed rule becomes an active rule at the priority given (else the one it was shown
    with), its name and auto_confirm as given; 409 when the priority is taken or it is not proposed."""
    current = ports.reconciliation_rules.get(environment, rule_id)
    wanted = {k: v for k, v in changes.items() if k in ("priority", "name", "auto_confirm")}
    definition = current.definition.patched({**wanted, "active": True})  # 422 before any 409
    if current.proposal is not RuleStatus.PROPOSED:
        raise Conflict(f"reconciliation rule {rule_id} is {current.status.value}; only a proposed rule is accepted")
    accepted = replace(current.with_definition(definition, utc_now()), proposal=None)
    ports.reconciliation_rules.save(accepted, previous=current)
    audit.note(**audit.changes({"status": current.status.value, "priority": current.definition.priority},
                               {"status": accepted.status.value, "priority": definition.priority}))
    return accepted


def dismiss(ports: Ports, environment: str, rule_id: int) -> Rule:
    """The proposed rule is kept dismissed (never run, not proposed again); dismissing it again
    changes nothing."""
    current = ports.reconciliation_rules.get(environment, rule_id)
    if current.proposal is RuleStatus.DISMISSED:
        return current
    if current.proposal is not RuleStatus.PROPOSED:
        raise Conflict(f"reconciliation rule {rule_id} is {current.status.value}; only a proposed rule is dismissed")
    dismissed = replace(current, proposal=RuleStatus.DISMISSED, updated_at=utc_now(), version=current.version + 1)
    ports.reconciliation_rules.save(dismissed, previous=current)
    audit.note(**audit.changes({"status": current.status.value}, {"status": dismissed.status.value}))
    return dismissed
