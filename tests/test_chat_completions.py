"""The Chat Completions client (graph/models/chat_completions.py) against a real server on loopback.

Each test's server writes exactly the bytes a provider could send, so what the protocol allows
(long lines, events split over lines, comments) and what it does not (a chunk that is not JSON, an
answer that never ends) are both on the wire. The turns that run over this client are in
tests/test_models_http.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from langchain_core.messages import AIMessageChunk, HumanMessage
from pydantic import SecretStr

from tollgate.graph.models import chat_completions
from tollgate.graph.models.chat_completions import ChatCompletionsModel, ProviderError
from tollgate.graph.models.resilient import Provider, ResilientChatModel
from tests.children import free_port

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Server:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.answer: Handler | None = None
        self.url = ""


@pytest.fixture
async def server() -> AsyncIterator[_Server]:
    state = _Server()

    async def completions(request: web.Request) -> web.StreamResponse:
        state.bodies.append(await request.json())
        state.headers.append(dict(request.headers))
        assert state.answer is not None
        return await state.answer(request)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    state.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield state
    finally:
        await runner.cleanup()


def _sse(*events: bytes, delay: float = 0.0) -> Handler:
    """A stream of these raw event bytes (each written as it is)."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            await response.write(event)
            if delay:
                await asyncio.sleep(delay)
        await response.write_eof()
        return response

    return answer


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _delta(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return _data({"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def _call_deltas(name: str, arguments: str) -> list[bytes]:
    return [_delta({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                    "function": {"name": name, "arguments": ""}}]}),
            _delta({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
            _delta({}, "tool_calls")]


def _model(server: _Server, **extra: Any) -> ChatCompletionsModel:
    return ChatCompletionsModel(base_url=server.url, model="m", api_key=SecretStr("sk-test-secret"), **extra)


async def _streamed(model: Any) -> AIMessageChunk:
    full: AIMessageChunk | None = None
    async for chunk in model.astream([HumanMessage("hi")]):
        full = chunk if full is None else full + chunk
    assert full is not None
    return full


async def test_a_streamed_tool_call_longer_than_an_aiohttp_line_arrives_whole(server: _Server) -> None:
    """One chunk of arguments over 64 KiB (a long mail body): aiohttp's ``readline`` refuses such
    a line; the client reads it whole, as the one tool call it is."""
    body = "x" * 200_000
    server.answer = _sse(*_call_deltas("mail__send", json.dumps({"to": ["sam@example.com"], "body": body})),
                         b"data: [DONE]\n\n")
    model = _model(server)
    full = await _streamed(model.bind_tools([_tool("mail__send")]))
    assert [c["name"] for c in full.tool_call_chunks] == ["mail__send"]
    assert json.loads(full.tool_call_chunks[0]["args"])["body"] == body
    await model.aclose()


async def test_events_split_over_lines_with_comments_and_crlf_are_read_as_the_protocol_says(server: _Server) -> None:
    """An event's data over two ``data:`` lines is one JSON text joined by a newline; comments,
    other fields and CRLF line ends are ignored; text arrives in order."""
    server.answer = _sse(
        b": keep-alive\r\n\r\n",
        b"event: message\r\nid: 1\r\n",
        b'data: {"model": "m", "choices": [{"index": 0,\r\ndata: "delta": {"content": "Hello "}}]}\r\n\r\n',
        _delta({"content": "there."}),
        _delta({}, "stop"),
        _data({"model": "m", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}),
        b"data: [DONE]\n\n",
    )
    model = _model(server)
    full = await _streamed(model)
    assert full.content == "Hello there."
    assert full.usage_metadata == {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}
    sent = server.bodies[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == [{"role": "user", "content": "hi"}]
    assert server.headers[0]["Authorization"] == "Bearer sk-test-secret"
    await model.aclose()


async def test_reasoning_deltas_are_kept_apart_from_the_text(server: _Server) -> None:
    server.answer = _sse(_delta({"reasoning_content": "Count them."}), _delta({"reasoning": " Three."}),
                         _delta({"content": "Three things."}), _delta({}, "stop"), b"data: [DONE]\n\n")
    model = _model(server)
    reasoning = [c.additional_kwargs.get("reasoning_content") async for c in model.astream([HumanMessage("hi")])]
    assert [r for r in reasoning if r] == ["Count them.", " Three."]
    await model.aclose()


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_arguments_that_are_not_a_json_object_are_an_invalid_call_never_repaired(server: _Server, stream: bool) -> None:
    """``[1]`` and a cut-off object are not arguments: an invalid tool call, as the picker refuses it."""

    async def whole(request: web.Request) -> web.Response:
        return web.json_response({"model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "tasks__create", "arguments": "[1]"}},
                {"id": "b", "type": "function", "function": {"name": "tasks__create", "arguments": '{"title": "x"'}},
                {"id": "c", "type": "function", "function": {"name": "tasks__create", "arguments": '{"title": "x"}'}},
            ]}}]})

    model = _model(server)
    if stream:
        server.answer = _sse(*_call_deltas("tasks__create", '{"title": "x"'), b"data: [DONE]\n\n")
        full = await _streamed(model)
        assert full.tool_call_chunks[0]["args"] == '{"title": "x"'  # the picker's strict parse refuses it
    else:
        server.answer = whole
        answer = await model.ainvoke([HumanMessage("hi")])
        assert [c["id"] for c in answer.tool_calls] == ["c"] and answer.tool_calls[0]["args"] == {"title": "x"}
        assert [c["id"] for c in answer.invalid_tool_calls] == ["a", "b"]
    await model.aclose()


