"""Domain objects to answers, where the shape is more than a copy of attributes."""
from __future__ import annotations

from typing import Any, TypeVar

from chalicelib.api.routing import API_PREFIX
from chalicelib.api.schemas.file_imports import JobCountsOut
from chalicelib.api.schemas.records import RecordOut
from chalicelib.domain.clock import utc_now
from chalicelib.domain.ingestion import IngestionJob, bulk_request_status
from chalicelib.domain.records import Record

J = TypeVar("J", bound=JobCountsOut)


def ingestion_job_out(model: type[J], job: IngestionJob, **fields: Any) -> J:
    """A job as the spec's file import (a bulk request is the same job, source bulk_api): read as a
    file import, its `url` is the file import's, whatever its source. `fields`: those of `model` the
    job has no attribute for, or shows otherwise."""
    return model.from_entity(job, **{
        "url": f"{API_PREFIX}/file_imports/{job.id}", "stuck": job.stuck(utc_now()),
        "records_url": f"{API_PREFIX}/file_imports/{job.id}/records",
        "results_url": f"{API_PREFIX}/file_imports/{job.id}/results", **fields})


def bulk_request_out(model: type[J], job: IngestionJob, **fields: Any) -> J:
    """The same job in a bulk request's own view, which has no `replicating` status and polls at
    its own url."""
    return ingestion_job_out(model, job, **{"status": bulk_request_status(job.status),
                                            "url": f"{API_PREFIX}/bulk_requests/{job.id}", **fields})


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
