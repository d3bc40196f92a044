"""Scripted language-model servers for tests, speaking the real wire formats on 127.0.0.1:

- ScriptedConverseServer: Bedrock's Converse (REST-JSON, `POST /model/{modelId}/converse`, errors as
  botocore reads them: the `x-amzn-ErrorType` header and a `message` field). Point a real boto3
  bedrock-runtime client at `server.url` (or use `server.client()`).
- ScriptedChatServer: OpenAI's Chat Completions (`POST /v1/chat/completions` and `/chat/completions`).

Each answers its script in order, records every request, and answers a request beyond the script
with an error naming it ("the scripted model has no reply left"), so a run that asks once too
often fails visibly:

    with ScriptedChatServer([ScriptedChatServer.tool_calls(("c1", "lookup", {"id": 1})),
                             ScriptedChatServer.text("done")]) as server:
        model = OpenAIChatModel(server.base_url, None, "m")
        ...
        assert server.tool_results(1) == [{"role": "tool", "tool_call_id": "c1", "content": "..."}]
"""
from __future__ import annotations

import itertools
import json
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

NO_REPLY_LEFT = "the scripted model has no reply left"


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP answer."""
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it. Header names are lower-case."""
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any  # the parsed JSON, None when the body was not JSON


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})})


def closed_port_url() -> str:
    """http://127.0.0.1:<port> where nothing listens (a port just bound and released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


_sessions: dict[str, Any] = {}


def converse_client(url: str, region: str = "us-east-1", **config: Any):
    """A real boto3 bedrock-runtime client for `url`, with dummy credentials and botocore's retries
    off (as the service's own client has them: the adapter retries)."""
    import boto3
    from botocore.config import Config

    # One session per region: it keeps the service model it loaded, a tenth of a second per client.
    if region not in _sessions:
        _sessions[region] = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                                  region_name=region)
    return _sessions[region].client("bedrock-runtime", endpoint_url=url,
                                    config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, **config))


