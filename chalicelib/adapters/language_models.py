"""The language models of llm agents (domain/agents/conversation.LanguageModel): Amazon Bedrock's
Converse API through boto3, and any OpenAI-compatible Chat Completions server (Ollama, llama.cpp's
server, vLLM) through the standard library's HTTP client.

Both retry throttling with their own exponential backoff (botocore's retries are off, so that one
policy runs, with one bound), and turn "nothing answers there" into ModelUnavailable, whose message
says how to configure a model. A reply that is not in the protocol's shape (a missing field, a
field of the wrong type) is a ModelError saying so, never another exception. An API key never
appears in a message, a log line or a repr."""
from __future__ import annotations

import json
import random as _random
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from functools import cached_property
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, NoCredentialsError, ParamValidationError, ReadTimeoutError
from botocore.exceptions import ConnectionError as BotocoreConnectionError
from botocore.parsers import ResponseParserError
from pydantic import SecretStr

from chalicelib.domain.agents.conversation import (
    AssistantMessage,
    LanguageModel,
    Message,
    ModelError,
    ModelReply,
    ModelUnavailable,
    StopReason,
    ToolCall,
    ToolResults,
    ToolSpec,
    Usage,
    UserMessage,
)
from chalicelib.observability import logger
from chalicelib.settings import Settings

# Nova Pro answers Converse with tool use and runs on demand without an inference profile;
# Ollama's llama3.1 is a common local model with tool calling.
DEFAULT_MODELS: dict[str, str] = {"bedrock": "amazon.nova-pro-v1:0", "openai": "llama3.1"}
OLLAMA_BASE_URL = "http://127.0.0.1:11434/v1"

TRIES = 6
TIMEOUT_SECONDS = 120.0
BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0  # also the cap of a server's Retry-After
_EXCERPT = 300

_BEDROCK_THROTTLING = {"ThrottlingException", "ServiceUnavailableException", "ModelNotReadyException"}
_THROTTLING_STATUS = {429, 503}
_BEDROCK_STOPS = {"end_turn": StopReason.END, "stop_sequence": StopReason.END,
                  "tool_use": StopReason.TOOL_USE, "max_tokens": StopReason.MAX_TOKENS}
# Stops where the reply cannot be used as an answer: the run fails with the reason.
_BEDROCK_FAILED_STOPS = {
    "guardrail_intervened": "a guardrail blocked the model's reply",
    "content_filtered": "the model's reply was filtered",
    "malformed_model_output": "the model produced malformed output",
    "malformed_tool_use": "the model produced a malformed tool call",
    "model_context_window_exceeded": "the conversation no longer fits in the model's context window",
}
_OPENAI_STOPS = {"stop": StopReason.END, "length": StopReason.MAX_TOKENS,
                 "tool_calls": StopReason.TOOL_USE, "function_call": StopReason.TOOL_USE}

_OPENAI_ADVICE = ("start an OpenAI-compatible server (Ollama: `ollama serve` and `ollama pull {model}`, then "
                  f"OPENAI_BASE_URL={OLLAMA_BASE_URL}) or set RECON_MODEL_PROVIDER=bedrock to use Amazon Bedrock")

T = TypeVar("T")
# What reading a reply of the wrong shape raises (botocore's parser included): a ModelError instead.
_READING_ERRORS = (AttributeError, TypeError, ValueError, KeyError, IndexError, RecursionError,
                   ResponseParserError)


class _Malformed(Exception):
    """A reply not in the protocol's shape; the reason is short and names the field."""


def _unreadable(reason: str, *secrets: str) -> ModelError:
    return ModelError(f"the model's reply could not be read: {_excerpt(reason, *secrets)}")


def _reading_error(error: Exception, *secrets: str) -> ModelError:
    """The ModelError for what reading a reply raised: a _Malformed's reason, or the error's kind."""
    if isinstance(error, _Malformed):
        return _unreadable(str(error), *secrets)
    return _unreadable(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__, *secrets)