async def test_a_whole_answers_arguments_are_read_as_the_streamed_ones_are_an_integer_of_any_size_exact(
    server: _Server,
) -> None:
    """A whole completion's arguments go through the same parse as a stream's (the picker's): an
    integer past 64 bits keeps its value rather than turning into a float."""
    big = 123456789012345678901234567890

    async def whole(request: web.Request) -> web.Response:
        arguments = '{"amount": ' + str(big) + "}"
        return web.json_response({"model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "pay__send", "arguments": arguments}}]}}]})

    server.answer = whole
    model = _model(server)
    answer = await model.ainvoke([HumanMessage("hi")])
    assert answer.tool_calls[0]["args"] == {"amount": big}
    assert isinstance(answer.tool_calls[0]["args"]["amount"], int)
    await model.aclose()


@pytest.mark.parametrize(("code", "kind", "retryable"), [
    (401, "http_401", False), (404, "http_404", False), (429, "rate_limited", True), (500, "http_500", True),
    (503, "http_503", True),
])
async def test_a_status_is_a_named_error_without_the_key_or_the_servers_words(
    server: _Server, code: int, kind: str, retryable: bool
) -> None:
    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "bad key sk-test-secret, says the server"}}, status=code)

    server.answer = refuse
    model = _model(server)
    for call in (model.ainvoke, lambda m: _streamed(model)):
        with pytest.raises(ProviderError) as raised:
            await call([HumanMessage("hi")])
        assert (raised.value.kind, raised.value.retryable) == (kind, retryable)
        assert "sk-test-secret" not in str(raised.value) and "says the server" not in str(raised.value)
    with pytest.raises(ProviderError) as raised:
        await asyncio.to_thread(model.invoke, [HumanMessage("hi")])  # the synchronous path names it alike
    assert raised.value.kind == kind
    await model.aclose()


@pytest.mark.parametrize("bad", [
    pytest.param(b"data: {not json\n\n", id="not-json"),
    pytest.param(b'data: {"error": {"message": "overloaded"}}\n\n', id="error-event"),
    pytest.param(b'data: {"choices": [{"delta": {"content": 7}}]}\n\n', id="content-not-text"),
])
async def test_a_stream_that_is_not_the_protocols_is_a_bad_answer_and_the_next_provider_answers(
    server: _Server, bad: bytes
) -> None:
    """Not retried (it would say the same again): before the first token, the resilient model
    names it and moves on (after it, a failure is the turn's: what was said cannot be unsaid)."""
    server.answer = _sse(bad, b"data: [DONE]\n\n")
    broken = _model(server)
    with pytest.raises(ProviderError) as raised:
        await _streamed(broken)
    assert raised.value.kind == "bad_answer" and not raised.value.retryable
    chain = ResilientChatModel(providers=[Provider("broken", broken, "m"), Provider("backup", _Echo(), "e")],
                               max_attempts=3, min_wait_seconds=0.01)
    full = await _streamed(chain)
    assert full.content == "from the backup"
    assert full.response_metadata["tollgate_fallbacks"] == [{"provider": "broken", "error": "bad_answer"}]
    assert len(server.bodies) == 2  # the chain asked once: not retried
    await broken.aclose()


