"""The language-model adapters on the wire: a real boto3 client and the real HTTP path against
scripted Converse and Chat Completions servers (tests/support/model_servers.py)."""
from __future__ import annotations

import json
import logging
import socket
import traceback

import pytest
from botocore.exceptions import ClientError

from chalicelib.adapters.language_models import (
    DEFAULT_MODELS,
    OLLAMA_BASE_URL,
    BedrockConverseModel,
    OpenAIChatModel,
    bedrock_client,
    language_model,
)
from chalicelib.domain.agents.conversation import (
    AssistantMessage,
    ModelError,
    ModelUnavailable,
    StopReason,
    ToolCall,
    ToolResult,
    ToolResults,
    ToolSpec,
    Usage,
    UserMessage,
)
from chalicelib.settings import Settings
from tests.support.model_servers import (
    NO_REPLY_LEFT,
    ScriptedChatServer,
    ScriptedConverseServer,
    closed_port_url,
    converse_client,
)

LOOKUP = ToolSpec("lookup", "Finds a record by id.", {"type": "object", "properties": {"id": {"type": "integer"}},
                                                      "required": ["id"]})
NOVA = "amazon.nova-pro-v1:0"
KEY = "sk-test-4b1d-very-secret"


class Sleeps(list):
    """A sleep function that records its delays instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps():
    return Sleeps()


@pytest.fixture
def converse():
    with ScriptedConverseServer() as server:
        yield server


@pytest.fixture
def chat():
    with ScriptedChatServer() as server:
        yield server


def bedrock(server, sleeps, **options):
    return BedrockConverseModel(server.client(), NOVA, sleep=sleeps, random=lambda: 0.5,
                                backoff_seconds=0.01, **options)


def openai(server, sleeps, key=None, **options):
    return OpenAIChatModel(server.base_url, key, "llama3.1", sleep=sleeps, random=lambda: 0.5,
                           backoff_seconds=0.01, **options)


def two_calls_and_results(reply):
    """The conversation after the model's two tool calls: the first succeeded, the second failed."""
    first, second = reply.message.tool_calls
    return [UserMessage("find 7"), reply.message,
            ToolResults((ToolResult(first.id, "seven"), ToolResult(second.id, "no such tool", is_error=True)))]


# -- Bedrock Converse ----------------------------------------------------------------------------

def test_converse_text_answer(converse, sleeps):
    converse.add(ScriptedConverseServer.text("Hello.", input_tokens=12, output_tokens=3))

    reply = bedrock(converse, sleeps).complete("Be brief.", [UserMessage("hi")], [], 200)

    assert reply.message == AssistantMessage("Hello.")
    assert reply.stop == StopReason.END
    assert reply.usage == Usage(12, 3)
    [request] = converse.requests
    assert converse.model_id(0) == NOVA
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256")  # a real, signed boto3 request
    assert request.body == {"system": [{"text": "Be brief."}], "messages": [{"role": "user", "content": [{"text": "hi"}]}],
                            "inferenceConfig": {"maxTokens": 200}}  # no toolConfig without tools


def test_converse_tool_call_then_results_in_the_protocols_shape(converse, sleeps):
    converse.add(ScriptedConverseServer.tool_calls(("tu-1", "lookup", {"id": 7}), ("tu-2", "lookdown", {}),
                                                   text="Looking.", input_tokens=20, output_tokens=8),
                 ScriptedConverseServer.text("Record 7 is seven.", input_tokens=40, output_tokens=6))
    model = bedrock(converse, sleeps)

    first = model.complete("sys", [UserMessage("find 7")], [LOOKUP], 100)
    assert first.stop == StopReason.TOOL_USE
    assert first.message == AssistantMessage("Looking.", (ToolCall("tu-1", "lookup", {"id": 7}, '{"id": 7}'),
                                                          ToolCall("tu-2", "lookdown", {}, "{}")))
    assert converse.requests[0].body["toolConfig"] == {"tools": [{"toolSpec": {
        "name": "lookup", "description": "Finds a record by id.", "inputSchema": {"json": LOOKUP.parameters}}}]}

    second = model.complete("sys", two_calls_and_results(first), [LOOKUP], 100)
    assert second.message.text == "Record 7 is seven." and second.stop == StopReason.END
    assert converse.tool_results(1) == [
        {"toolUseId": "tu-1", "content": [{"text": "seven"}], "status": "success"},
        {"toolUseId": "tu-2", "content": [{"text": "no such tool"}], "status": "error"}]
    assert converse.requests[1].body["messages"][1] == {"role": "assistant", "content": [
        {"text": "Looking."}, {"toolUse": {"toolUseId": "tu-1", "name": "lookup", "input": {"id": 7}}},
        {"toolUse": {"toolUseId": "tu-2", "name": "lookdown", "input": {}}}]}
    assert first.usage + second.usage == Usage(60, 14)


