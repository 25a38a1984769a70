"""OpenTelemetry spans of a turn: the run, each node, each tool call and each model call.

A run of the turn graph is one ``tollgate.turn`` span (a new message, or the resume of an
approval, which is linked to the run that asked for it even days later: the asking run's span
context is kept in the thread's state). Its nodes are ``tollgate.node`` children, and inside
them ``tollgate.tool`` spans (tool, action, tier, outcome) and ``tollgate.model`` spans
(provider, model, role, tokens). Attributes are names, ids, tiers, outcomes and counts, never
an argument value or a message's text.

Export: :func:`configure_tracing` sets up the SDK with the OTLP/HTTP exporter when the standard
variables name an endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._TRACES_ENDPOINT``; headers,
timeout, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SDK_DISABLED`` as the SDK
reads them). Unset, nothing is recorded, and a run makes no spans below its own (see ``_recording``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tollgate.graph.observe import metrics, scope

__all__ = ["answered", "configure_tracing", "link_of", "model_call", "node", "tool_call", "trace_parent", "turn"]

_log = logging.getLogger("tollgate.turn")
_tracer = trace.get_tracer("tollgate")
_propagator: Final = TraceContextTextMapPropagator()


def configure_tracing(default_service: str = "tollgate") -> Any | None:
    """Install the SDK's tracer provider with a batching OTLP/HTTP exporter, when the environment
    names an OTLP endpoint; return it (``None``: nothing is exported).

    Leaves alone a provider something else already installed (``langgraph dev`` may), and a
    protocol other than ``http/protobuf`` (the one exporter installed), which it logs."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if not (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")):
        return None
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if protocol != "http/protobuf":
        _log.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported (only http/protobuf); no traces are exported",
                     protocol)
        return None
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Attributes given here win over OTEL_RESOURCE_ATTRIBUTES, so the default name only when none is set.
    named = "OTEL_SERVICE_NAME" in env or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {SERVICE_NAME: default_service}))
    provider.add_span_processor(_QueryValuesWithheld())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


class _QueryValuesWithheld(SpanProcessor):
    """FastAPI's request spans carry the query string (``url.query``), a thread search's words
    among them: its values are withheld before any exporter sees the span, its keys kept."""

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        query = (span.attributes or {}).get("url.query")
        if isinstance(query, str) and query:
            span.set_attribute("url.query", urlencode([(k, "withheld") for k, _ in parse_qsl(query, keep_blank_values=True)]))


# --- the turn ------------------------------------------------------------------------------


class _TurnSpan:
    """The span of one run of the turn graph, current from its start to its end.

    Started and ended by :meth:`graph.governed.GovernedGraph.astream`, an async generator: its
    context is the task iterating it, so the span is attached there and detached only from that
    same task (a generator closed from another task leaves that context alone; it ends with its task).
    """

    def __init__(self, found: scope.Scope, run: str) -> None:
        self.scope = found
        self.span = _tracer.start_span("tollgate.turn", kind=SpanKind.INTERNAL, attributes={
            "tollgate.owner_id": found.owner, "tollgate.thread_id": found.thread, "tollgate.run": run})
        self._task = asyncio.current_task()
        self._token = otel_context.attach(trace.set_span_in_context(self.span))

    def end(self, error: BaseException | None) -> None:
        """End the span and count the run: by its outcome, else how it stopped."""
        outcome = self.scope.outcome
        if error is not None:
            outcome = ("cancelled" if isinstance(error, asyncio.CancelledError | GeneratorExit)
                       else str(getattr(error, "code", "") or "failed"))
            if not isinstance(error, asyncio.CancelledError | GeneratorExit):
                self.span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        elif not outcome:
            outcome = "awaiting_approval"  # a clean end that did not reach the reply: an interrupt
        self.span.set_attribute("tollgate.outcome", outcome)
        if self.scope.turn:
            self.span.set_attribute("tollgate.turn_id", self.scope.turn)
        if self.scope.approval:
            self.span.set_attribute("tollgate.approval_id", self.scope.approval)
        metrics.TURNS.labels(outcome).inc()
        _log.info("run ended: %s", outcome)  # with the owner, thread, turn and approval ids of the scope
        if asyncio.current_task() is self._task:
            otel_context.detach(self._token)
        self.span.end()


