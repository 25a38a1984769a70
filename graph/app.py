"""Assemble a running Tollgate from settings: database, checkpointer, services, graph, runner."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

from langchain_core.language_models import BaseChatModel

from tollgate.graph.models.llm import build_model, close_model
from tollgate.tools.perimeter.config import egress_client
from tollgate.graph.perimeter.credentials import CredentialStore, credentials_cipher
from tollgate.graph.process.gc_tuning import tune_collector
from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Hooks, Services, utc_now
from tollgate.graph.settings import Settings
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database, apply_tool_migrations, open_database
from tollgate.graph.turn import build_graph
from tollgate.policies.approval_rules import ApprovalRules, RulesError, parse_rules
from tollgate.graph.background.offer import BACKGROUND
from tollgate.tools.loading import ToolSource, assemble_registry
from tollgate.tools.registry import Registry, ToolSpec

__all__ = ["App", "build_services", "connected_tools", "default_picker", "open_app", "serve_connected"]


def default_picker() -> BaseChatModel:
    """The embedded offline picker (used when no model endpoint is configured)."""
    from tollgate.nodes.offline import OfflinePicker

    return OfflinePicker()


@dataclass(frozen=True, slots=True)
class App:
    """A running Tollgate: its services and the runner over the compiled graph."""

    services: Services
    """The collaborators."""
    runner: TurnRunner
    """Runs turns and approvals."""


def build_services(
    settings: Settings,
    db: Database,
    *,
    picker_model: BaseChatModel | None = None,
    naturalizer_model: BaseChatModel | None = None,
    clock: Callable[[], datetime] = utc_now,
    hooks: Hooks | None = None,
    tools: Iterable[ToolSource] = (),
) -> Services:
    """The services over an open ``db``: the registry and the models ``settings`` configure.

    The registry is the built-ins plus ``tools`` and the plug-ins the settings and installed
    packages name (:func:`tools.loading.assemble_registry`). Raises
    :class:`graph.models.model_settings.ModelConfigError` for an unusable model configuration and
    :class:`tools.loading.ToolLoadError` for unusable tools. Used by :func:`open_app` and by
    Studio (:mod:`graph.studio.platform`), so both run the same turn.
    """
    key = settings.approval_key()
    registry = assemble_registry(settings, (BACKGROUND, *tools))
    return Services(
        settings=settings,
        db=db,
        registry=registry,
        approval_rules=approval_rules(settings, registry),
        picker_model=picker_model or build_model(
            settings, "picker", fallback=default_picker() if settings.offline_fallback() else None) or default_picker(),
        naturalizer_model=naturalizer_model or build_model(settings, "naturalizer", fallback=None),
        clock=clock,
        hooks=hooks or Hooks(),
        approval_key=key,
        egress=egress_client(settings),
        credentials=CredentialStore(db.pool, credentials_cipher(settings, key)),
    )


def approval_rules(settings: Settings, registry: Registry) -> ApprovalRules:
    """The rules of ``settings.approval_rules`` (none without a file); raises :class:`RulesError` for an
    unreadable or invalid file, or one naming an action the registry does not have."""
    path = settings.approval_rules
    if path is None:
        return ApprovalRules()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesError(f"approval rules {path}: cannot read ({exc.strerror})") from None
    rules = parse_rules(text, str(path))
    unknown = rules.unknown_actions(f"{t.name}.{a.name}" for t in registry.tools for a in t.actions)
    if unknown:
        raise RulesError(f"approval rules {path}: no such action: {', '.join(unknown)}")
    return rules


@asynccontextmanager
async def connected_tools(settings: Settings) -> AsyncIterator[list[ToolSpec]]:
    """The tools of the MCP servers ``settings.mcp_policy`` names, connected for the block (none
    without one). :func:`serve_connected` keeps the registry that serves them current."""
    if settings.mcp_policy is None:
        yield []
        return
    from tollgate.tools.mcp_tools import open_mcp_tools

    async with open_mcp_tools(settings.mcp_policy) as specs:
        yield specs


def serve_connected(remote: list[ToolSpec], registry: Registry) -> None:
    """Keep ``registry`` current with the connected MCP tools (a schema their policy accepts at run
    time replaces the one read at start-up). Without an MCP policy there is nothing to follow, and
    the MCP SDK is not even imported (it is slow to import)."""
    serve = getattr(remote, "serve_in", None)  # tools.mcp_tools.McpTools, when there are servers
    if serve is not None:
        serve(registry)


@asynccontextmanager
async def open_app(
    settings: Settings,
    *,
    picker_model: BaseChatModel | None = None,
    naturalizer_model: BaseChatModel | None = None,
    clock: Callable[[], datetime] = utc_now,
    hooks: Hooks | None = None,
    tools: Iterable[ToolSource] = (),
) -> AsyncIterator[App]:
    """Open the database (migrated), the checkpointer and the graph for ``settings``.

    ``tools`` are served besides the built-ins and the configured plug-ins (see
    :func:`build_services`). Model and tool configuration are checked first: an unusable one
    raises before anything starts. The models built here from ``settings`` are closed with the
    block; ``picker_model`` and ``naturalizer_model`` stay their caller's.
    """
    async with open_database(settings) as db, connected_tools(settings) as remote:
        services = build_services(
            settings, db, picker_model=picker_model, naturalizer_model=naturalizer_model, clock=clock, hooks=hooks,
            tools=[*tools, *remote],
        )
        serve_connected(remote, services.registry)
        await apply_tool_migrations(db, services.registry)
        saver = await open_checkpointer(db)
        graph = build_graph(services, checkpointer=saver)
        tune_collector()  # the first app of a process: start-up objects frozen, young collections rarer
        try:
            yield App(services=services, runner=TurnRunner(graph, services))
        finally:
            if services.picker_model is not picker_model:
                await close_model(services.picker_model)
            if services.naturalizer_model is not naturalizer_model:
                await close_model(services.naturalizer_model)