def test_converse_roles_alternate_and_blank_text_is_left_out(converse, sleeps):
    """Tool results and a prompt after them are one user message; a reply with nothing said is dropped."""
    converse.add(ScriptedConverseServer.text("ok"))
    call = ToolCall("tu-1", "lookup", None, "not json")
    bedrock(converse, sleeps).complete("", [
        UserMessage("a"), AssistantMessage("", (call,)), ToolResults((ToolResult("tu-1", "bad input", True),)),
        UserMessage("go on"), AssistantMessage(""), UserMessage("and?")], [], 10)

    body = converse.requests[0].body
    assert "system" not in body  # Converse refuses a blank system block
    assert body["messages"] == [
        {"role": "user", "content": [{"text": "a"}]},
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tu-1", "name": "lookup", "input": {}}}]},
        {"role": "user", "content": [
            {"toolResult": {"toolUseId": "tu-1", "content": [{"text": "bad input"}], "status": "error"}},
            {"text": "go on"}, {"text": "and?"}]}]


@pytest.mark.parametrize("sent, arguments, raw", [
    ("id seven", None, "id seven"), ([1, 2], None, "[1, 2]"),
    ('{"id": 7}', {"id": 7}, '{"id": 7}'),  # an object sent as JSON text is read, as from OpenAI servers
])
def test_converse_tool_input_that_is_not_an_object(converse, sleeps, sent, arguments, raw):
    converse.add(ScriptedConverseServer.tool_calls(("tu-1", "lookup", sent)))

    reply = bedrock(converse, sleeps).complete("", [UserMessage("x")], [LOOKUP], 10)

    assert reply.stop == StopReason.TOOL_USE
    assert reply.message.tool_calls == (ToolCall("tu-1", "lookup", arguments, raw),)


@pytest.mark.parametrize("reason, stop", [("max_tokens", StopReason.MAX_TOKENS), ("stop_sequence", StopReason.END),
                                          ("end_turn", StopReason.END)])
def test_converse_stop_reasons(converse, sleeps, reason, stop):
    converse.add(ScriptedConverseServer.text("partial", stop=reason))
    assert bedrock(converse, sleeps).complete("", [UserMessage("x")], [], 10).stop == stop


@pytest.mark.parametrize("reason", ["content_filtered", "guardrail_intervened", "model_context_window_exceeded"])
def test_converse_unusable_stops_fail_with_the_reason(converse, sleeps, reason):
    converse.add(ScriptedConverseServer.text("", stop=reason))
    with pytest.raises(ModelError, match=reason):
        bedrock(converse, sleeps).complete("", [UserMessage("x")], [], 10)


@pytest.mark.parametrize("code, status", [("ThrottlingException", 429), ("ServiceUnavailableException", 503),
                                          ("ModelNotReadyException", 429)])
def test_converse_throttling_is_retried_with_backoff_then_answered(converse, sleeps, code, status):
    converse.add(ScriptedConverseServer.error(code, "slow down", status), ScriptedConverseServer.error(code, "slow down", status),
                 ScriptedConverseServer.text("finally"))

    reply = bedrock(converse, sleeps).complete("", [UserMessage("x")], [], 10)

    assert reply.message.text == "finally"
    assert len(converse.requests) == 3  # our retries, and botocore's own none
    assert converse.requests[0].body == converse.requests[1].body == converse.requests[2].body
    assert sleeps == [0.0075, 0.015]  # base 0.01 doubling, with jitter 0.5 of the upper half


