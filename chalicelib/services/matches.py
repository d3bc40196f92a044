"""Matches: writing one (for runs and people alike), confirming, unmatching, matching by hand."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial

from chalicelib.domain import event_data
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, FieldError, NotFound, TransitionRefused, ValidationFailed
from chalicelib.domain.events import EventOrigin
from chalicelib.domain.ingestion import JobStatus
from chalicelib.domain.matches import MAX_MANUAL_RECORDS, Match, MatchMember, MatchStatus, Side, check_manual_match
from chalicelib.domain.record_changes import ids_by_stream
from chalicelib.domain.records import Record, RecordQuery
from chalicelib.observability import logger
from chalicelib.services import approvals, audit, period_closes, unmatch_decisions
from chalicelib.services.events import save_and_emit
from chalicelib.services.partial_payments import manual_shares
from chalicelib.services.ports import Ports, StreamUsages
from chalicelib.services.reconciliation_exceptions import request_neighbour_refreshes

CLAIM_THREADS = 8
SETTLE_BATCH = 100  # records read at once (one BatchGetItem) by reconcile_left_behind
PENDING_FOR = timedelta(minutes=5)  # a begun match older than this belongs to a dead request
# An import that may still (re)write its records: they are neither matched by hand nor deleted
# (services/records.py) until it has finished.
WRITING = (JobStatus.PENDING, JobStatus.PROCESSING)


def write_matches(ports: Ports, batch: list[tuple[Match, list[MatchMember]]],
                  used_by: dict[str, frozenset[int]], pending_events: dict[int, str] | None = None,
                  journaled: bool = False) -> list[Match]:
    """Write matches together (see adapters/dynamodb/matches.py for the order): every member in
    one BatchWriteItem stream, the record claims (whole matches at once, or one by one from a thread
    pool), then the commit markers of the matches whose claims all held, batched (with the event
    each commit owes, by match id: see services/events.py `save_and_emit`). A record another match
    of the reconciliation holds, or one being deleted, undoes its match. Returns the matches
    written. `journaled`: a run's chunk whose journal keeps its small matches' members
    (`Matches.journal_members`), which their commit markers then carry."""
    if not batch:
        return []
    # Before any claim: a run reads from the analytics mirror only the records of blocks where none
    # was ever claimed (services/imported_records.py).
    for environment in sorted({match.environment for match, _ in batch}):
        ports.data_streams.note_records_changed(environment, ids_by_stream(
            (member.data_stream_key, member.record_id)
            for match, members in batch if match.environment == environment for member in members))
    ports.matches.put_members_of(batch, journaled=journaled)
    # Whole matches claimed together where the table can (a request per up to 100 claims), the rest
    # record by record.
    together = ports.claims.claim_together(batch, used_by)
    claims = [(match, member) for match, members in batch if match.id not in together for member in members]

    def claim(pair: tuple[Match, MatchMember]) -> bool:
        match, member = pair
        return ports.claims.claim_record(match.environment, member.record_id, match.reconciliation_id, match.id,
                                         used_by[member.data_stream_key], seen=member,
                                         proposed=match.status is MatchStatus.PROPOSED, share=member.share)

    with ThreadPoolExecutor(CLAIM_THREADS) as pool:
        held = list(pool.map(claim, claims))
    refused = {match.id for (match, _), ok in zip(claims, held) if not ok}
    for match, members in batch:
        if match.id in refused:
            release_members(ports, match, members, used_by)
    written = [match for match, _ in batch if match.id not in refused]
    ports.matches.commit_many(written, pending_events,
                              journaled={match.id: members for match, members in batch} if journaled else None)
    return written


def release_members(ports: Ports, match: Match, members: list[MatchMember],
                    used_by: dict[str, frozenset[int]]) -> None:
    """Open the match's records again in its reconciliation, then drop its members."""
    with ThreadPoolExecutor(CLAIM_THREADS) as pool:
        list(pool.map(lambda m: ports.claims.release_record(match.environment, m.record_id, match.reconciliation_id,
                                                            match.id, used_by[m.data_stream_key]), members))
    ports.matches.delete_members(match.environment, match.id)


