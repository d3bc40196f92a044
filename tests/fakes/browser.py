"""A browser agent's secrets and the task tokens of paused runs, as `adapters/secrets.py` and
`adapters/workflows.StepFunctionsTaskTokens` keep them."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.domain.agents.browser import Credentials


class FakeBrowserSecrets:
    """`secrets`: (environment, agent id, leaf) -> value; `leaf` is credentials, saved or pending."""

    def __init__(self, max_context_chars: int = 65_536) -> None:
        self.secrets: dict[tuple[str, str, str], Any] = {}
        self._max = max_context_chars

    def put_credentials(self, environment: str, agent_id: str, credentials: Credentials) -> None:
        self.secrets[(environment, agent_id, "credentials")] = credentials

    def credentials(self, environment: str, agent_id: str) -> Credentials | None:
        return self.secrets.get((environment, agent_id, "credentials"))

    def put_context(self, environment: str, agent_id: str, kind: str, state: Mapping[str, Any]) -> bool:
        if len(repr(state)) > self._max:
            return False
        self.secrets[(environment, agent_id, kind)] = dict(state)
        return True

    def context(self, environment: str, agent_id: str, kind: str) -> Mapping[str, Any] | None:
        return self.secrets.get((environment, agent_id, kind))

    def drop_context(self, environment: str, agent_id: str, kind: str) -> None:
        self.secrets.pop((environment, agent_id, kind), None)

    def delete_agent(self, environment: str, agent_id: str) -> None:
        for key in [k for k in self.secrets if k[:2] == (environment, agent_id)]:
            del self.secrets[key]


class FakeTaskTokens:
    """`waiting`: the tokens a workflow waits on; `sent`: the tokens sent, in order."""

    def __init__(self) -> None:
        self.waiting: set[str] = set()
        self.sent: list[str] = []

    def send_success(self, token: str, output: dict) -> bool:
        if token not in self.waiting:
            return False
        self.waiting.discard(token)
        self.sent.append(token)
        return True
