"""Agents and the file-drop guard, as `adapters/dynamodb/agents.py` keeps them."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.files import AgentFile
from chalicelib.domain.clock import iso
from chalicelib.domain.errors import Conflict, NotFound
from tests.fakes._support import newest_first_page, stored_time


class FakeAgentRepository:
    def __init__(self) -> None:
        self.agents: dict[tuple[str, str], Agent] = {}
        self.file_drop_holders: dict[str, str] = {}  # environment -> agent id
        self.input_files: dict[tuple[str, str], dict[str, AgentFile]] = {}  # (environment, agent id) -> by id

    def add(self, agent: Agent) -> None:
        key = (agent.environment, agent.id)
        if key in self.agents:
            raise Conflict(f"agent {agent.id} exists")
        self.agents[key] = _stored(agent)

    def get(self, environment: str, agent_id: str) -> Agent:
        agent = self.agents.get((environment, agent_id))
        if agent is None:
            raise NotFound(f"agent {agent_id} not found")
        return agent

    def list_page(self, environment: str, limit: int, cursor: str | None) -> tuple[list[Agent], str | None]:
        entries = [(f"{iso(a.created_at)}#{a.id}", a) for (env, _), a in self.agents.items() if env == environment]
        return newest_first_page(f"agents:{environment}", entries, limit, cursor)

    def save(self, updated: Agent, previous: Agent) -> None:
        stored = self.agents.get((previous.environment, previous.id))
        if stored is None:
            raise NotFound(f"agent {previous.id} not found")
        if stored.version != previous.version:
            raise Conflict(f"agent {previous.id} was changed meanwhile; read it again")
        self.agents[(updated.environment, updated.id)] = _stored(replace(updated, last_run_at=stored.last_run_at,
                                                                         browser_state=stored.browser_state))

    def set_browser_state(self, environment: str, agent_id: str, **changes: Any) -> None:
        stored = self.agents.get((environment, agent_id))
        if stored is not None:
            self.agents[(environment, agent_id)] = replace(stored, browser_state=replace(stored.browser_state,
                                                                                         **changes))

    def environment_of(self, agent_id: str) -> str | None:
        return next((env for (env, id_), a in self.agents.items() if id_ == agent_id and a.browser), None)

    def scheduled(self) -> list[tuple[str, str]]:
        return sorted((env, agent_id) for (env, agent_id), a in self.agents.items() if a.scheduled)

    def set_last_run(self, environment: str, agent_id: str, at: datetime) -> None:
        stored = self.agents.get((environment, agent_id))
        if stored is not None:
            self.agents[(environment, agent_id)] = _stored(replace(stored, last_run_at=at))

    def remove(self, agent: Agent) -> None:
        if self.agents.pop((agent.environment, agent.id), None) is None:
            raise NotFound(f"agent {agent.id} not found")
        self.input_files.pop((agent.environment, agent.id), None)

    def add_file(self, file: AgentFile) -> None:
        files = self.input_files.setdefault((file.environment, file.agent_id), {})
        if file.id in files:
            raise Conflict(f"file {file.id} exists")
        files[file.id] = replace(file, created_at=stored_time(file.created_at))

    def files(self, environment: str, agent_id: str) -> list[AgentFile]:
        return sorted(self.input_files.get((environment, agent_id), {}).values(), key=lambda f: (f.created_at, f.id))

    def get_file(self, environment: str, agent_id: str, file_id: str) -> AgentFile:
        file = self.input_files.get((environment, agent_id), {}).get(file_id)
        if file is None:
            raise NotFound(f"file {file_id} of agent {agent_id} not found")
        return file

    def set_file_size(self, file: AgentFile, byte_size: int) -> None:
        files = self.input_files.get((file.environment, file.agent_id), {})
        if file.id in files:
            files[file.id] = replace(files[file.id], byte_size=byte_size)

    def remove_file(self, file: AgentFile) -> None:
        if self.input_files.get((file.environment, file.agent_id), {}).pop(file.id, None) is None:
            raise NotFound(f"file {file.id} of agent {file.agent_id} not found")

    def claim_file_drops(self, environment: str, agent_id: str) -> str | None:
        holder = self.file_drop_holders.setdefault(environment, agent_id)
        return None if holder == agent_id else holder

    def take_over_file_drops(self, environment: str, stale_holder: str, agent_id: str) -> bool:
        if self.file_drop_holders.get(environment) != stale_holder:
            return False
        self.file_drop_holders[environment] = agent_id
        return True

    def release_file_drops(self, environment: str, agent_id: str) -> None:
        if self.file_drop_holders.get(environment) == agent_id:
            del self.file_drop_holders[environment]

    def file_drops_holder(self, environment: str) -> str | None:
        return self.file_drop_holders.get(environment)


def _stored(agent: Agent) -> Agent:
    """As the table gives it back: times to the millisecond."""
    return replace(agent, created_at=stored_time(agent.created_at), updated_at=stored_time(agent.updated_at),
                   last_run_at=stored_time(agent.last_run_at))
