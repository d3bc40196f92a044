"""Routes of /audit_events: read and verify the environment's audit trail (no route edits or deletes it)."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router
from chalicelib.api.schemas.audit_events import (
    AuditEventOut,
    AuditEventPage,
    AuditEventsQuery,
    AuditVerifyOut,
    AuditVerifyQuery,
    ChainBreakOut,
)
from chalicelib.container import container
from chalicelib.domain.audit import AuditEntry, AuditQuery
from chalicelib.services import audit as service

router = Router("audit_events")
AUDIT_EVENTS = "/audit_events"


def entry_out(entry: AuditEntry) -> AuditEventOut:
    return AuditEventOut(id=entry.seq, seq=entry.seq, at=entry.at, actor=entry.actor, action=entry.action,
                         resource_type=entry.resource_type, resource_id=entry.resource_id,
                         summary=dict(entry.summary), prev_hash=entry.prev_hash, hash=entry.hash)


@router.route("GET", AUDIT_EVENTS, summary="List audit trail entries, newest first", query=AuditEventsQuery,
              response=AuditEventPage, errors=(400, 422))
def list_audit_events(request: ApiRequest) -> AuditEventPage:
    query: AuditEventsQuery = request.query
    filters = AuditQuery(resource_type=query.resource_type, resource_id=query.resource_id, actor=query.actor,
                         at_from=query.at_from, at_to=query.at_to)
    entries, cursor = service.list_page(container().ports, request.environment, filters, query.limit, query.cursor)
    return AuditEventPage(data=[entry_out(e) for e in entries], next_cursor=cursor, limit=query.limit)


@router.route("GET", AUDIT_EVENTS + "/verify",
              summary="Walk the audit chain and report its first break, or that it is intact (in bounded steps: "
                      "continue with from_seq=next_from_seq while complete is false)",
              query=AuditVerifyQuery, response=AuditVerifyOut, errors=(400, 422))
def verify_audit_events(request: ApiRequest) -> AuditVerifyOut:
    query: AuditVerifyQuery = request.query
    report = service.verify(container().ports, request.environment, from_seq=query.from_seq)
    found = report.first_break
    first_break = None if found is None else ChainBreakOut(
        seq=found.seq, id=found.found_seq, reason=found.reason.value, message=found.message)
    return AuditVerifyOut(intact=report.intact, checked=report.checked, first_break=first_break,
                          from_seq=report.from_seq, last_checked_seq=report.last_checked_seq,
                          head_seq=report.head_seq, head_hash=report.head_hash, complete=report.complete,
                          next_from_seq=report.next_from_seq)
