"""The bulk way in (POST /records/bulk): store the payload, create the job and queue it; the SQS
worker then runs its chunks through one chunk's engine (chunk.py) and ends it (lifecycle.py)."""
from __future__ import annotations

import hashlib
import json
from typing import Any

from chalicelib.domain.clock import utc_now
from chalicelib.domain.executions import ExecutionStopped
from chalicelib.domain.ingestion import (
    ChunkRow,
    IngestionJob,
    JobSource,
    JobStatus,
    OnConflict,
    chunk_ranges,
)
from chalicelib.domain.records import shared_decimal_places
from chalicelib.observability import logger
from chalicelib.services import idempotency
from chalicelib.services.ingestion.chunk import ChunkPipeline, WriterLeases, stream_contexts
from chalicelib.services.ingestion.lifecycle import end_meanwhile, finish, start
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
    job_id, existing = idempotency.claim_id(
        environment, idempotency_key, digest, next_id=lambda: ports.counters.next_id(environment, "ingestion_job"),
        claim=ports.ingestion_jobs.claim_idempotency_key, find=ports.ingestion_jobs.find,
        send_again=lambda found: ports.bulk_queue.send({"environment": environment, "job_id": found}))
    if existing is not None:
        return existing
    key = payload_key(environment, job_id)
    job = IngestionJob(
        environment=environment, id=job_id, source=JobSource.BULK_API, status=JobStatus.PENDING,
        total_items=len(records), on_conflict=on_conflict, created_at=utc_now(), payload_key=key, body_hash=digest,
        idempotency_key=idempotency_key, decimal_places=shared_decimal_places(records),
        bulk_chunk_rows=ports.limits.bulk_chunk_rows,
    )
    ports.payloads.put_json(key, {"records": records})
    ports.ingestion_jobs.add(job)
    # Listed among its streams' imports from now, pending too (the worker links again: a crash here)
    named = {i["data_stream_key"] for i in records if isinstance(i, dict) and isinstance(i.get("data_stream_key"), str)}
    ports.ingestion_jobs.link_to_streams(job, sorted(ports.data_streams.get_many(environment, named)))
    ports.bulk_queue.send({"environment": environment, "job_id": job_id})
    return ports.ingestion_jobs.get(environment, job_id)


# Processing -------------------------------------------------------------------------------

def process_job(ports: Ports, environment: str, job_id: int) -> IngestionJob | None:
    """Run (or resume) one bulk job to the end. Safe to call any number of times."""
    job = ports.ingestion_jobs.find(environment, job_id)
    if job is None:
        logger.warning("ingestion job not found; message dropped", extra={"job_id": job_id})
        return None
    if job.finished or job.ending is not None:  # ended, or an end begun before (a worker died part-way)
        return end_meanwhile(ports, job)
    if job.status is JobStatus.PENDING:
        job = start(ports, job)
        if job.status is not JobStatus.PROCESSING:
            return job
    if job.first_record_id is None:
        block = ports.counters.next_ids(environment, "record", max(job.total_items, 1))
        job = ports.ingestion_jobs.reserve_record_ids(job, block.start)

    items = ports.payloads.get_json(job.bulk_payload_key)["records"]
    streams = stream_contexts(ports, environment, items)
    ports.ingestion_jobs.link_to_streams(job, sorted(key for key, stream in streams.items() if stream is not None))
    # One take and one release of the leases for the whole job; chunks in flight two at a time.
    ranges = chunk_ranges(len(items), job.chunk_rows)
    with WriterLeases(ports, job) as leases, ChunkPipeline(ports, job, leases) as chunks:
        for index, rows in enumerate(ranges):
            # The job as the last save (or the reads above) left it: no read of its own per chunk.
            if index in chunks.job.done_chunks:
                continue
            if ports.stopping():  # the message stays with the queue: the next start delivers it again
                job = chunks.flush()
                raise ExecutionStopped(f"ingestion job {job_id} stopped after {len(job.done_chunks)} chunks")
            if chunks.job.writes_no_more:
                return end_meanwhile(ports, chunks.flush())
            chunks.write(index, [ChunkRow(i, items[i]) for i in rows], streams)
        job = chunks.flush_last()
    if len(job.done_chunks) < len(ranges):  # the last chunk claimed, then not written: ended, cancelled, stopping
        if job.writes_no_more:
            return end_meanwhile(ports, job)
        raise ExecutionStopped(f"ingestion job {job_id} stopped after {len(job.done_chunks)} chunks")
    return finish(ports, job)