def test_converse_throttling_that_never_stops_fails_after_the_bound(converse, sleeps):
    converse.add(*[ScriptedConverseServer.throttling()] * 4)

    with pytest.raises(ModelError, match="kept throttling after 3 tries") as raised:
        bedrock(converse, sleeps, tries=3).complete("", [UserMessage("x")], [], 10)

    assert not isinstance(raised.value, ModelUnavailable)
    assert len(converse.requests) == 3 and len(sleeps) == 2 and converse.unused == 1


def test_converse_backoff_is_capped(converse, sleeps):
    converse.add(*[ScriptedConverseServer.throttling()] * 5, ScriptedConverseServer.text("ok"))
    bedrock(converse, sleeps, max_backoff_seconds=0.02).complete("", [UserMessage("x")], [], 10)
    assert sleeps == [0.0075, 0.015, 0.015, 0.015, 0.015]


@pytest.mark.parametrize("code", ["AccessDeniedException", "ResourceNotFoundException"])
def test_converse_model_without_access_is_unavailable_with_advice(converse, sleeps, code):
    converse.add(ScriptedConverseServer.error(code, "You don't have access to the model with the specified model ID.",
                                              403 if code == "AccessDeniedException" else 404))

    with pytest.raises(ModelUnavailable) as raised:
        bedrock(converse, sleeps).complete("", [UserMessage("x")], [], 10)

    message = str(raised.value)
    assert f"enable model access for {NOVA} in the Bedrock console" in message
    assert "RECON_DEFAULT_MODEL" in message and code in message
    assert len(converse.requests) == 1 and sleeps == []


def test_converse_unrecognised_credentials_are_unavailable(converse, sleeps):
    converse.add(ScriptedConverseServer.error("UnrecognizedClientException", "The security token is invalid.", 403))
    with pytest.raises(ModelUnavailable, match="credentials"):
        bedrock(converse, sleeps).complete("", [UserMessage("x")], [], 10)


def test_converse_other_errors_are_model_errors_with_the_servers_message(converse, sleeps):
    converse.add(ScriptedConverseServer.error("ValidationException", "maxTokens exceeds the model's limit"))
    with pytest.raises(ModelError, match="ValidationException: maxTokens exceeds the model's limit") as raised:
        bedrock(converse, sleeps).complete("", [UserMessage("x")], [], 10)
    assert not isinstance(raised.value, ModelUnavailable)


def test_converse_asking_beyond_the_script_fails_visibly(converse, sleeps):
    converse.add(ScriptedConverseServer.text("one"))
    model = bedrock(converse, sleeps)
    model.complete("", [UserMessage("x")], [], 10)
    with pytest.raises(ModelError, match=NO_REPLY_LEFT):
        model.complete("", [UserMessage("x")], [], 10)


def converse_body(content=None, *, usage=None, **fields):
    """A ConverseResponse's JSON with these fields as given (a malformed one, to script)."""
    body = {"output": {"message": {"role": "assistant", "content": [{"text": "x"}] if content is None else content}},
            "stopReason": "end_turn", "usage": usage or {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}}
    return ScriptedConverseServer.raw(200, {**body, **fields}, {"x-amzn-RequestId": "scripted"})


UNREADABLE = "the model's reply could not be read: "
MALFORMED_CONVERSE = {
    "content an object": (converse_body({"text": "x"}), "botocore could not parse it"),
    "content a string": (converse_body("hello"), "botocore could not parse it"),
    "a block that is a string": (ScriptedConverseServer.message(["hello"]), "botocore could not parse it"),
    "tool use without a name": (ScriptedConverseServer.message([{"toolUse": {"toolUseId": "t", "input": {}}}]),
                                "content block 0: toolUse.name is missing, not a string"),
    "tool use named by a list": (ScriptedConverseServer.tool_calls(("t", ["lookup"], {})),
                                 "content block 0: toolUse.name is a list, not a string"),
    "tool use without an id": (ScriptedConverseServer.message([{"toolUse": {"name": "lookup", "input": {}}}]),
                               "content block 0: toolUse.toolUseId is missing, not a string"),
    "text a number": (ScriptedConverseServer.message([{"text": 5}]), "content block 0: text is a number, not a string"),
    "tokens not a number": (converse_body(usage={"inputTokens": "n/a", "outputTokens": 1}),
                            "botocore could not parse it (ValueError: invalid literal for int()"),
    "usage a list": (converse_body(usage=[1, 2]), "botocore could not parse it"),
    "stop reason a list": (converse_body(stopReason=["end_turn"]), "stopReason is a list, not a string"),
    "no output": (ScriptedConverseServer.raw(200, {"stopReason": "end_turn"}), "output is missing, not an object"),
    "not json": (ScriptedConverseServer.raw(200, "<html>proxy error</html>", {"Content-Type": "application/json"}),
                 "output is missing, not an object"),
}


