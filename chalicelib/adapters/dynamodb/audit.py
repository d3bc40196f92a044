"""The audit trail's storage: one chain per environment, appended without forking.

An append reads the chain's head (seq, hash), builds the next entry and puts it conditionally on
its seq being free: that put is what serialises concurrent writers, so two entries can never take
one seq. Then the head is advanced with an update conditional on its seq being lower (it only moves
forward). A writer whose put fails re-reads and retries with jittered backoff (bounded: then
ChainBusy); if the seq it wanted holds an entry while the head is behind it (a writer crashed
between its put and its head update, or is just about to update it), the writer advances the head to
that entry first. With no head item (a new chain, or one lost) the newest entry stands for it.
Entries are never updated or deleted by any code path.
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, Filter
from chalicelib.domain.audit import (
    GENESIS_HASH,
    AuditEntry,
    AuditQuery,
    ChainBusy,
    ChainHead,
    RequestInFlight,
    canonical_json,
    new_entry,
)
from chalicelib.domain.clock import iso, parse_iso, utc_now

ENTITY = "audit_entry"
MAX_ATTEMPTS = 30
BACKOFF_BASE_SECONDS = 0.01
BACKOFF_CAP_SECONDS = 0.25
READ_PAGE = 500  # entries a verification reads a query at a time
UNREADABLE = "unreadable"  # the hash of an entry whose stored attributes cannot be read back


class AuditRepository:
    def __init__(self, table: DynamoTable, clock: Callable[[], datetime] = utc_now,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._table = table
        self._clock = clock
        self._sleep = sleep

    # Appending ----------------------------------------------------------------------------------

    def append(self, environment: str, *, actor: str, action: str, resource_type: str,
               resource_id: str | int | None, summary: Mapping[str, Any]) -> AuditEntry:
        for attempt in range(MAX_ATTEMPTS):
            head = self._tip(environment)
            seq = 1 if head is None else head.seq + 1
            now = self._clock()
            entry = new_entry(environment, seq, now if head is None else max(now, head.at),
                              GENESIS_HASH if head is None else head.hash, actor=actor, action=action,
                              resource_type=resource_type, resource_id=resource_id, summary=summary)
            try:
                self._table.put_new(self._item(entry))
            except ConditionFailed:
                taken = self.get(environment, seq)
                if taken is not None:
                    self._advance_head(environment, taken)
                self._sleep(random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** attempt)))
                continue
            self._advance_head(environment, entry)
            return entry
        raise ChainBusy(f"the audit chain of environment '{environment}' stayed busy through {MAX_ATTEMPTS} attempts")

    def _advance_head(self, environment: str, entry: AuditEntry) -> None:
        """Move the head forward to `entry` (nothing when another writer moved it there or beyond)."""
        try:
            self._table.update(
                keys.audit_head(environment), "SET #seq = :seq, #hash = :hash, #at = :at, entity = :entity",
                values={":seq": entry.seq, ":hash": entry.hash, ":at": iso(entry.at), ":entity": "audit_head"},
                names={"#seq": "seq", "#hash": "hash", "#at": "at"},
                condition="attribute_not_exists(#seq) OR #seq < :seq",
            )
        except ConditionFailed:
            pass

    def _tip(self, environment: str) -> ChainHead | None:
        """The head, or when there is none (a new chain, or a head item lost) the newest entry."""
        head = self.head(environment)
        if head is not None:
            return head
        last = self.newest(environment)
        return None if last is None else ChainHead(seq=last.seq, hash=last.hash, at=last.at)

    @staticmethod
    def _item(entry: AuditEntry) -> dict[str, Any]:
        index = {} if entry.resource_id is None else \
            keys.audit_resource_index(entry.environment, entry.resource_type, entry.resource_id, entry.seq)
        return {**keys.audit_entry(entry.environment, entry.seq), **index, "entity": ENTITY,
                "environment": entry.environment, "seq": entry.seq, "at": iso(entry.at), "actor": entry.actor,
                "action": entry.action, "resource_type": entry.resource_type, "resource_id": entry.resource_id,
                "summary": canonical_json(dict(entry.summary)), "prev_hash": entry.prev_hash, "hash": entry.hash}

    # Requests in flight -------------------------------------------------------------------------

    def begin_request(self, request: RequestInFlight) -> None:
        self._table.put({**keys.request_in_flight(request.environment, request.request_id),
                         "entity": "request_in_flight", "environment": request.environment,
                         "request_id": request.request_id, "actor": request.actor, "action": request.action,
                         "resource_type": request.resource_type, "resource_id": request.resource_id,
                         "summary": canonical_json(dict(request.summary)), "began_at": iso(request.began_at)})

    def end_request(self, environment: str, request_id: str) -> None:
        self._table.delete(keys.request_in_flight(environment, request_id))

    def claim_request(self, request: RequestInFlight, now: datetime, stale_before: datetime) -> bool:
        """One sweeper at a time writes an unfinished request's entry: False when another claimed
        it since `stale_before`, or the note is gone."""
        try:
            self._table.update(keys.request_in_flight(request.environment, request.request_id),
                               "SET claimed_at = :now", values={":now": iso(now), ":stale": iso(stale_before)},
                               condition="attribute_exists(pk) AND "
                                         "(attribute_not_exists(claimed_at) OR claimed_at < :stale)")
        except ConditionFailed:
            return False
        return True

    def requests_in_flight(self, limit_per_shard: int = 500) -> list[RequestInFlight]:
        """Every environment's, a page of `limit_per_shard` of each shard (in key order)."""
        found = []
        for shard in keys.requests_in_flight_shards():
            page = self._table.query_page(keys.BASE_TABLE, shard, limit=limit_per_shard, newest_first=False)
            found += [RequestInFlight(environment=item["environment"], request_id=item["request_id"],
                                      actor=item["actor"], action=item["action"],
                                      resource_type=item["resource_type"], resource_id=item.get("resource_id"),
                                      summary=json.loads(item["summary"]), began_at=parse_iso(item["began_at"]))
                      for item in page.items]
        return found

    # Reading ------------------------------------------------------------------------------------

    def head(self, environment: str) -> ChainHead | None:
        item = self._table.get(keys.audit_head(environment))
        if item is None or not {"seq", "hash", "at"} <= set(item):
            return None
        return ChainHead(seq=int(item["seq"]), hash=str(item["hash"]), at=parse_iso(item["at"]))

    def get(self, environment: str, seq: int) -> AuditEntry | None:
        item = self._table.get(keys.audit_entry(environment, seq))
        return _from_item(item) if item is not None else None

    def newest(self, environment: str) -> AuditEntry | None:
        """The entry with the highest seq (a consistent read), or None when the chain has none."""
        page = self._table.query_page(keys.BASE_TABLE, keys.audit_pk(environment), limit=1,
                                      sort_prefix=keys.AUDIT_ENTRY_PREFIX, consistent=True)
        return _from_item(page.items[0]) if page.items else None

    def entries_between(self, environment: str, first_seq: int, last_seq: int) -> Iterator[AuditEntry]:
        """The stored entries from `first_seq` to `last_seq`, in seq order, a page at a time. The
        reads are consistent (the table's own partition), like the head's: an entry the head counts
        was put before the head moved to it, so it is found here."""
        items = self._table.query_between(keys.BASE_TABLE, keys.audit_pk(environment), keys.audit_entry_sk(first_seq),
                                          keys.audit_entry_sk(last_seq), page_size=READ_PAGE, consistent=True)
        return (_from_item(item) for item in items)

    def list_page(self, environment: str, query: AuditQuery, limit: int,
                  cursor: str | None) -> tuple[list[AuditEntry], str | None]:
        """Newest first. A resource's entries come from gsi3 (keys, then the entries, the other
        filters applied to them); otherwise the environment's partition is read with a filter
        (consistently: with no filter and a limit of 1 this is the chain's newest entry)."""
        if query.resource_type is not None and query.resource_id is not None:
            page = self._table.index_page(
                keys.GSI3, keys.audit_resource_pk(environment, query.resource_type, query.resource_id),
                limit=limit, cursor=cursor,
                admits=lambda item: item.get("entity") == ENTITY and query.admits(_from_item(item)))
        else:
            page = self._table.query_page(keys.BASE_TABLE, keys.audit_pk(environment), limit=limit, cursor=cursor,
                                          sort_prefix=keys.AUDIT_ENTRY_PREFIX, filter=_filter(query),
                                          consistent=True)
        return [_from_item(item) for item in page.items], page.cursor


