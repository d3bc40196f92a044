"""Investigations: start one on an exception (202), run it on the investigation queue, and accept
its suggestion as a confirmed match."""
from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timedelta

from chalicelib.domain import event_data
from chalicelib.domain.audit import system_actor
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, NotFound, TransitionRefused, ValidationFailed, failure_reason, shown
from chalicelib.domain.events import Event
from chalicelib.domain.investigations.investigation import Investigation, InvestigationStatus
from chalicelib.domain.matches import Match, check_manual_match
from chalicelib.domain.reconciliation_exceptions import ExceptionStatus, RecordFilter, check_filter
from chalicelib.domain.records import Record
from chalicelib.observability import logger
from chalicelib.services import approvals, period_closes, sweeping
from chalicelib.services import reconciliation_exceptions as exception_service
from chalicelib.services.events import announce
from chalicelib.services.matches import create_manual_match
from chalicelib.services.ports import Ports
from chalicelib.services.status_moves import move_or_reload
from chalicelib.services.sweeping import GiveUp, SweptKind

INVESTIGATION_DECISIONS = "investigation"  # the sweeper's held decisions on investigations (events.deciding)
ABANDONED_AFTER = timedelta(minutes=95)  # the queue's 3 receives x 30 minutes of visibility, and then some


def start(ports: Ports, environment: str, exception_id: int, record_filter: RecordFilter) -> Investigation:
    """Create the investigation (pending), move an open exception to investigating, and queue it."""
    exception = ports.exceptions.get(environment, exception_id)
    check_filter(record_filter)
    investigation = Investigation(
        environment=environment, id=ports.exceptions.next_id(environment, "investigation"),
        exception_id=exception.id, reconciliation_id=exception.reconciliation_id,
        status=InvestigationStatus.PENDING, created_at=utc_now(),
        filter_params={k: v for k, v in asdict(record_filter).items() if v is not None})
    ports.investigations.add(investigation)
    if exception.status is ExceptionStatus.OPEN:
        try:
            exception_service.update(ports, environment, exception.id, title=None, description=None,
                                     status=ExceptionStatus.INVESTIGATING)
        except Conflict:
            pass  # someone moved it meanwhile: their move stands
    ports.investigation_queue.send({"environment": environment, "investigation_id": investigation.id})
    return investigation


def run(ports: Ports, environment: str, investigation_id: int) -> Investigation:
    """Search the other side's open records for the exception's records (idempotent: a finished
    investigation is left as it is; a redelivery of a running one runs it again)."""
    from chalicelib.domain.investigations import investigate
    from chalicelib.domain.matching.frames import investigation_frame

    investigation = ports.investigations.get(environment, investigation_id)
    if investigation.finished:  # a redelivery: finishes an announcement its crash cut short, if any
        _announce(ports, investigation)
        return investigation
    if investigation.status is InvestigationStatus.PENDING:
        investigation = move_or_reload(ports.investigations, investigation, InvestigationStatus.RUNNING)
    exception = ports.exceptions.get(environment, investigation.exception_id)
    reconciliation = ports.reconciliations.get(environment, exception.reconciliation_id)
    record_filter = RecordFilter(**investigation.filter_params)
    today = utc_now().date()
    target_ids = [r.record_id for r in ports.exceptions.records(exception) if record_filter.admits(r, today)]
    targets = [h.record for h in ports.claims.held_records(environment, target_ids)
               if h.match_in(reconciliation.id) is None and not h.deleting]
    other_side = (reconciliation.side_b_stream_keys if exception.data_stream_key in reconciliation.side_a_stream_keys
                  else reconciliation.side_a_stream_keys)
    candidates = [r for key in other_side for r in ports.claims.open_records(
        environment, key, reconciliation.id, ports.claims.is_adopted(environment, reconciliation.id, key))]
    outcome = investigate(investigation_frame(targets), investigation_frame(candidates),
                          decimal_places=exception.decimal_places)
    difference = None
    if outcome.proposal:
        found = {h.record.id: h.record for h in ports.claims.held_records(
            environment, outcome.target_record_ids + outcome.suggested_record_ids)}
        difference = _difference([found[i] for i in outcome.target_record_ids],
                                 [found[i] for i in outcome.suggested_record_ids])
    investigation = move_or_reload(
        ports.investigations, investigation, InvestigationStatus.COMPLETED, completed_at=utc_now(),
        candidate_records_searched=outcome.candidate_records_searched,
        suggested_record_ids=list(outcome.suggested_record_ids), target_record_ids=outcome.target_record_ids,
        suggested_difference=difference, confidence_score=float(outcome.confidence_score),
        recommendation_text=outcome.recommendation_text)
    _announce(ports, investigation)
    return investigation


