"""People's unmatch decisions: which records a person took apart (docs/learned-rules.md).

An unmatch deletes the match's members (the match stays as a tombstone without them), so what a
person decided by unmatching would be lost. Before the members go, a person's unmatch (of a
confirmed match, or the rejection of a proposed one) keeps one `UnmatchDecision`: the match, its
records by side, who decided and when. Learned rules read them: a suggested match that pairs
again records a person took apart conflicts with that decision (`repaired_by`), and the pairs are
real negatives for the text conditions learned.

Whose unmatch counts: a request's actor, a person (`user:<id>`) or a key (`api_key:<id>`), or the
requester of an approved unmatch. Never a system actor (a run, the sweeper), and never the
unmatches a reconciliation's delete makes (no one decided about the pairs).

Bounded: at most MAX_RECORDS_PER_SIDE record ids kept per side (a larger match keeps the first
ones, by id, and says `truncated`), each decision expires KEPT_FOR after it was made (the table's
TTL), and a reader takes at most MAX_READ of a reconciliation's, newest match first.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from chalicelib.domain.clock import iso

MAX_RECORDS_PER_SIDE = 25  # an item of ~0.5 KB: 5,000 are two query pages
KEPT_FOR = timedelta(days=400)  # a year of decisions, and the month a period takes to close
MAX_READ = 5_000
SYSTEM_ACTOR_PREFIX = "system:"

Pair = tuple[int, int]  # (side-A record id, side-B record id)


@dataclass(frozen=True)
class UnmatchDecision:
    environment: str
    reconciliation_id: int
    match_id: int
    side_a_record_ids: tuple[int, ...]
    side_b_record_ids: tuple[int, ...]
    decided_by: str  # the request's actor (user:<id>, api_key:<id>), or an approved unmatch's requester
    decided_at: datetime
    match_status: str  # the match's status when undone: "confirmed" (an unmatch) or "proposed" (a rejection)
    reconciliation_rule_id: int | None = None  # the rule that had made it; None: a person's match
    approved_by: str | None = None  # the approver, when the unmatch waited for one
    truncated: bool = False  # a side held more than MAX_RECORDS_PER_SIDE records: the first ones are kept

    @property
    def expires_at(self) -> datetime:
        return self.decided_at + KEPT_FOR

    def pairs(self) -> set[Pair]:
        """Every side-A record with every side-B record: what the person said does not belong together."""
        return {(a, b) for a in self.side_a_record_ids for b in self.side_b_record_ids}

    def as_body(self) -> dict[str, object]:
        return {"reconciliation_match_id": self.match_id, "unmatched_by": self.decided_by,
                "unmatched_at": iso(self.decided_at),
                "match_status": self.match_status}


def counts_as_a_decision(actor: str | None) -> bool:
    """Whether an unmatch by `actor` is someone's decision: a request's actor is; a job's or the
    sweeper's (system:...), or none (code outside any request), is not."""
    return actor is not None and not actor.startswith(SYSTEM_ACTOR_PREFIX)


def decision_of(environment: str, reconciliation_id: int, match_id: int, sides: Iterable[tuple[str, int]],
                decided_by: str, decided_at: datetime, match_status: str, reconciliation_rule_id: int | None,
                approved_by: str | None = None) -> UnmatchDecision:
    """The decision to keep for a match being unmatched, from its members as (side, record id)."""
    held = list(sides)
    side_a = sorted({record_id for side, record_id in held if side == "a"})
    side_b = sorted({record_id for side, record_id in held if side == "b"})
    truncated = len(side_a) > MAX_RECORDS_PER_SIDE or len(side_b) > MAX_RECORDS_PER_SIDE
    return UnmatchDecision(environment=environment, reconciliation_id=reconciliation_id, match_id=match_id,
                           side_a_record_ids=tuple(side_a[:MAX_RECORDS_PER_SIDE]),
                           side_b_record_ids=tuple(side_b[:MAX_RECORDS_PER_SIDE]), decided_by=decided_by,
                           decided_at=decided_at, match_status=match_status,
                           reconciliation_rule_id=reconciliation_rule_id, approved_by=approved_by,
                           truncated=truncated)


@dataclass(frozen=True)
class UnmatchedPairs:
    """The pairs people took apart, as an index by record: each side's record ids to the decisions
    (positions in `decisions`, newest first) that held them. Its size is the records' (at most
    MAX_READ decisions of 2 x MAX_RECORDS_PER_SIDE each), never their pairs' product."""
    decisions: tuple[UnmatchDecision, ...]
    side_a: Mapping[int, list[int]]
    side_b: Mapping[int, list[int]]

    def __bool__(self) -> bool:
        return bool(self.decisions)


def unmatched_pairs(decisions: Iterable[UnmatchDecision]) -> UnmatchedPairs:
    """The index of the pairs the decisions took apart (decisions newest first)."""
    kept = tuple(decisions)
    side_a: defaultdict[int, list[int]] = defaultdict(list)
    side_b: defaultdict[int, list[int]] = defaultdict(list)
    for position, decision in enumerate(kept):
        for record_id in decision.side_a_record_ids:
            side_a[record_id].append(position)
        for record_id in decision.side_b_record_ids:
            side_b[record_id].append(position)
    return UnmatchedPairs(kept, dict(side_a), dict(side_b))


def repaired_by(side_a_record_ids: Sequence[int], side_b_record_ids: Sequence[int],
                pairs: UnmatchedPairs) -> UnmatchDecision | None:
    """The decision a match of these records goes against, when it pairs again a side-A record and a
    side-B record a person took apart (the newest such decision); None when it pairs none."""
    on_a: set[int] = set()
    for record_id in side_a_record_ids:
        on_a.update(pairs.side_a.get(record_id, ()))
    if not on_a:
        return None
    both = {n for record_id in side_b_record_ids for n in pairs.side_b.get(record_id, ()) if n in on_a}
    if not both:
        return None
    return max((pairs.decisions[n] for n in both), key=lambda d: (d.decided_at, d.match_id))