def used_by(usages: StreamUsages, environment: str, stream_keys: Iterable[str]) -> dict[str, frozenset[int]]:
    """The reconciliations using each stream now: a record matched in all of them is reconciled
    (one still being created does not count yet)."""
    return {key: frozenset(user.reconciliation_id for user in usages.users_of_stream(environment, key)
                           if user.name is not None)
            for key in set(stream_keys)}


def reconcile_left_behind(ports: Ports, environment: str, leaving_id: int, stream_keys: Iterable[str]) -> int:
    """After a reconciliation stopped using streams (deleted, or the streams taken out of it): a
    record of theirs that was partially reconciled only for want of a match there is reconciled now
    that every reconciliation still using its stream has matched it (no claim does it: nothing
    changes on the record). Read from the streams' open records (those not reconciled), each
    candidate read whole and rewritten conditionally; a repeat finds nothing left. Returns how many."""
    settled = 0
    for key in sorted(set(stream_keys)):
        users = used_by(ports.reconciliations, environment, [key])[key] - {leaving_id}
        if not users:  # a stream nobody reconciles: its records keep the status they had
            continue
        candidates = [r.id for r in ports.claims.open_records(environment, key, leaving_id, adopted=True)
                      if r.matched_in >= users]
        settle = partial(ports.claims.settle_reconciled, environment, users=users)
        with ThreadPoolExecutor(CLAIM_THREADS) as pool:
            for start in range(0, len(candidates), SETTLE_BATCH):
                settled += sum(pool.map(settle, ports.claims.held_records(environment,
                                                                          candidates[start:start + SETTLE_BATCH])))
    return settled


def matching_changed(ports: Ports, environment: str, reconciliation_id: int) -> None:
    """A person matched, unmatched or confirmed: the reconciliation's exceptions and tallies are
    refreshed within a minute, and those of the other reconciliations of its streams too (a
    story's continuation counts what this one matched: see request_neighbour_refreshes)."""
    ports.reconciliations.request_exceptions_refresh(environment, reconciliation_id)
    request_neighbour_refreshes(ports, environment, reconciliation_id)


def confirm(ports: Ports, environment: str, match_id: int) -> Match:
    """Confirm the match, then its records (`pending_confirmation` -> reconciled, or partially
    reconciled while other reconciliations of their streams have not matched them). A confirm
    repeated after dying part-way confirms what is left."""
    current = ports.matches.get(environment, match_id)
    period_closes.refuse_match(ports, environment, current, "confirming")
    event = event_data.match_event(replace(current, status=MatchStatus.CONFIRMED), "confirmed", utc_now())
    confirmed = save_and_emit(ports, environment, event, EventOrigin.match(match_id),
                              lambda owed: ports.matches.confirm(current, pending_event=owed))
    members = ports.matches.members(environment, match_id)
    users = used_by(ports.reconciliations, environment, (m.data_stream_key for m in members))
    with ThreadPoolExecutor(CLAIM_THREADS) as pool:
        list(pool.map(lambda m: ports.claims.confirm_record(environment, m.record_id, confirmed.reconciliation_id,
                                                            match_id, users[m.data_stream_key]), members))
    audit.note(**audit.changes({"status": current.status.value}, {"status": confirmed.status.value}))
    matching_changed(ports, environment, confirmed.reconciliation_id)
    return confirmed


