"""Routes of /records and /bulk_requests."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router, idempotency_key, numeric_id
from chalicelib.api.schemas.file_imports import ItemResultOut
from chalicelib.api.schemas.records import (
    BulkRecordsBody,
    BulkRequestOut,
    BulkRequestSummaryOut,
    RecordOut,
    RecordPage,
    RecordsQuery,
)
from chalicelib.api.views import bulk_request_out, record_out
from chalicelib.container import container
from chalicelib.domain.errors import NotFound, ValidationFailed
from chalicelib.domain.ingestion import JobSource, OnConflict
from chalicelib.domain.records import RecordQuery, RecordStatus
from chalicelib.services import matches as match_service
from chalicelib.services import records as record_service
from chalicelib.services.ingestion import bulk

router = Router("records")
STANDALONE_FILTERS = ("data_stream_key", "status", "reconciliation_match_id", "file_import_id", "external_id")


@router.route("POST", "/records/bulk", summary="Submit 1 to 1000 records for asynchronous ingestion",
              status=202, body=BulkRecordsBody, response=BulkRequestSummaryOut, errors=(409,))
def submit_bulk(request: ApiRequest) -> BulkRequestSummaryOut:
    body: BulkRecordsBody = request.body
    key = idempotency_key(request)
    job = bulk.submit_bulk(container().ports, request.environment, body.records,
                                     OnConflict(body.on_conflict), key)
    return bulk_request_out(BulkRequestSummaryOut, job)


@router.route("GET", "/bulk_requests/{id}", summary="A bulk request: progress, totals and per-item results",
              response=BulkRequestOut, errors=(404,))
def get_bulk_request(request: ApiRequest, id: str) -> BulkRequestOut:
    jobs = container().ports.ingestion_jobs
    job = jobs.find(request.environment, numeric_id(id, "bulk request"))
    if job is None or job.source is not JobSource.BULK_API:
        raise NotFound(f"bulk request '{id}' not found")
    results = [ItemResultOut.model_validate(r) for r in jobs.results(request.environment, job.id)]
    return bulk_request_out(BulkRequestOut, job, results=results)


@router.route("GET", "/records", summary="List records, newest first, by stream, status, match, import or "
              "external id (at least one of these)", query=RecordsQuery, response=RecordPage, errors=(400, 422))
def list_records(request: ApiRequest) -> RecordPage:
    query: RecordsQuery = request.query
    if all(getattr(query, name) is None for name in STANDALONE_FILTERS):
        raise ValidationFailed.on("data_stream_key", f"give at least one of {', '.join(STANDALONE_FILTERS)}")
    filters = RecordQuery(
        data_stream_key=query.data_stream_key, status=RecordStatus(query.status) if query.status else None,
        file_import_id=query.file_import_id, external_id=query.external_id,
        date_from=query.date_from.isoformat() if query.date_from else None,
        date_to=query.date_to.isoformat() if query.date_to else None,
    )
    ports = container().ports
    if query.reconciliation_match_id is not None:
        records, cursor = match_service.records_of_match(ports, request.environment, query.reconciliation_match_id,
                                                         filters, query.limit, query.cursor)
    else:
        records, cursor = ports.records.list_page(request.environment, filters, query.limit, query.cursor)
    return RecordPage(data=[record_out(r) for r in records], next_cursor=cursor, limit=query.limit)


@router.route("GET", "/records/{id}", summary="Get a record", response=RecordOut, errors=(404,))
def get_record(request: ApiRequest, id: str) -> RecordOut:
    return record_out(container().ports.records.get(request.environment, numeric_id(id, "record")))


@router.route("DELETE", "/records/{id}", summary="Delete an unreconciled record", status=204, errors=(404, 409))
def delete_record(request: ApiRequest, id: str) -> None:
    record_service.delete_record(container().ports, request.environment, numeric_id(id, "record"))
