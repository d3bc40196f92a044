"""Routes of /agents."""
from __future__ import annotations

import re
from typing import Any

from chalicelib.api.routing import ApiRequest, Router
from chalicelib.api.schemas import AgentOut, AgentPage, CreateAgent, CursorQuery, UpdateAgent
from chalicelib.container import container
from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import NotFound
from chalicelib.services import agents as service

router = Router("agents")
AGENTS = "/agents"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def agent_id(raw: str) -> str:
    """A path id: an agent's UUID (in any case); anything else is simply not found."""
    if not UUID.match(raw.lower()):
        raise NotFound(f"agent '{raw[:40]}' not found")
    return raw.lower()


def given(body: CreateAgent | UpdateAgent) -> dict[str, Any]:
    """The fields the client sent, as plain values (absent ones left out)."""
    return body.model_dump(include=body.model_fields_set)


def agent_out(agent: Agent) -> AgentOut:
    return AgentOut(**service.fields_of(agent), id=agent.id, kind=agent.kind.value, input_files=[],
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