@pytest.mark.parametrize("reply, reason", MALFORMED_CONVERSE.values(), ids=MALFORMED_CONVERSE.keys())
def test_converse_a_reply_out_of_shape_is_a_model_error_saying_so(converse, sleeps, reply, reason):
    converse.add(reply)
    with pytest.raises(ModelError) as raised:
        bedrock(converse, sleeps).complete("", [UserMessage("x")], [LOOKUP], 10)
    assert type(raised.value) is ModelError
    assert str(raised.value).startswith(UNREADABLE + reason), str(raised.value)
    assert len(str(raised.value)) < 400 and len(converse.requests) == 1 and sleeps == []  # not retried


def test_converse_nothing_listening_is_unavailable_with_advice(sleeps):
    model = BedrockConverseModel(converse_client(closed_port_url()), NOVA, sleep=sleeps)

    with pytest.raises(ModelUnavailable) as raised:
        model.complete("", [UserMessage("x")], [], 10)

    assert "no Bedrock endpoint answered" in str(raised.value)
    assert "AWS_ENDPOINT_URL_BEDROCK_RUNTIME" in str(raised.value) and "RECON_MODEL_PROVIDER=openai" in str(raised.value)
    assert sleeps == []


def test_the_factorys_bedrock_client_leaves_retries_to_the_adapter(converse, monkeypatch):
    """botocore's own retries would multiply the adapter's: one throttling answer reaches the caller."""
    converse.add(ScriptedConverseServer.throttling(), ScriptedConverseServer.text("not asked"))
    client = bedrock_client(Settings(AWS_ENDPOINT_URL_BEDROCK_RUNTIME=converse.url))

    with pytest.raises(ClientError, match="ThrottlingException"):
        client.converse(modelId=NOVA, messages=[{"role": "user", "content": [{"text": "x"}]}])
    assert len(converse.requests) == 1


def test_the_factorys_bedrock_model_talks_converse(converse, clean_model_environment):
    converse.add(ScriptedConverseServer.text("hi"))
    model = language_model(Settings(AWS_ENDPOINT_URL_BEDROCK_RUNTIME=converse.url))

    assert model.complete("", [UserMessage("x")], [], 10).message.text == "hi"
    assert converse.model_id(0) == DEFAULT_MODELS["bedrock"]


# -- OpenAI-compatible Chat Completions ----------------------------------------------------------

def test_chat_text_answer(chat, sleeps):
    chat.add(ScriptedChatServer.text("Hello.", prompt_tokens=12, completion_tokens=3))

    reply = openai(chat, sleeps).complete("Be brief.", [UserMessage("hi")], [], 200)

    assert reply.message == AssistantMessage("Hello.") and reply.stop == StopReason.END
    assert reply.usage == Usage(12, 3)
    [request] = chat.requests
    assert request.path == "/v1/chat/completions"
    assert "authorization" not in request.headers  # no key, no header
    assert request.body == {"model": "llama3.1", "max_tokens": 200, "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]}  # no tools key


def test_chat_tool_call_then_results_in_the_protocols_shape(chat, sleeps):
    chat.add(ScriptedChatServer.tool_calls(("call_1", "lookup", {"id": 7}), ("call_2", "lookdown", {}),
                                           prompt_tokens=20, completion_tokens=8),
             ScriptedChatServer.text("Record 7 is seven.", prompt_tokens=40, completion_tokens=6))
    model = openai(chat, sleeps)

    first = model.complete("sys", [UserMessage("find 7")], [LOOKUP], 100)
    assert first.stop == StopReason.TOOL_USE
    assert first.message == AssistantMessage("", (ToolCall("call_1", "lookup", {"id": 7}, '{"id": 7}'),
                                                  ToolCall("call_2", "lookdown", {}, "{}")))
    assert chat.requests[0].body["tools"] == [{"type": "function", "function": {
        "name": "lookup", "description": "Finds a record by id.", "parameters": LOOKUP.parameters}}]

    second = model.complete("sys", two_calls_and_results(first), [LOOKUP], 100)
    assert second.message.text == "Record 7 is seven."
    assert chat.tool_results(1) == [{"role": "tool", "tool_call_id": "call_1", "content": "seven"},
                                    {"role": "tool", "tool_call_id": "call_2", "content": "ERROR: no such tool"}]
    assistant = chat.requests[1].body["messages"][2]
    assert assistant == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"id": 7}'}},
        {"id": "call_2", "type": "function", "function": {"name": "lookdown", "arguments": "{}"}}]}
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"id": 7}  # a JSON string
    assert first.usage + second.usage == Usage(60, 14)