class _ScriptedServer:
    def __init__(self, replies: list[Reply] | None = None) -> None:
        self._replies = list(replies or [])
        self._lock = threading.Lock()
        self.requests: list[Recorded] = []
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._http.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- the script ---------------------------------------------------------------------------------

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    @property
    def unused(self) -> int:
        """How many scripted replies were not asked for."""
        with self._lock:
            return len(self._replies)

    @staticmethod
    def raw(status: int, body: bytes | str | dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
        """Any status and body (a dict is sent as JSON)."""
        if isinstance(body, dict):
            return _json(status, body, headers)
        return Reply(status, body.encode() if isinstance(body, str) else body, dict(headers or {}))

    # -- lifecycle ----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        # A short poll so that stop() (shutdown waits for a poll) costs no half second per test.
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.02},
                                        name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._http.shutdown()
            self._thread.join()
            self._thread = None
        self._http.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- serving ------------------------------------------------------------------------------------

    def _answers(self, path: str) -> bool:
        raise NotImplementedError

    def _no_reply_left(self, index: int) -> Reply:
        raise NotImplementedError

    def _not_found(self, path: str) -> Reply:
        return _json(404, {"message": f"the scripted server does not serve {path}"})

    def _serve(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            self.requests.append(Recorded(method, path, headers, raw, body))
            index = len(self.requests) - 1
            if method != "POST" or not self._answers(path):
                return self._not_found(path)
            return self._replies.pop(0) if self._replies else self._no_reply_left(index)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                headers = {name.lower(): value for name, value in self.headers.items()}
                reply = server._serve(self.command, self.path, headers, raw)
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_POST = do_GET = _handle

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

        return Handler


class ScriptedConverseServer(_ScriptedServer):
    """Bedrock Runtime's Converse operation. Tool calls are (toolUseId, name, input) tuples."""

    def client(self, region: str = "us-east-1", **config: Any):
        """A real boto3 bedrock-runtime client pointed here (see converse_client)."""
        return converse_client(self.url, region, **config)

    @staticmethod
    def text(text: str, *, input_tokens: int = 10, output_tokens: int = 5, stop: str = "end_turn") -> Reply:
        return ScriptedConverseServer.message([{"text": text}], stop=stop, input_tokens=input_tokens,
                                              output_tokens=output_tokens)

    @staticmethod
    def tool_calls(*calls: tuple[str, str, Any], text: str = "", input_tokens: int = 10,
                   output_tokens: int = 5, stop: str = "tool_use") -> Reply:
        content: list[dict[str, Any]] = [{"text": text}] if text else []
        content += [{"toolUse": {"toolUseId": id, "name": name, "input": input}} for id, name, input in calls]
        return ScriptedConverseServer.message(content, stop=stop, input_tokens=input_tokens,
                                              output_tokens=output_tokens)

    @staticmethod
    def message(content: list[dict[str, Any]], *, stop: str = "end_turn", input_tokens: int = 10,
                output_tokens: int = 5) -> Reply:
        """A ConverseResponse with these content blocks."""
        return _json(200, {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": stop,
            "usage": {"inputTokens": input_tokens, "outputTokens": output_tokens,
                      "totalTokens": input_tokens + output_tokens},
            "metrics": {"latencyMs": 1},
        }, {"x-amzn-RequestId": "scripted"})

    @staticmethod
    def error(code: str, message: str, status: int = 400) -> Reply:
        """An AWS error as Bedrock sends it; botocore reads the code from x-amzn-ErrorType."""
        return _json(status, {"message": message},
                     {"x-amzn-ErrorType": f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/",
                      "x-amzn-RequestId": "scripted"})

    @staticmethod
    def throttling(message: str = "Too many requests, please wait before trying again.") -> Reply:
        return ScriptedConverseServer.error("ThrottlingException", message, 429)

    def _answers(self, path: str) -> bool:
        parts = urllib.parse.urlsplit(path).path.split("/")
        return len(parts) == 4 and parts[1] == "model" and parts[3] == "converse"

    def _no_reply_left(self, index: int) -> Reply:
        return self.error("ValidationException", f"{NO_REPLY_LEFT} (request {index})")

    def model_id(self, n: int) -> str:
        """The modelId that request n named in its path."""
        return urllib.parse.unquote(urllib.parse.urlsplit(self.requests[n].path).path.split("/")[2])

    def tool_results(self, n: int) -> list[dict[str, Any]]:
        """The toolResult blocks that request n brought: those of its last message (Converse sends
        the whole conversation each time)."""
        messages = self.requests[n].body["messages"]
        last = messages[-1] if messages else {"content": []}
        return [block["toolResult"] for block in last["content"] if "toolResult" in block]


class ScriptedChatServer(_ScriptedServer):
    """OpenAI's Chat Completions. Tool calls are (id, name, arguments) tuples; arguments that are
    not a str are sent as their JSON text, a str is sent as it is (to script malformed calls)."""

    _ids = itertools.count(1)

    @property
    def base_url(self) -> str:
        """The URL an OpenAI client is configured with (OPENAI_BASE_URL)."""
        return f"{self.url}/v1"

    @staticmethod
    def text(content: str | None, *, prompt_tokens: int = 10, completion_tokens: int = 5,
             finish_reason: str = "stop", usage: bool = True) -> Reply:
        return ScriptedChatServer.message({"role": "assistant", "content": content}, finish_reason=finish_reason,
                                          prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                          usage=usage)

    @staticmethod
    def tool_calls(*calls: tuple[str, str, Any], content: str | None = None, finish_reason: str = "tool_calls",
                   prompt_tokens: int = 10, completion_tokens: int = 5, usage: bool = True) -> Reply:
        message = {"role": "assistant", "content": content, "tool_calls": [
            {"id": id, "type": "function",
             "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}}
            for id, name, arguments in calls]}
        return ScriptedChatServer.message(message, finish_reason=finish_reason, prompt_tokens=prompt_tokens,
                                          completion_tokens=completion_tokens, usage=usage)

    @staticmethod
    def message(message: dict[str, Any], *, finish_reason: str | None = "stop", prompt_tokens: int = 10,
                completion_tokens: int = 5, usage: bool = True) -> Reply:
        """A chat.completion with this message as its only choice."""
        body: dict[str, Any] = {
            "id": f"chatcmpl-{next(ScriptedChatServer._ids)}", "object": "chat.completion", "created": 0,
            "model": "scripted", "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]}
        if usage:
            body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
        return _json(200, body)

    @staticmethod
    def error(status: int, message: str, type: str = "invalid_request_error",
              headers: dict[str, str] | None = None) -> Reply:
        return _json(status, {"error": {"message": message, "type": type, "code": None}}, headers)

    @staticmethod
    def throttling(retry_after: float | None = None, status: int = 429) -> Reply:
        headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
        return ScriptedChatServer.error(status, "Rate limit reached, please try again later",
                                        "rate_limit_error", headers)

    def _answers(self, path: str) -> bool:
        return urllib.parse.urlsplit(path).path in ("/v1/chat/completions", "/chat/completions")

    def _no_reply_left(self, index: int) -> Reply:
        return self.error(400, f"{NO_REPLY_LEFT} (request {index})")

    def tool_results(self, n: int) -> list[dict[str, Any]]:
        """The `role: tool` messages that request n brought: those after its last assistant message."""
        messages = self.requests[n].body["messages"]
        tail: list[dict[str, Any]] = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            tail.insert(0, message)
        return tail
