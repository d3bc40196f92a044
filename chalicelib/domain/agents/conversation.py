"""What an agent run says to a language model and hears back, independent of the wire protocol
(Bedrock Converse or OpenAI-compatible Chat Completions: adapters/language_models.py translates).

A conversation is a list of messages: the user's prompt, the assistant's replies (text and tool
calls), and the results of those tool calls, which go back to the model in the next request."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: a name, what it does, and a JSON schema of its input object."""
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    # The input object; None when the model sent something that is not a JSON object (a
    # malformed call goes back to the model as an error result, it never stops the run).
    arguments: dict[str, Any] | None
    raw_arguments: str = ""  # as sent, for the run's steps when it could not be read


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    content: str
    is_error: bool = False


@dataclass(frozen=True)
class UserMessage:
    text: str


@dataclass(frozen=True)
class AssistantMessage:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class ToolResults:
    """The results of every tool call of the previous assistant message, in its order."""
    results: tuple[ToolResult, ...]


Message = UserMessage | AssistantMessage | ToolResults


class StopReason(StrEnum):
    END = "end"            # a final answer
    TOOL_USE = "tool_use"  # the model wants the tool calls run
    MAX_TOKENS = "max_tokens"  # cut off by the reply's token limit


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)


@dataclass(frozen=True)
class ModelReply:
    message: AssistantMessage
    stop: StopReason
    usage: Usage = field(default_factory=Usage)


class ModelError(Exception):
    """The model could not answer (after retries of throttling); the run fails with this message."""


class ModelUnavailable(ModelError):
    """No model is configured or reachable; the message says how to configure one."""


class LanguageModel(Protocol):
    """One chat model with tool use. `model` is the id the request names."""
    @property
    def model(self) -> str: ...

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int) -> ModelReply:
        """The model's next reply to the conversation. Raises ModelError (ModelUnavailable when
        nothing answers at the configured address)."""
        ...