def unmatch(ports: Ports, environment: str, match_id: int, decided_by: str | None = None,
            approved_by: str | None = None, only: MatchStatus | None = None) -> None:
    """Hide the match, open its records again, drop its members, and keep the match as a
    tombstone; the reconciliation's exceptions are refreshed within a minute (the records may
    be overdue). A retry after a crash finds the match marked and finishes. A person's unmatch
    (the request's actor, or `decided_by`: an approved unmatch's requester) is kept as their
    decision first (services/unmatch_decisions.py). `only`: the status the caller unmatches
    (a reject: proposed); a match in another is refused unless its unmatch is under way. The mark
    lands only on the match as it was read and gated (a confirm in between: 409, try again)."""
    match = ports.matches.find(environment, match_id)
    if match is None or match.unmatched_at is not None or match.pending_since is not None:
        raise NotFound(f"reconciliation match {match_id} not found")
    if only is not None and match.status is not only and not match.unmatching:
        raise TransitionRefused(f"reconciliation match {match_id} is {match.status.value}: only {only.value} "
                                f"matches are rejected here (unmatch it with DELETE "
                                f"/v1/reconciliation_matches/{match_id})")
    # A closed period refuses before anything is held for an approver, a retry too: no close lands
    # while the unmatch is held (only one begun before unmatches were held finds one).
    period_closes.refuse_match(ports, environment, match, "unmatching")
    approvals.check_unmatch(ports, match)
    period_closes.hold_match(ports, match)  # until it ends: a close refuses while it is under way
    if not match.unmatching:
        ports.matches.mark_unmatching(match)
    members = ports.matches.members(environment, match_id)
    unmatch_decisions.keep(ports, match, members, decided_by, approved_by)  # before its members go
    release_members(ports, match, members,
                    used_by(ports.reconciliations, environment, (m.data_stream_key for m in members)))
    # Before the tombstone: a retry after it finds nothing left to do.
    matching_changed(ports, environment, match.reconciliation_id)
    save_and_emit(ports, environment, event_data.match_event(match, "deleted", utc_now()), EventOrigin.match(match_id),
                  lambda owed: ports.matches.mark_unmatched(match, pending_event=owed))
    period_closes.let_go_match(ports, match)
    audit.note(before={"status": match.status.value}, after={"status": "unmatched"}, record_count=len(members))


def create_manual_match(ports: Ports, environment: str, reconciliation_id: int, record_ids: list[int],
                        allow_difference: bool, reason: str | None,
                        allocations: Mapping[int, int] | None = None) -> Match:
    """A person's match of records from both sides, confirmed at once (422 unless it balances or
    a difference is allowed with a reason; 409 when a record is matched in this reconciliation,
    or its import is still writing). The reconciliation's exceptions are refreshed within a minute.

    The match item is written first, hidden (`pending_since`): should the request die part-way,
    the sweeper finds it and opens its records again, so no claim outlives a match that never was.
    """
    reconciliation = ports.reconciliations.get(environment, reconciliation_id)
    ids = list(dict.fromkeys(record_ids))
    if not ids or len(ids) > MAX_MANUAL_RECORDS:
        raise ValidationFailed.on("record_ids", f"must hold 1 to {MAX_MANUAL_RECORDS} record ids")
    held = {h.record.id: h for h in ports.claims.held_records(environment, ids) if not h.deleting}
    errors = [FieldError(f"record_ids[{n}]", f"record {rid} not found") for n, rid in enumerate(ids) if rid not in held]
    side_of: dict[str, Side] = {key: "a" for key in reconciliation.side_a_stream_keys}
    side_of.update({key: "b" for key in reconciliation.side_b_stream_keys})
    errors += [FieldError(f"record_ids[{n}]", f"record {rid} is in data stream "
                          f"'{held[rid].record.data_stream_key}', which is on neither side of this reconciliation")
               for n, rid in enumerate(ids) if rid in held and held[rid].record.data_stream_key not in side_of]
    if errors:
        raise ValidationFailed(errors)
    taken = [rid for rid in ids if held[rid].match_in(reconciliation_id) is not None]
    if taken:
        raise Conflict(f"record {taken[0]} is already matched in reconciliation {reconciliation_id}")
    records = {rid: held[rid].record for rid in ids}
    period_closes.refuse_records(ports, environment, reconciliation_id, records.values())
    writing = {job.id for job in ports.ingestion_jobs.active()
               if job.environment == environment and job.status in WRITING}
    busy = [rid for rid in ids if records[rid].file_import_id in writing]
    if busy:
        raise Conflict(f"record {busy[0]} belongs to import {records[busy[0]].file_import_id}, which is still "
                       "writing; match it once the import has finished")
    side_a = [records[rid] for rid in ids if side_of[records[rid].data_stream_key] == "a"]
    side_b = [records[rid] for rid in ids if side_of[records[rid].data_stream_key] == "b"]
    partial = manual_shares(side_a, side_b, reconciliation_id, allocations or {}, allow_difference, reason)
    difference = partial.difference if partial else check_manual_match(side_a, side_b, allow_difference, reason)
    approvals.check_manual_match(ports, environment, reconciliation_id, ids, allow_difference, reason, side_a, side_b,
                                 allocations, shares=partial.shares if partial else {}, difference=difference)
    match = Match(environment=environment, id=ports.counters.next_id(environment, "match"),
                  reconciliation_id=reconciliation_id, status=MatchStatus.CONFIRMED, group_key="manual",
                  record_count=len(ids), created_at=utc_now(), differences={"amount": difference},
                  reason=reason.strip() if allow_difference and reason else None,
                  allocations=partial.shares if partial else {})
    members = [MatchMember(side_of[records[rid].data_stream_key], rid, records[rid].data_stream_key,
                           held[rid].matched_in, share=partial.shares.get(rid) if partial else None) for rid in ids]
    users = used_by(ports.reconciliations, environment, side_of)
    period_closes.hold_match(ports, match)  # until it is made or rolled back: a close refuses meanwhile
    ports.matches.begin(match)

    def commit(owed: str | None) -> None:
        try:
            written = write_matches(ports, [(match, members)], users, {match.id: owed} if owed else None)
        except Exception:
            landed = _commit_landed(ports, match)
            if landed:  # its answer was lost: the match is made
                logger.exception("writing a match failed after its commit", extra={"match_id": match.id})
                period_closes.let_go_match(ports, match)
                return
            if landed is False:  # None, not known: the sweeper rolls it back if it was not committed
                roll_back(ports, match, members, users)
            raise
        if not written:
            ports.matches.remove(match)
            period_closes.let_go_match(ports, match)
            raise Conflict("a record of this match was matched, paid in part or deleted meanwhile; nothing was "
                           "matched")
        period_closes.let_go_match(ports, match)

    save_and_emit(ports, environment, event_data.match_event(match, "created", match.created_at),
                  EventOrigin.match(match.id), commit)
    try:
        matching_changed(ports, environment, reconciliation_id)  # its records leave them
    except Exception:  # the match is made: a retry would be 409; the hourly refresh catches up
        logger.exception("requesting an exception refresh failed", extra={"reconciliation_id": reconciliation_id})
    return match


