"""Reconciliations and their rules in DynamoDB, with the items that keep their invariants.

- A usage item per stream a reconciliation uses (in the stream's partition) keeps the stream
  from being deleted: written before the reconciliation on create, added before and removed
  after the write on an edit, removed after the reconciliation on delete. A usage carries the
  reconciliation version it was written for, so an edit removes only what no later edit re-added.
- A change or a delete is refused while the reconciliation has a current run: the condition
  `attribute_not_exists(current_run_id)` is part of the write, never a read before it.
- A priority guard per (reconciliation, priority) keeps priorities unique; a rule moves its
  guard on an edit (new guard, then the rule, then release the old one).
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, confirm_delete_mark
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.data_streams import KEY_PATTERN
from chalicelib.domain.errors import Conflict, DomainError, NotFound
from chalicelib.domain.reconciliations import (
    Reconciliation,
    RunType,
    StreamUser,
    change_refused,
    usage_holds_stream,
)
from chalicelib.domain.rules import Rule, RuleSource, RuleStatus, validate_rule

# What gsi2 (infra/template.yaml) projects besides the keys: what the sweeper reads of every
# reconciliation each minute. Its other readers (active jobs, runs and investigations, pending
# matches, recounts: a few items at a time) read the items whole by BatchGetItem.
SWEEP_INDEX_ATTRIBUTES = ("environment", "id", "exceptions_refreshed_at")
# A priority guard whose rule never got written, or no longer has that priority (a crash
# between the writes), is reclaimed after this long; a younger one may belong to a write in flight.
STALE_GUARD_AGE = timedelta(seconds=60)


class ReconciliationRepository:
    def __init__(self, table: DynamoTable, counters) -> None:
        self._table = table
        self._counters = counters

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "reconciliation")

    def add(self, reconciliation: Reconciliation) -> None:
        """Usages first, so that no reconciliation ever exists without the usages of its streams."""
        self._table.batch_write(puts=[self._usage_item(reconciliation, k) for k in reconciliation.stream_keys])
        self._table.put_new(self._to_item(reconciliation))

    def get(self, environment: str, reconciliation_id: int) -> Reconciliation:
        found = self.find_including_deleting(environment, reconciliation_id)
        if found is None or found.deleting:
            raise NotFound(f"reconciliation {reconciliation_id} not found")
        return found

    def find_including_deleting(self, environment: str, reconciliation_id: int) -> Reconciliation | None:
        item = self._table.get(keys.reconciliation(environment, reconciliation_id))
        return self._from_item(item) if item else None

    def names(self, environment: str, reconciliation_ids) -> dict[int, str]:
        """Names of the visible reconciliations among the ids, read in batches."""
        return {i: r.name for i, r in self.visible(environment, reconciliation_ids).items()}

    def visible(self, environment: str, reconciliation_ids) -> dict[int, Reconciliation]:
        """The visible reconciliations among the ids, read in batches."""
        items = self._table.get_many(keys.reconciliation(environment, i) for i in reconciliation_ids)
        return {i["id"]: self._from_item(i) for i in items if not i.get("deleting")}

    def due_for_exception_refresh(self, refreshed_before: datetime) -> list[tuple[str, int]]:
        """(environment, id) of every reconciliation, of every environment, whose exceptions were
        last refreshed before `refreshed_before` or never (for the sweeper, every minute: read from
        the index alone, SWEEP_INDEX_ATTRIBUTES; a reconciliation being deleted has left it)."""
        entries = self._table.query_all(keys.GSI2, keys.ALL_RECONCILIATIONS_PK)
        return [(e["environment"], e["id"]) for e in entries
                if e.get("exceptions_refreshed_at") is None
                or parse_iso(e["exceptions_refreshed_at"]) < refreshed_before]

    def mark_exceptions_refreshed(self, environment: str, reconciliation_id: int, at, seen_requests: int = 0) -> None:
        """Refreshed at `at`, unless a refresh was requested after the refresh read `seen_requests`
        (that request stays: the sweeper refreshes again within a minute)."""
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id), "SET exceptions_refreshed_at = :at",
                               condition="attribute_exists(pk) AND (attribute_not_exists(exceptions_refresh_requests) "
                                         "OR exceptions_refresh_requests = :seen)",
                               values={":at": iso(at), ":seen": seen_requests})
        except ConditionFailed:
            pass

    def request_exceptions_refresh(self, environment: str, reconciliation_id: int) -> None:
        """Matching changed outside a run (a person's match, unmatch or confirm): the sweeper
        refreshes the reconciliation's exceptions at its next minute (it reads the missing
        `exceptions_refreshed_at` from its index as due)."""
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id),
                               "REMOVE exceptions_refreshed_at ADD exceptions_refresh_requests :one",
                               condition="attribute_exists(pk)", values={":one": 1})
        except ConditionFailed:
            pass  # the reconciliation is gone

    def list_page(self, environment: str, limit: int,
                  cursor: str | None) -> tuple[list[Reconciliation], str | None]:
        page = self._table.query_page(keys.GSI1, keys.reconciliations_index_pk(environment), limit=limit, cursor=cursor)
        return [self._from_item(i) for i in page.items], page.cursor

    def save(self, updated: Reconciliation, previous: Reconciliation) -> None:
        """Write an edit; `updated.version` must be one past the stored version, and no run current."""
        environment = updated.environment
        added = [k for k in updated.stream_keys if not previous.uses(k)]
        removed = [k for k in previous.stream_keys if not updated.uses(k)]
        for stream_key in added:
            try:
                self._table.put(self._usage_item(updated, stream_key), condition="attribute_not_exists(pk) OR #v <= :v",
                                names={"#v": "version"}, values={":v": updated.version})
            except ConditionFailed:
                pass  # a later edit wrote it already
        # Streams taken out are kept as leaving until their follow-up is done, and the exceptions
        # refresh that resolves theirs is requested by the same write.
        leaving = (" REMOVE exceptions_refreshed_at ADD leaving_stream_keys :leaving, exceptions_refresh_requests :one"
                   if removed else "")
        try:
            self._table.update(
                keys.reconciliation(environment, updated.id),
                "SET #name = :name, run_type = :run_type, side_a_stream_keys = :a, side_b_stream_keys = :b, "
                "exception_after_days = :days, updated_at = :updated_at, #v = :version" + leaving,
                condition="attribute_exists(pk) AND #v = :expected AND attribute_not_exists(deleting) "
                          "AND attribute_not_exists(current_run_id)",
                names={"#v": "version", "#name": "name"},
                values={":name": updated.name, ":run_type": updated.run_type.value,
                        ":a": list(updated.side_a_stream_keys), ":b": list(updated.side_b_stream_keys),
                        ":days": updated.exception_after_days, ":updated_at": iso(updated.updated_at),
                        ":version": updated.version, ":expected": updated.version - 1,
                        **({":leaving": set(removed), ":one": 1} if removed else {})},
            )
        except ConditionFailed:
            # The usages just added stay: they stop holding their streams once stale.
            raise self._refusal(environment, updated.id) from None
        for stream_key in removed:
            try:
                self._table.delete(keys.stream_usage(environment, stream_key, updated.id),
                                   condition="#v <= :v", names={"#v": "version"}, values={":v": updated.version})
            except ConditionFailed:
                pass  # gone already, or re-added by a later edit

    def streams_left(self, environment: str, reconciliation_id: int, stream_keys: Iterable[str]) -> None:
        """The follow-up of these leaving streams is done (a no-op when it was said already)."""
        done = set(stream_keys)
        if not done:
            return
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id), "DELETE leaving_stream_keys :done",
                               condition="attribute_exists(pk)", values={":done": done})
        except ConditionFailed:
            pass  # the reconciliation is gone

    def mark_deleting(self, environment: str, reconciliation_id: int) -> Reconciliation:
        """Hide it (404, out of the list) unless a run is current; repeating it is allowed, so a
        delete cut short is finished by the next DELETE."""
        try:
            item = self._table.update(
                keys.reconciliation(environment, reconciliation_id),
                f"SET deleting = if_not_exists(deleting, :t) REMOVE {keys.GSI1.attributes}, {keys.GSI2.attributes}",
                condition="attribute_exists(pk) AND attribute_not_exists(current_run_id)",
                values={":t": True}, return_new=True,
            )
        except ConditionFailed:
            raise self._refusal(environment, reconciliation_id) from None
        return self._from_item(item)

    def confirm_deleting(self, environment: str, reconciliation_id: int) -> None:
        """A delete that found no story using it goes on: its mark can no longer be taken back."""
        confirm_delete_mark(self._table, keys.reconciliation(environment, reconciliation_id))

    def unmark_deleting(self, environment: str, reconciliation_id: int) -> bool:
        """Undo mark_deleting (a delete refused after the mark: a story uses it); visible and
        listed again. False when another delete confirmed the mark (it is going) or finished."""
        index = {**keys.reconciliation_index(environment, reconciliation_id),
                 **keys.all_reconciliations_index(environment, reconciliation_id)}
        try:
            self._table.update(keys.reconciliation(environment, reconciliation_id),
                               "REMOVE deleting SET " + ", ".join(f"{k} = :{k}" for k in index),
                               condition="deleting = :t",
                               values={":t": True, **{f":{k}": v for k, v in index.items()}})
        except ConditionFailed:
            return False
        return True

    def remove(self, reconciliation: Reconciliation) -> None:
        """The reconciliation first, its usages after, so a crash never frees a stream still in use."""
        environment = reconciliation.environment
        self._table.delete(keys.reconciliation(environment, reconciliation.id))
        self._table.batch_write(deletes=[keys.stream_usage(environment, k, reconciliation.id)
                                         for k in reconciliation.stream_keys])

    def _refusal(self, environment: str, reconciliation_id: int) -> DomainError:
        """Why a conditional write was refused, read after the fact for the message only."""
        item = self._table.get(keys.reconciliation(environment, reconciliation_id))
        return change_refused(reconciliation_id, self._from_item(item) if item else None)

    # Stream usages (read when a data stream is deleted) ---------------------------------

    def users_of_stream(self, environment: str, stream_key: str) -> list[StreamUser]:
        """The reconciliations that hold the stream; stale usages (see usage_holds_stream) are left out."""
        if not KEY_PATTERN.match(stream_key):
            return []
        usages = list(self._usages_of_stream(environment, stream_key))
        if not usages:
            return []
        items = self._table.get_many(keys.reconciliation(environment, u["reconciliation_id"]) for u in usages)
        owners = {r.id: r for r in map(self._from_item, items)}
        now = utc_now()
        users = []
        for usage in usages:
            owner = owners.get(usage["reconciliation_id"])
            if usage_holds_stream(owner, stream_key, parse_iso(usage["created_at"]), now):
                users.append(StreamUser(usage["reconciliation_id"], owner.name if owner else None))
        return users

    def remove_usages_of_stream(self, environment: str, stream_key: str) -> None:
        """Drop the (stale) usages left in a stream's partition when the stream is deleted."""
        self._table.batch_write(deletes=[{"pk": u["pk"], "sk": u["sk"]}
                                         for u in self._usages_of_stream(environment, stream_key)])

    def _usages_of_stream(self, environment: str, stream_key: str) -> Iterable[dict[str, Any]]:
        """Read consistently: a stream delete marks first and reads the usages after, so a usage
        an edit held a moment before the mark must be seen."""
        return self._table.query_all(keys.BASE_TABLE, keys.data_stream(environment, stream_key)["pk"],
                                     sort_prefix=keys.STREAM_USAGE_PREFIX, consistent=True)

    @staticmethod
    def _usage_item(reconciliation: Reconciliation, stream_key: str) -> dict[str, Any]:
        return {
            **keys.stream_usage(reconciliation.environment, stream_key, reconciliation.id),
            "entity": "stream_usage", "environment": reconciliation.environment, "stream_key": stream_key,
            "reconciliation_id": reconciliation.id, "version": reconciliation.version,
            "created_at": iso(utc_now()),
        }

    @staticmethod
    def _to_item(reconciliation: Reconciliation) -> dict[str, Any]:
        return {
            **keys.reconciliation(reconciliation.environment, reconciliation.id),
            **keys.reconciliation_index(reconciliation.environment, reconciliation.id),
            **keys.all_reconciliations_index(reconciliation.environment, reconciliation.id),
            "entity": "reconciliation", "environment": reconciliation.environment, "id": reconciliation.id,
            "name": reconciliation.name, "run_type": reconciliation.run_type.value,
            "side_a_stream_keys": list(reconciliation.side_a_stream_keys),
            "side_b_stream_keys": list(reconciliation.side_b_stream_keys),
            "exception_after_days": reconciliation.exception_after_days,
            "created_at": iso(reconciliation.created_at), "updated_at": iso(reconciliation.updated_at),
            "current_run_id": reconciliation.current_run_id, "last_run_id": reconciliation.last_run_id,
            "exceptions_refreshed_at": iso(reconciliation.exceptions_refreshed_at)
            if reconciliation.exceptions_refreshed_at else None,
            "version": reconciliation.version,
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> Reconciliation:
        return Reconciliation(
            environment=item["environment"], id=item["id"], name=item["name"], run_type=RunType(item["run_type"]),
            side_a_stream_keys=tuple(item["side_a_stream_keys"]), side_b_stream_keys=tuple(item["side_b_stream_keys"]),
            exception_after_days=item["exception_after_days"], created_at=parse_iso(item["created_at"]),
            updated_at=parse_optional_iso(item.get("updated_at")) or parse_iso(item["created_at"]),
            current_run_id=item.get("current_run_id"), last_run_id=item.get("last_run_id"),
            exceptions_refreshed_at=parse_optional_iso(item.get("exceptions_refreshed_at")),
            exceptions_refresh_requests=int(item.get("exceptions_refresh_requests", 0)),
            deleting=bool(item.get("deleting")), version=item.get("version", 1),
            leaving_stream_keys=frozenset(item.get("leaving_stream_keys") or ()),
        )


class ReconciliationRuleRepository:
    def __init__(self, table: DynamoTable, counters) -> None:
        self._table = table
        self._counters = counters

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "reconciliation_rule")

    def add(self, rule: Rule) -> None:
        """Reserve the priority (guard), then write the rule (a suggestion reserves none)."""
        if rule.holds_priority:
            self._claim_priority(rule)
        self._table.put_new(self._to_item(rule))

    def get(self, environment: str, rule_id: int) -> Rule:
        item = self._table.get(keys.reconciliation_rule(environment, rule_id))
        if item is None:
            raise NotFound(f"reconciliation rule {rule_id} not found")
        return self._from_item(item)

    def list_of(self, environment: str, reconciliation_id: int) -> list[Rule]:
        """Every rule of the reconciliation, by priority (one query)."""
        items = self._table.query_all(keys.GSI1, keys.rules_of_reconciliation_pk(environment, reconciliation_id))
        return [self._from_item(i) for i in items]

    def save(self, updated: Rule, previous: Rule) -> None:
        """Write an edit (`updated.version` one past the stored one); a new priority is claimed
        before the write and the old one released after it. A suggestion holds no priority: an
        accepted one claims its own, a dismissed one never does."""
        moved = updated.holds_priority and (updated.definition.priority != previous.definition.priority
                                            or not previous.holds_priority)
        claimed_at = self._claim_priority(updated) if moved else None
        try:
            self._table.put(self._to_item(updated), condition="attribute_exists(pk) AND #v = :expected",
                            names={"#v": "version"}, values={":expected": updated.version - 1})
        except ConditionFailed:
            if moved:
                self._release_priority(updated, claimed_at)
            if self._table.get(keys.reconciliation_rule(updated.environment, updated.id)) is None:
                raise NotFound(f"reconciliation rule {updated.id} not found") from None
            raise Conflict(f"reconciliation rule {updated.id} changed while it was being updated; retry") from None
        if moved and previous.holds_priority:
            self._release_priority(previous)

    def remove(self, rule: Rule) -> None:
        """Delete the rule first, then free its priority, so a crash never frees a priority in use."""
        try:
            self._table.delete(keys.reconciliation_rule(rule.environment, rule.id), condition="attribute_exists(pk)")
        except ConditionFailed:
            raise NotFound(f"reconciliation rule {rule.id} not found") from None
        if rule.holds_priority:
            self._release_priority(rule)

    def remove_all_of_reconciliation(self, environment: str, reconciliation_id: int) -> None:
        rules = self.list_of(environment, reconciliation_id)
        self._table.batch_write(deletes=[keys.reconciliation_rule(environment, r.id) for r in rules])
        guards = self._table.query_all(keys.BASE_TABLE, keys.reconciliation(environment, reconciliation_id)["pk"],
                                       sort_prefix=keys.RULE_PRIORITY_GUARD_PREFIX)
        self._table.batch_write(deletes=[{"pk": g["pk"], "sk": g["sk"]} for g in guards])

    # Priority guards ----------------------------------------------------------------------

    def _claim_priority(self, rule: Rule) -> str:
        """Reserve the rule's priority in its reconciliation; returns the guard's created_at."""
        guard: dict[str, Any] = {
            **keys.rule_priority_guard(rule.environment, rule.reconciliation_id, rule.definition.priority),
            "entity": "rule_priority_guard", "rule_id": rule.id, "created_at": iso(utc_now()),
        }
        priority = rule.definition.priority
        for _ in range(2):
            try:
                self._table.put_new(guard)
                return guard["created_at"]
            except ConditionFailed:
                pass
            existing = self._table.get({"pk": guard["pk"], "sk": guard["sk"]})
            if existing is None:
                continue  # released meanwhile
            if existing["rule_id"] == rule.id or self._abandoned(rule, existing):
                try:
                    self._table.put(guard, condition="rule_id = :old AND created_at = :created",
                                    values={":old": existing["rule_id"], ":created": existing["created_at"]})
                    return guard["created_at"]
                except ConditionFailed:
                    continue
            raise Conflict(f"priority {priority} is already used by rule {existing['rule_id']} "
                           f"of reconciliation {rule.reconciliation_id}")
        raise Conflict(f"priority {priority} is being claimed by another rule; retry")

    def _abandoned(self, rule: Rule, guard: dict[str, Any]) -> bool:
        """A guard whose rule is gone or has moved to another priority, and old enough not to be in flight."""
        if utc_now() - parse_iso(guard["created_at"]) < STALE_GUARD_AGE:
            return False
        owner = self._table.get(keys.reconciliation_rule(rule.environment, guard["rule_id"]))
        return owner is None or owner["priority"] != rule.definition.priority

    def _release_priority(self, rule: Rule, claimed_at: str | None = None) -> None:
        """Free the rule's priority; with `claimed_at`, only the very guard claimed then (a
        concurrent edit of the same rule may hold it since)."""
        condition = "rule_id = :id"
        values: dict[str, Any] = {":id": rule.id}
        if claimed_at is not None:
            condition, values = condition + " AND created_at = :at", {**values, ":at": claimed_at}
        try:
            self._table.delete(
                keys.rule_priority_guard(rule.environment, rule.reconciliation_id, rule.definition.priority),
                condition=condition, values=values,
            )
        except ConditionFailed:
            pass  # already released, or reclaimed by another rule

    @staticmethod
    def _to_item(rule: Rule) -> dict[str, Any]:
        # The definition is stored as its JSON body: it holds floats (thresholds), which DynamoDB
        # numbers would turn into Decimals, and it is read back through validate_rule.
        return {
            **keys.reconciliation_rule(rule.environment, rule.id),
            **keys.reconciliation_rule_index(rule.environment, rule.reconciliation_id, rule.definition.priority,
                                             rule.id),
            "entity": "reconciliation_rule", "environment": rule.environment, "id": rule.id,
            "reconciliation_id": rule.reconciliation_id, "priority": rule.definition.priority,
            "definition": json.dumps(rule.definition.as_body(), separators=(",", ":")),
            "created_at": iso(rule.created_at), "updated_at": iso(rule.updated_at or rule.created_at),
            "version": rule.version,
            **({"source": rule.source.value} if rule.source is not RuleSource.USER else {}),
            **({"proposal": rule.proposal.value} if rule.proposal is not None else {}),
            **({"evidence": json.dumps(rule.evidence, separators=(",", ":"))} if rule.evidence is not None else {}),
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> Rule:
        return Rule(
            environment=item["environment"], id=item["id"], reconciliation_id=item["reconciliation_id"],
            definition=validate_rule(json.loads(item["definition"])), created_at=parse_iso(item["created_at"]),
            updated_at=parse_iso(item["updated_at"]), version=item.get("version", 1),
            source=RuleSource(item.get("source", RuleSource.USER.value)),
            proposal=RuleStatus(item["proposal"]) if item.get("proposal") else None,
            evidence=json.loads(item["evidence"]) if item.get("evidence") else None,
        )
