"""What an agent run reaches beyond storage: the mailer (`adapters/mailer.py`, SES), the `sql`
tool's engine (`adapters/records_sql.py`), the language models (`adapters/language_models.py`)
and the browser (`adapters/browser_portal.py`). Each keeps what it was asked and answers as
scripted: their real counterparts talk to the outside world, which a service test has none of."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.adapters.mailer import MailRefused
from chalicelib.adapters.records_sql import SqlAnswer, as_table
from chalicelib.domain.agents.browser import PortalFailed, PortalJob, PortalOutcome
from chalicelib.domain.agents.conversation import Message, ModelError, ModelReply, ToolSpec


class FakeMailer:
    """`sent`: (recipient, subject, body, attachments) of each message, in order; a recipient in
    `refused` is refused as SES refuses one (MailRefused)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, list[tuple[str, str, bytes]]]] = []
        self.refused: set[str] = set()

    def send(self, recipient: str, subject: str, body_text: str,
             attachments: list[tuple[str, str, bytes]]) -> str:
        if recipient in self.refused:
            raise MailRefused(f"MessageRejected: Email address is not verified: {recipient}")
        self.sent.append((recipient, subject, body_text, list(attachments)))
        return f"fake-message-{len(self.sent)}"


class FakeRecordsSql:
    """`asked`: (environment, sql) of each query; `answer(environment, sql)` gives its answer (no
    rows by default) or raises as the engine refuses one."""

    def __init__(self, answer: Callable[[str, str], SqlAnswer] | None = None) -> None:
        self.asked: list[tuple[str, str]] = []
        self._answer = answer or (lambda environment, sql: SqlAnswer(columns=[], rows=[], truncated=False,
                                                                     total_records=0))

    def query(self, environment: str, sql: str) -> SqlAnswer:
        self.asked.append((environment, sql))
        return self._answer(environment, sql)

    @staticmethod
    def as_table(answer: SqlAnswer) -> str:
        return as_table(answer)


class FakeLanguageModel:
    """One model: `replies` in the order the conversation gets them; past the last, ModelError (as a
    model that cannot answer). `requests`: what each call was given."""

    def __init__(self, model: str, replies: list[ModelReply]) -> None:
        self._model = model
        self._replies = replies
        self.requests: list[dict[str, Any]] = []

    @property
    def model(self) -> str:
        return self._model

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int) -> ModelReply:
        self.requests.append({"system": system, "messages": list(messages), "tools": tools, "max_tokens": max_tokens})
        if not self._replies:
            raise ModelError("no reply scripted for this call")
        return self._replies.pop(0)


class FakeLanguageModels:
    """`Ports.language_model`: the model of a name (None: the platform's default, "fake-default"),
    answering with the replies scripted in `replies` (shared by every model it gives)."""

    def __init__(self, replies: list[ModelReply] | None = None) -> None:
        self.replies = replies if replies is not None else []
        self.given: list[FakeLanguageModel] = []

    def __call__(self, model: str | None) -> FakeLanguageModel:
        self.given.append(FakeLanguageModel(model or "fake-default", self.replies))
        return self.given[-1]


class FakePortal:
    """`jobs`: each attempt asked for; `outcomes`: what the attempts get, in order (past the last, a
    failure at the first step, as a portal that never loads)."""

    def __init__(self, outcomes: list[PortalOutcome] | None = None) -> None:
        self.outcomes = outcomes if outcomes is not None else []
        self.jobs: list[PortalJob] = []

    def run(self, job: PortalJob) -> PortalOutcome:
        self.jobs.append(job)
        if not self.outcomes:
            return PortalFailed("open_portal", "no outcome scripted for this attempt", ())
        return self.outcomes.pop(0)
