"""Reconciliations (with their stream usages, run slot, pending work and exception refresh
marks) and their rules (with the priority guards), as `adapters/dynamodb/reconciliations.py`
and the slot part of `adapters/dynamodb/runs.py` keep them: the run fake shares the rows here."""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from chalicelib.domain.clock import utc_now
from chalicelib.domain.data_streams import KEY_PATTERN
from chalicelib.domain.errors import Conflict, DomainError, NotFound
from chalicelib.domain.reconciliations import (
    Reconciliation,
    StreamUser,
    change_refused,
    usage_holds_stream,
)
from chalicelib.domain.rules import Rule, validate_rule
from tests.fakes._support import ConditionFailed, newest_first_page, padded, stored_time
from tests.fakes.counters import FakeCounters

# The adapter's age after which a priority guard no rule stands behind is taken back.
STALE_GUARD_AGE = timedelta(seconds=60)


@dataclass
class _ReconciliationRow:
    reconciliation: Reconciliation
    refresh_requests: int | None = None  # absent until the first request (the adapter's condition tells them apart)
    pending_jobs: set[int] = field(default_factory=set)
    whole_pool_requests: int | None = None
    delete_confirmed: bool = False  # the adapter's `deleting = "confirmed"`


@dataclass
class _Usage:
    version: int
    created_at: datetime


