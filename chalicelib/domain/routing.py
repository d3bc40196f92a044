"""Routing rules (pure): which rule of a reconciliation takes a new exception, who its team is,
and whom of the team it goes to (round robin, or the least loaded). The state a choice reads (a
rule's cursor, each user's load) is stored and written conditionally by services/routing.py.

- A rule applies to an exception when it is enabled and its optional `data_stream_key` and
  `severity` match; the first that applies (by `position`, then id) decides.
- Its team: the users of the environment with `team_role` (exactly that role), or those of
  `team_user_ids`; only those who may be named (not deactivated).
- Round robin: the team sorted by user id, the member at `cursor` modulo its size.
- Least loaded: the member with the fewest open (open or investigating) exceptions assigned,
  ties broken by the round-robin order from `cursor`, so that ties spread too.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from chalicelib.domain.errors import ValidationFailed
from chalicelib.domain.service_levels import Severity
from chalicelib.domain.users import Role, User, can_be_named

MAX_RULES = 50
MAX_TEAM = 500


class Strategy(StrEnum):
    ROUND_ROBIN = "round_robin"
    LEAST_LOADED = "least_loaded"


@dataclass(frozen=True)
class RoutingRule:
    environment: str
    id: int
    reconciliation_id: int
    name: str
    strategy: Strategy
    position: int = 0
    team_role: Role | None = None
    team_user_ids: tuple[int, ...] = ()
    data_stream_key: str | None = None
    severity: Severity | None = None
    enabled: bool = True
    created_at: datetime | None = None
    updated_at: datetime | None = None
    version: int = 1

    def applies(self, data_stream_key: str, severity: Severity | None) -> bool:
        return (self.enabled and (self.data_stream_key is None or self.data_stream_key == data_stream_key)
                and (self.severity is None or self.severity is severity))


def check_rule(rule: RoutingRule) -> RoutingRule:
    """One team: a role or a list of user ids, not both (422)."""
    if (rule.team_role is None) == (not rule.team_user_ids):
        raise ValidationFailed.on("team", "give team.role or team.user_ids (one of the two)")
    if len(rule.team_user_ids) > MAX_TEAM:
        raise ValidationFailed.on("team.user_ids", f"at most {MAX_TEAM} users")
    if len(set(rule.team_user_ids)) != len(rule.team_user_ids):
        raise ValidationFailed.on("team.user_ids", "names a user twice")
    return rule


def ordered(rules: Iterable[RoutingRule]) -> list[RoutingRule]:
    return sorted(rules, key=lambda r: (r.position, r.id))


def first_rule(rules: Iterable[RoutingRule], data_stream_key: str, severity: Severity | None) -> RoutingRule | None:
    return next((r for r in ordered(rules) if r.applies(data_stream_key, severity)), None)


def team_of(rule: RoutingRule, users: Iterable[User], excluding: Iterable[int] = ()) -> list[int]:
    """The ids of the rule's team who may be assigned, sorted (the round-robin order)."""
    left_out = set(excluding)
    named = set(rule.team_user_ids)
    return sorted(u.id for u in users if can_be_named(u) and u.id not in left_out
                  and (u.role is rule.team_role if rule.team_role is not None else u.id in named))


def choose(strategy: Strategy, team: Sequence[int], loads: Mapping[int, int], cursor: int) -> tuple[int, int]:
    """Whom of the (sorted, non-empty) team an exception goes to, and the rule's next cursor."""
    if not team:
        raise ValueError("an empty team takes nothing")
    size = len(team)
    if strategy is Strategy.ROUND_ROBIN:
        return team[cursor % size], cursor + 1
    turn = {user_id: (n - cursor) % size for n, user_id in enumerate(team)}
    chosen = min(team, key=lambda user_id: (loads.get(user_id, 0), turn[user_id]))
    return chosen, cursor + 1


@dataclass(frozen=True)
class RoutingState:
    """The environment's routing state: each rule's round-robin cursor, and the picks made whose
    assignment may not be written yet (exception id -> (user id, when)), counted in the loads."""
    version: int = 0
    cursors: dict[int, int] = field(default_factory=dict)
    pending: dict[int, tuple[int, datetime]] = field(default_factory=dict)
