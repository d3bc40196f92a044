"""Agent runs, their guard, schedules and file bytes, as `adapters/dynamodb/agent_runs.py`,
`adapters/schedules.py` and `adapters/agent_files.py` keep them."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.files import AgentFile, FileTooLarge
from chalicelib.domain.agents.runs import AgentRun, AgentRunStatus
from chalicelib.domain.agents.schedule import schedule_expression
from chalicelib.domain.errors import Conflict, NotFound, TransitionRefused
from tests.fakes._support import newest_first_page, stored_time
from tests.fakes.counters import FakeCounters


class FakeAgentRunRepository:
    def __init__(self, counters: FakeCounters) -> None:
        self._counters = counters
        self.runs: dict[tuple[str, int], AgentRun] = {}
        self.running: dict[tuple[str, str], int] = {}  # (environment, agent id) -> run id
        self.triggers: dict[tuple[str, str, str], int] = {}  # (environment, agent id, token) -> run id

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "agent_run")

    def add(self, run: AgentRun) -> None:
        if (run.environment, run.id) in self.runs:
            raise Conflict(f"agent run {run.id} exists")
        self.runs[(run.environment, run.id)] = _stored(run)

    def get(self, environment: str, agent_id: str, run_id: int) -> AgentRun:
        run = self.runs.get((environment, run_id))
        if run is None or run.agent_id != agent_id:
            raise NotFound(f"run {run_id} of agent {agent_id} not found")
        return run

    def list_page(self, environment: str, agent_id: str, limit: int,
                  cursor: str | None) -> tuple[list[AgentRun], str | None]:
        entries = [(str(r.id).zfill(12), r) for (env, _), r in self.runs.items()
                   if env == environment and r.agent_id == agent_id]
        return newest_first_page(f"agent-runs:{environment}:{agent_id}", entries, limit, cursor)

    def save(self, run: AgentRun, expected: Iterable[AgentRunStatus]) -> AgentRun:
        expected = tuple(expected)
        stored = self.runs.get((run.environment, run.id))
        if stored is None or stored.status not in expected:
            raise TransitionRefused(f"agent run {run.id} is no longer {'/'.join(s.value for s in expected)}")
        self.runs[(run.environment, run.id)] = _stored(run)
        return run

    def remove_all_of_agent(self, environment: str, agent_id: str) -> None:
        for key in [k for k, r in self.runs.items() if k[0] == environment and r.agent_id == agent_id]:
            del self.runs[key]

    def claim_running(self, environment: str, agent_id: str, run_id: int) -> int | None:
        holder = self.running.setdefault((environment, agent_id), run_id)
        return None if holder == run_id else holder

    def take_over_running(self, environment: str, agent_id: str, stale_run_id: int, run_id: int) -> bool:
        if self.running.get((environment, agent_id)) != stale_run_id:
            return False
        self.running[(environment, agent_id)] = run_id
        return True

    def release_running(self, environment: str, agent_id: str, run_id: int) -> None:
        if self.running.get((environment, agent_id)) == run_id:
            del self.running[(environment, agent_id)]

    def running_run(self, environment: str, agent_id: str) -> int | None:
        return self.running.get((environment, agent_id))

    def in_flight(self) -> list[AgentRun]:
        return [r for r in self.runs.values()
                if r.browser and r.status in (AgentRunStatus.RUNNING, AgentRunStatus.WAITING_FOR_VERIFICATION)]

    def keep_task_token(self, run: AgentRun, token: str) -> bool:
        stored = self.runs.get((run.environment, run.id))
        if stored is None or stored.status is not AgentRunStatus.WAITING_FOR_VERIFICATION:
            return False
        self.runs[(run.environment, run.id)] = replace(stored, task_token=token)
        return True

    def resume_with_code(self, run: AgentRun, code: str, at: datetime) -> AgentRun:
        stored = self.runs.get((run.environment, run.id))
        if stored is None or stored.status is not AgentRunStatus.WAITING_FOR_VERIFICATION:
            raise TransitionRefused(f"agent run {run.id} is not waiting for a verification code")
        resumed = replace(stored, status=AgentRunStatus.RUNNING, verification_code=code, resumed_at=at)
        self.runs[(run.environment, run.id)] = resumed
        return resumed

    def claim_trigger(self, environment: str, agent_id: str, token: str, run_id: int) -> int:
        return self.triggers.setdefault((environment, agent_id, token), run_id)


class FakeAgentSchedules:
    """`schedules`: (environment, agent id) -> (expression, timezone) of each agent scheduled."""

    def __init__(self) -> None:
        self.schedules: dict[tuple[str, str], tuple[str, str]] = {}

    def put(self, agent: Agent) -> None:
        expression = schedule_expression(agent.schedule)
        if agent.scheduled and expression is not None:
            self.schedules[(agent.environment, agent.id)] = (expression, agent.schedule.timezone)
        else:
            self.schedules.pop((agent.environment, agent.id), None)

    def remove(self, environment: str, agent_id: str) -> None:
        self.schedules.pop((environment, agent_id), None)


class FakeAgentFileStore:
    """`bodies`: the bytes of each file, by (environment, agent id, run id or None, file id)."""

    def __init__(self) -> None:
        self.bodies: dict[tuple[str, str, str | None, str], bytes] = {}

    @staticmethod
    def _key(file: AgentFile) -> tuple[str, str, str | None, str]:
        return file.environment, file.agent_id, file.run_id, file.id

    def put(self, file: AgentFile, body: bytes) -> None:
        self.bodies[self._key(file)] = body

    def read(self, file: AgentFile, max_bytes: int) -> bytes:
        if self._key(file) not in self.bodies:
            raise NotFound(f"file {file.id} not found")
        body = self.bodies[self._key(file)]
        if len(body) > max_bytes:
            raise FileTooLarge(file.filename, len(body), max_bytes)
        return body

    def download_url(self, file: AgentFile) -> str:
        return f"https://files.invalid/{'/'.join(str(p) for p in self._key(file))}/{file.filename}"

    def upload_url(self, file: AgentFile) -> str:
        return f"https://uploads.invalid/{'/'.join(str(p) for p in self._key(file))}/{file.filename}"

    def landed_size(self, file: AgentFile) -> int | None:
        body = self.bodies.get(self._key(file))
        return len(body) if body is not None else None

    def delete(self, file: AgentFile) -> None:
        self.bodies.pop(self._key(file), None)

    def delete_agent(self, environment: str, agent_id: str) -> None:
        for key in [k for k in self.bodies if k[:2] == (environment, agent_id)]:
            del self.bodies[key]


def _stored(run: AgentRun) -> AgentRun:
    """As the table gives it back: times to the millisecond."""
    def ms(value: datetime | None) -> datetime | None:
        return stored_time(value) if value is not None else None
    return replace(run, created_at=stored_time(run.created_at), started_at=ms(run.started_at),
                   completed_at=ms(run.completed_at))