class FakeReconciliationRepository:
    def __init__(self, counters: FakeCounters | None = None) -> None:
        self._counters = counters or FakeCounters()
        self.rows: dict[tuple[str, int], _ReconciliationRow] = {}
        self.usages: dict[tuple[str, str, int], _Usage] = {}  # (environment, stream key, reconciliation id)

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "reconciliation")

    def add(self, reconciliation: Reconciliation) -> None:
        """Usages first, so that no reconciliation ever exists without the usages of its streams."""
        for stream_key in reconciliation.stream_keys:
            self._put_usage(reconciliation, stream_key)
        key = (reconciliation.environment, reconciliation.id)
        if key in self.rows:
            raise ConditionFailed()  # the adapter's put_new lets it through
        self.rows[key] = _ReconciliationRow(replace(
            reconciliation, created_at=stored_time(reconciliation.created_at),
            updated_at=stored_time(reconciliation.updated_at),
            exceptions_refreshed_at=stored_time(reconciliation.exceptions_refreshed_at),
            exceptions_refresh_requests=0, deleting=False))

    def get(self, environment: str, reconciliation_id: int) -> Reconciliation:
        found = self.find_including_deleting(environment, reconciliation_id)
        if found is None or found.deleting:
            raise NotFound(f"reconciliation {reconciliation_id} not found")
        return found

    def find_including_deleting(self, environment: str, reconciliation_id: int) -> Reconciliation | None:
        row = self.rows.get((environment, reconciliation_id))
        return self._read(row) if row else None

    def names(self, environment: str, reconciliation_ids) -> dict[int, str]:
        return {i: r.name for i, r in self.visible(environment, reconciliation_ids).items()}

    def visible(self, environment: str, reconciliation_ids) -> dict[int, Reconciliation]:
        rows = [self.rows.get((environment, i)) for i in dict.fromkeys(reconciliation_ids)]
        return {r.reconciliation.id: self._read(r) for r in rows if r is not None and not r.reconciliation.deleting}

    def due_for_exception_refresh(self, refreshed_before: datetime) -> list[tuple[str, int]]:
        """(environment, id) of every reconciliation not being deleted, of every environment, in
        the order of "<environment>#<id>", whose exceptions were refreshed before the moment or never."""
        entries = sorted((f"{env}#{padded(i)}", r.reconciliation) for (env, i), r in self.rows.items()
                         if not r.reconciliation.deleting)
        return [(r.environment, r.id) for _, r in entries
                if r.exceptions_refreshed_at is None or r.exceptions_refreshed_at < refreshed_before]

    def mark_exceptions_refreshed(self, environment: str, reconciliation_id: int, at, seen_requests: int = 0) -> None:
        """Refreshed at `at`, unless a refresh was requested after the refresh read `seen_requests`."""
        row = self.rows.get((environment, reconciliation_id))
        if row is None or (row.refresh_requests is not None and row.refresh_requests != seen_requests):
            return
        row.reconciliation = replace(row.reconciliation, exceptions_refreshed_at=stored_time(at))

    def request_exceptions_refresh(self, environment: str, reconciliation_id: int) -> None:
        row = self.rows.get((environment, reconciliation_id))
        if row is None:
            return
        row.refresh_requests = (row.refresh_requests or 0) + 1
        row.reconciliation = replace(row.reconciliation, exceptions_refreshed_at=None)

    def list_page(self, environment: str, limit: int,
                  cursor: str | None) -> tuple[list[Reconciliation], str | None]:
        """Newest first (by id); one being deleted has left the list."""
        entries = [(padded(i), self._read(r)) for (env, i), r in self.rows.items()
                   if env == environment and not r.reconciliation.deleting]
        return newest_first_page(f"reconciliations/{environment}", entries, limit, cursor)

    def save(self, updated: Reconciliation, previous: Reconciliation) -> None:
        """Write an edit; `updated.version` must be one past the stored version, and no run current."""
        environment = updated.environment
        for stream_key in (k for k in updated.stream_keys if not previous.uses(k)):
            usage = self.usages.get((environment, stream_key, updated.id))
            if usage is None or usage.version <= updated.version:
                self._put_usage(updated, stream_key)
        row = self.rows.get((environment, updated.id))
        if row is None:
            raise self._refusal(environment, updated.id)
        stored = row.reconciliation
        if stored.version != updated.version - 1 or stored.deleting or \
                stored.current_run_id is not None:
            raise self._refusal(environment, updated.id)
        removed = [k for k in previous.stream_keys if not updated.uses(k)]
        row.reconciliation = replace(
            stored, name=updated.name, run_type=updated.run_type, side_a_stream_keys=tuple(updated.side_a_stream_keys),
            side_b_stream_keys=tuple(updated.side_b_stream_keys), exception_after_days=updated.exception_after_days,
            updated_at=stored_time(updated.updated_at), version=updated.version,
            leaving_stream_keys=stored.leaving_stream_keys | set(removed))
        if removed:  # the refresh that resolves their exceptions, requested by the same write
            self.request_exceptions_refresh(environment, updated.id)
        for stream_key in removed:
            usage = self.usages.get((environment, stream_key, updated.id))
            if usage is not None and usage.version <= updated.version:
                del self.usages[(environment, stream_key, updated.id)]

    def streams_left(self, environment: str, reconciliation_id: int, stream_keys: Iterable[str]) -> None:
        row = self.rows.get((environment, reconciliation_id))
        if row is not None:
            row.reconciliation = replace(row.reconciliation,
                                         leaving_stream_keys=row.reconciliation.leaving_stream_keys - set(stream_keys))

    def mark_deleting(self, environment: str, reconciliation_id: int) -> Reconciliation:
        """Hide it unless a run is current; repeating it is allowed."""
        row = self.rows.get((environment, reconciliation_id))
        if row is None or row.reconciliation.current_run_id is not None:
            raise self._refusal(environment, reconciliation_id)
        row.reconciliation = replace(row.reconciliation, deleting=True)
        return self._read(row)

    def confirm_deleting(self, environment: str, reconciliation_id: int) -> None:
        row = self.rows.get((environment, reconciliation_id))
        if row is not None and row.reconciliation.deleting:
            row.delete_confirmed = True

    def unmark_deleting(self, environment: str, reconciliation_id: int) -> bool:
        """Undo mark_deleting, unless another delete confirmed it or it is gone."""
        row = self.rows.get((environment, reconciliation_id))
        if row is None or not row.reconciliation.deleting or row.delete_confirmed:
            return False
        row.reconciliation = replace(row.reconciliation, deleting=False)
        return True

    def remove(self, reconciliation: Reconciliation) -> None:
        """The reconciliation first, its usages after."""
        environment = reconciliation.environment
        self.rows.pop((environment, reconciliation.id), None)
        for stream_key in reconciliation.stream_keys:
            self.usages.pop((environment, stream_key, reconciliation.id), None)

    def _refusal(self, environment: str, reconciliation_id: int) -> DomainError:
        row = self.rows.get((environment, reconciliation_id))
        return change_refused(reconciliation_id, row.reconciliation if row else None)

    # Stream usages -----------------------------------------------------------------------------

    def users_of_stream(self, environment: str, stream_key: str) -> list[StreamUser]:
        """The reconciliations that hold the stream, by id; stale usages are left out."""
        if not KEY_PATTERN.match(stream_key):
            return []
        now = utc_now()
        users = []
        for (env, key, reconciliation_id), usage in sorted(self.usages.items(), key=lambda u: u[0][2]):
            if (env, key) != (environment, stream_key):
                continue
            owner = self.find_including_deleting(environment, reconciliation_id)
            if usage_holds_stream(owner, stream_key, usage.created_at, now):
                users.append(StreamUser(reconciliation_id, owner.name if owner else None))
        return users

    def remove_usages_of_stream(self, environment: str, stream_key: str) -> None:
        for key in [k for k in self.usages if k[:2] == (environment, stream_key)]:
            del self.usages[key]

    def _put_usage(self, reconciliation: Reconciliation, stream_key: str) -> None:
        self.usages[(reconciliation.environment, stream_key, reconciliation.id)] = _Usage(
            reconciliation.version, stored_time(utc_now()))

    @staticmethod
    def _read(row: _ReconciliationRow) -> Reconciliation:
        return replace(row.reconciliation, exceptions_refresh_requests=row.refresh_requests or 0)