def turn(found: scope.Scope, *, run: str) -> _TurnSpan:
    """Start the span of a run (``run``: ``message`` or ``resume``) for ``found``'s turn."""
    return _TurnSpan(found, run)


def trace_parent() -> str | None:
    """The W3C ``traceparent`` of the current span, when it is recorded (to link a later run to it)."""
    span = trace.get_current_span()
    if not span.is_recording():
        return None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


def link_of(parent: str | None) -> Link | None:
    """A link to the span a ``traceparent`` names (``None`` for none, or one that does not parse)."""
    if not parent:
        return None
    context = trace.get_current_span(_propagator.extract({"traceparent": parent})).get_span_context()
    return Link(context, {"tollgate.link": "approval_requested"}) if context.is_valid else None


# --- nodes ---------------------------------------------------------------------------------

NodeFn = Callable[[Any, Any, Any], Awaitable[dict[str, Any]]]


def node(name: str, fn: NodeFn) -> NodeFn:
    """``fn`` (a node of the turn graph) run inside a ``tollgate.node`` span.

    What the node's update says is noted on the run's scope: the turn id, the approval asked
    for (with a ``trace_link`` to this run kept in the state, so its resume links back here),
    and the turn's outcome once the reply is made. A resumed run is linked to the run that
    asked. An interrupt is the node waiting, not an error.
    """

    async def traced(state: Any, runtime: Runtime[Any], config: RunnableConfig) -> dict[str, Any]:
        found = scope.current()
        if found is not None:  # a resumed run learns its turn and approval from the state
            _note(found, "", {"turn_id": found.turn or state.get("turn_id"),
                              "approval_request": None if found.approval else state.get("approval_request")})
        update = await (_in_span(name, fn, state, runtime, config) if _recording() else fn(state, runtime, config))
        if found is not None and isinstance(update, Mapping):
            _note(found, name, update)
            if name == "propose" and update.get("approval_request") is not None:
                parent = trace_parent()
                if parent is not None:
                    update = {**update, "trace_link": parent}
        return update

    traced.__name__ = traced.__qualname__ = name
    traced.__doc__ = fn.__doc__
    return traced


async def _in_span(name: str, fn: NodeFn, state: Any, runtime: Runtime[Any], config: RunnableConfig) -> dict[str, Any]:
    """``fn`` run inside its ``tollgate.node`` span (a resumed approval's run linked to the asking one)."""
    link = link_of(state.get("trace_link")) if name == "approval" else None
    current = trace.get_current_span()
    if link is not None and link.context.span_id != current.get_span_context().span_id:
        current.add_link(link.context, link.attributes)
    with _tracer.start_as_current_span(
        "tollgate.node", attributes={"tollgate.node": name}, links=[link] if link else None,
        record_exception=False, set_status_on_exception=False,
    ) as span:
        try:
            return await fn(state, runtime, config)
        except GraphBubbleUp:
            span.set_attribute("tollgate.interrupted", True)
            raise
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def _recording() -> bool:
    """Whether the run's span records. When it does not (no exporter set, or the run sampled out),
    its nodes, tool and model calls make no spans of their own: a child of a span that is not
    recorded is not recorded either (the SDK's default, parent-based sampling), and entering even
    the API's no-op span attaches and detaches a context per node (measured in bench/README.md)."""
    return trace.get_current_span().is_recording()


def _note(found: scope.Scope, name: str, update: Mapping[str, Any]) -> None:
    if update.get("turn_id"):
        found.turn = str(update["turn_id"])
    request = update.get("approval_request")
    if isinstance(request, Mapping) and isinstance(request.get("approval"), Mapping):
        found.approval = str(request["approval"].get("id") or "")
    if name == "naturalize" and update.get("outcome"):
        found.outcome = str(update["outcome"])