@pytest.mark.parametrize("finish_reason", ["stop", "tool_calls", None])
def test_chat_tool_calls_mean_tool_use_whatever_finish_reason_says(chat, sleeps, finish_reason):
    chat.add(ScriptedChatServer.tool_calls(("c", "lookup", {"id": 1}), finish_reason=finish_reason))
    assert openai(chat, sleeps).complete("", [UserMessage("x")], [LOOKUP], 10).stop == StopReason.TOOL_USE


@pytest.mark.parametrize("finish_reason, stop", [("length", StopReason.MAX_TOKENS), ("stop", StopReason.END)])
def test_chat_finish_reasons(chat, sleeps, finish_reason, stop):
    chat.add(ScriptedChatServer.text("partial", finish_reason=finish_reason))
    assert openai(chat, sleeps).complete("", [UserMessage("x")], [], 10).stop == stop


def test_chat_null_content_and_missing_usage(chat, sleeps):
    chat.add(ScriptedChatServer.text(None, usage=False))
    reply = openai(chat, sleeps).complete("", [UserMessage("x")], [], 10)
    assert reply.message == AssistantMessage("") and reply.usage == Usage(0, 0)


@pytest.mark.parametrize("raw", ['{"id": 7', '"just a string"', "[1, 2]", "null"])
def test_chat_malformed_tool_arguments_are_kept_raw(chat, sleeps, raw):
    chat.add(ScriptedChatServer.tool_calls(("c1", "lookup", raw)))

    reply = openai(chat, sleeps).complete("", [UserMessage("x")], [LOOKUP], 10)

    assert reply.stop == StopReason.TOOL_USE
    assert reply.message.tool_calls == (ToolCall("c1", "lookup", None, raw),)


def test_chat_empty_arguments_are_a_call_without_parameters(chat, sleeps):
    """llama.cpp's server and others send "" for a tool without parameters."""
    chat.add(ScriptedChatServer.tool_calls(("c1", "now", "")))
    reply = openai(chat, sleeps).complete("", [UserMessage("x")], [LOOKUP], 10)
    assert reply.message.tool_calls == (ToolCall("c1", "now", {}, ""),)


def test_chat_malformed_call_goes_back_as_sent(chat, sleeps):
    chat.add(ScriptedChatServer.tool_calls(("c1", "lookup", "{oops")), ScriptedChatServer.text("sorry"))
    model = openai(chat, sleeps)
    first = model.complete("", [UserMessage("x")], [LOOKUP], 10)
    model.complete("", [UserMessage("x"), first.message,
                        ToolResults((ToolResult("c1", "arguments are not a JSON object", True),))], [LOOKUP], 10)
    assert chat.requests[1].body["messages"][1]["tool_calls"][0]["function"]["arguments"] == "{oops"


def test_chat_throttling_is_retried_with_backoff_then_answered(chat, sleeps):
    chat.add(ScriptedChatServer.throttling(), ScriptedChatServer.throttling(status=503), ScriptedChatServer.text("finally"))

    reply = openai(chat, sleeps).complete("", [UserMessage("x")], [], 10)

    assert reply.message.text == "finally"
    assert len(chat.requests) == 3
    assert chat.requests[0].raw == chat.requests[1].raw == chat.requests[2].raw
    assert sleeps == [0.0075, 0.015]