def _announce(ports: Ports, investigation: Investigation) -> None:
    """`investigation.completed` when it ends, failed ones too (their status says which)."""
    if investigation.finished:
        announce(ports, event_data.investigation_completed(investigation), investigation.environment,
                 actor=system_actor("investigation", investigation.id),
                 summary_fields=("status", "confidence_score", "suggested_record_ids", "error_message"))


def _difference(targets: list[Record], suggested: list[Record]) -> int:
    """The difference the match of these records would have (see check_manual_match)."""
    return check_manual_match(targets, suggested, allow_difference=True, reason="investigation")


def fail(ports: Ports, environment: str, investigation_id: int, error: Exception) -> None:
    investigation = ports.investigations.get(environment, investigation_id)
    if not investigation.finished:
        investigation = move_or_reload(ports.investigations, investigation, InvestigationStatus.FAILED,
                                       completed_at=utc_now(),
                                       error_message=failure_reason(error))
    _announce(ports, investigation)


def accept(ports: Ports, environment: str, exception_id: int, investigation_id: int) -> Match:
    """Turn the suggestion into a confirmed match of the exception's records it answers with the
    suggested ones, if it still holds (409 saying why not: a record was deleted or matched since,
    or the match would no longer have the difference stated); the exception is refreshed at
    once (matched records leave it). A retry after a crash returns the match it made."""
    investigation = ports.investigations.get(environment, investigation_id)
    if investigation.exception_id != exception_id:
        raise NotFound(f"investigation {investigation_id} not found on exception {exception_id}")
    if investigation.status is not InvestigationStatus.COMPLETED:
        raise Conflict(f"investigation {investigation_id} is {investigation.status.value}; only a completed one "
                       "can be accepted")
    if investigation.accepted_match_id is not None:
        raise Conflict(f"investigation {investigation_id} was accepted already "
                       f"(match {investigation.accepted_match_id})")
    if not investigation.suggested_record_ids or not investigation.target_record_ids:
        raise Conflict(f"investigation {investigation_id} suggested nothing to match")
    record_ids = list(investigation.target_record_ids) + list(investigation.suggested_record_ids)
    match = _made_before(ports, investigation, record_ids)
    if match is None:
        match = _match_suggestion(ports, investigation, record_ids)
    try:
        ports.investigations.mark_accepted(investigation, match.id)
    except TransitionRefused:
        pass  # a concurrent accept marked it; the match stands
    try:
        exception_service.refresh(ports, environment, investigation.reconciliation_id)
    except Exception:  # the match is made (and a refresh requested): the sweeper refreshes the exception
        logger.exception("refreshing exceptions after an accept failed", extra={"investigation_id": investigation.id})
    return match


