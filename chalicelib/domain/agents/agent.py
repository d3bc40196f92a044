"""The agent entity: what is stored of an agent (its schedule, definition and run times)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from chalicelib.domain.agents.browser import BrowserSetup, BrowserState
from chalicelib.domain.agents.definition import AgentKind, Delivery, Mention
from chalicelib.domain.agents.schedule import Schedule, next_run_at


@dataclass(frozen=True)
class Agent:
    environment: str
    id: str  # a UUID
    name: str
    schedule: Schedule
    created_at: datetime
    updated_at: datetime
    kind: AgentKind = AgentKind.LLM
    description: str = ""
    instructions: str = ""
    model: str | None = None  # None: the platform's default
    active: bool = True
    handles_file_drops: bool = False
    delivery: Delivery = field(default_factory=Delivery)
    mentions: tuple[Mention, ...] = ()
    last_run_at: datetime | None = None
    version: int = 1
    # Browser agents only: the operator's set-up, and what runs and the command line learned.
    browser: BrowserSetup | None = None
    browser_state: BrowserState = field(default_factory=BrowserState)

    @property
    def scheduled(self) -> bool:
        """Whether a schedule fires it (an inactive or manual agent runs on demand only)."""
        return self.active and self.schedule.scheduled

    @property
    def holds_file_drops(self) -> bool:
        return self.active and self.handles_file_drops

    def next_run_at(self, now: datetime) -> datetime | None:
        return next_run_at(self.schedule, now) if self.scheduled else None

    def edited(self, now: datetime, **changes: object) -> Agent:
        return replace(self, **changes, updated_at=now, version=self.version + 1)  # type: ignore[arg-type]
