"""Browser agent runs: the agent worker hands a started run to the browser-run workflow, whose
tasks are here.

    attempt ──> completed / failed
       │ the portal asked for a code
       v
    pause (waits on a task token) ──code──> attempt (enters the code) ──> ...
       │ no code in time
       v
    expire (fails the run)

An attempt drives the portal once (adapters/browser_portal.py) from the agent's saved browser
context, or, when it resumes a paused run, from the half-logged-in context the pause kept. The
run holds its agent's guard from the worker's start to its end, through the pause: no second
run of the agent logs in meanwhile. Each task is safe to repeat: it looks at the run's status first.
"""
from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.browser import (
    CodeRequested,
    Exported,
    PortalFailed,
    PortalJob,
    PortalOutcome,
    VerificationReason,
    check_code,
)
from chalicelib.domain.agents.definition import AgentKind
from chalicelib.domain.agents.runs import AgentRun, AgentRunStatus, OutputFile, Step
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, NotFound, TransitionRefused, failure_reason
from chalicelib.domain.executions import execution_name, resume_label
from chalicelib.domain.ingestion import JobSource, OnConflict
from chalicelib.observability import logger
from chalicelib.services.events import announce_agent_run
from chalicelib.services.ingestion import files
from chalicelib.services.ports import Ports

RUNNING, WAITING = AgentRunStatus.RUNNING, AgentRunStatus.WAITING_FOR_VERIFICATION
NOT_WAITING = {"needs_verification": False, "verification_reason": None, "verification_required_at": None}


def hand_over(ports: Ports, run: AgentRun, attempt_label: str = "") -> None:
    """Start the workflow of a run the agent worker moved to running (it keeps the agent's guard)."""
    ports.browser_workflows.start(
        execution_name("browser-run", run.environment, run.id, *([attempt_label] if attempt_label else [])),
        {"environment": run.environment, "agent_id": run.agent_id, "run_id": run.id,
         "verification_timeout_seconds": ports.limits.agent.verification_wait_seconds})


def resume_in_flight(ports: Ports, resumed_at: datetime) -> list[tuple[str, int]]:
    """The local stack's start: its workflows died with the previous process, so each browser run
    still going or waiting starts a new one. A waiting run waits again (from now, for a fresh
    task token); a run that had its code enters it; one cut off mid-attempt drives the portal
    again. (On AWS, Step Functions keeps its executions: nothing calls this.)"""
    resumed = []
    for run in ports.agent_runs.in_flight():
        try:
            agent = ports.agents.get(run.environment, run.agent_id)
        except NotFound:
            continue
        if agent.kind is AgentKind.BROWSER:
            if run.task_token is not None:  # its workflow is gone: a code posted now waits for the new pause
                run = _saved(ports, replace(run, task_token=None), run.status)
            hand_over(ports, run, resume_label(resumed_at))
            resumed.append((run.environment, run.id))
    return resumed


# The workflow's tasks ---------------------------------------------------------------------------

def attempt(ports: Ports, environment: str, agent_id: str, run_id: int) -> dict[str, Any]:
    """Drive the portal once for a running run: `{"status": ...}` as the run stands afterwards."""
    try:
        run = ports.agent_runs.get(environment, agent_id, run_id)
    except NotFound:
        return {"status": "gone"}  # its agent was deleted
    if run.status is not RUNNING:
        return {"status": run.status.value}  # a repeat of an attempt that ended or paused it
    try:
        agent = ports.agents.get(environment, agent_id)
    except NotFound:
        return {"status": _finish_failed(ports, run, "the agent was deleted while its run went").status.value}
    try:
        outcome = _drive(ports, agent, run)
    except Exception as error:  # the run fails with the reason rather than as a bare task failure
        logger.exception("browser run attempt failed")
        outcome = PortalFailed("run", failure_reason(error, limit=300), ())
    return {"status": _conclude(ports, agent, run, outcome).status.value}


def pause(ports: Ports, environment: str, agent_id: str, run_id: int, task_token: str) -> None:
    """The workflow waits for a code on `task_token`: keep it on the run for the code to send. A
    code that came before the token (or a run ended meanwhile) sends it on at once."""
    tokens = ports.task_tokens
    try:
        run = ports.agent_runs.get(environment, agent_id, run_id)
    except NotFound:
        tokens.send_success(task_token, {})
        return
    if run.status is WAITING and ports.agent_runs.keep_task_token(run, task_token):
        return
    tokens.send_success(task_token, {})  # the next attempt sees the code, or that the run ended


