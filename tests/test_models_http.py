"""The real client path: the Chat Completions client against an OpenAI-compatible server on loopback."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from tollgate.graph.app import default_picker
from tollgate.graph.models.llm import build_model, close_model
from tollgate.graph.models.model_settings import ModelConfigError, ProviderSettings
from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.turn import build_graph
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns
from tests.openai_stub import StubServer, hang, sse_text, status, stub_server, text, tool_call


@pytest.fixture
def stub_b() -> Iterator[StubServer]:
    with stub_server() as server:
        yield server


_built: list[Any] = []
"""The models a test built from settings (closed after it, as ``open_app`` closes its own)."""


@pytest.fixture(autouse=True)
async def _close_built_models() -> AsyncIterator[None]:
    yield
    while _built:
        await close_model(_built.pop())


def _build(cfg: Settings, role: Any, *, fallback: Any) -> Any:
    model = build_model(cfg, role, fallback=fallback)
    _built.append(model)
    return model


def _provider(name: str, server: StubServer, **extra: Any) -> ProviderSettings:
    return ProviderSettings(name=name, base_url=server.base_url, model=f"{name}-model", **extra)


async def _turns(services: Services, db: Database, settings: Settings, *, picker: list[ProviderSettings] | None = None,
                 naturalizer: list[ProviderSettings] | None = None, offline: bool = False) -> Turns:
    cfg = settings.model_copy(update={
        "picker_providers": picker or [], "naturalizer_providers": naturalizer or [],
        "model_max_attempts": 2, "model_retry_budget_seconds": 5.0,
    })
    svc = replace(services, settings=cfg)
    if picker:
        model = _build(cfg, "picker", fallback=default_picker() if offline else None)
        assert model is not None
        svc = replace(svc, picker_model=model)
    if naturalizer:
        svc = replace(svc, naturalizer_model=_build(cfg, "naturalizer", fallback=None))
    return Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))


async def _usage(db: Database, owner: str) -> list[dict[str, Any]]:
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT role, provider, model, input_tokens, output_tokens, estimated FROM model_usage WHERE owner_id = %s ORDER BY id",
            (owner,),
        )
        return list(await cur.fetchall())


async def test_a_tool_call_pick_over_real_http(
    stub: StubServer, services: Services, db: Database, settings: Settings, ctx: Context
) -> None:
    turns = await _turns(services, db, settings, picker=[_provider("local", stub)])
    stub.push(tool_call("calendar__list", {"range": "today"}, usage={"in": 812, "out": 17}), text(""))
    out = await turns.send(ctx, ctx.owner_id + "/http", "what's on my calendar today?")
    assert out.outcome == "read" and out.reply is not None and "Standup" in out.reply
    first = stub.requests[0]
    assert first["model"] == "local-model"
    functions = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert "calendar__list" in functions and functions["calendar__list"]["parameters"]["additionalProperties"] is False
    assert "<data kind=context" in first["messages"][0]["content"]
    assert first["messages"][-1] == {"role": "user", "content": "what's on my calendar today?"}
    # The second look carries the result as fenced data in a tool message.
    assert stub.requests[1]["messages"][-1]["role"] == "tool"
    assert "<data kind=tool_result" in stub.requests[1]["messages"][-1]["content"]
    usage = await _usage(db, ctx.owner_id)
    assert usage[0] == {"role": "picker", "provider": "local", "model": "local-model",
                        "input_tokens": 812, "output_tokens": 17, "estimated": False}
    assert usage[1]["estimated"] is True  # the second answer carried no usage block


async def test_strict_providers_get_strict_schemas_and_null_means_absent(
    stub: StubServer, services: Services, db: Database, settings: Settings, ctx: Context
) -> None:
    turns = await _turns(services, db, settings, picker=[_provider("openai", stub, strict=True)])
    stub.push(tool_call("calendar__list", {"range": "today", "limit": None}), text(""))
    out = await turns.send(ctx, ctx.owner_id + "/strict", "calendar today")
    assert out.outcome == "read"
    listed = next(t["function"] for t in stub.requests[0]["tools"] if t["function"]["name"] == "calendar__list")
    assert listed["strict"] is True
    assert set(listed["parameters"]["required"]) == set(listed["parameters"]["properties"])


async def test_streamed_deltas_arrive_in_order_before_message_complete(
    stub: StubServer, services: Services, db: Database, settings: Settings, model: ScriptedModel, ctx: Context
) -> None:
    turns = await _turns(services, db, settings, naturalizer=[_provider("writer", stub)])
    model.push(call("calendar__list", {"range": "today"}), say(""))
    stub.push(sse_text(["You have ", "three things ", "today."], reasoning=["Count the rows."], usage={"in": 300, "out": 6}))
    out = await turns.send(ctx, ctx.owner_id + "/stream", "what's on today")
    kinds = [e["type"] for e in out.events]
    deltas = [e["data"]["text"] for e in out.events if e["type"] == "token_delta"]
    assert deltas == ["You have ", "three things ", "today."]
    assert kinds.index("reasoning_delta") < kinds.index("token_delta") < kinds.index("message_complete")
    assert kinds[-1] == "message_complete" and out.reply == "You have three things today."
    assert stub.requests[0]["stream"] is True
    usage = await _usage(db, ctx.owner_id)
    assert usage == [{"role": "naturalizer", "provider": "writer", "model": "writer-model",
                      "input_tokens": 300, "output_tokens": 6, "estimated": False}]


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(tool_call("calendar__list", {"range": "today", "owner_id": "victim"}), id="extra-owner-key"),
        pytest.param(tool_call("calendar__list", '{"range": "today"'), id="malformed-json"),
        pytest.param(tool_call("calendar__teleport", {}), id="unknown-function"),
    ],
)
async def test_a_malformed_call_gets_one_correction_round(
    stub: StubServer, services: Services, db: Database, settings: Settings, ctx: Context, bad: Any
) -> None:
    turns = await _turns(services, db, settings, picker=[_provider("local", stub)])
    stub.push(bad, tool_call("calendar__list", {"range": "today"}), text(""))
    out = await turns.send(ctx, ctx.owner_id + "/fix", "calendar today")
    assert out.outcome == "read" and out.events[0]["data"]["corrected"] is True
    feedback = stub.requests[1]["messages"][-1]
    assert feedback["role"] == "tool" and "Invalid call, nothing ran" in feedback["content"]


async def test_429_then_success_retries_the_same_provider(
    stub: StubServer, services: Services, db: Database, settings: Settings, ctx: Context
) -> None:
    turns = await _turns(services, db, settings, picker=[_provider("local", stub)])
    stub.push(status(429), tool_call("calendar__list", {"range": "today"}), text(""))
    out = await turns.send(ctx, ctx.owner_id + "/429", "calendar today")
    assert out.outcome == "read"
    assert len(stub.requests) == 3
    assert "model_fallback" not in [e["type"] for e in out.events]


async def test_500_moves_to_the_next_provider_and_says_so(
    stub: StubServer, stub_b: StubServer, services: Services, db: Database, settings: Settings, ctx: Context
) -> None:
    turns = await _turns(services, db, settings, picker=[_provider("primary", stub), _provider("backup", stub_b)])
    stub.push(status(500), status(500), status(502), status(502))  # both picker steps of the turn
    stub_b.push(tool_call("calendar__list", {"range": "today"}), text(""))
    out = await turns.send(ctx, ctx.owner_id + "/500", "calendar today")
    assert out.outcome == "read"
    fallbacks = [e["data"] for e in out.events if e["type"] == "model_fallback"]
    assert fallbacks[0] == {"role": "picker", "failed": [{"provider": "primary", "error": "http_500"}], "answered_by": "backup"}
    assert fallbacks[1]["failed"] == [{"provider": "primary", "error": "http_502"}]
    assert len(stub.requests) == 4  # the retry budget of each call, then the next provider


async def test_timeouts_fall_back_to_the_offline_picker(
    stub: StubServer, services: Services, db: Database, settings: Settings, ctx: Context
) -> None:
    turns = await _turns(services, db, settings, picker=[_provider("slow", stub, timeout_seconds=0.3)], offline=True)
    stub.push(hang(1.5), hang(1.5), hang(1.5), hang(1.5))
    out = await turns.send(ctx, ctx.owner_id + "/timeout", "what's on my calendar today?")
    assert out.outcome == "read" and out.reply is not None and "Standup" in out.reply
    fallback = next(e["data"] for e in out.events if e["type"] == "model_fallback")
    assert fallback["answered_by"] == "offline" and fallback["failed"][0]["error"] == "timeout"
    assert out.reply.endswith("(The model didn't answer, so the offline picker handled this request.)")


async def test_without_the_offline_fallback_a_failing_model_is_said_and_nothing_runs(
    stub: StubServer, services: Services, db: Database, settings: Settings, ctx: Context
) -> None:
    """Production's default: no silent downgrade to the offline picker (issue 21)."""
    turns = await _turns(services, db, settings, picker=[_provider("down", stub)], offline=False)
    stub.push(status(503), status(503))
    out = await turns.send(ctx, ctx.owner_id + "/down", "cancel the standup")
    assert out.outcome == "reply" and out.approval is None
    assert out.reply is not None and out.reply.startswith("The model isn't answering right now, so I didn't do anything.")
    fallback = next(e["data"] for e in out.events if e["type"] == "model_fallback")
    assert fallback == {"role": "picker", "failed": [{"provider": "down", "error": "http_503"}], "answered_by": None}


