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
    AgentRunFileOut,
    AgentRunOut,
    AgentRunPage,
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
    return AgentFileOut.from_entity(file, url=container().ports.agent_files.download_url(file))


def browser_out(agent: Agent) -> BrowserOut | None:
    if agent.browser is None:
        return None
    # What the operator set up, and what runs learned since (stored apart).
    return BrowserOut.from_entity(agent.browser_state, automation=agent.browser.automation,
                                  portal_url=agent.browser.portal_url, settings=agent.browser.settings)


def agent_out(agent: Agent) -> AgentOut:
    files = service.files_of(container().ports, agent.environment, agent.id)
    return AgentOut.from_entity(agent, **service.fields_of(agent), browser=browser_out(agent),
                                input_files=[file_out(f) for f in files], next_run_at=agent.next_run_at(utc_now()))


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
    return AgentRunOut.from_entity(
        run, output_files=[AgentRunFileOut.from_entity(f, url=files.download_url(run.stored(f)))
                           for f in run.output_files],
        usage=AgentRunUsageOut.from_entity(run.usage, model=run.model))


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
