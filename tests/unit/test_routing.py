"""Routing (domain/routing.py, and the pick of services/routing.py against a version-guarded state):
which rule applies, who the team is, and fairness over 10,000 exceptions."""
import random
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from chalicelib.domain.errors import ValidationFailed
from chalicelib.domain.routing import RoutingRule, RoutingState, Strategy, check_rule, choose, first_rule, team_of
from chalicelib.domain.service_levels import Severity
from chalicelib.domain.users import Role, User, UserStatus
from chalicelib.services import routing as routing_service

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
EXCEPTIONS = 10_000


def rule(**fields) -> RoutingRule:
    base = dict(environment="acme", id=1, reconciliation_id=1, name="r", strategy=Strategy.ROUND_ROBIN,
                team_role=Role.PREPARER)
    return RoutingRule(**{**base, **fields})


def user(user_id: int, role: Role = Role.PREPARER, status: UserStatus = UserStatus.ACTIVE) -> User:
    return User(id=user_id, environment="acme", idp_user_id=f"u{user_id}", email=f"u{user_id}@acme.example",
                name=None, role=role, status=status, created_at=NOW)


def test_the_first_rule_that_applies_decides_by_position_then_id():
    rules = [rule(id=1, position=5), rule(id=2, position=1, data_stream_key="bank"),
             rule(id=3, position=1, severity=Severity.HIGH), rule(id=4, position=0, enabled=False)]
    assert first_rule(rules, "bank", Severity.LOW).id == 2
    assert first_rule(rules, "ledger", Severity.HIGH).id == 3
    assert first_rule(rules, "ledger", Severity.LOW).id == 1
    assert first_rule([rule(data_stream_key="bank")], "ledger", None) is None


def test_a_team_is_a_role_exactly_or_a_list_and_never_a_deactivated_user():
    people = [user(1), user(2, Role.APPROVER), user(3, status=UserStatus.DEACTIVATED),
              user(4, status=UserStatus.INVITED), user(5)]
    assert team_of(rule(), people) == [1, 4, 5]
    assert team_of(rule(team_role=None, team_user_ids=(5, 2, 3, 99)), people) == [2, 5]
    assert team_of(rule(), people, excluding=[4]) == [1, 5]


def test_a_rule_names_one_team():
    with pytest.raises(ValidationFailed):
        check_rule(rule(team_role=Role.ADMIN, team_user_ids=(1,)))
    with pytest.raises(ValidationFailed):
        check_rule(rule(team_role=None))


def test_round_robin_is_fair_over_ten_thousand_exceptions():
    team, cursor, counts = [3, 8, 11, 20, 41, 42, 57], 0, Counter[int]()
    for _ in range(EXCEPTIONS):
        chosen, cursor = choose(Strategy.ROUND_ROBIN, team, {}, cursor)
        counts[chosen] += 1
    assert set(counts) == set(team) and max(counts.values()) - min(counts.values()) <= 1
    assert sum(counts.values()) == EXCEPTIONS


def test_least_loaded_is_fair_over_ten_thousand_exceptions_that_open_and_close():
    """Exceptions come and go (each pick, a random open one closes 40% of the time): every pick goes to
    a member with the fewest open, so open loads never differ by more than the closes allow, and the
    totals assigned stay within a small spread."""
    rng = random.Random(36)
    team = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    open_by_user: dict[int, list[int]] = {u: [] for u in team}
    assigned, cursor = Counter[int](), 0
    for exception_id in range(EXCEPTIONS):
        loads = {u: len(ids) for u, ids in open_by_user.items()}
        chosen, cursor = choose(Strategy.LEAST_LOADED, team, loads, cursor)
        assert loads[chosen] == min(loads.values())
        open_by_user[chosen].append(exception_id)
        assigned[chosen] += 1
        if rng.random() < 0.4:
            holders = [u for u in team if open_by_user[u]]
            holder = rng.choice(holders)
            open_by_user[holder].pop(rng.randrange(len(open_by_user[holder])))
    assert sum(assigned.values()) == EXCEPTIONS
    mean = EXCEPTIONS / len(team)
    assert all(abs(n - mean) / mean < 0.05 for n in assigned.values()), assigned


def test_least_loaded_ties_go_in_turn():
    team = [1, 2, 3]
    picks, cursor = [], 0
    for _ in range(6):
        chosen, cursor = choose(Strategy.LEAST_LOADED, team, {}, cursor)
        picks.append(chosen)
    assert picks == [1, 2, 3, 1, 2, 3]