@dataclass
class _PriorityGuard:
    rule_id: int
    created_at: datetime


class FakeReconciliationRuleRepository:
    def __init__(self, counters: FakeCounters | None = None) -> None:
        self._counters = counters or FakeCounters()
        self.rules: dict[tuple[str, int], Rule] = {}
        self.guards: dict[tuple[str, int, int], _PriorityGuard] = {}  # (environment, reconciliation id, priority)

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "reconciliation_rule")

    def add(self, rule: Rule) -> None:
        """Reserve the priority (guard), then write the rule (a suggestion reserves none)."""
        if rule.holds_priority:
            self._claim_priority(rule)
        if (rule.environment, rule.id) in self.rules:
            raise ConditionFailed()  # the adapter's put_new lets it through
        self.rules[(rule.environment, rule.id)] = self._stored(rule)

    def get(self, environment: str, rule_id: int) -> Rule:
        rule = self.rules.get((environment, rule_id))
        if rule is None:
            raise NotFound(f"reconciliation rule {rule_id} not found")
        return rule

    def list_of(self, environment: str, reconciliation_id: int) -> list[Rule]:
        """Every rule of the reconciliation, by priority, then id."""
        rules = [r for (env, _), r in self.rules.items()
                 if env == environment and r.reconciliation_id == reconciliation_id]
        return sorted(rules, key=lambda r: (r.definition.priority, r.id))

    def save(self, updated: Rule, previous: Rule) -> None:
        """Write an edit (`updated.version` one past the stored one); a new priority is claimed
        before the write and the old one released after it."""
        moved = updated.holds_priority and (updated.definition.priority != previous.definition.priority
                                            or not previous.holds_priority)
        claimed_at = self._claim_priority(updated) if moved else None
        stored = self.rules.get((updated.environment, updated.id))
        if stored is None or stored.version != updated.version - 1:
            if moved:
                self._release_priority(updated, claimed_at)
            if stored is None:
                raise NotFound(f"reconciliation rule {updated.id} not found")
            raise Conflict(f"reconciliation rule {updated.id} changed while it was being updated; retry")
        self.rules[(updated.environment, updated.id)] = self._stored(updated)
        if moved and previous.holds_priority:
            self._release_priority(previous)

    def remove(self, rule: Rule) -> None:
        """Delete the rule first, then free its priority."""
        if self.rules.pop((rule.environment, rule.id), None) is None:
            raise NotFound(f"reconciliation rule {rule.id} not found")
        if rule.holds_priority:
            self._release_priority(rule)

    def remove_all_of_reconciliation(self, environment: str, reconciliation_id: int) -> None:
        for rule in self.list_of(environment, reconciliation_id):
            del self.rules[(environment, rule.id)]
        for key in [k for k in self.guards if k[:2] == (environment, reconciliation_id)]:
            del self.guards[key]

    def _claim_priority(self, rule: Rule) -> datetime:
        key = (rule.environment, rule.reconciliation_id, rule.definition.priority)
        existing = self.guards.get(key)
        if existing is not None and existing.rule_id != rule.id and not self._abandoned(rule, existing):
            raise Conflict(f"priority {rule.definition.priority} is already used by rule {existing.rule_id} "
                           f"of reconciliation {rule.reconciliation_id}")
        self.guards[key] = _PriorityGuard(rule.id, stored_time(utc_now()))
        return self.guards[key].created_at

    def _abandoned(self, rule: Rule, guard: _PriorityGuard) -> bool:
        if utc_now() - guard.created_at < STALE_GUARD_AGE:
            return False
        owner = self.rules.get((rule.environment, guard.rule_id))
        return owner is None or owner.definition.priority != rule.definition.priority

    def _release_priority(self, rule: Rule, claimed_at: datetime | None = None) -> None:
        key = (rule.environment, rule.reconciliation_id, rule.definition.priority)
        guard = self.guards.get(key)
        if guard is not None and guard.rule_id == rule.id and (claimed_at is None or guard.created_at == claimed_at):
            del self.guards[key]

    @staticmethod
    def _stored(rule: Rule) -> Rule:
        """As the adapter reads it back: the definition through its JSON body and validate_rule."""
        return replace(rule, definition=validate_rule(json.loads(json.dumps(rule.definition.as_body()))),
                       created_at=stored_time(rule.created_at),
                       updated_at=stored_time(rule.updated_at or rule.created_at))
