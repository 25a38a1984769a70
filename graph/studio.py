"""The turn graph as LangGraph Studio and ``langgraph dev`` load it (see ``langgraph.json``).

Compiled without a checkpointer, as ``langgraph dev`` requires: the platform attaches its
own. Services are built lazily on first use, inside the server's event loop, from the same
settings as every other Tollgate process. Studio's context form asks for the owner.
"""

from __future__ import annotations

import asyncio

import graph._env  # noqa: F401  - before langgraph is imported
from graph.app import default_picker
from graph.db import Database, open_database
from graph.services import Services
from graph.settings import Settings
from graph.turn import build_graph
from tools.builtin import default_registry

__all__ = ["graph"]

_lock = asyncio.Lock()
_services: list[Services] = []
_db_cm: list[object] = []


async def _provider() -> Services:
    if _services:
        return _services[0]
    async with _lock:
        if not _services:
            settings = Settings()
            cm = open_database(settings)
            db: Database = await cm.__aenter__()
            _db_cm.append(cm)  # kept open for the life of the server process
            _services.append(
                Services(
                    settings=settings,
                    db=db,
                    registry=default_registry(settings),
                    picker_model=default_picker(),
                    approval_key=settings.approval_key(),
                )
            )
    return _services[0]


graph = build_graph(_provider, step_budget=Settings().step_budget)
"""The compiled turn graph, for ``langgraph.json``."""