class VersionedState:
    """The routing state as DynamoDB keeps it: a pick is written only at the version it read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = RoutingState()
        self.refused = 0
        self.reads = Counter[str]()

    def state(self, environment):
        with self._lock:
            self.reads["state"] += 1
            return self._state

    def active_summaries(self, environment):
        self.reads["active_summaries"] += 1
        return []

    def advance(self, environment, seen, rule_id, cursor, exception_id, user_id, at, expired=()):
        """The whole item put back at `seen.version + 1` (the adapter's put), pending picks included."""
        with self._lock:
            if self._state.version != seen.version:
                self.refused += 1
                return False
            pending = {k: v for k, v in seen.pending.items() if k not in set(expired)}
            self._state = RoutingState(version=seen.version + 1, cursors={**seen.cursors, rule_id: cursor},
                                       pending={**pending, exception_id: (user_id, at)})
            return True

    def settle(self, environment, exception_id):
        """As the adapter: `SET version = version + 1 REMOVE pending.<id>`, if the pick is pending."""
        with self._lock:
            if exception_id in self._state.pending:
                self._state = RoutingState(version=self._state.version + 1, cursors=self._state.cursors,
                                           pending={k: v for k, v in self._state.pending.items()
                                                    if k != exception_id})


def test_concurrent_picks_never_share_a_turn():
    """Four routers picking at once for one rule: each pick is written at the version it read, so no
    turn is taken twice and none is lost (the cursor counts every pick), and the team stays even."""
    store = VersionedState()
    ports = SimpleNamespace(service_levels=store)
    team, picks, lock = [1, 2, 3, 4, 5], Counter[int](), threading.Lock()

    def router(n: int) -> None:
        for k in range(500):
            chosen = routing_service.pick(ports, "acme", rule(), team, n * 1000 + k, NOW)
            with lock:
                picks[chosen] += 1
            store.settle("acme", n * 1000 + k)  # its assignment written

    threads = [threading.Thread(target=router, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.state("acme").cursors[1] == 2000 and sum(picks.values()) == 2000
    assert set(picks.values()) == {400}


def test_loads_count_the_picks_not_yet_written_and_drop_those_past_their_lease():
    from chalicelib.domain.reconciliation_exceptions import Assignee, ExceptionStatus, ExceptionSummary
    from chalicelib.domain.service_levels import SlaSummary

    def summary(exception_id, *user_ids, status=ExceptionStatus.OPEN):
        return SlaSummary(ExceptionSummary(exception_id, 1, status, "bank",
                                           tuple(Assignee(i, f"u{i}", i) for i in user_ids)), NOW, None, None)

    summaries = [summary(1, 1), summary(2, 1, 2), summary(3, 2, status=ExceptionStatus.RESOLVED), summary(4)]
    pending = {2: (2, NOW), 4: (3, NOW), 9: (1, NOW - routing_service.PICK_LEASE - timedelta(seconds=1))}
    counted, expired = routing_service.loads(summaries, pending, NOW)
    assert counted == Counter({1: 2, 2: 1, 3: 1}) and expired == [9]


def test_a_settled_pick_never_comes_back_from_an_older_read():
    """A router read the state while a pick was pending; the pick is settled; the router's write of
    its older read is refused (settle moved the version), so the settled pick is not put back as a
    ghost counted against its user."""
    store = VersionedState()
    assert store.advance("acme", store.state("acme"), 1, 1, 7, 1, NOW)
    older = store.state("acme")
    store.settle("acme", 7)
    assert not store.advance("acme", older, 1, 2, 8, 2, NOW)
    ports = SimpleNamespace(service_levels=store)
    routing_service.pick(ports, "acme", rule(), [1, 2], 8, NOW)
    assert set(store.state("acme").pending) == {8}


def test_a_pick_that_loses_the_race_reads_again_the_state_only():
    """Least loaded: the exceptions are read once per pick (or passed in by the sweep), never once per
    attempt; a conflict re-reads only the state item, whose pending picks carry the other's pick."""
    class Rival(VersionedState):
        def advance(self, environment, seen, *args, **kwargs):
            if self.refused < 3:  # another router writes first, three times
                with self._lock:
                    self._state = RoutingState(version=self._state.version + 1, cursors=self._state.cursors,
                                               pending={**self._state.pending, 100 + self.refused: (1, NOW)})
            return super().advance(environment, seen, *args, **kwargs)

    store = Rival()
    ports = SimpleNamespace(service_levels=store)
    chosen = routing_service.pick(ports, "acme", rule(strategy=Strategy.LEAST_LOADED), [1, 2], 5, NOW)
    assert store.refused == 3 and store.reads == Counter({"state": 4, "active_summaries": 1})
    assert chosen == 2  # the rival's three pending picks went to 1
    store.reads.clear()
    routing_service.pick(ports, "acme", rule(strategy=Strategy.LEAST_LOADED), [1, 2], 6, NOW, active=[])
    assert store.reads["active_summaries"] == 0


def test_routers_that_pick_and_settle_at_once_leave_no_ghost_pick():
    """Four routers each pick and settle 200 exceptions at once, least loaded: every pick is made
    (none refused 25 times over) and every settled pick left the state for good (none written back
    from an older read)."""
    store = VersionedState()
    ports = SimpleNamespace(service_levels=store)
    team, picks, lock = [1, 2, 3, 4], Counter[int](), threading.Lock()

    def router(n: int) -> None:
        for k in range(200):
            exception_id = n * 1000 + k
            chosen = routing_service.pick(ports, "acme", rule(strategy=Strategy.LEAST_LOADED), team, exception_id,
                                          NOW, active=[])
            with lock:
                picks[chosen] += 1
            store.settle("acme", exception_id)

    threads = [threading.Thread(target=router, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.state("acme").pending == {} and sum(picks.values()) == 800
