"""The stuck-job sweeper, for a job that no longer moves in any phase: the one-minute sweep
restarts it from its checkpoint (a new execution of a file import, a bulk request's message
queued again) or, when restarts stop helping or its upload never came, fails it (lifecycle.py).
The local stack's resumption (services/resumption.py) restarts a job the same way (`restart`,
`waiting_for_upload`).
"""
from __future__ import annotations

from datetime import datetime, timedelta

from chalicelib.domain import event_data
from chalicelib.domain.events import Event
from chalicelib.domain.ingestion import IngestionJob, JobStatus
from chalicelib.observability import logger
from chalicelib.services import sweeping
from chalicelib.services.ingestion.files import UPLOAD_WAIT, execution_name
from chalicelib.services.ingestion.lifecycle import conclude
from chalicelib.services.ports import Message, Ports
from chalicelib.services.sweeping import GiveUp, SweptKind

MAX_RESTARTS = 3
LOST_START_AFTER = timedelta(minutes=5)
JOB_DECISIONS = "ingestion_job"  # the sweeper's held decisions on imports (events.deciding)


def sweep(ports: Ports, now: datetime | None = None) -> dict[str, int]:
    """Restart or fail what no longer moves, so that no job stays pending or processing for ever:
    a job with no heartbeat for `Limits.stuck_import_after` (5 minutes) restarts from its checkpoint,
    again and again while it moves between restarts (slow, not stuck: every row is written once
    however often), and fails after MAX_RESTARTS restarts in a row that moved nothing; a start
    that got lost is redone (as many times); an upload that never came fails its import. One
    job's trouble never stops the sweep of the others."""
    return sweeping.sweep(ports, SWEPT_JOBS, now)


def _finish_if_ended(ports: Ports, environment: str, job_id: int) -> Event | None:
    job = ports.ingestion_jobs.find(environment, job_id)
    if job is not None and not job.finished and job.ending is not None:  # the sweeper died mid-end
        job = conclude(ports, job, job.ending)
    if job is None or not job.finished:
        return None
    job = conclude(ports, job, job.status)  # on an ended job: what it left of settling, and its announcement
    return event_data.ingestion_ended(job)


def _judge(ports: Ports, job: IngestionJob, now: datetime) -> sweeping.Verdict:
    if job.finished:
        return None
    if waiting_for_upload(ports, job):
        if now - job.created_at <= UPLOAD_WAIT:
            return None
        return GiveUp("the file was never uploaded", {"upload_url_expired": True})
    if job.status is JobStatus.PENDING:
        stale = now - job.created_at > LOST_START_AFTER and now - job.heartbeat > LOST_START_AFTER
    else:
        stale = now - job.heartbeat > ports.limits.stuck_import_after
    if not stale:
        return None
    if job.idle_restarts_after_next() > MAX_RESTARTS:
        minutes = ports.limits.stuck_import_after.total_seconds() / 60
        return GiveUp(f"no progress for over {minutes:g} minutes, {job.idle_restarts} restarts did not help",
                      {"restarts": job.restarts, "last_progress_at": str(job.heartbeat)})
    return sweeping.RESTART


def _fail(ports: Ports, job: IngestionJob, verdict: GiveUp) -> None:
    conclude(ports, job, JobStatus.FAILED, error_message=verdict.reason, error_details=verdict.details)


def _restart_stuck(ports: Ports, job: IngestionJob) -> str | None:
    if not restart(ports, job):
        return None
    return "started" if job.status is JobStatus.PENDING else "restarted"


SWEPT_JOBS = SweptKind[IngestionJob](
    decisions=JOB_DECISIONS, noun="job", outcomes=("restarted", "failed", "started"),
    active=lambda ports: ports.ingestion_jobs.active(), judge=_judge, give_up=_fail,
    finish_if_ended=_finish_if_ended, restart=_restart_stuck)


def waiting_for_upload(ports: Ports, job: IngestionJob) -> bool:
    """A file import whose file has not come: nothing to run yet."""
    return job.is_file and job.status is JobStatus.PENDING and not ports.payloads.exists(job.import_file_key)


def restart(ports: Ports, job: IngestionJob, resumed_at: datetime | None = None) -> bool:
    """Start the job's work again, from its checkpoints: a new execution of a file import, a
    bulk request's message queued again. False when not claimed (sweeping.claim_restart, which
    counts it against MAX_RESTARTS unless it is a resume)."""
    attempt = sweeping.claim_restart(ports.ingestion_jobs.count_restart, job, resumed_at)
    if attempt is None:
        return False
    if resumed_at is None:
        logger.warning("restarting a stuck import" if job.is_file else "restarting a stuck bulk request", extra={
            "environment": job.environment, "job_id": job.id, "restarts": job.restarts + 1,
            "processed_items": job.processed_items, "total_items": job.total_items,
            "last_progress_at": str(job.heartbeat)})
    payload: Message = {"environment": job.environment, "job_id": job.id}
    if job.is_file:
        ports.file_import_workflows.start(execution_name(job, attempt), payload)
    else:
        ports.bulk_queue.send(payload)
    return True