# --- tool and model calls ------------------------------------------------------------------


class _Call:
    """What a tool or model call's span and metric learn as it runs."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self.outcome = "ok"
        self.provider = ""
        self.role = ""

    def set(self, **attributes: str | int | bool) -> None:
        """Record ``attributes`` on the span (as ``tollgate.<name>``; names, counts, never values)."""
        for key, value in attributes.items():
            self.span.set_attribute(key if "." in key else f"tollgate.{key}", value)


@contextmanager
def _span(name: str, kind: SpanKind, attributes: dict[str, str | bool]) -> Iterator[Span]:
    """A current child span named ``name``; the no-op span when the run's is not recorded (see :func:`_recording`)."""
    if not _recording():
        yield trace.INVALID_SPAN
        return
    with _tracer.start_as_current_span(name, kind=kind, attributes=attributes, record_exception=False,
                                       set_status_on_exception=False) as span:
        yield span


@contextmanager
def tool_call(tool: str, action: str, tier: str, *, writes: bool) -> Iterator[_Call]:
    """A ``tollgate.tool`` span around one tool call; the block sets ``call.outcome`` (``ok``, an
    error code, ``replayed``). Timed into ``tollgate_tool_call_seconds``."""
    started = time.perf_counter()
    with _span("tollgate.tool", SpanKind.INTERNAL, {"tollgate.tool": tool, "tollgate.action": action,
                                                    "tollgate.tier": tier, "tollgate.writes": writes}) as span:
        call = _Call(span)
        try:
            yield call
        except BaseException as exc:
            call.outcome = "cancelled" if isinstance(exc, asyncio.CancelledError) else str(
                getattr(exc, "code", "") or "failed")
            raise
        finally:
            span.set_attribute("tollgate.outcome", call.outcome)
            if call.outcome not in ("ok", "replayed"):
                span.set_status(Status(StatusCode.ERROR, call.outcome))
            metrics.TOOL_CALLS.labels(tool, call.outcome).observe(time.perf_counter() - started)


@contextmanager
def model_call(role: str) -> Iterator[_Call]:
    """A ``tollgate.model`` span around one model answer of ``role`` (picker, naturalizer); the
    block calls :func:`answered` with the answer. Timed into ``tollgate_model_call_seconds``."""
    started = time.perf_counter()
    with _span("tollgate.model", SpanKind.CLIENT, {"gen_ai.operation.name": "chat", "tollgate.role": role}) as span:
        call = _Call(span)
        call.role = role
        try:
            yield call
        except BaseException as exc:
            call.outcome = "cancelled" if isinstance(exc, asyncio.CancelledError) else "error"
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            span.set_attribute("tollgate.outcome", call.outcome)
            metrics.MODEL_CALLS.labels(call.provider or "none", role, call.outcome).observe(
                time.perf_counter() - started)


def answered(call: _Call, message: Any) -> None:
    """Note who answered ``call`` and what it cost: provider, model, tokens (from the answer's
    metadata; the offline picker is provider ``offline``)."""
    meta = getattr(message, "response_metadata", None) or {}
    # A model outside the resilient chain (the offline picker, a scripted one) is named "offline".
    call.provider = str(meta.get("tollgate_provider") or "offline")
    model = str(meta.get("tollgate_model") or meta.get("model_name") or call.provider)
    call.set(**{"gen_ai.system": call.provider, "gen_ai.request.model": model})
    usage = getattr(message, "usage_metadata", None) or {}
    if usage:
        call.set(**{"gen_ai.usage.input_tokens": int(usage.get("input_tokens", 0)),
                    "gen_ai.usage.output_tokens": int(usage.get("output_tokens", 0))})
    fallbacks = meta.get("tollgate_fallbacks") or []
    if fallbacks:
        call.set(fallbacks=len(fallbacks))
