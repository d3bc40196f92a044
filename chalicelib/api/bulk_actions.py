"""Routes of bulk actions: many exceptions or proposed matches at once, by ids or a filter,
answered 202 with the action; GET /bulk_actions/{id} shows its progress and per-item results."""
from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from chalicelib.api.reconciliation_exceptions import filtered_query
from chalicelib.api.routing import ApiRequest, Router, idempotency_key, numeric_id
from chalicelib.api.schemas.bulk_actions import (
    BulkActionDetailOut,
    BulkActionOut,
    BulkActionQuery,
    BulkExceptionsBody,
    BulkItemResultOut,
    BulkMatchesBody,
)
from chalicelib.container import container
from chalicelib.domain.bulk_actions import BulkAction, BulkActionKind, BulkTarget
from chalicelib.domain.errors import BadRequest, ValidationFailed
from chalicelib.domain.users import Principal
from chalicelib.services import bulk_actions as service

router = Router("bulk_actions")


def bulk_action_out(action: BulkAction) -> BulkActionOut:
    return BulkActionOut.from_entity(action, url=f"/v1/bulk_actions/{action.id}")


def _caller(request: ApiRequest) -> service.Caller:
    principal: Principal = request.principal
    return service.Caller(actor=principal.actor, role=principal.role, user=principal.user)


def _one_of(ids: list[int] | None, given_filter: object) -> None:
    if (ids is None) == (given_filter is None):
        raise ValidationFailed.on("ids", "give ids or filter (one of the two)")
    if ids is not None:
        service.checked_ids(ids)


@router.route("POST", "/reconciliation_exceptions/bulk", summary="Assign, move or comment on many exceptions at "
              "once (by ids, up to 1,000, or by the queue's filters, up to 10,000): worked asynchronously, with a "
              "result per item", status=202, body=BulkExceptionsBody, response=BulkActionOut, errors=(404, 409, 422))
def bulk_exceptions(request: ApiRequest) -> BulkActionOut:
    body: BulkExceptionsBody = request.body
    ports, environment, caller = container().ports, request.environment, _caller(request)
    _one_of(body.ids, body.filter)
    action = BulkActionKind(body.action)
    params = service.exception_params(ports, environment, caller, action, user_id=body.user_id,
                                      idp_user_id=body.idp_user_id, status=body.status, body=body.body,
                                      author_idp_id=body.author_idp_id, mentions=body.mentions)
    if body.filter is not None:
        given = body.filter
        query = filtered_query(ports, environment, given)
        select = lambda: service.filtered_exceptions(ports, environment, query)  # noqa: E731
        selection: dict[str, Any] = {"filter": given.model_dump(mode="json", exclude_defaults=True)}
    else:
        ids = list(body.ids or [])
        select, selection = (lambda: ids), {"ids": len(ids)}
    created = service.submit(ports, environment, caller, BulkTarget.EXCEPTIONS, action, params, select, selection,
                             service.body_hash(body.model_dump(mode="json")), idempotency_key(request))
    return bulk_action_out(created)


@router.route("POST", "/reconciliation_matches/bulk", summary="Confirm or reject many proposed matches at once (by "
              "ids, up to 1,000, or a reconciliation's proposed matches, up to 10,000): worked asynchronously, with "
              "a result per item", status=202, body=BulkMatchesBody, response=BulkActionOut, errors=(404, 409, 422))
def bulk_matches(request: ApiRequest) -> BulkActionOut:
    body: BulkMatchesBody = request.body
    ports, environment, caller = container().ports, request.environment, _caller(request)
    _one_of(body.ids, body.filter)
    if body.filter is not None:
        reconciliation_id = body.filter.reconciliation_id
        select = lambda: service.filtered_matches(ports, environment, reconciliation_id)  # noqa: E731
        selection: dict[str, Any] = {"filter": body.filter.model_dump(mode="json")}
    else:
        ids = list(body.ids or [])
        select, selection = (lambda: ids), {"ids": len(ids)}
    created = service.submit(ports, environment, caller, BulkTarget.MATCHES, BulkActionKind(body.action), {}, select,
                             selection, service.body_hash(body.model_dump(mode="json")), idempotency_key(request))
    return bulk_action_out(created)


@router.route("GET", "/bulk_actions/{id}", summary="A bulk action: its progress, counts and a page of per-item "
              "results", query=BulkActionQuery, response=BulkActionDetailOut, errors=(404,))
def get_bulk_action(request: ApiRequest, id: str) -> BulkActionDetailOut:
    query: BulkActionQuery = request.query
    ports = container().ports
    action = ports.bulk_actions.get(request.environment, numeric_id(id, "bulk action"))
    after = _after(action, query.cursor) if query.cursor else -1
    results, last = service.results_page(ports, action, after, query.limit)
    return BulkActionDetailOut.from_entity(
        action, url=f"/v1/bulk_actions/{action.id}",
        results=[BulkItemResultOut.model_validate(r, from_attributes=True) for r in results],
        next_cursor=None if last is None else _cursor(action, last))


def _cursor(action: BulkAction, after: int) -> str:
    raw = json.dumps({"bulk_action": action.id, "after": after}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _after(action: BulkAction, cursor: str) -> int:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if decoded["bulk_action"] == action.id and isinstance(decoded["after"], int) and \
                0 <= decoded["after"] < action.total_items:
            return int(decoded["after"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        pass
    raise BadRequest("cursor does not belong to this list; pass the next_cursor of a previous page unchanged")
