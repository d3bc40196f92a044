"""Domain objects to response fields, where the shape is more than a copy of attributes."""
from __future__ import annotations

from typing import Any

from chalicelib.api.routing import API_PREFIX
from chalicelib.api.schemas.records import RecordOut
from chalicelib.domain.clock import utc_now
from chalicelib.domain.ingestion import IngestionJob, bulk_request_status
from chalicelib.domain.records import Record


def ingestion_job_fields(job: IngestionJob) -> dict[str, Any]:
    """Every field of the spec's file import (a bulk request is the same job, source bulk_api): read
    as a file import, its `url` is the file import's, whatever its source."""
    return {
        "id": job.id, "status": job.status.value, "total_items": job.total_items,
        "processed_items": job.processed_items, "successful_items": job.successful_items,
        "failed_items": job.failed_items, "skipped_items": job.skipped_items,
        "url": f"{API_PREFIX}/file_imports/{job.id}",
        "source": job.source.value, "filename": job.filename,
        "expected_records_count": job.expected_records_count, "progress": job.progress,
        # A bulk request's items are known from the start; only files are parsed before rows land.
        "parsing": job.parsing,
        "decimal_places": job.decimal_places, "stuck": job.stuck(utc_now()), "on_conflict": job.on_conflict.value,
        "error_message": job.error_message, "error_details": job.error_details,
        "data_stream_ids": list(job.data_stream_ids), "created_at": job.created_at, "started_at": job.started_at,
        "records_written_at": job.records_written_at, "completed_at": job.completed_at,
        "last_progress_at": job.last_progress_at, "cancellation_requested_at": job.cancellation_requested_at,
        "records_url": f"{API_PREFIX}/file_imports/{job.id}/records",
        "results_url": f"{API_PREFIX}/file_imports/{job.id}/results",
    }


def bulk_request_fields(job: IngestionJob) -> dict[str, Any]:
    """The same job in a bulk request's own view, which has no `replicating` status and polls at
    its own url."""
    return {**ingestion_job_fields(job), "status": bulk_request_status(job.status).value,
            "url": f"{API_PREFIX}/bulk_requests/{job.id}"}


def record_out(record: Record) -> RecordOut:
    return RecordOut.model_validate(record)


def file_import_aggregates(job: IngestionJob, stream_key: str) -> dict[str, Any]:
    """The stream-scoped index's aggregates over the records the import wrote into that stream
    (set when it ends; a bulk request may have fed other streams too)."""
    totals = job.totals_in_stream(stream_key)
    return {
        "record_count": totals.count, "total_credits": totals.credits, "total_debits": totals.debits,
        "net_amount": totals.credits - totals.debits, "date_range_start": totals.date_min,
        "date_range_end": totals.date_max, "currency": totals.currencies[0] if len(totals.currencies) == 1 else None,
    }