def test_chat_retry_after_is_honoured_up_to_the_cap(chat, sleeps):
    chat.add(ScriptedChatServer.throttling(retry_after=2), ScriptedChatServer.throttling(retry_after=9999),
             ScriptedChatServer.text("ok"))
    openai(chat, sleeps, max_backoff_seconds=30).complete("", [UserMessage("x")], [], 10)
    assert sleeps == [2.0, 30.0]


def test_chat_throttling_that_never_stops_fails_after_the_bound(chat, sleeps):
    chat.add(*[ScriptedChatServer.throttling()] * 6)

    with pytest.raises(ModelError, match="kept throttling after 4 tries"):
        openai(chat, sleeps, tries=4).complete("", [UserMessage("x")], [], 10)

    assert len(chat.requests) == 4 and len(sleeps) == 3


def test_chat_nothing_listening_is_unavailable_with_advice(sleeps):
    url = closed_port_url() + "/v1"
    model = OpenAIChatModel(url, None, "llama3.1", sleep=sleeps)

    with pytest.raises(ModelUnavailable) as raised:
        model.complete("", [UserMessage("x")], [], 10)

    message = str(raised.value)
    assert f"no language model answered at {url}" in message
    assert "ollama serve" in message and "OPENAI_BASE_URL=" in message and "RECON_MODEL_PROVIDER=bedrock" in message
    assert sleeps == []


def test_chat_a_server_that_never_answers_times_out():
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        model = OpenAIChatModel(f"http://127.0.0.1:{port}/v1", None, "m", timeout_seconds=0.2)
        with pytest.raises(ModelError, match="did not answer within 0.2 s") as raised:
            model.complete("", [UserMessage("x")], [], 10)
    assert not isinstance(raised.value, ModelUnavailable)


def chat_body(**fields):
    """A chat.completion's JSON with these fields as given (a malformed one, to script)."""
    choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}
    return ScriptedChatServer.raw(200, {"id": "c", "object": "chat.completion", "choices": [choice], **fields})


def chat_calls(*calls):
    return ScriptedChatServer.message({"role": "assistant", "content": None, "tool_calls": list(calls)},
                                      finish_reason="tool_calls")


MALFORMED_CHAT = {
    "a call that is a string": (chat_calls("oops"), "tool_calls[0] is a string, not an object"),
    "calls an object": (ScriptedChatServer.message({"role": "assistant", "tool_calls": {"id": "c"}}),
                        "message.tool_calls is an object, not a list"),
    "a name that is a list": (ScriptedChatServer.tool_calls(("c1", ["lookup"], {})),
                              "tool_calls[0].function.name is a list, not a string"),
    "no name": (chat_calls({"id": "c1", "type": "function", "function": {"arguments": "{}"}}),
                "tool_calls[0].function.name is missing, not a string"),
    "no function": (chat_calls({"id": "c1", "type": "function"}), "tool_calls[0].function is missing, not an object"),
    "an id that is a number": (ScriptedChatServer.tool_calls((7, "lookup", {})),
                               "tool_calls[0].id is a number, not a string"),
    "tokens not a number": (chat_body(usage={"prompt_tokens": "n/a", "completion_tokens": 1}),
                            'usage.prompt_tokens is "n/a", not a token count'),
    "tokens negative": (chat_body(usage={"prompt_tokens": 1, "completion_tokens": -5}),
                        "usage.completion_tokens is -5, not a token count"),
    "usage a list": (chat_body(usage=[1]), "usage is a list, not an object"),
    "no choices": (ScriptedChatServer.raw(200, {"choices": []}), "choices is empty"),
    "choices an object": (ScriptedChatServer.raw(200, {"choices": {"0": {}}}), "choices is an object, not a list"),
    "choices missing": (ScriptedChatServer.raw(200, {"object": "chat.completion"}), "choices is missing, not a list"),
    "a message that is a string": (ScriptedChatServer.raw(200, {"choices": [{"message": "hi"}]}),
                                   "choices[0].message is a string, not an object"),
    "content a number": (ScriptedChatServer.message({"role": "assistant", "content": 5}),
                         "message.content is a number, not a string or a list"),
    "finish reason a list": (ScriptedChatServer.message({"role": "assistant", "content": "x"}, finish_reason=["x"]),
                             "choices[0].finish_reason is a list, not a string"),
    "not json, echoing the key": (ScriptedChatServer.raw(200, f"<html>Bearer {KEY}</html>"),
                                  "the model server at http://127.0.0.1:"),
    "an empty body": (ScriptedChatServer.raw(200, b""), "the model server at http://127.0.0.1:"),
}


