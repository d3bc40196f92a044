"""The audit trail, as `adapters/dynamodb/audit.py` keeps it: one hash chain per environment,
appended only (each entry follows the newest, its time never before the head's), and the notes of
requests in flight, claimed by one sweeper at a time."""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from chalicelib.domain.audit import (
    GENESIS_HASH,
    AuditEntry,
    AuditQuery,
    ChainHead,
    RequestInFlight,
    canonical_json,
    new_entry,
)
from chalicelib.domain.clock import iso, utc_now
from tests.fakes._support import newest_first_page, padded, stored_time


class FakeAuditRepository:
    """`entries`: (environment, seq) -> entry as stored; `requests`: (environment, request id) ->
    (the request, when a sweeper claimed it)."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, int], AuditEntry] = {}
        self.requests: dict[tuple[str, str], tuple[RequestInFlight, str | None]] = {}

    def append(self, environment: str, *, actor: str, action: str, resource_type: str,
               resource_id: str | int | None, summary: Mapping[str, Any]) -> AuditEntry:
        head = self.head(environment)
        now = utc_now()
        entry = new_entry(environment, 1 if head is None else head.seq + 1, now if head is None else max(now, head.at),
                          GENESIS_HASH if head is None else head.hash, actor=actor, action=action,
                          resource_type=resource_type, resource_id=resource_id, summary=summary)
        # Read back as the table gives it: the summary through its canonical JSON, the time to the ms.
        self.entries[(environment, entry.seq)] = replace(entry, at=stored_time(entry.at),
                                                         summary=json.loads(canonical_json(dict(entry.summary))))
        return entry

    def begin_request(self, request: RequestInFlight) -> None:
        self.requests[(request.environment, request.request_id)] = (
            replace(request, summary=json.loads(canonical_json(dict(request.summary))),
                    began_at=stored_time(request.began_at)), None)

    def end_request(self, environment: str, request_id: str) -> None:
        self.requests.pop((environment, request_id), None)

    def claim_request(self, request: RequestInFlight, now: datetime, stale_before: datetime) -> bool:
        key = (request.environment, request.request_id)
        if key not in self.requests:
            return False
        noted, claimed_at = self.requests[key]
        if claimed_at is not None and not claimed_at < iso(stale_before):
            return False
        self.requests[key] = (noted, iso(now))
        return True

    def requests_in_flight(self, limit_per_shard: int = 500) -> list[RequestInFlight]:
        return [noted for noted, _ in self.requests.values()]

    def head(self, environment: str) -> ChainHead | None:
        newest = self.newest(environment)
        return None if newest is None else ChainHead(seq=newest.seq, hash=newest.hash, at=newest.at)

    def get(self, environment: str, seq: int) -> AuditEntry | None:
        return self.entries.get((environment, seq))

    def newest(self, environment: str) -> AuditEntry | None:
        seqs = [seq for env, seq in self.entries if env == environment]
        return self.entries[(environment, max(seqs))] if seqs else None

    def entries_between(self, environment: str, first_seq: int, last_seq: int) -> Iterator[AuditEntry]:
        return iter([self.entries[(environment, seq)] for seq in range(first_seq, last_seq + 1)
                     if (environment, seq) in self.entries])

    def list_page(self, environment: str, query: AuditQuery, limit: int,
                  cursor: str | None) -> tuple[list[AuditEntry], str | None]:
        """Newest first (by seq), the query's filters applied."""
        listing = f"audit:{environment}:{query.resource_type}:{query.resource_id}"
        return newest_first_page(listing, ((padded(seq), entry) for (env, seq), entry in self.entries.items()
                                           if env == environment and query.admits(entry)), limit, cursor)
