"""Routes of period closes: close a period of a reconciliation (an approver's sign-off), list and
read its closes, and reopen one (an admin, with a reason)."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.common import CursorQuery, MoneyOut
from chalicelib.api.schemas.period_closes import (
    ClosePeriodBody,
    OpenExceptionOut,
    PeriodCloseOut,
    PeriodClosePage,
    ReopenBody,
)
from chalicelib.container import container
from chalicelib.domain.errors import ValidationFailed
from chalicelib.domain.period_closes import OpenMoney, PeriodClose, checked_period
from chalicelib.services import period_closes as service

router = Router("period_closes")


def _actor(request: ApiRequest) -> str:
    return request.principal.actor if request.principal is not None else "system"


def _money(money: tuple[OpenMoney, ...]) -> list[MoneyOut]:
    return [MoneyOut.from_entity(m) for m in money]


def close_out(close: PeriodClose) -> PeriodCloseOut:
    return PeriodCloseOut.from_entity(
        close, url=f"/v1/reconciliations/{close.reconciliation_id}/period_closes/{close.id}",
        period_start=close.period.start, period_end=close.period.end, status=close.status.value,
        unmatched=_money(close.unmatched),
        open_exceptions=[OpenExceptionOut.from_entity(e, url=f"/v1/reconciliation_exceptions/{e.id}",
                                                      money=_money(e.money)) for e in close.open_exceptions])


@router.route("POST", "/reconciliations/{id}/period_closes", summary="Close a period of the reconciliation: a "
              "sign-off listing what is still open there; nothing dated inside is matched, unmatched, deleted or "
              "imported until an admin reopens it", status=201, body=ClosePeriodBody, response=PeriodCloseOut,
              errors=(404, 409, 422))
def close_period(request: ApiRequest, id: str) -> PeriodCloseOut:
    body: ClosePeriodBody = request.body
    explanations: dict[int, str] = {}
    for n, given in enumerate(body.explanations):
        if given.exception_id in explanations:
            raise ValidationFailed.on(f"explanations[{n}].exception_id", f"exception {given.exception_id} is "
                                      "explained twice")
        explanations[given.exception_id] = given.explanation
    period = checked_period(body.period_start, body.period_end)
    made = service.close(container().ports, request.environment, numeric_id(id, "reconciliation"), period,
                         body.note, explanations, _actor(request))
    return close_out(made)


@router.route("GET", "/reconciliations/{id}/period_closes", summary="The reconciliation's period closes, newest "
              "first (reopened ones too)", query=CursorQuery, response=PeriodClosePage, errors=(404,))
def list_period_closes(request: ApiRequest, id: str) -> PeriodClosePage:
    query: CursorQuery = request.query
    found, cursor = service.list_page(container().ports, request.environment, numeric_id(id, "reconciliation"),
                                      query.limit, query.cursor)
    return PeriodClosePage(data=[close_out(c) for c in found], next_cursor=cursor, limit=query.limit)


@router.route("GET", "/reconciliations/{id}/period_closes/{close_id}", summary="A period close: its period, "
              "sign-off and what was open at close", response=PeriodCloseOut, errors=(404,))
def get_period_close(request: ApiRequest, id: str, close_id: str) -> PeriodCloseOut:
    return close_out(service.get(container().ports, request.environment, numeric_id(id, "reconciliation"),
                                 numeric_id(close_id, "period close")))


@router.route("POST", "/reconciliations/{id}/period_closes/{close_id}/reopen", summary="Reopen a closed period "
              "(an admin, with a reason): its records may change again", body=ReopenBody, response=PeriodCloseOut,
              errors=(404, 409, 422))
def reopen_period(request: ApiRequest, id: str, close_id: str) -> PeriodCloseOut:
    body: ReopenBody = request.body
    return close_out(service.reopen(container().ports, request.environment, numeric_id(id, "reconciliation"),
                                    numeric_id(close_id, "period close"), body.reason, _actor(request)))