def _field(container: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str,
           default: Any = None) -> Any:
    """container[key] when it is of `kind`; `default` when it is missing or null (unless default is
    None: then it is required); _Malformed otherwise."""
    value = container.get(key)
    if value is None and default is not None:
        return default
    if not isinstance(value, kind):
        raise _Malformed(f"{where}{key} is {_kind(value)}, not {' or '.join(_JSON_NAMES[k] for k in _kinds(kind))}")
    return value


_JSON_NAMES: dict[type, str] = {str: "a string", list: "a list", dict: "an object", bool: "a boolean",
                                 int: "a number", float: "a number"}


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind(value: Any) -> str:
    """What a JSON value is, in a message: "missing" for null."""
    return "missing" if value is None else _JSON_NAMES.get(type(value), type(value).__name__)


def _dict(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Malformed(f"{where} is {_kind(value)}, not an object")
    return value


def _tokens(usage: Any, key: str, where: str) -> int:
    """A token count of `usage` (missing or null: 0); _Malformed when it is not a count."""
    if usage is None:
        return 0
    value = _dict(usage, where).get(key)
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Malformed(f"{where}.{key} is {json.dumps(value)[:40]}, not a token count")
    return value


class _Throttled(Exception):
    """A throttling answer, retried by _Backoff."""

    def __init__(self, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after


class _Backoff:
    """At most `tries` attempts, sleeping between throttled ones: exponential, with jitter so that
    runs throttled together do not come back together; a server's Retry-After wins, up to the cap."""

    def __init__(self, tries: int, base: float, cap: float, sleep: Callable[[float], None],
                 random: Callable[[], float]) -> None:
        if tries < 1:
            raise ValueError("tries must be at least 1")
        self.tries, self._base, self._cap, self._sleep, self._random = tries, base, cap, sleep, random

    def run(self, model: str, attempt: Callable[[], T]) -> T:
        for n in range(1, self.tries + 1):
            try:
                return attempt()
            except _Throttled as throttled:
                if n == self.tries:
                    raise ModelError(f"the model {model} kept throttling after {self.tries} tries "
                                     f"(last: {throttled.detail})") from None
                delay = self.delay(n, throttled.retry_after)
                logger.warning("the model is throttling; retrying",
                               extra={"model": model, "attempt": n, "delay_seconds": round(delay, 3)})
                self._sleep(delay)
        raise AssertionError("unreachable")

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, min(retry_after, self._cap))
        ceiling = min(self._cap, self._base * 2 ** (attempt - 1))
        return ceiling / 2 + self._random() * ceiling / 2  # "equal jitter": never zero, spread apart


def _excerpt(text: str, *secrets: str) -> str:
    """A server's message, short and on one line, with anything secret taken out."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "…"


def _arguments(raw: Any) -> tuple[dict[str, Any] | None, str]:
    """A tool call's input object and its text as sent; None when it is not a JSON object. An object
    (Converse's parsed input) is taken as it is, a string is read as JSON text (Chat Completions)."""
    if isinstance(raw, dict):
        return raw, json.dumps(raw)
    if not isinstance(raw, str):
        return None, json.dumps(raw)
    if not raw.strip():
        return {}, raw  # some servers send "" for a call of a tool without parameters
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None, raw
    return (parsed, raw) if isinstance(parsed, dict) else (None, raw)


# -- Bedrock -------------------------------------------------------------------------------------

class BedrockConverseModel:
    """Bedrock's Converse API. `client` is a bedrock-runtime client, or a function that makes one
    at the first request (making a client resolves credentials, which may call the instance
    metadata service); it should have botocore's retries off (see bedrock_client)."""

    def __init__(self, client: Any, model_id: str, *, tries: int = TRIES, backoff_seconds: float = BACKOFF_SECONDS,
                 max_backoff_seconds: float = MAX_BACKOFF_SECONDS, sleep: Callable[[float], None] = time.sleep,
                 random: Callable[[], float] = _random.random) -> None:
        self._client_source = client
        self._model_id = model_id
        self._backoff = _Backoff(tries, backoff_seconds, max_backoff_seconds, sleep, random)

    def __repr__(self) -> str:
        return f"BedrockConverseModel(model={self._model_id!r})"

    @property
    def model(self) -> str:
        return self._model_id

    @cached_property
    def _client(self) -> Any:
        source = self._client_source
        return source() if callable(source) else source

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int) -> ModelReply:
        request: dict[str, Any] = {"modelId": self._model_id, "messages": _converse_messages(messages),
                                   "inferenceConfig": {"maxTokens": max_tokens}}
        if system:  # Converse refuses a blank system block
            request["system"] = [{"text": system}]
        if tools:
            request["toolConfig"] = {"tools": [{"toolSpec": {
                "name": tool.name, "description": tool.description, "inputSchema": {"json": tool.parameters}}}
                for tool in tools]}
        return _converse_reply(self._backoff.run(self._model_id, lambda: self._converse(request)))

    def _converse(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            client = self._client
            reply: dict[str, Any] = client.converse(**request)
            return reply
        except ClientError as error:
            raise self._client_error(error) from None
        except NoCredentialsError:
            raise ModelUnavailable(
                "Bedrock needs AWS credentials and this process has none: give it credentials (a role, a "
                "profile or AWS_ACCESS_KEY_ID), or set RECON_MODEL_PROVIDER=openai with OPENAI_BASE_URL of an "
                "OpenAI-compatible server") from None
        except BotocoreConnectionError as error:  # refused, unknown host, connect timeout
            raise ModelUnavailable(
                f"no Bedrock endpoint answered at {self._endpoint()} ({error}): check AWS_ENDPOINT_URL_BEDROCK_RUNTIME "
                "and the region, or set RECON_MODEL_PROVIDER=openai with OPENAI_BASE_URL of an OpenAI-compatible "
                "server") from None
        except ReadTimeoutError:
            raise ModelError(f"the model {self._model_id} did not answer in time ({self._endpoint()})") from None
        except ParamValidationError as error:
            raise ModelError(f"the request to Bedrock is not valid: {_excerpt(str(error))}") from None
        except _READING_ERRORS as error:  # botocore's parser, given a reply of another shape
            raise _unreadable(f"botocore could not parse it ({type(error).__name__}: {error})") from None

    def _client_error(self, error: ClientError) -> Exception:
        details = error.response.get("Error", {})
        code = details.get("Code", "")
        said = _excerpt(f"{code}: {details.get('Message', '')}")
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _BEDROCK_THROTTLING or status in _THROTTLING_STATUS:
            return _Throttled(said)
        if code in ("AccessDeniedException", "ResourceNotFoundException"):
            return ModelUnavailable(
                f"Bedrock refused model {self._model_id} in {self._region()} ({said}): enable model access for "
                f"{self._model_id} in the Bedrock console, or set RECON_DEFAULT_MODEL to a model this account may use")
        if code == "UnrecognizedClientException":
            return ModelUnavailable(
                f"Bedrock did not recognise this process's AWS credentials ({said}): check them, or set "
                "RECON_MODEL_PROVIDER=openai with OPENAI_BASE_URL of an OpenAI-compatible server")
        return ModelError(f"Bedrock could not answer with model {self._model_id} ({said})")

    def _endpoint(self) -> str:
        return str(getattr(getattr(self._client, "meta", None), "endpoint_url", "Bedrock"))

    def _region(self) -> str:
        return str(getattr(getattr(self._client, "meta", None), "region_name", "this region"))


def _converse_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Converse's messages: roles alternate, so consecutive ones of a role (tool results, then a
    prompt) become one message; blank text blocks, which Converse refuses, are left out."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role, content = _converse_message(message)
        if not content:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})
    return out