def _match_suggestion(ports: Ports, investigation: Investigation, record_ids: list[int]) -> Match:
    environment = investigation.environment
    if investigation.suggested_difference is None:
        raise Conflict(f"investigation {investigation.id} was made before suggestions stated their difference; "
                       "start a new investigation")
    held = {h.record.id: h for h in ports.claims.held_records(environment, record_ids)}
    for record_id in record_ids:
        stored = held.get(record_id)
        if stored is None or stored.deleting:
            raise Conflict(f"record {record_id} of the suggestion was deleted since the investigation; "
                           "start a new investigation")
        held_by = stored.match_in(investigation.reconciliation_id)
        if held_by is not None:
            raise Conflict(f"record {record_id} of the suggestion was matched since the investigation (match "
                           f"{held_by}); start a new investigation")
        if stored.record.allocations.get(investigation.reconciliation_id):
            # The suggestion weighed whole amounts; a share already taken would leave the match unbalanced
            raise Conflict(f"record {record_id} of the suggestion is paid in part in this reconciliation: an "
                           "investigation weighs whole amounts; match the rest by hand with allocations")
    difference = _difference([held[i].record for i in investigation.target_record_ids],
                             [held[i].record for i in investigation.suggested_record_ids])
    if difference != investigation.suggested_difference:
        raise Conflict(f"the suggestion no longer balances as stated: its records differed by "
                       f"{investigation.suggested_difference} (minor units) when suggested and differ by {difference} "
                       "now; start a new investigation")
    # A closed period refuses the match (409) now, not after an approver's 202 fails
    period_closes.refuse_records(ports, environment, investigation.reconciliation_id,
                                 [held[i].record for i in record_ids])
    approvals.check_accept(ports, investigation)  # its checks passed: held for an approver, or on
    try:
        with approvals.decided():  # the accept's own gate has passed
            return create_manual_match(
                ports, environment, investigation.reconciliation_id, record_ids, allow_difference=True,
                reason=shown(f"Accepted investigation {investigation.id}: {investigation.recommendation_text or ''}",
                             490))
    except ValidationFailed as error:  # the reconciliation changed since (its sides): the suggestion is stale
        raise Conflict(f"the suggestion no longer fits reconciliation {investigation.reconciliation_id} "
                       f"({error}); start a new investigation") from None
    except Conflict:  # a concurrent accept of this investigation made it first
        match = _made_before(ports, investigation, record_ids)
        if match is None:
            raise
        return match


def _made_before(ports: Ports, investigation: Investigation, record_ids: list[int]) -> Match | None:
    """The match an earlier accept of this investigation made before it died (it holds exactly
    these records and names the investigation), or None."""
    held = ports.claims.held_records(investigation.environment, record_ids)
    match_ids = {h.match_in(investigation.reconciliation_id) for h in held}
    match_id = match_ids.pop() if len(held) == len(record_ids) and len(match_ids) == 1 else None
    match = ports.matches.find(investigation.environment, match_id) if match_id is not None else None
    if match is None or not (match.reason or "").startswith(f"Accepted investigation {investigation.id}:"):
        return None
    return match if match.record_count == len(record_ids) and not match.unmatching else None


def sweep(ports: Ports, now: datetime | None = None) -> dict[str, int]:
    """Fail what no delivery will finish any more: an investigation still pending or running after
    its queue gave up (every receive's visibility timeout) died with its Lambda or was never queued.
    One investigation's trouble stops no other."""
    return sweeping.sweep(ports, SWEPT_INVESTIGATIONS, now)


def _judge(ports: Ports, investigation: Investigation, now: datetime) -> sweeping.Verdict:
    """Never a restart: its queue's deliveries were its restarts."""
    if now - investigation.created_at > ABANDONED_AFTER:
        return GiveUp("no worker finished it; start a new investigation")
    return None


def _finish_if_ended(ports: Ports, environment: str, investigation_id: int) -> Event | None:
    investigation = sweeping.ended(ports.investigations.get, environment, investigation_id)
    if investigation is None:
        return None
    _announce(ports, investigation)
    return event_data.investigation_completed(investigation)


SWEPT_INVESTIGATIONS = SweptKind[Investigation](
    decisions=INVESTIGATION_DECISIONS, noun="investigation", outcomes=("failed",),
    active=lambda ports: ports.investigations.active(), judge=_judge,
    give_up=lambda ports, investigation, verdict: fail(ports, investigation.environment, investigation.id,
                                                       TimeoutError(verdict.reason)),
    finish_if_ended=_finish_if_ended)