@pytest.mark.parametrize("reply, reason", MALFORMED_CHAT.values(), ids=MALFORMED_CHAT.keys())
def test_chat_a_reply_out_of_shape_is_a_model_error_saying_so(chat, sleeps, reply, reason):
    chat.add(reply)
    with pytest.raises(ModelError) as raised:
        openai(chat, sleeps, key=KEY).complete("", [UserMessage("x")], [LOOKUP], 10)
    message = str(raised.value)
    assert type(raised.value) is ModelError
    assert message.startswith(UNREADABLE + reason), message
    assert KEY not in message and len(message) < 400 and len(chat.requests) == 1 and sleeps == []


def test_chat_a_body_that_is_not_json_is_shown_short_and_without_the_key(chat, sleeps):
    chat.add(ScriptedChatServer.raw(200, f"<html>Bearer {KEY}</html>" + " filler" * 500), ScriptedChatServer.raw(200, ""))
    model = openai(chat, sleeps, key=KEY)
    with pytest.raises(ModelError, match=r"did not answer a JSON object \(<html>Bearer \*\*\*</html> filler") as raised:
        model.complete("", [UserMessage("x")], [], 10)
    assert KEY not in str(raised.value) and len(str(raised.value)) < 450
    with pytest.raises(ModelError, match=r"did not answer a JSON object \(an empty body\)"):
        model.complete("", [UserMessage("x")], [], 10)


def test_chat_text_parts_of_other_kinds_are_skipped(chat, sleeps):
    chat.add(ScriptedChatServer.message({"role": "assistant", "content": [
        {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}, "b", {"type": "text", "text": "c"}]}))
    assert openai(chat, sleeps).complete("", [UserMessage("x")], [], 10).message == AssistantMessage("ac")


def test_chat_unknown_model_is_unavailable_with_advice(chat, sleeps):
    chat.add(ScriptedChatServer.error(404, 'model "llama3.1" not found, try pulling it first', "not_found_error"))
    with pytest.raises(ModelUnavailable, match="ollama pull llama3.1") as raised:
        openai(chat, sleeps).complete("", [UserMessage("x")], [], 10)
    assert "not found, try pulling it first" in str(raised.value)


def test_chat_other_errors_are_model_errors_with_an_excerpt(chat, sleeps):
    chat.add(ScriptedChatServer.error(500, "out of memory " + "x" * 2000, "server_error"))
    with pytest.raises(ModelError) as raised:
        openai(chat, sleeps).complete("", [UserMessage("x")], [], 10)
    assert not isinstance(raised.value, ModelUnavailable)
    assert "HTTP 500: out of memory" in str(raised.value) and len(str(raised.value)) < 500
    assert sleeps == []


def test_chat_asking_beyond_the_script_fails_visibly(chat, sleeps):
    with pytest.raises(ModelError, match=NO_REPLY_LEFT):
        openai(chat, sleeps).complete("", [UserMessage("x")], [], 10)


@pytest.fixture
def logged():
    """What the adapters log, as the service prints it: a handler beside the service's own on its
    logger, with its formatter (pytest's capture may not see it, depending on earlier tests)."""
    from chalicelib.observability import logger

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    keep = Keep()
    keep.setFormatter(logger.registered_formatter)
    target = logging.getLogger(logger.name)
    target.addHandler(keep)
    yield lines
    target.removeHandler(keep)


