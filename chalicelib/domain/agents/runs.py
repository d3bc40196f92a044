"""Agent runs: what one execution of an agent's instructions (or of a browser agent's portal
automation) did.

    queued -> running -> completed
       |         |  ^
       |         v  |  (browser agents: the portal asked for a code; a code resumes the run)
       |   waiting_for_verification
       |         |
       +---------+--> failed

One run of an agent goes at a time: a queued run waits for the one going; a schedule that fires
meanwhile is recorded as a failed run that says it was skipped (never lost silently). A run
records each tool call as a step, the files it wrote, the mail it sent and the tokens it used.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

from chalicelib.domain.agents.conversation import Usage
from chalicelib.domain.agents.files import AgentFile


class AgentRunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_VERIFICATION = "waiting_for_verification"
    COMPLETED = "completed"
    FAILED = "failed"


class AgentRunTrigger(StrEnum):
    MANUAL = "manual"
    SCHEDULE = "schedule"
    FILE_DROP = "file_drop"
    AGENT = "agent"


FINISHED = frozenset({AgentRunStatus.COMPLETED, AgentRunStatus.FAILED})
PREVIEW_CHARS = 400  # of a step's result, and of each text in its input, as the run shows them
INPUT_CHARS = 1000  # a step's whole input as JSON; beyond it, the input is kept as that JSON cut short
# A started run belongs to its worker this long (the worker's 15-minute limit, and a minute more):
# its message coming again meanwhile is a duplicate; after it, the run was cut off.
RUN_LEASE = timedelta(minutes=16)
# A run waiting for its verification code is ended by its workflow's timeout; a waiting run older
# than the longest wait and a worker's lease was abandoned (its workflow is gone).
WAIT_LEASE = timedelta(hours=2) + RUN_LEASE
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
        kept = _short_input(input)
        text = json.dumps(kept, ensure_ascii=False)
        return cls(name, kept if len(text) <= INPUT_CHARS else _short(text, INPUT_CHARS), failed, _short(result), at)


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
    # Browser agents: a run of one (its workflow drives it), the import of what the portal exported,
    # and the pause for a verification code (the workflow's task token that resumes it, and the
    # code given, until it is entered).
    browser: bool = False
    file_import_id: int | None = None
    paused_at: datetime | None = None
    resumed_at: datetime | None = None
    task_token: str | None = field(default=None, repr=False)
    verification_code: str | None = field(default=None, repr=False)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def moved(self, status: AgentRunStatus, **changes: Any) -> AgentRun:
        """The run in `status`; its save names the statuses it may come from (queued -> running ->
        completed, and failed from either)."""
        return replace(self, status=status, **changes)

    def lease_expired(self, now: datetime) -> bool:
        """Whether a running (or waiting) run has outlived any worker that could still be running
        it (a resumed run's lease runs from when it was resumed)."""
        if self.status is AgentRunStatus.WAITING_FOR_VERIFICATION:
            return self.paused_at is None or now - self.paused_at > WAIT_LEASE
        began = self.resumed_at or self.started_at
        return began is None or now - began > RUN_LEASE

    def stored(self, file: OutputFile) -> AgentFile:
        """Where one of its output files is kept (beside the run's other outputs)."""
        return AgentFile(environment=self.environment, agent_id=self.agent_id, id=file.id, filename=file.filename,
                         byte_size=file.byte_size, content_type=file.content_type, created_at=file.created_at,
                         run_id=str(self.id))


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