async def test_an_answer_that_never_ends_is_refused_past_the_cap(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_completions, "_MAX_ANSWER", 10_000)
    server.answer = _sse(*[_delta({"content": "word " * 50}) for _ in range(200)])
    model = _model(server)
    with pytest.raises(ProviderError) as raised:
        await _streamed(model)
    assert raised.value.kind == "bad_answer"
    await model.aclose()


async def test_a_silent_server_is_a_timeout_and_a_slow_steady_stream_is_not(server: _Server) -> None:
    """``timeout`` bounds each wait for the next bytes, not the whole answer."""
    model = _model(server, timeout=0.3)
    server.answer = _sse(*[_delta({"content": f"{i} "}) for i in range(6)], _delta({}, "stop"), b"data: [DONE]\n\n",
                         delay=0.1)
    assert (await _streamed(model)).content == "0 1 2 3 4 5 "  # 0.7 s in all, never 0.3 s silent

    async def silent(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(2)
        return web.Response(text="late")

    server.answer = silent
    with pytest.raises(ProviderError) as raised:
        await _streamed(model)
    assert (raised.value.kind, raised.value.retryable) == ("timeout", True)
    await model.aclose()


async def test_a_closed_model_makes_no_more_calls(server: _Server) -> None:
    server.answer = _sse(_delta({"content": "hi"}), b"data: [DONE]\n\n")
    model = _model(server)
    await _streamed(model)
    await model.aclose()
    assert model.closed
    with pytest.raises(ProviderError):
        await _streamed(model)
    assert len(server.bodies) == 1


def test_strict_tools_are_marked_strict_and_others_sent_as_given() -> None:
    model = ChatCompletionsModel(base_url="http://127.0.0.1:9/v1", model="m")
    strict = model.bind_tools([_tool("a__b")], strict=True)
    loose = model.bind_tools([_tool("a__b")])
    assert strict.kwargs["tools"][0]["function"]["strict"] is True  # type: ignore[attr-defined]
    assert loose.kwargs["tools"] == [_tool("a__b")]  # type: ignore[attr-defined]


class _Echo(ChatCompletionsModel):
    """A provider that answers from memory (the chain's backup in one test)."""

    def __init__(self) -> None:
        super().__init__(base_url="http://127.0.0.1:9/v1", model="e")

    async def astream_answer(self, *args: Any, **kwargs: Any) -> Any:
        yield AIMessageChunk(content="from the backup")


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "d",
                                             "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}}


async def test_the_resilient_model_is_one_run_per_answer_and_sends_a_strict_providers_tools_strict(
    server: _Server,
) -> None:
    """Callbacks (LangGraph's message stream among them) see one model run and each token once;
    a strict provider gets the bound tools in their strict form, the same on every call."""
    from langchain_core.callbacks import AsyncCallbackHandler

    class Counting(AsyncCallbackHandler):
        def __init__(self) -> None:
            self.starts = 0
            self.tokens: list[str] = []

        async def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
            self.starts += 1

        async def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
            self.tokens.append(token)

    server.answer = _sse(_delta({"content": "one "}), _delta({"content": "two"}, "stop"), b"data: [DONE]\n\n")
    client = _model(server)
    chain = ResilientChatModel(providers=[Provider("strict-box", client, "m", strict=True)]).bind_tools([_tool("a__b")])
    counting = Counting()
    for _ in range(2):
        async for _chunk in chain.astream([HumanMessage("hi")], {"callbacks": [counting]}):
            pass
    assert counting.starts == 2
    assert "".join(counting.tokens) == "one twoone two"
    sent = [body["tools"] for body in server.bodies]
    assert sent[0] == sent[1] and sent[0][0]["function"]["strict"] is True
    await client.aclose()
