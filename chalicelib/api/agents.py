"""Routes of /agents."""
from __future__ import annotations

import base64
import re
from typing import Any

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.agents import (
    AgentFileCreatedOut,
    AgentFileOut,
    AgentOut,
    AgentPage,
    AgentRunDeliveryOut,
    AgentRunFileOut,
    AgentRunOut,
    AgentRunPage,
    AgentRunStepOut,
    AgentRunUsageOut,
    BrowserOut,
    CreateAgent,
    CreateAgentFile,
    UpdateAgent,
    VerificationCodeIn,
)
from chalicelib.api.schemas.common import CursorQuery
from chalicelib.container import container
from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.files import AgentFile
from chalicelib.domain.agents.runs import AgentRun
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import NotFound, ValidationFailed
from chalicelib.services import agent_runs, browser_runs
from chalicelib.services import agents as service

router = Router("agents")
AGENTS = "/agents"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def uuid_of(raw: str, what: str) -> str:
    """A path id that is a UUID (in any case); anything else is simply not found."""
    if not UUID.match(raw.lower()):
        raise NotFound(f"{what} '{raw[:40]}' not found")
    return raw.lower()


def agent_id(raw: str) -> str:
    return uuid_of(raw, "agent")


def given(body: CreateAgent | UpdateAgent) -> dict[str, Any]:
    """The fields the client sent, as plain values (absent ones left out)."""
    return body.model_dump(include=body.model_fields_set)


def file_out(file: AgentFile) -> AgentFileOut:
    return AgentFileOut(id=file.id, filename=file.filename, byte_size=file.byte_size, content_type=file.content_type,
                        created_at=file.created_at, url=container().ports.agent_files.download_url(file))


def browser_out(agent: Agent) -> BrowserOut | None:
    if agent.browser is None:
        return None
    state = agent.browser_state
    return BrowserOut(automation=agent.browser.automation.value, portal_url=agent.browser.portal_url,
                      has_credentials=state.has_credentials, has_browser_context=state.has_browser_context,
                      settings=dict(agent.browser.settings), needs_verification=state.needs_verification,
                      verification_reason=state.verification_reason.value if state.verification_reason else None,
                      verification_required_at=state.verification_required_at)


def agent_out(agent: Agent) -> AgentOut:
    files = service.files_of(container().ports, agent.environment, agent.id)
    return AgentOut(**service.fields_of(agent), id=agent.id, kind=agent.kind.value, browser=browser_out(agent),
                    input_files=[file_out(f) for f in files],
                    next_run_at=agent.next_run_at(utc_now()), last_run_at=agent.last_run_at,
                    created_at=agent.created_at, updated_at=agent.updated_at)


@router.route("POST", AGENTS, summary="Create an agent: standing instructions run on a schedule or on demand",
              status=201, body=CreateAgent, response=AgentOut, errors=(409, 422))
def create_agent(request: ApiRequest) -> AgentOut:
    return agent_out(service.create_agent(container().ports, request.environment, given(request.body)))


@router.route("GET", AGENTS, summary="List agents, newest first", query=CursorQuery, response=AgentPage,
              errors=(400, 422))
def list_agents(request: ApiRequest) -> AgentPage:
    query: CursorQuery = request.query
    page, cursor = container().ports.agents.list_page(request.environment, query.limit, query.cursor)
    return AgentPage(data=[agent_out(a) for a in page], next_cursor=cursor, limit=query.limit)


@router.route("GET", AGENTS + "/{id}", summary="Get an agent", response=AgentOut, errors=(404,))
def get_agent(request: ApiRequest, id: str) -> AgentOut:
    return agent_out(container().ports.agents.get(request.environment, agent_id(id)))


@router.route("PATCH", AGENTS + "/{id}", summary="Change an agent's fields (kind never changes)", body=UpdateAgent,
              response=AgentOut, errors=(404, 409, 422))
def update_agent(request: ApiRequest, id: str) -> AgentOut:
    return agent_out(service.update_agent(container().ports, request.environment, agent_id(id),
                                          given(request.body)))


@router.route("DELETE", AGENTS + "/{id}", summary="Delete an agent", status=204, errors=(404,))
def delete_agent(request: ApiRequest, id: str) -> None:
    service.delete_agent(container().ports, request.environment, agent_id(id))