def _commit_landed(ports: Ports, match: Match) -> bool | None:
    """Whether a begun match's commit landed, read after a write that failed (a write can be applied
    though its answer was lost); None when the match cannot be read."""
    try:
        found = ports.matches.find(match.environment, match.id)
    except Exception:
        logger.exception("reading a match after its write failed", extra={"match_id": match.id})
        return None
    return found is not None and found.pending_since is None


def roll_back(ports: Ports, match: Match, members: list[MatchMember], users: dict[str, frozenset[int]]) -> None:
    """Undo a match that was begun and never committed: its records open again, then it goes."""
    release_members(ports, match, members, users)
    ports.matches.remove(match)
    period_closes.let_go_match(ports, match)


def sweep_pending(ports: Ports, now: datetime | None = None) -> int:
    """Roll back the matches a dead request left begun (older than PENDING_FOR: no request lives that long)."""
    now = now or utc_now()
    undone = 0
    for match in ports.matches.pending():
        if match.pending_since is None or now - match.pending_since <= PENDING_FOR:
            continue
        members = ports.matches.members(match.environment, match.id)
        roll_back(ports, match, members, used_by(ports.reconciliations, match.environment,
                                                 (m.data_stream_key for m in members)))
        undone += 1
    return undone


# Reading ----------------------------------------------------------------------------------------

def member_records(ports: Ports, match: Match) -> list[tuple[Side, Record]]:
    """The match's records with the side each is on, side A first, then by id (a match shown whole)."""
    side_of = {m.record_id: m.side for m in ports.matches.members(match.environment, match.id)}
    held = sorted(ports.claims.held_records(match.environment, side_of),
                  key=lambda h: (side_of[h.record.id], h.record.id))
    return [(side_of[h.record.id], h.record) for h in held]


def records_of_match(ports: Ports, environment: str, match_id: int, filters: RecordQuery, limit: int,
                     cursor: str | None) -> tuple[list[Record], str | None]:
    """A page of the match's records, newest first (a page of its members; the other filters
    narrow the page). A match being unmatched, or none, has none."""
    match = ports.matches.find(environment, match_id)
    if match is None or match.unmatching:
        return [], None
    ids, next_cursor = ports.matches.member_page(environment, match_id, limit, cursor)
    found = sorted(ports.records.find_many(environment, ids).values(), key=lambda r: -r.id)
    return [r for r in found if filters.admits(r)], next_cursor
