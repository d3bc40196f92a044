"""Bulk requests (POST /records/bulk): store the payload, create the job and queue it; the
worker processes it with the ingestion engine (services/ingestion.py)."""
from __future__ import annotations

import hashlib
import json
from typing import Any

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict
from chalicelib.domain.ingestion import IngestionJob, JobSource, JobStatus, OnConflict
from chalicelib.domain.records import shared_decimal_places
from chalicelib.services.ports import Ports


def body_hash(records: list[Any], on_conflict: OnConflict) -> str:
    canonical = json.dumps({"records": records, "on_conflict": on_conflict.value}, sort_keys=True,
                           separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def payload_key(environment: str, job_id: int) -> str:
    return f"bulk/{environment}/{job_id}.json"


# Submitting -------------------------------------------------------------------------------

def submit_bulk(ports: Ports, environment: str, records: list[Any], on_conflict: OnConflict,
                idempotency_key: str | None) -> IngestionJob:
    """Store the payload, create the job and queue it. With an idempotency key, a repeat of the
    same body returns the first job (and re-queues it if it never started); another body is 409."""
    digest = body_hash(records, on_conflict)
    job_id = ports.counters.next_id(environment, "ingestion_job")
    if idempotency_key:
        job_id, bound_hash = ports.ingestion_jobs.claim_idempotency_key(environment, idempotency_key, job_id, digest)
        if bound_hash != digest:
            raise Conflict(f"Idempotency-Key '{idempotency_key}' was already used with a different body")
        existing = ports.ingestion_jobs.find(environment, job_id)
        if existing is not None:
            if existing.status is JobStatus.PENDING:
                ports.bulk_queue.send({"environment": environment, "job_id": job_id})  # the first send may be lost
            return existing
    key = payload_key(environment, job_id)
    job = IngestionJob(
        environment=environment, id=job_id, source=JobSource.BULK_API, status=JobStatus.PENDING,
        total_items=len(records), on_conflict=on_conflict, created_at=utc_now(), payload_key=key, body_hash=digest,
        idempotency_key=idempotency_key, decimal_places=shared_decimal_places(records),
    )
    ports.payloads.put_json(key, {"records": records})
    ports.ingestion_jobs.add(job)
    # Listed among its streams' imports from now, pending too (the worker links again: a crash here)
    named = {i["data_stream_key"] for i in records if isinstance(i, dict) and isinstance(i.get("data_stream_key"), str)}
    ports.ingestion_jobs.link_to_streams(job, sorted(ports.data_streams.get_many(environment, named)))
    ports.bulk_queue.send({"environment": environment, "job_id": job_id})
    return ports.ingestion_jobs.get(environment, job_id)
