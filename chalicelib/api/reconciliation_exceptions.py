"""Routes of /reconciliation_exceptions: the queue, the detail, status, assignees, comments."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.approvals import ApprovalOut
from chalicelib.api.schemas.matches import MatchOut
from chalicelib.api.schemas.near_misses import ExceptionNearMissesOut
from chalicelib.api.schemas.reconciliation_exceptions import (
    AggregatesOut,
    AssigneeOut,
    CommentOut,
    CreateAssignee,
    CreateComment,
    ExceptionDetailOut,
    ExceptionDetailQuery,
    ExceptionOut,
    ExceptionPage,
    ExceptionRecordsFilter,
    ExceptionRecordsQuery,
    ExceptionsFilter,
    ExceptionsQuery,
    InvestigationOut,
    UpdateException,
)
from chalicelib.api.schemas.records import RecordPage
from chalicelib.api.views import record_out
from chalicelib.container import container
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.investigations.investigation import Investigation
from chalicelib.domain.reconciliation_exceptions import (
    AgeBucket,
    ExceptionComment,
    ExceptionStatus,
    QueueOrder,
    ReconciliationException,
    RecordFilter,
)
from chalicelib.domain.reconciliations import Reconciliation
from chalicelib.domain.records import RecordStatus
from chalicelib.domain.service_levels import AgeBucket as QueueAgeBucket
from chalicelib.domain.service_levels import Severity, Standing
from chalicelib.services import investigations as investigation_service
from chalicelib.services import near_misses
from chalicelib.services import reconciliation_exceptions as service
from chalicelib.services import service_levels as sla
from chalicelib.services.ports import Ports

router = Router("exceptions")
BASE = "/reconciliation_exceptions"
SESSIONS_SHOWN = 5


def exceptions_out(environment: str, exceptions: list[ReconciliationException]) -> list[ExceptionOut]:
    """Rows with their stream's and reconciliation's names, read in one batch for the page."""
    ports = container().ports
    streams = ports.data_streams.get_many(environment, (e.data_stream_key for e in exceptions))
    owners = ports.reconciliations.visible(environment, {e.reconciliation_id for e in exceptions})
    standings = sla.standings_of(ports, environment, exceptions)
    return [ExceptionOut.from_entity(e, **_beside_attributes(e, streams.get(e.data_stream_key),
                                                              owners.get(e.reconciliation_id), standings[e.id]))
            for e in exceptions]


def _beside_attributes(exception: ReconciliationException, stream, reconciliation: Reconciliation | None,
                       standing: Standing) -> dict:
    """The fields of an exception's answer that are not its attributes."""
    return dict(reconciliation_name=reconciliation.name if reconciliation else None,
                refresh_pending=bool(reconciliation and reconciliation.exceptions_refresh_pending),
                data_stream_name=stream.name if stream else None, aggregates=service.view_aggregates(exception),
                severity=standing.severity.value, due_at=standing.due_at, overdue=standing.overdue,
                age_bucket=standing.age_bucket.value if standing.age_bucket else None)


def _record_filter(query: ExceptionRecordsFilter) -> RecordFilter:
    return RecordFilter(amount_min=query.amount_min, amount_max=query.amount_max,
                        date_from=query.date_from.isoformat() if query.date_from else None,
                        date_to=query.date_to.isoformat() if query.date_to else None, direction=query.direction,
                        age_bucket=AgeBucket(query.age_bucket) if query.age_bucket else None,
                        pending_confirmation=None if query.record_status is None
                        else query.record_status == RecordStatus.PENDING_CONFIRMATION.value)


def comment_out(comment: ExceptionComment) -> CommentOut:
    return CommentOut.from_entity(comment, created_at=iso(comment.created_at))


def investigation_out(investigation: Investigation) -> InvestigationOut:
    return InvestigationOut.model_validate(investigation, from_attributes=True)


def investigations_of(environment: str, exception: ReconciliationException) -> list[InvestigationOut]:
    """The exception's newest investigations."""
    return [investigation_out(i)
            for i in container().ports.investigations.of_exception(environment, exception.id, SESSIONS_SHOWN)]


def detail_out(environment: str, exception: ReconciliationException, record_filter: RecordFilter) -> ExceptionDetailOut:
    ports = container().ports
    stream = ports.data_streams.get_many(environment, [exception.data_stream_key]).get(exception.data_stream_key)
    owner = ports.reconciliations.visible(environment, {exception.reconciliation_id}).get(exception.reconciliation_id)
    sessions = investigations_of(environment, exception)
    standing = sla.standings_of(ports, environment, [exception])[exception.id]
    return ExceptionDetailOut.from_entity(
        exception, **_beside_attributes(exception, stream, owner, standing),
        filtered_aggregates=AggregatesOut.model_validate(
            service.filtered_aggregates(ports, exception, record_filter)),
        comments=[comment_out(c) for c in ports.exceptions.comments(exception)],
        investigation=sessions[0] if sessions else None, investigation_sessions=sessions)


def _exception_query(query: ExceptionsFilter) -> service.ExceptionQuery:
    """The queue's filters other than the service levels, as the service takes them."""
    oldest_before = (None if query.older_than_days is None
                     else (utc_now().date() - timedelta(days=query.older_than_days)).isoformat())
    return service.ExceptionQuery(
        reconciliation_id=query.reconciliation_id, status=ExceptionStatus(query.status) if query.status else None,
        data_stream_key=query.data_stream_key, assignee=query.assignee, assignee_user_id=query.assignee_user_id,
        unassigned=query.unassigned, amount_min=query.amount_min, amount_max=query.amount_max,
        amount_decimal_places=query.amount_decimal_places, oldest_before=oldest_before)


