"""Routes of reconciliation matches."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.approvals import ApprovalOut
from chalicelib.api.schemas.matches import CreateMatch, MatchesQuery, MatchOut, MatchPage, MatchRecordOut
from chalicelib.container import container
from chalicelib.domain.matches import MAX_INLINE_RECORDS, Match, MatchStatus
from chalicelib.services import matches as service
from chalicelib.services.partial_payments import allocations_asked

router = Router("matches")


def match_out(match: Match, with_records: bool = True) -> MatchOut:
    if match.record_count > MAX_INLINE_RECORDS or not with_records:
        return MatchOut.from_entity(match)
    records = [MatchRecordOut.from_entity(record, side=side)
               for side, record in service.member_records(container().ports, match)]
    return MatchOut.from_entity(match, records=records, record_count=None)  # the records, or their count


@router.route("GET", "/reconciliation_matches", summary="Matches of a reconciliation, newest first",
              query=MatchesQuery, response=MatchPage, errors=(400, 404, 422))
def list_matches(request: ApiRequest) -> MatchPage:
    query: MatchesQuery = request.query
    ports = container().ports
    reconciliation = ports.reconciliations.get(request.environment, query.reconciliation_id)
    matches, cursor = ports.matches.list_page(request.environment, reconciliation.id, query.limit, query.cursor,
                                                 status=MatchStatus(query.status) if query.status else None)
    return MatchPage(data=[match_out(m, with_records=False) for m in matches], next_cursor=cursor, limit=query.limit)


@router.route("GET", "/reconciliation_matches/{id}", summary="A match, its records inline up to 100",
              response=MatchOut, errors=(404,))
def get_match(request: ApiRequest, id: str) -> MatchOut:
    return match_out(container().ports.matches.get(request.environment, numeric_id(id, "reconciliation match")))


@router.route("POST", "/reconciliation_matches", summary="Match records of both sides by hand", status=201,
              body=CreateMatch, response=MatchOut, errors=(404, 409, 422), accepted=ApprovalOut)
def create_match(request: ApiRequest) -> MatchOut:
    body: CreateMatch = request.body
    match = service.create_manual_match(container().ports, request.environment, body.reconciliation_id,
                                        body.record_ids, body.allow_difference, body.reason,
                                        allocations_asked(body.allocations))
    return match_out(match)


@router.route("POST", "/reconciliation_matches/{id}/confirm", summary="Confirm a proposed match",
              response=MatchOut, errors=(404, 409))
def confirm_match(request: ApiRequest, id: str) -> MatchOut:
    return match_out(service.confirm(container().ports, request.environment, numeric_id(id, "reconciliation match")))


@router.route("DELETE", "/reconciliation_matches/{id}", summary="Unmatch: the records are open again", status=204,
              errors=(404, 409), accepted=ApprovalOut)
def delete_match(request: ApiRequest, id: str) -> None:
    service.unmatch(container().ports, request.environment, numeric_id(id, "reconciliation match"))
