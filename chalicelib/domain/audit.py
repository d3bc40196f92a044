"""The audit trail: append-only entries, hash-chained per environment, and the walk that checks them.

Each entry's `hash` is `sha256(prev_hash + canonical)` (hex), where `canonical` is the compact,
sorted-keys JSON of every other field of the entry (environment, seq, at, actor, action,
resource_type, resource_id, summary, prev_hash) and the first entry's `prev_hash` is
GENESIS_HASH. So editing any field of an entry breaks its own hash, and removing, inserting or
reordering entries breaks a seq or a prev_hash link: `ChainWalk` finds the first such break.
The chain's head (its last seq and hash, kept apart from the entries) catches a shortened chain:
entries missing up to the head's seq, an entry at that seq whose hash is not the head's, or no head
while entries exist. (A rewrite of the tail that rewrites the head to match is only caught by a head
hash kept outside the table: docs/audit.md.) Seqs are 1-based and dense. Summaries are kept small
and never hold secrets (`bounded_summary`).
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import Enum, StrEnum
from typing import Any

from chalicelib.domain.clock import iso

GENESIS_HASH = "0" * 64

MAX_SUMMARY_BYTES = 2048  # of the summary's canonical JSON; a larger one is cut to its keys
MAX_STRING = 200
MAX_ITEMS = 20  # of a list, or keys of a mapping
MAX_DEPTH = 3
MAX_NAME = 120  # actor, action, resource type and id
# What finds an entry again: the request that made it (services/audit.py record_unfinished), the
# event that announced it (services/events.py announce).
KEPT_IDS = ("request_id", "event_id")
REDACTED = "[redacted]"
# A key whose name says it holds a secret keeps its name, never its value; so does a value that
# looks like one (a webhook signing secret, a bearer header).
_SECRET_NAME = re.compile(r"secret|passw|token|api_?key|key_hash|credential|authori[sz]ation|signature|private",
                          re.IGNORECASE)
_SECRET_VALUE = re.compile(r"^(whsec_|bearer\s)", re.IGNORECASE)


# Actors ---------------------------------------------------------------------------------------

def api_key_actor(key_id: int) -> str:
    return f"api_key:{key_id}"


def agent_actor(agent_id: str) -> str:
    return f"agent:{agent_id}"


def operator_actor() -> str:
    """An operator's change made on the command line (`python -m chalicelib.cli`), not through the API."""
    return "operator:cli"


def system_actor(kind: str, job_id: str | int | None = None) -> str:
    """`system:reconciliation_run:12`, `system:file_import:5`, or `system:sweeper` (no id)."""
    return f"system:{kind}" if job_id is None else f"system:{kind}:{job_id}"


# Entries --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AuditEntry:
    environment: str
    seq: int
    at: datetime
    actor: str
    action: str
    resource_type: str
    resource_id: str | None
    summary: Mapping[str, Any]
    prev_hash: str
    hash: str

    def canonical(self) -> str:
        return canonical_json(self.hashed_fields())

    def hashed_fields(self) -> dict[str, Any]:
        return {"environment": self.environment, "seq": self.seq, "at": iso(self.at), "actor": self.actor,
                "action": self.action, "resource_type": self.resource_type, "resource_id": self.resource_id,
                "summary": dict(self.summary), "prev_hash": self.prev_hash}

    def computed_hash(self) -> str:
        return chain_hash(self.prev_hash, self.canonical())


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def chain_hash(prev_hash: str, canonical: str) -> str:
    return hashlib.sha256((prev_hash + canonical).encode("utf-8")).hexdigest()