def filtered_query(ports: Ports, environment: str, given: ExceptionsFilter) -> service.ExceptionQuery:
    """The queue's filters as the service reads them, the service level ones included (the list's
    and a bulk action's `filter`)."""
    wanted = sla.StandingFilter(overdue=given.overdue, severity=Severity(given.severity) if given.severity else None,
                                age_bucket=QueueAgeBucket(given.age_bucket) if given.age_bucket else None)
    return replace(_exception_query(given), also=sla.queue_filter(ports, environment, wanted))


@router.route("GET", BASE, summary="The exception queue: newest first (or oldest, or largest), by offset, with "
              "aggregates on every row and the count of the filtered queue", query=ExceptionsQuery,
              response=ExceptionPage, errors=(422,))
def list_exceptions(request: ApiRequest) -> ExceptionPage:
    query: ExceptionsQuery = request.query
    ports = container().ports
    found, total = service.queue_page(ports, request.environment, filtered_query(ports, request.environment, query),
                                      QueueOrder(query.sort), query.offset, query.limit)
    return ExceptionPage(data=exceptions_out(request.environment, found), has_more=total > query.offset + query.limit,
                         offset=query.offset, total=total)


@router.route("GET", BASE + "/{id}", summary="An exception with its aggregates, the filtered ones, comments and "
              "investigations (near misses when asked)", query=ExceptionDetailQuery, response=ExceptionDetailOut,
              errors=(400, 404, 422))
def get_exception(request: ApiRequest, id: str) -> ExceptionDetailOut:
    exception = container().ports.exceptions.get(request.environment, numeric_id(id, "reconciliation exception"))
    detail = detail_out(request.environment, exception, _record_filter(request.query))
    if request.query.near_misses:
        detail.near_misses = ExceptionNearMissesOut(**near_misses.of_exception(container().ports,
                                                                              request.environment, exception))
    return detail


@router.route("GET", BASE + "/{id}/records", summary="The exception's records, newest first, filtered",
              query=ExceptionRecordsQuery, response=RecordPage, errors=(400, 404, 422))
def list_exception_records(request: ApiRequest, id: str) -> RecordPage:
    query: ExceptionRecordsQuery = request.query
    ports = container().ports
    exception = ports.exceptions.get(request.environment, numeric_id(id, "reconciliation exception"))
    records, cursor = service.records_page(ports, exception, _record_filter(query), query.limit, query.cursor)
    return RecordPage(data=[record_out(r) for r in records], next_cursor=cursor, limit=query.limit)


@router.route("PATCH", BASE + "/{id}", summary="Retitle, describe, or move an exception (open, investigating, "
              "dismissed, resolved)", body=UpdateException, response=ExceptionDetailOut, errors=(404, 409, 422),
              accepted=ApprovalOut)
def update_exception(request: ApiRequest, id: str) -> ExceptionDetailOut:
    body: UpdateException = request.body
    exception = service.update(container().ports, request.environment,
                               numeric_id(id, "reconciliation exception"), title=body.title,
                               description=body.description,
                               status=ExceptionStatus(body.status) if body.status else None)
    return detail_out(request.environment, exception, RecordFilter())


@router.route("POST", BASE + "/{id}/assignees", summary="Assign a person", status=201, body=CreateAssignee,
              response=AssigneeOut, errors=(404, 409, 422))
def add_assignee(request: ApiRequest, id: str) -> AssigneeOut:
    body: CreateAssignee = request.body
    assignee = service.add_assignee(container().ports, request.environment,
                                    numeric_id(id, "reconciliation exception"), user_id=body.user_id,
                                    idp_user_id=body.idp_user_id)
    return AssigneeOut.model_validate(assignee, from_attributes=True)


@router.route("DELETE", BASE + "/{id}/assignees/{assignee_id}", summary="Unassign a person", status=204,
              errors=(404, 409))
def remove_assignee(request: ApiRequest, id: str, assignee_id: str) -> None:
    service.remove_assignee(container().ports, request.environment,
                            numeric_id(id, "reconciliation exception"), numeric_id(assignee_id, "assignee"))


@router.route("POST", BASE + "/{id}/comments", summary="Comment on an exception (listed newest last)", status=201,
              body=CreateComment, response=CommentOut, errors=(404, 422))
def add_comment(request: ApiRequest, id: str) -> CommentOut:
    body: CreateComment = request.body
    return comment_out(service.comment_by_person(
        container().ports, request.environment, numeric_id(id, "reconciliation exception"), body=body.body,
        signed_in=request.principal.user if request.principal else None, author_idp_id=body.author_idp_id,
        mentions=body.mentions))


@router.route("POST", BASE + "/{id}/investigations", summary="Start an investigation: search the other side's open "
              "records for the exception's (filtered) records", status=202, query=ExceptionRecordsFilter,
              response=InvestigationOut, errors=(404, 422))
def start_investigation(request: ApiRequest, id: str) -> InvestigationOut:
    ports = container().ports
    investigation = investigation_service.start(ports, request.environment,
                                                numeric_id(id, "reconciliation exception"),
                                                _record_filter(request.query))
    return investigation_out(ports.investigations.get(request.environment, investigation.id))


@router.route("POST", BASE + "/{id}/investigations/{investigation_id}/accept", summary="Match the exception's records "
              "with the suggested ones (a confirmed match)", status=201, response=MatchOut, errors=(404, 409, 422),
              accepted=ApprovalOut)
def accept_investigation(request: ApiRequest, id: str, investigation_id: str) -> MatchOut:
    from chalicelib.api.matches import match_out

    match = investigation_service.accept(container().ports, request.environment,
                                         numeric_id(id, "reconciliation exception"),
                                         numeric_id(investigation_id, "investigation"))
    return match_out(match)
