"""Agent runs: what one execution of an agent's instructions did.

    queued -> running -> completed
       |         |
       +---------+--> failed

One run of an agent goes at a time: a queued run waits for the one going; a schedule that fires
meanwhile is recorded as a failed run that says it was skipped (never lost silently). A run
records each tool call as a step, the files it wrote, the mail it sent and the tokens it used.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from chalicelib.domain.agents.conversation import Usage
from chalicelib.domain.status_machine import StatusMachine


class AgentRunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class AgentRunTrigger(StrEnum):
    MANUAL = "manual"
    SCHEDULE = "schedule"
    FILE_DROP = "file_drop"
    AGENT = "agent"


AGENT_RUN_STATUSES = StatusMachine({
    AgentRunStatus.QUEUED: {AgentRunStatus.RUNNING, AgentRunStatus.FAILED},
    AgentRunStatus.RUNNING: {AgentRunStatus.COMPLETED, AgentRunStatus.FAILED},
})

FINISHED = frozenset({AgentRunStatus.COMPLETED, AgentRunStatus.FAILED})
PREVIEW_CHARS = 400  # of a step's input and result, as the run shows them
MAX_AGENT_DEPTH = 3  # run_agent: an agent started by an agent started by an agent, no deeper


@dataclass(frozen=True)
class Step:
    """One tool call of a run (or, last, the model's final answer: name `final_answer`)."""
    name: str
    input: Any
    failed: bool
    result_preview: str
    at: datetime

    @classmethod
    def of(cls, name: str, input: Any, failed: bool, result: str, at: datetime) -> Step:
        return cls(name, _short_input(input), failed, _short(result), at)


@dataclass(frozen=True)
class OutputFile:
    id: str
    filename: str
    byte_size: int
    content_type: str
    created_at: datetime


@dataclass(frozen=True)
class Delivery:
    recipient: str
    status: Literal["sent", "failed"]
    message_id: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class InputRef:
    """A file a run reads beside the agent's input files: the dropped file of a file-drop run."""
    filename: str
    key: str  # in the data bucket
    byte_size: int


@dataclass(frozen=True)
class AgentRun:
    environment: str
    agent_id: str
    id: int
    status: AgentRunStatus
    trigger: AgentRunTrigger
    created_at: datetime
    started_at: datetime | None = None
    completed_at: datetime | None = None
    error_message: str | None = None
    output_files: tuple[OutputFile, ...] = ()
    deliveries: tuple[Delivery, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    steps: tuple[Step, ...] = ()
    extra_input: InputRef | None = None
    # run_agent: the agents above this run, outermost first (a cycle or too deep a chain is refused).
    callers: tuple[str, ...] = ()

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def moved(self, status: AgentRunStatus, **changes: Any) -> AgentRun:
        """The run in `status` (the repository's conditional write checks the move is allowed)."""
        return replace(self, status=status, **changes)


def _short(text: str, limit: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _short_input(value: Any) -> Any:
    """A tool call's input as the run keeps it: long strings cut (a written file's content)."""
    if isinstance(value, str):
        return _short(value)
    if isinstance(value, dict):
        return {k: _short_input(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_short_input(v) for v in value[:20]]
    return value
