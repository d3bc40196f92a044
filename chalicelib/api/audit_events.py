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
    return AuditEventOut.from_entity(entry, id=entry.seq)


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
    first_break = None if found is None else ChainBreakOut.from_entity(found, id=found.found_seq)
    return AuditVerifyOut.from_entity(report, first_break=first_break)
