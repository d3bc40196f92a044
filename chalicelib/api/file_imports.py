"""Routes of file imports: create (with an upload URL), read, list per stream, records, cancel."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.common import CursorQuery
from chalicelib.api.schemas.file_imports import (
    CreateFileImport,
    CreateRoutedFileImport,
    FileImportDetailOut,
    FileImportOut,
    FileImportPage,
    FileImportSummaryOut,
    FileItemResultOut,
    ItemResultPage,
    ResultsQuery,
)
from chalicelib.api.schemas.records import RecordPage
from chalicelib.api.views import file_import_aggregates, ingestion_job_out, record_out
from chalicelib.container import container
from chalicelib.domain.ingestion import ItemStatus, JobSource, OnConflict
from chalicelib.domain.records import RecordQuery
from chalicelib.services.ingestion import files, lifecycle
from chalicelib.services.ingestion.results import EVERY_STATUS, results_page

router = Router("file_imports")
MAX_RESULTS_SHOWN = 1000


@router.route("POST", "/data_streams/{key}/file_imports", summary="Create a file import and get its upload URL",
              status=201, body=CreateFileImport, response=FileImportOut, errors=(404,))
def create_file_import(request: ApiRequest, key: str) -> FileImportOut:
    body: CreateFileImport = request.body
    source = JobSource(body.format)
    files.check_create_options(source, body.date_format, body.decimal_places, body.encoding, body.delimiter)
    job, url = files.create_import(
        container().ports, request.environment, key, filename=body.filename, source=source,
        on_conflict=OnConflict(body.on_conflict), column_mapping=body.column_mapping,
        date_format=body.date_format, decimal_places=body.decimal_places,
        encoding=body.encoding, delimiter=body.delimiter,
        nacha_control_mismatch=body.nacha_control_mismatch, control_mismatch=body.control_mismatch,
    )
    return ingestion_job_out(FileImportOut, job, upload_url=url)


@router.route("POST", "/file_imports", summary="Create a bank statement import routed by account (each account "
              "to the bank_feed stream that holds it) and get its upload URL", status=201,
              body=CreateRoutedFileImport, response=FileImportOut, errors=(422,))
def create_routed_file_import(request: ApiRequest) -> FileImportOut:
    body: CreateRoutedFileImport = request.body
    job, url = files.create_import(
        container().ports, request.environment, None, filename=body.filename, source=JobSource(body.format),
        on_conflict=OnConflict(body.on_conflict), column_mapping={}, date_format="YYYY-MM-DD", decimal_places=None,
        control_mismatch=body.control_mismatch)
    return ingestion_job_out(FileImportOut, job, upload_url=url)


@router.route("GET", "/data_streams/{key}/file_imports", summary="File imports and bulk requests of a stream, "
              "newest first, with the aggregates of what each wrote into the stream",
              query=CursorQuery, response=FileImportPage, errors=(400, 404, 422))
def list_file_imports(request: ApiRequest, key: str) -> FileImportPage:
    query: CursorQuery = request.query
    ports = container().ports
    ports.data_streams.get(request.environment, key)
    jobs, cursor = ports.ingestion_jobs.list_of_stream(request.environment, key, query.limit, query.cursor)
    return FileImportPage(data=[ingestion_job_out(FileImportSummaryOut, j, **file_import_aggregates(j, key))
                                for j in jobs], next_cursor=cursor, limit=query.limit)


@router.route("GET", "/file_imports/{id}", summary="A file import (or a bulk request, as an ingestion job)",
              response=FileImportDetailOut, errors=(404,))
def get_file_import(request: ApiRequest, id: str) -> FileImportDetailOut:
    ports = container().ports
    jobs = ports.ingestion_jobs
    job = jobs.get(request.environment, numeric_id(id, "file import"))
    problems = jobs.results(request.environment, job.id, problems_only=True)
    return ingestion_job_out(FileImportDetailOut, job, upload_url=files.fresh_upload_url(ports, job),
                             ignored_uploads=job.not_imported_uploads,
                             results=problems[:MAX_RESULTS_SHOWN], results_truncated=len(problems) > MAX_RESULTS_SHOWN)


@router.route("GET", "/file_imports/{id}/records", summary="Records written by a file import, newest first",
              query=CursorQuery, response=RecordPage, errors=(400, 404, 422))
def list_file_import_records(request: ApiRequest, id: str) -> RecordPage:
    query: CursorQuery = request.query
    ports = container().ports
    job = ports.ingestion_jobs.get(request.environment, numeric_id(id, "file import"))
    records, cursor = ports.records.list_page(request.environment, RecordQuery(file_import_id=job.id),
                                                 query.limit, query.cursor)
    return RecordPage(data=[record_out(r) for r in records], next_cursor=cursor, limit=query.limit)


@router.route("GET", "/file_imports/{id}/results", summary="Every item's result of an import or bulk request, "
              "in item order, by status", query=ResultsQuery, response=ItemResultPage, errors=(400, 404, 422))
def list_file_import_results(request: ApiRequest, id: str) -> ItemResultPage:
    query: ResultsQuery = request.query
    ports = container().ports
    jobs = ports.ingestion_jobs
    job = jobs.get(request.environment, numeric_id(id, "file import"))
    listing = query.status or "all"
    after = jobs.results_after(job, listing, query.cursor) if query.cursor else -1
    statuses = frozenset({ItemStatus(query.status)}) if query.status else EVERY_STATUS
    page = results_page(ports, job, statuses, after, query.limit)
    cursor = jobs.results_cursor(job, listing, page.after) if page.after is not None else None
    return ItemResultPage(data=[FileItemResultOut.model_validate(r) for r in page.results], next_cursor=cursor,
                          limit=query.limit)


@router.route("POST", "/file_imports/{id}/cancel", summary="Cancel a pending or processing import", status=202,
              response=FileImportOut, errors=(404, 409))
def cancel_file_import(request: ApiRequest, id: str) -> FileImportOut:
    job = lifecycle.cancel(container().ports, request.environment, numeric_id(id, "file import"))
    return ingestion_job_out(FileImportOut, job)
