"""Routes of /exports: create an export of a list (202, a job), read its status and progress, and
fetch it through a short-lived download URL once completed."""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from chalicelib.api.errors import validation_failed
from chalicelib.api.records import STANDALONE_FILTERS
from chalicelib.api.routing import ApiRequest, Router, idempotency_key, numeric_id
from chalicelib.api.schemas.common import CursorQuery
from chalicelib.api.schemas.exports import (
    FILTER_MODELS,
    PAGING,
    RECORDS_NEED_ONE_OF,
    CreateExport,
    ExportOut,
    ExportPage,
    filter_names,
)
from chalicelib.container import container
from chalicelib.domain.errors import Forbidden, ValidationFailed
from chalicelib.domain.exports import COLUMNS, Export, ExportFormat, ExportKind, header
from chalicelib.domain.users import Role
from chalicelib.services import exports as service

router = Router("exports")
# audit_events alone needs more than a viewer: the whole trail (who did what, when) leaves in one file.
ROLE_OF_KIND: dict[ExportKind, Role] = {ExportKind.AUDIT_EVENTS: Role.ADMIN}
assert RECORDS_NEED_ONE_OF == STANDALONE_FILTERS and set(FILTER_MODELS) == {k.value for k in ExportKind} == {
    k.value for k in COLUMNS}


def checked_filters(kind: ExportKind, filters: dict[str, Any]) -> dict[str, Any]:
    """The filters as the kind's list route validates its query (422 naming `filters.<name>`), as
    JSON values; a name the route does not take is 422 too, never silently ignored."""
    model, _ = FILTER_MODELS[kind.value]
    known = filter_names(kind.value)
    unknown = sorted(name for name in filters if name not in known)
    if unknown:
        raise ValidationFailed.on(f"filters.{unknown[0][:40]}", f"not a filter of {kind.value}; it takes "
                                  f"{', '.join(sorted(known))}")
    try:
        parsed = model.model_validate(filters)
    except ValidationError as error:
        raise validation_failed(error, ("filters",)) from None
    values = parsed.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude=set(PAGING))
    if kind is ExportKind.RECORDS and all(values.get(name) is None for name in STANDALONE_FILTERS):
        raise ValidationFailed.on("filters.data_stream_key", f"give at least one of {', '.join(STANDALONE_FILTERS)}")
    return values


def may_export(request: ApiRequest, kind: ExportKind) -> bool:
    """The caller's role may make (and so fetch) an export of this kind."""
    needed = ROLE_OF_KIND.get(kind)
    return needed is None or request.principal is None or request.principal.role.allows(needed)


def export_out(export: Export, downloadable: bool) -> ExportOut:
    """`downloadable`: the caller may fetch the file; otherwise no download URL (an admin's audit export
    listed to a viewer)."""
    xp = container().export_ports
    url = service.download_url(xp, export) if downloadable else None
    return ExportOut.from_entity(export, kind=export.kind.value, format=export.format.value,
                                 status=export.status.value, filters=dict(export.filters), filename=export.filename,
                                 columns=header(export.kind), download_url=url,
                                 download_url_expires_in=xp.limits.download_url_seconds if url else None)


@router.route("POST", "/exports", summary="Export a list (records, matches, exceptions, import results, audit "
              "events) to a CSV, XLSX or Parquet file; a job: poll it until completed, then download it",
              status=202, body=CreateExport, response=ExportOut, errors=(404, 409, 422))
def create_export(request: ApiRequest) -> ExportOut:
    body: CreateExport = request.body
    kind = ExportKind(body.kind)
    if not may_export(request, kind):
        assert request.principal is not None
        raise Forbidden(f"an export of {kind.value} needs the {ROLE_OF_KIND[kind].value} role or above; "
                        f"yours is {request.principal.role.value}")
    key = idempotency_key(request)
    filters = checked_filters(kind, body.filters)
    actor = request.principal.actor if request.principal is not None else None
    export = service.create(container().export_ports, request.environment, kind, ExportFormat(body.format), filters,
                            actor, key)
    return export_out(export, downloadable=True)


@router.route("GET", "/exports", summary="Exports, newest first", query=CursorQuery, response=ExportPage,
              errors=(400, 422))
def list_exports(request: ApiRequest) -> ExportPage:
    query: CursorQuery = request.query
    found, cursor = container().export_ports.exports.list_page(request.environment, query.limit, query.cursor)
    return ExportPage(data=[export_out(e, may_export(request, e.kind)) for e in found], next_cursor=cursor,
                      limit=query.limit)


@router.route("GET", "/exports/{id}", summary="An export: status, progress, and its download URL once completed",
              response=ExportOut, errors=(404,))
def get_export(request: ApiRequest, id: str) -> ExportOut:
    export = container().export_ports.exports.get(request.environment, numeric_id(id, "export"))
    return export_out(export, may_export(request, export.kind))