def _filter(query: AuditQuery) -> Filter | None:
    clauses: list[str] = []
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    for name, op, value in (("resource_type", "=", query.resource_type), ("resource_id", "=", query.resource_id),
                            ("actor", "=", query.actor),
                            ("at", ">=", iso(query.at_from) if query.at_from else None),
                            ("at", "<=", iso(query.at_to) if query.at_to else None)):
        if value is None:
            continue
        index = len(clauses)
        names[f"#f{index}"] = name
        values[f":f{index}"] = value
        clauses.append(f"#f{index} {op} :f{index}")
    return Filter(" AND ".join(clauses), names, values) if clauses else None


def _from_item(item: dict[str, Any]) -> AuditEntry:
    """The entry as stored. An entry whose attributes no longer read back (edited into another type,
    a summary that is not JSON) keeps what can be read and the hash UNREADABLE, so a verification
    reports it as changed rather than failing."""
    try:
        summary = json.loads(item["summary"])
        if not isinstance(summary, dict):
            raise ValueError("the summary is not a JSON object")
        return AuditEntry(
            environment=str(item["environment"]), seq=int(item["seq"]), at=parse_iso(str(item["at"])),
            actor=str(item["actor"]), action=str(item["action"]), resource_type=str(item["resource_type"]),
            resource_id=None if item.get("resource_id") is None else str(item["resource_id"]),
            summary=summary, prev_hash=str(item["prev_hash"]), hash=str(item["hash"]),
        )
    except (KeyError, TypeError, ValueError):
        seq = int(str(item.get("sk", "")).removeprefix(keys.AUDIT_ENTRY_PREFIX) or 0)
        return AuditEntry(environment=str(item.get("environment", "")), seq=seq, at=datetime.min.replace(tzinfo=UTC),
                          actor=str(item.get("actor", "")), action=str(item.get("action", "")),
                          resource_type=str(item.get("resource_type", "")), resource_id=None, summary={},
                          prev_hash=str(item.get("prev_hash", "")), hash=UNREADABLE)
