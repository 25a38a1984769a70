"""The turn graph as LangGraph Studio and ``langgraph dev`` load it (see ``langgraph.json``).

Two objects, both named in ``langgraph.json``:

* :data:`graph` (``graphs.tollgate``) is compiled without a checkpointer, as ``langgraph dev``
  requires: the platform attaches one. Its services are built lazily on first use, inside the
  server's event loop (their file reads in a worker thread: ``langgraph dev`` refuses blocking
  calls on the loop), from the same settings as every other Tollgate process. Studio's
  context form is :class:`graph.state.Context`, so it asks for the owner.
* :func:`checkpointer` (``checkpointer.path``) is the checkpointer the platform attaches: our
  PostgreSQL saver with the strict serializer, over the database of ``DATABASE_URL`` (or the
  embedded one). Studio, the HTTP server and the CLI therefore read and write the same threads.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import tollgate.graph._env  # noqa: F401  - before langgraph is imported
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from tollgate.graph.app import build_services, connected_tools, serve_connected
from tollgate.graph.observe.tracing import configure_tracing
from tollgate.graph.services import Services
from tollgate.graph.settings import Settings, misspelt_variables
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import apply_tool_migrations, open_database
from tollgate.graph.turn import build_graph

__all__ = ["DevelopmentContext", "checkpointer", "graph", "services"]

_log = logging.getLogger("tollgate.studio")
_lock = asyncio.Lock()
_services: list[Services] = []
# Entered once and kept open for the life of the server process (the platform has no hook to close it).
_resources = AsyncExitStack()


async def services() -> Services:
    """The graph's services, built once per server process (the authentication handlers share them)."""
    if _services:
        return _services[0]
    async with _lock:
        if not _services:
            settings = await asyncio.to_thread(Settings)  # reads `.env` when there is one
            for warning in misspelt_variables(os.environ):
                _log.warning("%s", warning)
            configure_tracing()  # OTLP export when OTEL_EXPORTER_OTLP_* say where (and the platform set up none)
            db = await _resources.enter_async_context(open_database(settings))
            remote = await _resources.enter_async_context(connected_tools(settings))
            # Off the event loop: building the services reads files (the development approval key,
            # approval rules, plug-in metadata), and `langgraph dev` fails any blocking call on the loop.
            services = await asyncio.to_thread(build_services, settings, db, tools=remote)
            serve_connected(remote, services.registry)
            await apply_tool_migrations(db, services.registry)
            _services.append(services)
    return _services[0]


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncPostgresSaver]:
    """Our PostgreSQL checkpointer (strict serializer, migrated), for ``langgraph dev``'s lifetime.

    ``langgraph.json`` names it as ``checkpointer.path``; the platform enters it at start-up and
    closes it at shutdown.
    """
    async with open_database(await asyncio.to_thread(Settings)) as db:
        yield await open_checkpointer(db)


@dataclass(frozen=True)
class DevelopmentContext(Context):
    """``make studio-open``'s run context: a run whose context names no owner acts for the
    development owner (``TOLLGATE_DEV_OWNER``, ``demo`` by default)."""

    owner_id: str = field(default_factory=lambda: os.environ.get("TOLLGATE_DEV_OWNER") or "demo")
    """The owner whose data the turn may touch (the development owner unless the form names one)."""


_OPEN = os.environ.get("TOLLGATE_STUDIO_OPEN") == "true"
if _OPEN:
    # `make studio-open` (langgraph-open.json): no authentication. Said once, loudly, at start.
    _log.warning("Studio runs WITHOUT authentication: anyone who reaches this port can act as any owner "
                 "(a run that names none acts as %r). Keep it on 127.0.0.1, for development only; "
                 "`make studio` authenticates every request.", DevelopmentContext().owner_id)

graph = build_graph(services, step_budget=Settings().step_budget,
                    context_schema=DevelopmentContext if _OPEN else Context)
"""The compiled turn graph, for ``langgraph.json``."""