def _converse_message(message: Message) -> tuple[str, list[dict[str, Any]]]:
    if isinstance(message, UserMessage):
        return "user", [{"text": message.text}] if message.text.strip() else []
    if isinstance(message, AssistantMessage):
        blocks: list[dict[str, Any]] = [{"text": message.text}] if message.text.strip() else []
        # A malformed call (arguments None) goes back as an empty input: Converse wants an object.
        blocks += [{"toolUse": {"toolUseId": call.id, "name": call.name, "input": call.arguments or {}}}
                   for call in message.tool_calls]
        return "assistant", blocks
    if isinstance(message, ToolResults):
        return "user", [{"toolResult": {"toolUseId": result.call_id, "content": [{"text": result.content}],
                                        "status": "error" if result.is_error else "success"}}
                        for result in message.results]
    raise TypeError(f"not a message: {message!r}")


def _converse_reply(reply: Any) -> ModelReply:
    try:
        return _read_converse_reply(reply)
    except _READING_ERRORS + (_Malformed,) as error:
        raise _reading_error(error) from None


def _read_converse_reply(reply: Any) -> ModelReply:
    reply = _dict(reply, "the reply")
    message = _dict(_dict(reply.get("output"), "output").get("message"), "output.message")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for n, block in enumerate(_field(message, "content", list, "output.message.", default=[])):
        block = _dict(block, f"content block {n}")
        if "text" in block:
            texts.append(_field(block, "text", str, f"content block {n}: "))
        elif "toolUse" in block:
            use = _dict(block["toolUse"], f"content block {n}: toolUse")
            where = f"content block {n}: toolUse."
            arguments, raw = _arguments(use.get("input"))
            calls.append(ToolCall(id=_field(use, "toolUseId", str, where), name=_field(use, "name", str, where),
                                  arguments=arguments, raw_arguments=raw))
    reason = _field(reply, "stopReason", str, "", default="")
    if calls:
        stop = StopReason.TOOL_USE
    elif reason in _BEDROCK_FAILED_STOPS:
        raise ModelError(f"{_BEDROCK_FAILED_STOPS[reason]} (stopReason {reason})")
    else:
        stop = _BEDROCK_STOPS.get(reason, StopReason.END)  # a reason newer than this code: an answer
    usage = reply.get("usage")
    return ModelReply(AssistantMessage("\n".join(texts), tuple(calls)), stop,
                      Usage(_tokens(usage, "inputTokens", "usage"), _tokens(usage, "outputTokens", "usage")))