@pytest.mark.parametrize(
    ("environment", "setting", "offline"),
    [("development", None, True), ("production", None, False), ("production", "offline", True),
     ("development", "none", False)],
)
def test_the_offline_fallback_is_the_operators_choice(
    settings: Settings, environment: str, setting: str | None, offline: bool
) -> None:
    chosen = settings.model_copy(update={"environment": environment, "model_fallback": setting})
    assert chosen.offline_fallback() is offline


async def test_a_failing_naturalizer_stream_falls_back_to_the_renderer_with_an_event(
    stub: StubServer, services: Services, db: Database, settings: Settings, model: ScriptedModel, ctx: Context
) -> None:
    turns = await _turns(services, db, settings, naturalizer=[_provider("writer", stub)])
    model.push(call("calendar__list", {"range": "today"}), say(""))
    stub.push(status(503), status(503))
    out = await turns.send(ctx, ctx.owner_id + "/nat-down", "what's on today")
    assert out.reply is not None and "Standup" in out.reply and "Design review" in out.reply
    assert any(e["type"] == "model_fallback" and e["data"]["answered_by"] == "renderer" for e in out.events)


@pytest.mark.parametrize(
    ("update", "message"),
    [
        pytest.param({"picker_model": "gpt-x"}, "OPENAI_API_KEY", id="openai-without-key"),
        pytest.param({"openai_base_url": "http://localhost:8000/v1"}, "TOLLGATE_PICKER_MODEL", id="base-url-without-model"),
        pytest.param({"picker_model": "m", "openai_base_url": "ftp://models.example"}, "http(s) URL", id="bad-scheme"),
        pytest.param({"picker_model": "m", "openai_base_url": "x"}, "OPENAI_BASE_URL", id="garbage-url"),
    ],
)
def test_unusable_model_configuration_is_refused_with_what_to_set(settings: Settings, update: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_model(settings.model_copy(update=update), "picker", fallback=None)


def test_the_synchronous_path_retries_then_moves_to_the_next_provider(
    stub: StubServer, stub_b: StubServer, settings: Settings
) -> None:
    from langchain_core.messages import HumanMessage

    cfg = settings.model_copy(update={
        "picker_providers": [_provider("primary", stub), _provider("backup", stub_b)],
        "model_max_attempts": 2, "model_retry_budget_seconds": 5.0,
    })
    model = _build(cfg, "picker", fallback=None)
    assert model is not None
    stub.push(status(500), status(503))
    stub_b.push(text("hello from backup"))
    answer = model.invoke([HumanMessage("hi")])
    assert answer.content == "hello from backup"
    assert answer.response_metadata["tollgate_fallbacks"] == [{"provider": "primary", "error": "http_503"}]
    assert len(stub.requests) == 2


def _nested_json(levels: int) -> str:
    return '{"to": ["sam@example.com"], "subject": "hi", "body": ' + '{"k": ' * levels + '"x"' + "}" * levels + "}"


@pytest.mark.parametrize("levels", [40, 300, 1200], ids=["40-levels", "300-levels", "1200-levels"])
async def test_arguments_nested_too_deep_are_refused_at_decode_and_the_thread_goes_on(
    stub: StubServer, services: Services, db: Database, settings: Settings, ctx: Context, levels: int
) -> None:
    """Too deep to validate, to store or even to parse: a violation the model can correct, never a 503."""
    turns = await _turns(services, db, settings, picker=[_provider("local", stub)])
    thread = ctx.owner_id + f"/deep-{levels}"
    stub.push(tool_call("mail__send", _nested_json(levels)), tool_call("mail__send", _nested_json(levels)))
    out = await turns.send(ctx, thread, "email sam")
    assert out.outcome == "clarify" and out.reply is not None and "did nothing" in out.reply
    feedback = stub.requests[1]["messages"][-1]
    assert feedback["role"] == "tool" and "Invalid call, nothing ran" in feedback["content"]
    stub.push(tool_call("calendar__list", {"range": "today"}), text(""))
    assert (await turns.send(ctx, thread, "what's on my calendar today?")).outcome == "read"


async def test_the_app_closes_the_model_connections_it_opened_and_only_those(
    stub: StubServer, settings: Settings, ctx: Context
) -> None:
    """A picker built from settings talks over its own connection pool, closed with the app; a model
    the caller passed in is the caller's to close."""
    from tollgate.graph.app import open_app
    from tollgate.graph.models.resilient import ResilientChatModel

    cfg = settings.model_copy(update={"picker_providers": [_provider("local", stub)],
                                      "naturalizer_providers": [_provider("writer", stub)]})
    given = _build(cfg, "naturalizer", fallback=None)
    async with open_app(cfg, naturalizer_model=given) as app:
        picker = app.services.picker_model
        assert isinstance(picker, ResilientChatModel)
        stub.push(tool_call("calendar__list", {"range": "today"}), text(""), sse_text(["Three things today."]))
        out = await app.runner.send(ctx, ctx.owner_id + "/closing", "what's on my calendar today?")
        assert out.outcome == "read"
    assert picker.providers[0].model.closed
    assert isinstance(given, ResilientChatModel)
    assert not given.providers[0].model.closed


async def test_a_turn_cancelled_during_a_model_call_over_http_leaves_the_client_and_thread_usable(
    stub: StubServer, services: Services, db: Database, settings: Settings, ctx: Context
) -> None:
    """Cancelled mid-request (the client went away): the request's connection goes with it, and the
    same model client serves the next turns on the same thread at once."""
    import asyncio
    import time

    turns = await _turns(services, db, settings, picker=[_provider("local", stub, timeout_seconds=30)])
    thread = ctx.owner_id + "/cancelled-http"
    for _ in range(3):  # more cancelled requests than one connection
        stub.push(hang(2.0))
        started = len(stub.requests)
        task = asyncio.create_task(turns.send(ctx, thread, "what's on my calendar today?"))
        while len(stub.requests) == started:
            await asyncio.sleep(0.01)  # the request is on the wire
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    began = time.monotonic()
    stub.push(tool_call("calendar__list", {"range": "today"}), text(""))
    out = await turns.send(ctx, thread, "what's on my calendar today?")
    assert out.outcome == "read" and out.reply is not None and "Standup" in out.reply
    assert time.monotonic() - began < 2.0  # neither the thread nor a connection waited out the hung requests
    await turns.check_approvals(thread)


@pytest.mark.parametrize("offline", [True, False], ids=["offline-fallback", "no-fallback"])
async def test_a_provider_that_refuses_connections_is_named_a_connection_failure_not_a_timeout(
    services: Services, db: Database, settings: Settings, ctx: Context, offline: bool
) -> None:
    """Nothing listens at the provider's address: the failure says "connection" (the aiohttp
    transport reports it as a connect timeout, which would send an operator after the wrong cause)."""
    from tests.children import free_port

    closed = ProviderSettings(name="gone", base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", timeout_seconds=5)
    turns = await _turns(services, db, settings, picker=[closed], offline=offline)
    out = await turns.send(ctx, ctx.owner_id + f"/refused-{offline}", "what's on my calendar today?")
    fallback = next(e["data"] for e in out.events if e["type"] == "model_fallback")
    assert fallback["failed"] == [{"provider": "gone", "error": "connection"}]


async def test_the_pickers_text_answer_streams_to_the_client_as_token_deltas_over_http(
    stub: StubServer, settings: Settings, demo_token: str
) -> None:
    """A real model's text answer streams through the picker, the event log and SSE as it is written:
    each delta reaches the HTTP client before the model has finished (once, the reply came whole)."""
    from httpx_sse import aconnect_sse

    from tests.conftest import NOW
    from tests.harness import Clock
    from tests.server_harness import serve


    cfg = settings.model_copy(update={"picker_providers": [_provider("local", stub)], "model_max_attempts": 1})
    stub.push(sse_text(["Hello ", "there, ", "Sam."], seconds=0.4))
    arrived: list[tuple[float, dict[str, Any]]] = []
    with serve(cfg, clock=Clock(NOW)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client, aconnect_sse(
            client, "POST", "/v1/chat", json={"message": "hi there"},
            headers={"Authorization": f"Bearer {demo_token}"},
        ) as source:
            assert source.response.status_code == 200
            async for message in source.aiter_sse():
                arrived.append((time.monotonic(), message.json()))
    assert stub.requests[0]["stream"] is True and stub.requests[0]["tools"]  # the picker's call, tools bound
    kinds = [event["type"] for _, event in arrived]
    deltas = [(at, event["data"]["text"]) for at, event in arrived if event["type"] == "token_delta"]
    assert [text for _, text in deltas] == ["Hello ", "there, ", "Sam."]
    assert kinds[-1] == "message_complete" and arrived[-1][1]["data"]["text"] == "Hello there, Sam."
    assert kinds.index("token_delta") < kinds.index("message_complete")
    assert arrived[-1][0] - deltas[0][0] >= 0.6  # the first delta came while the model was still writing