def expire(ports: Ports, environment: str, agent_id: str, run_id: int) -> None:
    """No code came in time: the run fails, and the agent no longer asks for one. A run that ended
    meanwhile (cut off and followed by another) leaves the agent as its later run has it."""
    run = _unfinished(ports, environment, agent_id, run_id)
    if run is None:
        return
    minutes = ports.limits.agent.verification_wait_seconds / 60
    _stop_asking(ports, run)
    _finish_failed(ports, run, f"no verification code was given within {minutes:g} minutes (post it to "
                               f"/agents/{agent_id}/verification while the run waits); run the agent again")


def give_up(ports: Ports, environment: str, agent_id: str, run_id: int, error: dict[str, Any] | None) -> None:
    """A task failed for good (the browser worker crashed or timed out, a pause could not keep its
    token): the run fails with why, and the agent no longer asks for a code for it."""
    run = _unfinished(ports, environment, agent_id, run_id)
    if run is None:
        return
    _stop_asking(ports, run)
    _finish_failed(ports, run, f"the browser run failed: {failure_reason(error or {}, limit=300)}")


def _unfinished(ports: Ports, environment: str, agent_id: str, run_id: int) -> AgentRun | None:
    """The run, unless it is gone (its agent deleted) or has ended already."""
    try:
        run = ports.agent_runs.get(environment, agent_id, run_id)
    except NotFound:
        return None
    return None if run.finished else run


def _stop_asking(ports: Ports, run: AgentRun) -> None:
    """The agent of a run about to fail asks for no code. Done BEFORE the run fails: a client that
    sees the end must see the flag cleared, and a task that dies in between leaves the run
    unfinished, so its retry clears again (idempotent) and fails it. A run that no longer holds
    its agent's guard (cut off, a later run going) leaves the agent as that later run has it."""
    holder = ports.agent_runs.running_run(run.environment, run.agent_id)
    if holder is not None and holder != run.id:
        return
    ports.agents.set_browser_state(run.environment, run.agent_id, **NOT_WAITING)
    ports.browser_secrets.drop_context(run.environment, run.agent_id, "pending")


# The verification code --------------------------------------------------------------------------

def give_code(ports: Ports, environment: str, agent_id: str, raw_code: Any) -> AgentRun:
    """Resume the agent's run that waits for a code (409 when none waits)."""
    agent = ports.agents.get(environment, agent_id)
    if agent.kind is not AgentKind.BROWSER:
        raise Conflict(f"agent {agent_id} is not a browser agent: only browser agents take verification codes")
    code = check_code(raw_code)
    run_id = ports.agent_runs.running_run(environment, agent_id)
    try:
        run = ports.agent_runs.get(environment, agent_id, run_id) if run_id is not None else None
    except NotFound:
        run = None
    if run is not None and run.status is RUNNING and run.verification_code is not None:
        resumed = run  # given before, and its token not yet taken (a send that failed): sent again below
    elif run is None or run.status is not WAITING:
        raise Conflict(f"no run of agent {agent_id} is waiting for a verification code")
    else:
        # The flag first: a client that sees the run going again sees the agent ask for no code, and
        # the attempt this code starts may ask again (a rejected code) without being overwritten.
        # A run no longer waiting has cleared it too (or will: an expiry, a give-up).
        ports.agents.set_browser_state(environment, agent_id, **NOT_WAITING)
        try:
            resumed = ports.agent_runs.resume_with_code(run, code, utc_now())
        except TransitionRefused:
            raise Conflict(f"run {run.id} of agent {agent_id} is no longer waiting for a verification code") from None
    # Without a token yet, the pause that keeps it sends it on itself (pause()).
    if resumed.task_token is not None and not ports.task_tokens.send_success(resumed.task_token, {}) \
            and resumed is not run:
        raise Conflict(f"run {run.id} of agent {agent_id} stopped waiting for its code (it timed out); "
                       "run the agent again")
    return replace(resumed, verification_code=None, task_token=None)


# One attempt ------------------------------------------------------------------------------------

def _drive(ports: Ports, agent: Agent, run: AgentRun) -> PortalOutcome:
    if agent.browser is None:
        return PortalFailed("run", "the agent is not a browser agent", ())
    secrets = ports.browser_secrets
    credentials = secrets.credentials(agent.environment, agent.id)
    if credentials is None:
        return PortalFailed("log_in", "the agent has no portal login: set it with `python -m chalicelib.cli agents "
                                      f"set-credentials {agent.id}`", ())
    resuming = run.verification_code is not None
    state = secrets.context(agent.environment, agent.id, "pending" if resuming else "saved")
    today = utc_now().astimezone(ZoneInfo(agent.schedule.timezone)).date()
    return ports.portal.run(PortalJob(portal_url=agent.browser.portal_url, settings=agent.browser.export,
                                      credentials=credentials, today=today, storage_state=state,
                                      code=run.verification_code))