def new_entry(environment: str, seq: int, at: datetime, prev_hash: str, *, actor: str, action: str,
              resource_type: str, resource_id: str | int | None,
              summary: Mapping[str, Any] | None = None) -> AuditEntry:
    """The entry that follows `prev_hash` at `seq`, hashed; `at` is kept to the millisecond (the
    precision of its text, which the hash covers)."""
    draft = AuditEntry(
        environment=environment, seq=seq, at=at.replace(microsecond=at.microsecond // 1000 * 1000),
        actor=_name(actor), action=_name(action), resource_type=_name(resource_type),
        resource_id=None if resource_id is None else _name(str(resource_id)),
        summary=bounded_summary(summary or {}), prev_hash=prev_hash, hash="",
    )
    return AuditEntry(**{**draft.__dict__, "hash": draft.computed_hash()})


def _name(text: str) -> str:
    return text[:MAX_NAME]


@dataclass(frozen=True)
class ChainHead:
    """Where an environment's chain ends: its last seq and hash, and that entry's time (the next
    entry's `at` is never earlier, so newest first by seq is newest first by time)."""
    seq: int
    hash: str
    at: datetime


@dataclass(frozen=True)
class RequestInFlight:
    """A state-changing API request that has begun: noted before its handler runs and dropped once
    its entry is written (or it changed nothing). One left past its lease belongs to a process that
    died between its change and its entry: the sweeper writes the entry, its outcome unknown."""
    environment: str
    request_id: str
    actor: str
    action: str
    resource_type: str
    resource_id: str | None
    summary: Mapping[str, Any]
    began_at: datetime


UNKNOWN_OUTCOME = {"outcome": "unknown",
                   "note": "the request ended before its entry was written: whether it changed anything is not known"}


class ChainBusy(RuntimeError):
    """An append lost the race for the next seq every time it tried (bounded retries)."""


@dataclass(frozen=True)
class AuditQuery:
    """Filters of GET /audit_events; a resource id needs its resource type (ids repeat across types)."""
    resource_type: str | None = None
    resource_id: str | None = None
    actor: str | None = None
    at_from: datetime | None = None  # inclusive
    at_to: datetime | None = None  # inclusive

    def admits(self, entry: AuditEntry) -> bool:
        return ((self.resource_type is None or entry.resource_type == self.resource_type)
                and (self.resource_id is None or entry.resource_id == self.resource_id)
                and (self.actor is None or entry.actor == self.actor)
                and (self.at_from is None or entry.at >= self.at_from)
                and (self.at_to is None or entry.at <= self.at_to))


# Summaries ------------------------------------------------------------------------------------

def bounded_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON object of plain values, small, with secrets redacted: strings cut to MAX_STRING,
    lists and mappings to MAX_ITEMS, nesting to MAX_DEPTH; whole, at most MAX_SUMMARY_BYTES
    (a larger one keeps only its first keys' names, with `truncated: true`). The ids an entry is
    found by (KEPT_IDS) are always kept, first."""
    kept = {name: summary[name] for name in KEPT_IDS if isinstance(summary.get(name), str)}
    summary = {**kept, **{k: v for k, v in summary.items() if k not in kept}}
    bounded = _bounded_mapping(summary, 1)
    if len(canonical_json(bounded).encode("utf-8")) <= MAX_SUMMARY_BYTES:
        return bounded
    return {**{k: _bounded(v, 1) for k, v in kept.items()}, "truncated": True,
            "keys": [str(k)[:MAX_STRING] for k in list(summary)[:MAX_ITEMS]]}


def _bounded_mapping(mapping: Mapping[Any, Any], depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for index, (key, value) in enumerate(mapping.items()):
        if index == MAX_ITEMS:
            out["..."] = f"{len(mapping) - MAX_ITEMS} more"
            break
        name = str(key.value if isinstance(key, Enum) else key)[:MAX_STRING]
        out[name] = REDACTED if _SECRET_NAME.search(name) and value is not None else _bounded(value, depth)
    return out


def _bounded(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Enum):
        return _bounded(value.value, depth)
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, date | Decimal):
        return str(value)
    if isinstance(value, str):
        return REDACTED if _SECRET_VALUE.match(value) else value[:MAX_STRING]
    if depth >= MAX_DEPTH:
        return "..."
    if isinstance(value, Mapping):
        return _bounded_mapping(value, depth + 1)
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else list(value)
        bounded = [_bounded(v, depth + 1) for v in items[:MAX_ITEMS]]
        return bounded + [f"{len(items) - MAX_ITEMS} more"] if len(items) > MAX_ITEMS else bounded
    return str(value)[:MAX_STRING]


# Changes: the before and after of an update --------------------------------------------------

MAX_CHANGE_CHARS = 100  # of one before or after value: a longer one keeps its start and says its length
SHORT_CHANGE_CHARS = 24  # ... when the changes at MAX_CHANGE_CHARS would not fit the summary
CHANGES_BUDGET = 1200  # bytes of {"before", "after"}: the summary keeps room for its other fields
# Bookkeeping every update moves, not what it changed.
NOT_CHANGES = frozenset({"environment", "id", "version", "updated_at"})


def entity_fields(entity: Any) -> dict[str, Any]:
    """An entity's fields by name, a nested entity's as `outer.inner` (so a change inside one names
    its own field); `NOT_CHANGES` left out."""
    out: dict[str, Any] = {}
    for item in fields(entity):
        if item.name in NOT_CHANGES:
            continue
        value = getattr(entity, item.name)
        if is_dataclass(value) and not isinstance(value, type):
            out.update({f"{item.name}.{name}": inner for name, inner in entity_fields(value).items()})
        else:
            out[item.name] = value
    return out


def field_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """`{"before": {...}, "after": {...}}` of the fields whose values differ, or {}: secrets (by
    their field's name or their look) read REDACTED on both sides, a text longer than
    MAX_CHANGE_CHARS keeps its start and its length (`"abc… (5000 characters)"`), a list or an
    entity is shown as compact JSON (cut the same way). When the whole would not fit
    CHANGES_BUDGET the values are cut to SHORT_CHANGE_CHARS, and past that only named."""
    changed = [name for name in after if before.get(name) != after.get(name)]
    if not changed:
        return {}
    for limit in (MAX_CHANGE_CHARS, SHORT_CHANGE_CHARS, 0):
        result = {side: {name: _change_value(name, values.get(name), limit) for name in changed}
                  for side, values in (("before", before), ("after", after))}
        if len(canonical_json(result).encode("utf-8")) <= CHANGES_BUDGET:
            break
    return result


def _change_value(name: str, value: Any, limit: int) -> Any:
    if value is not None and any(_SECRET_NAME.search(part) for part in name.split(".")):
        return REDACTED
    plain = _plain(value)
    if plain is None or isinstance(plain, bool | int | float):
        return plain if not isinstance(plain, float) or math.isfinite(plain) else str(plain)
    if isinstance(plain, str) and _SECRET_VALUE.match(plain):
        return REDACTED
    text = plain if isinstance(plain, str) else canonical_json(plain)
    if len(text) <= limit:  # a list or mapping of plain values stays one; a deeper one is its JSON
        nested = plain.values() if isinstance(plain, dict) else plain
        return plain if isinstance(plain, str) or not any(isinstance(v, list | dict) for v in nested) else text
    return f"{text[:limit]}… ({len(text)} characters)" if limit else f"… ({len(text)} characters)"


def _plain(value: Any) -> Any:
    """JSON's values only, secrets redacted at any depth."""
    if is_dataclass(value) and not isinstance(value, type):
        value = {item.name: getattr(value, item.name) for item in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): REDACTED if _SECRET_NAME.search(str(k)) and v is not None else _plain(v)
                for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [_plain(v) for v in items]
    if isinstance(value, Enum):
        return _plain(value.value)
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, date | Decimal):
        return str(value)
    if isinstance(value, str):
        return REDACTED if _SECRET_VALUE.match(value) else value
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)


# Verification ---------------------------------------------------------------------------------

class BreakReason(StrEnum):
    HASH_MISMATCH = "hash_mismatch"  # the entry's fields do not give its stored hash: it was edited
    PREV_HASH_MISMATCH = "prev_hash_mismatch"  # it does not follow the entry before it
    MISSING_ENTRY = "missing_entry"  # no entry at this seq (removed, or the chain was reordered)
    HEAD_MISMATCH = "head_mismatch"  # the entry at the head's seq has another hash than the head names
    HEAD_MISSING = "head_missing"  # entries exist but the chain's head does not


_MESSAGES = {
    BreakReason.HASH_MISMATCH: "the entry's fields do not hash to its stored hash: it was changed after it was written",
    BreakReason.PREV_HASH_MISMATCH: "the entry's prev_hash is not the hash of the entry before it: "
                                    "an entry was changed, removed or inserted",
    BreakReason.MISSING_ENTRY: "no entry at this seq: an entry was removed or the entries were reordered",
    BreakReason.HEAD_MISMATCH: "the entry at the chain head's seq does not have the head's hash: "
                               "the entries or the head were rewritten",
    BreakReason.HEAD_MISSING: "the chain's head is missing while entries exist: the newest entries may have "
                              "been removed with it",
}


@dataclass(frozen=True)
class ChainBreak:
    seq: int
    reason: BreakReason
    found_seq: int | None = None  # the entry found where `seq` was expected, if any

    @property
    def message(self) -> str:
        return _MESSAGES[self.reason]


class ChainWalk:
    """Checks entries in seq order, fed a page at a time, from `start_seq` (whose predecessor's hash
    is `prev_hash`); stops at the first break. Given the chain's head, the entry at the head's seq
    must have the head's hash."""

    def __init__(self, start_seq: int = 1, prev_hash: str = GENESIS_HASH, head: ChainHead | None = None) -> None:
        self.next_seq = start_seq
        self.prev_hash = prev_hash
        self.head = None if head is None else (head.seq, head.hash)
        self.checked = 0
        self.first_break: ChainBreak | None = None

    def feed(self, entries: Iterable[AuditEntry]) -> bool:
        """False once a break is found (feed no more)."""
        for entry in entries:
            if self.first_break is not None:
                return False
            self._check(entry)
        return self.first_break is None

    def _check(self, entry: AuditEntry) -> None:
        if entry.seq != self.next_seq:
            self.first_break = ChainBreak(self.next_seq, BreakReason.MISSING_ENTRY, found_seq=entry.seq)
        elif entry.prev_hash != self.prev_hash:
            self.first_break = ChainBreak(entry.seq, BreakReason.PREV_HASH_MISMATCH, found_seq=entry.seq)
        elif entry.computed_hash() != entry.hash:
            self.first_break = ChainBreak(entry.seq, BreakReason.HASH_MISMATCH, found_seq=entry.seq)
        elif self.head is not None and entry.seq == self.head[0] and entry.hash != self.head[1]:
            self.first_break = ChainBreak(entry.seq, BreakReason.HEAD_MISMATCH, found_seq=entry.seq)
        else:
            self.checked += 1
            self.next_seq += 1
            self.prev_hash = entry.hash

    def expect_through(self, last_seq: int) -> None:
        """The chain is known to reach `last_seq` (its head): entries missing at its end are a break."""
        if self.first_break is None and self.next_seq <= last_seq:
            self.first_break = ChainBreak(self.next_seq, BreakReason.MISSING_ENTRY)

    def missing_head(self, newest_seq: int) -> None:
        """The chain has no head while its newest entry is at `newest_seq`: a break there (its tail
        may have been removed along with the head)."""
        if self.first_break is None:
            self.first_break = ChainBreak(newest_seq, BreakReason.HEAD_MISSING, found_seq=newest_seq)

    @property
    def intact(self) -> bool:
        return self.first_break is None


@dataclass(frozen=True)
class Verification:
    intact: bool
    checked: int
    first_break: ChainBreak | None
    last_seq: int  # the last seq checked intact (0: none)
    last_hash: str


def verify(entries: Iterable[AuditEntry], *, start_seq: int = 1, prev_hash: str = GENESIS_HASH,
           head_seq: int | None = None, head_hash: str | None = None) -> Verification:
    """Walk `entries` (in seq order) and report the first break, or that they are intact; given the
    head's seq, entries missing up to it are a break, and given its hash too, so is another hash there."""
    walk = ChainWalk(start_seq, prev_hash)
    if head_seq is not None and head_hash is not None:
        walk.head = (head_seq, head_hash)
    walk.feed(entries)
    if head_seq is not None:
        walk.expect_through(head_seq)
    return Verification(intact=walk.intact, checked=walk.checked, first_break=walk.first_break,
                        last_seq=walk.next_seq - 1, last_hash=walk.prev_hash)