# -- OpenAI-compatible Chat Completions ----------------------------------------------------------

class OpenAIChatModel:
    """POST {base_url}/chat/completions, as Ollama, llama.cpp's server, vLLM and OpenAI answer it."""

    def __init__(self, base_url: str, api_key: str | SecretStr | None, model: str, *,
                 timeout_seconds: float = TIMEOUT_SECONDS, tries: int = TRIES,
                 backoff_seconds: float = BACKOFF_SECONDS, max_backoff_seconds: float = MAX_BACKOFF_SECONDS,
                 sleep: Callable[[float], None] = time.sleep, random: Callable[[], float] = _random.random) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ModelUnavailable(f"OPENAI_BASE_URL must be an http(s) URL such as {OLLAMA_BASE_URL}, "
                                   f"not {base_url!r}")
        self._base_url = base_url.rstrip("/")
        # Kept as a SecretStr so that no repr, vars() or debugger shows it.
        self._api_key = api_key if isinstance(api_key, SecretStr) or api_key is None else SecretStr(api_key)
        self._model = model
        self._timeout = timeout_seconds
        self._backoff = _Backoff(tries, backoff_seconds, max_backoff_seconds, sleep, random)

    def __repr__(self) -> str:
        return f"OpenAIChatModel(base_url={self._base_url!r}, model={self._model!r})"

    @property
    def model(self) -> str:
        return self._model

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec], max_tokens: int) -> ModelReply:
        body: dict[str, Any] = {"model": self._model, "messages": _chat_messages(system, messages),
                                "max_tokens": max_tokens}
        if tools:
            body["tools"] = [{"type": "function", "function": {
                "name": tool.name, "description": tool.description, "parameters": tool.parameters}} for tool in tools]
        data = json.dumps(body).encode()
        return _chat_reply(self._backoff.run(self._model, lambda: self._post(data)), self._secret())

    def _secret(self) -> str:
        return self._api_key.get_secret_value() if self._api_key else ""

    def _post(self, data: bytes) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._secret():
            headers["Authorization"] = f"Bearer {self._secret()}"
        request = urllib.request.Request(f"{self._base_url}/chat/completions", data=data, headers=headers,
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            raise self._http_error(error) from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, TimeoutError):
                raise self._timed_out() from None
            raise ModelUnavailable(f"no language model answered at {self._base_url} ({error.reason}): "
                                   + _OPENAI_ADVICE.format(model=self._model)) from None
        except TimeoutError:
            raise self._timed_out() from None
        except OSError as error:  # the connection dropped mid-answer
            raise ModelError(f"the connection to the model server at {self._base_url} failed ({error})") from None
        try:
            reply = json.loads(raw)
        except (ValueError, RecursionError):
            reply = None
        if not isinstance(reply, dict):
            said = raw.decode(errors="replace").strip()
            raise _unreadable(f"the model server at {self._base_url} did not answer a JSON object"
                              + (f" ({said})" if said else " (an empty body)"), self._secret())
        return reply

    def _timed_out(self) -> ModelError:
        return ModelError(f"the model server at {self._base_url} did not answer within {self._timeout:g} s")

    def _http_error(self, error: urllib.error.HTTPError) -> Exception:
        status = error.code
        try:
            text = error.read().decode(errors="replace")
        except OSError:
            text = ""
        said = f"HTTP {status}: {_excerpt(_error_message(text), self._secret())}"
        if status in _THROTTLING_STATUS:
            return _Throttled(said, _retry_after(error.headers.get("Retry-After") if error.headers else None))
        if status in (401, 403):
            return ModelUnavailable(f"the model server at {self._base_url} refused the request ({said}): "
                                    "check OPENAI_API_KEY")
        if status == 404:
            return ModelUnavailable(
                f"the model server at {self._base_url} has no model {self._model} or no /chat/completions ({said}): "
                f"check that OPENAI_BASE_URL ends in /v1 and that the model is installed (Ollama: `ollama pull "
                f"{self._model}`), or set RECON_DEFAULT_MODEL")
        return ModelError(f"the model server at {self._base_url} could not answer ({said})")


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:  # an HTTP date: the backoff's own delay will do
        return None