# Input files ------------------------------------------------------------------------------------

@router.route("POST", AGENTS + "/{id}/files", summary="Attach an input file (inline base64, or an upload URL)",
              status=201, body=CreateAgentFile, response=AgentFileCreatedOut, errors=(404, 422))
def add_file(request: ApiRequest, id: str) -> AgentFileCreatedOut:
    body: CreateAgentFile = request.body
    content = None
    if body.content_base64 is not None:
        try:
            content = base64.b64decode(body.content_base64, validate=True)
        except ValueError:  # binascii.Error, or characters outside ASCII
            raise ValidationFailed.on("content_base64", "is not valid base64") from None
    file, upload_url = service.add_file(container().ports, request.environment, agent_id(id), body.filename,
                                        body.content_type, content)
    return AgentFileCreatedOut(**file_out(file).model_dump(), upload_url=upload_url)


@router.route("DELETE", AGENTS + "/{id}/files/{file_id}", summary="Remove an input file", status=204,
              errors=(404,))
def delete_file(request: ApiRequest, id: str, file_id: str) -> None:
    service.delete_file(container().ports, request.environment, agent_id(id), uuid_of(file_id, "file"))


# Runs -------------------------------------------------------------------------------------------

def run_out(run: AgentRun) -> AgentRunOut:
    files = container().ports.agent_files
    return AgentRunOut(
        id=run.id, agent_id=run.agent_id, status=run.status.value, trigger=run.trigger.value,
        created_at=run.created_at, started_at=run.started_at, completed_at=run.completed_at,
        error_message=run.error_message,
        output_files=[AgentRunFileOut(id=f.id, filename=f.filename, byte_size=f.byte_size,
                                      content_type=f.content_type, created_at=f.created_at,
                                      url=files.download_url(run.stored(f))) for f in run.output_files],
        deliveries=[AgentRunDeliveryOut(recipient=d.recipient, status=d.status, message_id=d.message_id,
                                        error=d.error) for d in run.deliveries],
        usage=AgentRunUsageOut(input_tokens=run.usage.input_tokens, output_tokens=run.usage.output_tokens,
                               model=run.model),
        steps=[AgentRunStepOut(name=s.name, input=s.input, failed=s.failed, result_preview=s.result_preview)
               for s in run.steps],
        file_import_id=run.file_import_id)


@router.route("POST", AGENTS + "/{id}/runs", summary="Run an agent now (inactive agents too)", status=202,
              response=AgentRunOut, errors=(404,))
def start_run(request: ApiRequest, id: str) -> AgentRunOut:
    return run_out(agent_runs.queue_run(container().ports, request.environment, agent_id(id)))


@router.route("POST", AGENTS + "/{id}/verification", summary="Give a browser agent's waiting run the verification "
              "code its portal sent: the run resumes, enters it and goes on", status=202, body=VerificationCodeIn,
              response=AgentRunOut, errors=(404, 409, 422))
def give_verification_code(request: ApiRequest, id: str) -> AgentRunOut:
    body: VerificationCodeIn = request.body
    return run_out(browser_runs.give_code(container().ports, request.environment, agent_id(id), body.code))


@router.route("GET", AGENTS + "/{id}/runs", summary="List an agent's runs, newest first", query=CursorQuery,
              response=AgentRunPage, errors=(400, 404, 422))
def list_runs(request: ApiRequest, id: str) -> AgentRunPage:
    query: CursorQuery = request.query
    ports = container().ports
    agent = ports.agents.get(request.environment, agent_id(id))
    page, cursor = ports.agent_runs.list_page(request.environment, agent.id, query.limit, query.cursor)
    return AgentRunPage(data=[run_out(r) for r in page], next_cursor=cursor, limit=query.limit)


@router.route("GET", AGENTS + "/{id}/runs/{run_id}", summary="Get a run of an agent", response=AgentRunOut,
              errors=(404,))
def get_run(request: ApiRequest, id: str, run_id: str) -> AgentRunOut:
    return run_out(container().ports.agent_runs.get(request.environment, agent_id(id), numeric_id(run_id, "run")))
