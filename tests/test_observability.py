"""What an operator sees: OpenTelemetry traces over OTLP/HTTP, Prometheus metrics, structured logs.

The server is ``tollgate serve`` in a subprocess, configured as an operator configures it: the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at an OTLP/HTTP receiver the test runs (it
decodes the protobuf requests with the protocol's own message types), ``TOLLGATE_METRICS_PORT``
scraped and parsed with prometheus-client's parser, and ``TOLLGATE_LOG_FORMAT=json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse,
)
from prometheus_client.parser import text_string_to_metric_families

from tollgate.graph._env import child_environment
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tests.children import free_port, serve_tollgate
from tests.server_harness import Api



class _Receiver:
    """An OTLP/HTTP trace receiver on loopback: every span it was sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.resources: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                try:
                    request.ParseFromString(body)
                    receiver.take(self.path, request)
                except Exception as exc:
                    receiver.failures.append(repr(exc))
                    raise
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.paths: list[str] = []

    def take(self, path: str, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.paths.append(path)
            for resource_spans in request.resource_spans:
                self.resources.append({a.key: _value(a.value) for a in resource_spans.resource.attributes})
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append({
                            "name": span.name, "trace": span.trace_id.hex(), "id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "attrs": {a.key: _value(a.value) for a in span.attributes},
                            "links": [(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                            "error": span.status.code == 2,
                        })

    def __repr__(self) -> str:
        return repr([(s["name"], s["attrs"]) for s in self.spans] + self.failures)

    def named(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [s for s in self.spans if s["name"] == name]


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    found = _Receiver()
    thread = threading.Thread(target=found.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        found.server.shutdown()
        found.server.server_close()


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus exposition, by (name, sorted labels)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def _until(check: Any, what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_a_turn_and_its_approval_are_traced_metered_and_logged(
    settings: Settings, db: Database, owner: str, demo_token: str, receiver: _Receiver, tmp_path: Path
) -> None:
    """One write asked and approved through the HTTP API: spans per run (the resume linked to the
    run that asked), node, tool and model call reach the OTLP receiver; the metrics port counts
    them; every log line is JSON with the run's ids; no argument value or token anywhere."""
    port, metrics_port = free_port(), free_port()
    env = child_environment(settings, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_BSP_SCHEDULE_DELAY="100",
                            OTEL_SERVICE_NAME="tollgate-under-test", TOLLGATE_LOG_FORMAT="json",
                            TOLLGATE_METRICS_PORT=str(metrics_port), TOLLGATE_METRICS_REFRESH_SECONDS="0.2")
    proc = serve_tollgate(env, tmp_path, port)
    secret_detail = "quartz-7731 pelican"
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            api = Api(client=client, owner=owner, token=demo_token)
            asked = await api.chat(f"add a task to {secret_detail}")
            assert asked.status == 200 and asked.last["type"] == "approval_required", asked.events
            thread_id = asked.last["thread_id"]
            approval_id = asked.last["data"]["approval_id"]
            done = await api.decide(approval_id, {"type": "approve"})
            assert done.last["type"] == "message_complete" and done.last["data"]["outcome"] == "executed", done.events
            searched = await client.get("/v1/threads", params={"q": "heron-5520"}, headers=api.auth)
            assert searched.status_code == 200

            # --- traces ---------------------------------------------------------------------
            tools = await _until(lambda: [s for s in receiver.named("tollgate.tool")
                                          if s["attrs"].get("tollgate.action") == "create"], "the tool span")
            def both_runs() -> list[dict[str, Any]] | None:
                runs = [s for s in receiver.named("tollgate.turn") if s["attrs"].get("tollgate.thread_id") == thread_id]
                return runs if len(runs) == 2 else None

            turns = await _until(both_runs, "both runs' spans")
            assert all(p == "/v1/traces" for p in receiver.paths)
            assert {r.get("service.name") for r in receiver.resources} == {"tollgate-under-test"}
            first, second = sorted(turns, key=lambda s: s["attrs"]["tollgate.run"])  # message, resume
            assert first["attrs"]["tollgate.run"] == "message" and second["attrs"]["tollgate.run"] == "resume"
            assert first["attrs"]["tollgate.outcome"] == "awaiting_approval"
            assert second["attrs"]["tollgate.outcome"] == "executed"
            assert first["attrs"]["tollgate.owner_id"] == owner
            assert first["attrs"]["tollgate.turn_id"] == second["attrs"]["tollgate.turn_id"] == asked.last["turn_id"]
            assert second["attrs"]["tollgate.approval_id"] == approval_id
            # The resume, a new request and a new trace, is linked to the run that asked for it.
            assert (first["trace"], first["id"]) in second["links"]

            nodes = {run["id"]: [s["attrs"]["tollgate.node"] for s in receiver.named("tollgate.node")
                                 if s["parent"] == run["id"]] for run in (first, second)}
            assert {"picker", "tier_gate", "propose", "approval"} <= set(nodes[first["id"]])
            assert "execute" not in nodes[first["id"]]
            assert {"approval", "execute", "naturalize"} <= set(nodes[second["id"]])
            [tool] = tools
            execute = next(s for s in receiver.named("tollgate.node") if s["id"] == tool["parent"])
            assert execute["attrs"]["tollgate.node"] == "execute" and execute["parent"] == second["id"]
            assert tool["attrs"] | {"tollgate.approval_id": ""} == {
                "tollgate.tool": "tasks", "tollgate.action": "create", "tollgate.tier": "confirmation",
                "tollgate.writes": True, "tollgate.outcome": "ok", "tollgate.approval_id": ""}
            models = [s for s in receiver.named("tollgate.model") if s["trace"] == first["trace"]]
            assert models and models[0]["attrs"]["tollgate.role"] == "picker"
            assert models[0]["attrs"]["gen_ai.system"] == "offline"  # the offline picker answered
            assert not any(s["error"] for s in receiver.spans if s["trace"] in (first["trace"], second["trace"]))
            queries = await _until(lambda: [s["attrs"]["url.query"] for s in receiver.spans
                                            if s["attrs"].get("url.path") == "/v1/threads" and "url.query" in s["attrs"]],
                                   "the thread search's request span")
            assert queries == ["q=withheld"]  # FastAPI's request span: the search's words withheld, its key kept
            everything = json.dumps(receiver.spans)
            assert "heron" not in everything
            assert "quartz" not in everything and "pelican" not in everything  # never an argument value
            assert demo_token not in everything

            # --- metrics --------------------------------------------------------------------
            async with httpx.AsyncClient(timeout=10) as scraper:
                async def scraped() -> dict[Any, float]:
                    page = await scraper.get(f"http://127.0.0.1:{metrics_port}/metrics")
                    assert page.status_code == 200
                    return _samples(page.text)

                samples = await scraped()
                deadline = time.monotonic() + 10
                while samples.get(("tollgate_approvals", (("state", "executed"),)), 0) < 1:
                    assert time.monotonic() < deadline, "the approvals gauge never counted the executed approval"
                    await asyncio.sleep(0.2)
                    samples = await scraped()
            assert samples[("tollgate_turns_total", (("outcome", "awaiting_approval"),))] >= 1
            assert samples[("tollgate_turns_total", (("outcome", "executed"),))] >= 1
            assert samples[("tollgate_tool_call_seconds_count", (("outcome", "ok"), ("tool", "tasks")))] >= 1
            assert samples[("tollgate_model_call_seconds_count",
                            (("outcome", "ok"), ("provider", "offline"), ("role", "picker")))] >= 2
            assert samples[("tollgate_db_pool_connections", (("state", "max"),))] == settings.pool_max_size
            for state in ("pending", "rejected", "expired"):
                assert ("tollgate_approvals", (("state", state),)) in samples  # a state with none reads 0
            assert ("tollgate_background_runs", (("state", "queued"),)) in samples
    finally:
        _stop(proc)

    # --- logs ---------------------------------------------------------------------------------
    text = (tmp_path / "serve.log").read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert lines, text
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    ran = [line for line in lines if line["logger"] == "tollgate.turn" and line["thread_id"] == thread_id]
    assert [line["message"] for line in ran] == ["run ended: awaiting_approval", "run ended: executed"]
    assert all(line["owner_id"] == owner and line["turn_id"] == asked.last["turn_id"] for line in ran)
    assert ran[1]["approval_id"] == approval_id
    assert any(line["logger"] == "uvicorn.access" for line in lines)  # the server's own lines are JSON too
    assert "quartz" not in text and demo_token not in text


def _sample(name: str, **labels: str) -> float:
    """A sample of this process's metrics (0 when it has not been counted yet)."""
    from tollgate.graph.observe import metrics

    return _samples(metrics.exposition().decode()).get((name, tuple(sorted(labels.items()))), 0.0)


async def test_a_turn_that_waits_for_its_thread_is_counted_as_a_lease_wait(settings: Settings, db: Database) -> None:
    """Two holders (two processes' lease tables) on one thread: the second waits, then gets it,
    and ``tollgate_lease_wait_seconds`` counts the wait (and a wait that times out)."""
    from tollgate.graph.store import leases
    from tollgate.policies.errors import Unavailable

    thread = f"wait-{time.monotonic_ns()}"
    async with db.pool.connection() as conn:
        await conn.execute("INSERT INTO threads (thread_id, owner_id) VALUES (%s, 'lease_owner')", (thread,))
    first = leases.Leases(db.pool, ttl_seconds=30, wait_seconds=10)
    second = leases.Leases(db.pool, ttl_seconds=30, wait_seconds=10)
    impatient = leases.Leases(db.pool, ttl_seconds=30, wait_seconds=0.3)
    waited, timed_out = (_sample("tollgate_lease_wait_seconds_count", outcome=o) for o in ("acquired", "timed_out"))
    held = await first.acquire(thread)
    with pytest.raises(Unavailable):
        await impatient.acquire(thread)
    waiting = asyncio.create_task(second.acquire(thread))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await first.release(held)
    got = await asyncio.wait_for(waiting, 10)
    await second.release(got)
    assert _sample("tollgate_lease_wait_seconds_count", outcome="acquired") == waited + 1
    assert _sample("tollgate_lease_wait_seconds_count", outcome="timed_out") == timed_out + 1
    assert _sample("tollgate_lease_wait_seconds_sum", outcome="acquired") > 0


async def test_a_failing_provider_is_counted_by_provider_and_kind() -> None:
    """A provider that refuses connections: ``tollgate_model_errors_total`` counts it under its
    name and the failure kind (never its message), and the fallback answers."""
    from langchain_core.messages import AIMessage, HumanMessage
    from pydantic import SecretStr

    from tollgate.graph.models.chat_completions import ChatCompletionsModel
    from tollgate.graph.models.resilient import Provider, ResilientChatModel
    from tollgate.graph.observe import metrics
    from tests.fakes import ScriptedModel

    closed = free_port()  # nothing listens there
    down = ChatCompletionsModel(base_url=f"http://127.0.0.1:{closed}/v1", api_key=SecretStr("sk-never-logged"), model="m")
    model = ResilientChatModel(providers=[Provider(name="lan-box", model=down, model_name="m")],
                               fallback=ScriptedModel(steps=[AIMessage(content="offline answer")]), max_attempts=1)
    before = _sample("tollgate_model_errors_total", provider="lan-box", kind="connection")
    answer = await model.ainvoke([HumanMessage(content="hi")])
    assert answer.content == "offline answer"
    assert _sample("tollgate_model_errors_total", provider="lan-box", kind="connection") == before + 1
    assert "sk-never-logged" not in metrics.exposition().decode()
    await down.aclose()


async def test_a_run_that_is_not_recorded_makes_no_spans_below_its_own(
    turns: Any, model: Any, ctx: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no exporter set (this process installs none), a turn's nodes, tool and model calls
    start no spans at all, not even the API's no-op ones; what they count still counts."""
    from opentelemetry import trace

    from tollgate.graph.observe import tracing
    from tests.fakes import call, say

    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # no SDK here: nothing records
    started: list[str] = []

    class Counting:
        def start_span(self, name: str, **kwargs: Any) -> Any:  # the run's own span, always made
            return trace.get_tracer("tollgate").start_span(name, **kwargs)

        def start_as_current_span(self, name: str, **kwargs: Any) -> Any:
            started.append(name)
            return trace.get_tracer("tollgate").start_as_current_span(name, **kwargs)

    monkeypatch.setattr(tracing, "_tracer", Counting())
    before = _sample("tollgate_tool_call_seconds_count", tool="calendar", outcome="ok")
    model.push(call("calendar__list", {"range": "today"}), say(""))
    out = await turns.send(ctx, ctx.owner_id + "/untraced", "calendar today")
    assert out.outcome == "read"
    assert started == []
    assert _sample("tollgate_tool_call_seconds_count", tool="calendar", outcome="ok") == before + 1
