"""Each domain event built from the resource it tells of: its id and url, and the fields a client
needs to act without another request. One function per resource; the occurrence key of each
(see events.event_id) names what happened once, so the same happening always has the same id."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from chalicelib.domain.agents.runs import AgentRun, AgentRunStatus
from chalicelib.domain.clock import iso, optional_iso, utc_now
from chalicelib.domain.events import Event, event_id, make_event
from chalicelib.domain.ingestion import IngestionJob, JobSource, JobStatus, bulk_request_status
from chalicelib.domain.investigations.investigation import Investigation
from chalicelib.domain.matches import Match
from chalicelib.domain.reconciliation_exceptions import ExceptionComment, ReconciliationException
from chalicelib.domain.runs import Run, RunStatus

API = "/v1"  # the API's prefix: events carry the same urls the API serves


def ingestion_ended(job: IngestionJob) -> Event | None:
    """A file import's end (completed, failed, cancelled), or a bulk request's (completed, with
    its status: a bulk request whose every item failed ends `failed`)."""
    if not job.finished:
        return None
    counts = {"total_items": job.total_items, "successful_items": job.successful_items,
              "failed_items": job.failed_items, "skipped_items": job.skipped_items}
    if job.source is JobSource.BULK_API:
        return make_event(job.environment, "bulk_request.completed", f"job {job.id}", job.completed_at or utc_now(), {
            "id": job.id, "url": f"{API}/bulk_requests/{job.id}", "status": bulk_request_status(job.status).value,
            **counts, "data_stream_ids": list(job.data_stream_ids), "error_message": job.error_message,
            "results_url": f"{API}/file_imports/{job.id}/results", "completed_at": optional_iso(job.completed_at)})
    event_type = {JobStatus.COMPLETED: "file_import.completed", JobStatus.FAILED: "file_import.failed",
                  JobStatus.CANCELLED: "file_import.cancelled"}[job.status]
    return make_event(job.environment, event_type, f"job {job.id}", job.completed_at or utc_now(), {
        "id": job.id, "url": f"{API}/file_imports/{job.id}", "status": job.status.value, "source": job.source.value,
        "filename": job.filename, **counts, "data_stream_ids": list(job.data_stream_ids),
        "error_message": job.error_message, "records_url": f"{API}/file_imports/{job.id}/records",
        "completed_at": optional_iso(job.completed_at)})


def run_ended(run: Run) -> Event | None:
    """A reconciliation run's end, with its counts per rule (never one event per match)."""
    if run.status not in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED):
        return None
    url = f"{API}/reconciliations/{run.reconciliation_id}/runs/{run.id}"
    return make_event(run.environment, f"reconciliation_run.{run.status.value}", f"run {run.id}",
                      run.completed_at or utc_now(), {
                          "id": run.id, "url": url, "reconciliation_id": run.reconciliation_id,
                          "status": run.status.value, "kind": run.kind.value, "trigger": run.trigger.value,
                          "total_records": run.total_records, "matched_records": run.matched_records,
                          "matches_count": run.matches_count or 0, "rule_summary": run.rule_summary,
                          "error_message": run.error_message,
                          "matches_url": f"{API}/reconciliation_matches?reconciliation_id={run.reconciliation_id}",
                          "completed_at": optional_iso(run.completed_at)})


def match_event(match: Match, verb: str, at: datetime) -> Event:
    """`created` (a person's match), `confirmed` or `deleted`."""
    return make_event(match.environment, f"reconciliation_match.{verb}", f"match {match.id} {verb}", at, {
        "id": match.id, "url": f"{API}/reconciliation_matches/{match.id}",
        "reconciliation_id": match.reconciliation_id, "status": match.status.value,
        "record_count": match.record_count, "reconciliation_rule_id": match.reconciliation_rule_id,
        "run_id": match.run_id, "differences": match.differences, "reason": match.reason,
        "records_url": f"{API}/records?reconciliation_match_id={match.id}"})


def _exception_fields(exception: ReconciliationException) -> dict[str, Any]:
    return {"id": exception.id, "url": f"{API}/reconciliation_exceptions/{exception.id}",
            "reconciliation_id": exception.reconciliation_id, "data_stream_id": exception.data_stream_id,
            "title": exception.title, "status": exception.status.value,
            "assignees": [a.idp_user_id for a in exception.assignees], "totals": exception.totals,
            "opened_at": optional_iso(exception.opened_at), "updated_at": optional_iso(exception.updated_at)}