def _conclude(ports: Ports, agent: Agent, run: AgentRun, outcome: PortalOutcome) -> AgentRun:
    try:  # deleted with its agent while the browser went: nothing of it is kept (no session, no import)
        ports.agent_runs.get(run.environment, run.agent_id, run.id)
    except NotFound:
        return replace(run, status=AgentRunStatus.FAILED)
    now = utc_now()
    run = replace(run, verification_code=None, steps=run.steps + tuple(
        Step.of(s.name, None, s.failed, s.detail, now) for s in outcome.steps))
    secrets = ports.browser_secrets
    environment, agent_id = agent.environment, agent.id
    if isinstance(outcome, CodeRequested):
        secrets.put_context(environment, agent_id, "pending", outcome.storage_state)
        ports.agents.set_browser_state(environment, agent_id, needs_verification=True,
                                       verification_reason=VerificationReason.CODE_REQUESTED,
                                       verification_required_at=now)
        return _saved(ports, run.moved(WAITING, paused_at=now, task_token=None), RUNNING)
    if isinstance(outcome, PortalFailed):
        if outcome.screenshot:
            run = _with_screenshot(ports, run, outcome.step, outcome.screenshot)
        if outcome.code_rejected:  # the portal still wants a code: the operator must see it
            ports.agents.set_browser_state(environment, agent_id, needs_verification=True,
                                           verification_reason=VerificationReason.CODE_REQUESTED)
        secrets.drop_context(environment, agent_id, "pending")  # a half-done login no later run goes on with
        return _finish_failed(ports, run, f"step {outcome.step} failed: {outcome.message}")
    kept = secrets.put_context(environment, agent_id, "saved", outcome.storage_state)
    secrets.drop_context(environment, agent_id, "pending")
    ports.agents.set_browser_state(environment, agent_id, has_browser_context=kept, **NOT_WAITING)
    try:
        job_id = _import(ports, agent, outcome)
    except Exception as error:
        logger.exception("importing a browser run's export failed")
        return _finish_failed(ports, run, f"step import failed: {getattr(error, 'message', None) or error}")
    step = Step.of("import", None, False, f"{outcome.filename} ({len(outcome.content)} bytes): file import {job_id}",
                   now)
    finished = run.moved(AgentRunStatus.COMPLETED, completed_at=utc_now(), file_import_id=job_id,
                         steps=run.steps + (step,))
    return _release_after(ports, _saved(ports, finished, RUNNING))


def _import(ports: Ports, agent: Agent, exported: Exported) -> int:
    """The exported file through the file-import path, into the agent's stream: the import's id."""
    if agent.browser is None:
        raise ValueError("not a browser agent")
    settings = agent.browser.export
    options = settings.import_options
    source = JobSource(settings.format)
    job, _ = files.create_import(
        ports, agent.environment, settings.data_stream_key, filename=exported.filename, source=source,
        on_conflict=OnConflict(options.on_conflict), column_mapping=dict(options.column_mapping),
        date_format=options.date_format, decimal_places=options.decimal_places)
    ports.payloads.put_bytes(job.import_file_key, exported.content)
    files.start_uploaded(ports, job)
    return job.id


def _with_screenshot(ports: Ports, run: AgentRun, step: str, png: bytes) -> AgentRun:
    """The page as the failed step left it, kept as one of the run's output files."""
    shot = OutputFile(id=str(uuid.uuid4()), filename=f"screenshot-{step}.png", byte_size=len(png),
                      content_type="image/png", created_at=utc_now())
    try:
        ports.agent_files.put(run.stored(shot), png)
    except Exception:  # the run still fails with its reason
        logger.exception("keeping a browser run's screenshot failed")
        return run
    return replace(run, output_files=run.output_files + (shot,))


def _saved(ports: Ports, run: AgentRun, expected: AgentRunStatus) -> AgentRun:
    try:
        saved = ports.agent_runs.save(run, expected=(expected,))
    except TransitionRefused:  # failed meanwhile (the agent deleted, a timeout): as it stands
        return ports.agent_runs.get(run.environment, run.agent_id, run.id)
    announce_agent_run(ports, saved)  # paused, or completed
    return saved


def _finish_failed(ports: Ports, run: AgentRun, reason: str) -> AgentRun:
    """Fail a run not yet ended, and give its agent's guard up."""
    now: datetime = utc_now()
    failed = run.moved(AgentRunStatus.FAILED, error_message=reason, completed_at=now,
                       started_at=run.started_at or now, verification_code=None, task_token=None)
    try:
        run = ports.agent_runs.save(failed, expected=(AgentRunStatus.QUEUED, RUNNING, WAITING))
    except TransitionRefused:
        run = ports.agent_runs.get(run.environment, run.agent_id, run.id)
    else:
        announce_agent_run(ports, run)
    return _release_after(ports, run)


def _release_after(ports: Ports, run: AgentRun) -> AgentRun:
    if run.finished:
        ports.agent_runs.release_running(run.environment, run.agent_id, run.id)
    return run