def _error_message(text: str) -> str:
    """The message of an error body: OpenAI's {"error": {"message"}}, Ollama's {"error": "..."},
    FastAPI's {"detail": ...}, or the text itself."""
    try:
        body = json.loads(text)
    except ValueError:
        return text
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return error if isinstance(error, str) else json.dumps(error)
    return text


def _chat_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            said: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                said["tool_calls"] = [{"id": call.id, "type": "function", "function": {
                    "name": call.name,
                    "arguments": call.raw_arguments if call.arguments is None else json.dumps(call.arguments)}}
                    for call in message.tool_calls]
            elif said["content"] is None:
                said["content"] = ""  # null content is allowed only beside tool calls
            out.append(said)
        elif isinstance(message, ToolResults):
            out += [{"role": "tool", "tool_call_id": result.call_id,
                     "content": f"ERROR: {result.content}" if result.is_error else result.content}
                    for result in message.results]
        else:
            raise TypeError(f"not a message: {message!r}")
    return out


def _chat_reply(reply: Any, secret: str = "") -> ModelReply:
    try:
        return _read_chat_reply(reply)
    except _READING_ERRORS + (_Malformed,) as error:
        raise _reading_error(error, secret) from None


def _read_chat_reply(reply: Any) -> ModelReply:
    reply = _dict(reply, "the reply")
    choices = _field(reply, "choices", list, "")
    if not choices:
        raise _Malformed("choices is empty")
    choice = _dict(choices[0], "choices[0]")
    message = _dict(choice.get("message"), "choices[0].message")
    content = _field(message, "content", (str, list), "message.", default="")
    if isinstance(content, list):  # content parts, as some servers send them
        texts = (part.get("text") for part in content if isinstance(part, dict))
        content = "".join(text for text in texts if isinstance(text, str))  # other parts (images) are not text
    calls: list[ToolCall] = []
    for n, call in enumerate(_field(message, "tool_calls", list, "message.", default=[])):
        where = f"tool_calls[{n}]"
        call = _dict(call, where)
        function = _dict(call.get("function"), f"{where}.function")
        arguments, raw = _arguments(function.get("arguments", ""))
        calls.append(ToolCall(id=_field(call, "id", str, f"{where}.", default=f"call_{n}") or f"call_{n}",
                              name=_field(function, "name", str, f"{where}.function."),
                              arguments=arguments, raw_arguments=raw))
    reason = _field(choice, "finish_reason", str, "choices[0].", default="stop")
    if calls:  # whatever finish_reason says: some servers answer "stop" beside tool calls
        stop = StopReason.TOOL_USE
    elif reason == "content_filter":
        raise ModelError("the model's reply was filtered (finish_reason content_filter)")
    else:
        stop = _OPENAI_STOPS.get(reason, StopReason.END)
    usage = reply.get("usage")
    return ModelReply(AssistantMessage(content, tuple(calls)), stop,
                      Usage(_tokens(usage, "prompt_tokens", "usage"), _tokens(usage, "completion_tokens", "usage")))