def exception_opened(exception: ReconciliationException) -> Event:
    return make_event(exception.environment, "reconciliation_exception.opened", f"exception {exception.id}",
                      exception.opened_at, _exception_fields(exception))


def exception_opened_id(environment: str, exception_id: int) -> str:
    """The id `exception_opened` gives the exception's event, known before reading the exception."""
    return event_id(environment, "reconciliation_exception.opened", f"exception {exception_id}")


def exception_overdue(exception: ReconciliationException, severity: str, due_at: datetime) -> Event:
    """Once per opening of the exception: it passed the due time its severity gives
    (domain/service_levels.py); a reopen starts the clock again, and may tell again."""
    return make_event(exception.environment, "reconciliation_exception.overdue",
                      f"exception {exception.id} overdue {iso(exception.opened_at)}", due_at,
                      {**_exception_fields(exception), "severity": severity, "due_at": iso(due_at)})


def exception_status_changed(before: ReconciliationException, after: ReconciliationException) -> Event:
    return make_event(after.environment, "reconciliation_exception.status_changed",
                      f"exception {after.id} version {after.version}", after.updated_at,
                      {**_exception_fields(after), "previous_status": before.status.value})


def exception_assigned(before: ReconciliationException, after: ReconciliationException) -> Event:
    """An assignee added (`change` "assigned") or removed ("unassigned")."""
    previous = [a.idp_user_id for a in before.assignees]
    now = [a.idp_user_id for a in after.assignees]
    return make_event(after.environment, "reconciliation_exception.assigned",
                      f"exception {after.id} version {after.version}", after.updated_at, {
                          **_exception_fields(after), "previous_assignees": previous,
                          "change": "assigned" if len(now) > len(previous) else "unassigned",
                          "idp_user_ids": sorted(set(now) ^ set(previous))})


def exception_commented(exception: ReconciliationException, comment: ExceptionComment) -> Event:
    return make_event(exception.environment, "reconciliation_exception.commented",
                      f"exception {exception.id} comment {comment.id}", comment.created_at, {
                          **_exception_fields(exception),
                          "comment": {"id": comment.id, "body": comment.body, "author_idp_id": comment.author_idp_id,
                                      "mentions": list(comment.mentions), "created_at": iso(comment.created_at)}})


def investigation_completed(investigation: Investigation) -> Event:
    return make_event(investigation.environment, "investigation.completed", f"investigation {investigation.id}",
                      investigation.completed_at or utc_now(), {
                          "id": investigation.id,
                          "url": f"{API}/reconciliation_exceptions/{investigation.exception_id}",
                          "exception_id": investigation.exception_id,
                          "reconciliation_id": investigation.reconciliation_id,
                          "status": investigation.status.value, "confidence_score": investigation.confidence_score,
                          "recommendation_text": investigation.recommendation_text,
                          "suggested_record_ids": list(investigation.suggested_record_ids),
                          "error_message": investigation.error_message,
                          "completed_at": optional_iso(investigation.completed_at)})


def agent_run_event(run: AgentRun) -> Event | None:
    """A run's end, or its pause for a verification code (each pause its own event)."""
    fields = {"id": run.id, "url": f"{API}/agents/{run.agent_id}/runs/{run.id}", "agent_id": run.agent_id,
              "status": run.status.value, "trigger": run.trigger.value, "error_message": run.error_message,
              "file_import_id": run.file_import_id, "output_files": [f.filename for f in run.output_files],
              "started_at": optional_iso(run.started_at), "completed_at": optional_iso(run.completed_at)}
    if run.status is AgentRunStatus.WAITING_FOR_VERIFICATION:
        paused = f"agent run {run.agent_id} {run.id} paused {optional_iso(run.paused_at)}"
        return make_event(run.environment, "agent_run.needs_verification", paused, run.paused_at or utc_now(),
                          {**fields, "paused_at": optional_iso(run.paused_at),
                           "verification_url": f"{API}/agents/{run.agent_id}/verification"})
    if run.status in (AgentRunStatus.COMPLETED, AgentRunStatus.FAILED):
        return make_event(run.environment, f"agent_run.{run.status.value}", f"agent run {run.agent_id} {run.id}",
                          run.completed_at or utc_now(), fields)
    return None