def test_chat_the_key_is_sent_as_a_bearer_and_never_shown(chat, sleeps, logged):
    # Servers echo a rejected key in their message; throttling is logged.
    chat.add(ScriptedChatServer.throttling(), ScriptedChatServer.text("ok"),
             ScriptedChatServer.error(401, f"Incorrect API key provided: {KEY}", "invalid_api_key"),
             ScriptedChatServer.raw(500, f"crashed while handling Bearer {KEY}"))
    model = openai(chat, sleeps, key=KEY)

    assert model.complete("", [UserMessage("x")], [], 10).message.text == "ok"
    assert [r.headers["authorization"] for r in chat.requests] == [f"Bearer {KEY}"] * 2
    errors = []
    for _ in range(2):
        with pytest.raises(ModelError) as raised:
            model.complete("", [UserMessage("x")], [], 10)
        errors.append(raised.value)
    assert isinstance(errors[0], ModelUnavailable) and "OPENAI_API_KEY" in str(errors[0])
    assert "Incorrect API key provided: ***" in str(errors[0]) and "Bearer ***" in str(errors[1])
    shown = [repr(model), str(vars(model)), "\n".join(logged)]
    shown += ["".join(traceback.format_exception(error)) for error in errors]
    assert all(KEY not in text for text in shown)
    assert "throttling" in shown[2]  # the log was captured, so its check above means something


# -- The factory ---------------------------------------------------------------------------------

@pytest.fixture
def clean_model_environment(monkeypatch):
    for name in ("RECON_MODEL_PROVIDER", "RECON_DEFAULT_MODEL", "RECON_LOCAL_MODE", "OPENAI_BASE_URL",
                 "RECON_OPENAI_BASE_URL", "OPENAI_API_KEY", "RECON_OPENAI_API_KEY", "RECON_BEDROCK_ENDPOINT",
                 "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_network(monkeypatch, clean_model_environment):
    """The factory contacts nothing: no HTTP request, no boto3 session (which resolves credentials)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the factory contacted something")
    monkeypatch.setattr("urllib.request.urlopen", refuse)
    monkeypatch.setattr("boto3.session.Session", refuse)
    monkeypatch.setattr("socket.create_connection", refuse)


def test_factory_on_aws_is_bedrock_with_its_default_model(no_network):
    model = language_model(Settings())
    assert isinstance(model, BedrockConverseModel)
    assert model.model == DEFAULT_MODELS["bedrock"]


def test_factory_locally_is_ollama(no_network):
    model = language_model(Settings(local_mode=True))
    assert isinstance(model, OpenAIChatModel)
    assert model.model == DEFAULT_MODELS["openai"] == "llama3.1"
    assert repr(model) == f"OpenAIChatModel(base_url='{OLLAMA_BASE_URL}', model='llama3.1')"


def test_factory_model_choice(no_network):
    assert language_model(Settings(default_model="anthropic.claude-x")).model == "anthropic.claude-x"
    assert language_model(Settings(default_model="anthropic.claude-x"), "amazon.nova-lite-v1:0").model == \
        "amazon.nova-lite-v1:0"
    assert language_model(Settings(local_mode=True, default_model="qwen2.5"), None).model == "qwen2.5"


def test_factory_provider_overrides_the_mode(no_network):
    assert isinstance(language_model(Settings(local_mode=True, model_provider="bedrock")), BedrockConverseModel)
    model = language_model(Settings(model_provider="openai", OPENAI_BASE_URL="https://llm.example/v1/"))
    assert isinstance(model, OpenAIChatModel)
    assert repr(model) == "OpenAIChatModel(base_url='https://llm.example/v1', model='llama3.1')"


def test_factory_openai_on_aws_needs_a_url(no_network):
    with pytest.raises(ModelUnavailable, match="OPENAI_BASE_URL"):
        language_model(Settings(model_provider="openai"))


def test_factory_refuses_a_base_url_that_is_not_http(no_network):
    with pytest.raises(ModelUnavailable, match="http"):
        language_model(Settings(local_mode=True, OPENAI_BASE_URL="localhost:11434/v1"))


def test_factorys_openai_model_uses_the_configured_server_and_key(chat, clean_model_environment):
    chat.add(ScriptedChatServer.text("hi"))
    model = language_model(Settings(local_mode=True, OPENAI_BASE_URL=chat.base_url, OPENAI_API_KEY=KEY,
                                    default_model="qwen2.5"))

    assert model.complete("", [UserMessage("x")], [], 10).message.text == "hi"
    assert chat.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert chat.requests[0].body["model"] == "qwen2.5"
    assert KEY not in repr(model)