# -- The factory ---------------------------------------------------------------------------------

_BEDROCK_CONFIG = Config(retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=10,
                         read_timeout=TIMEOUT_SECONDS)


def bedrock_client(settings: Settings) -> Any:
    """A bedrock-runtime client with botocore's retries off (the adapter's backoff retries). Not
    AwsClients.client: that one retries 8 times on its own, and in local mode it signs with fixed
    credentials, which would keep a developer's own AWS profile from reaching the real Bedrock."""
    local_endpoint = settings.local_mode and settings.bedrock_endpoint
    fixed = {"aws_access_key_id": "local", "aws_secret_access_key": "local"} if local_endpoint else {}
    session = boto3.session.Session(region_name=settings.region, **fixed)
    return session.client("bedrock-runtime", endpoint_url=settings.bedrock_endpoint or None, config=_BEDROCK_CONFIG)


def language_model(settings: Settings, model: str | None = None) -> LanguageModel:
    """The configured model (`model`, else RECON_DEFAULT_MODEL, else the provider's default). Bedrock
    on AWS and an OpenAI-compatible server locally, unless RECON_MODEL_PROVIDER says which. Contacts
    nothing: a missing model shows at the first request, as ModelUnavailable."""
    provider = settings.model_provider or ("openai" if settings.local_mode else "bedrock")
    name = model or settings.default_model or DEFAULT_MODELS[provider]
    if provider == "bedrock":
        return BedrockConverseModel(lambda: bedrock_client(settings), name)
    base_url = settings.openai_base_url or (OLLAMA_BASE_URL if settings.local_mode else None)
    if not base_url:
        raise ModelUnavailable(
            "RECON_MODEL_PROVIDER is openai but no server is configured: set OPENAI_BASE_URL to an "
            "OpenAI-compatible Chat Completions server (for example https://api.openai.com/v1, with "
            "OPENAI_API_KEY), or set RECON_MODEL_PROVIDER=bedrock")
    return OpenAIChatModel(base_url, settings.openai_api_key, name)
