"""Build a governed turn runner with the web tools pointed at the loopback test site."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.settings import Settings
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.turn import build_graph
from tests.conftest import all_rows
from tests.fakes import ScriptedModel
from tests.harness import Clock, Turns
from tests.webserver import WebServer
from tollgate.tools.builtin import builtin_tools
from tollgate.tools.registry import Registry, ToolSpec
from tollgate.tools.web import web_tools


def web_settings(settings: Settings, server: WebServer, **changes: Any) -> Settings:
    """Session settings with the web tools on, served by ``server``; loopback allowed explicitly."""
    return settings.model_copy(
        update={
            "web_tools": True,
            "weather_url": server.base,
            "geocoding_url": server.base,
            "search_url": server.base,
            "egress_allow_networks": ["127.0.0.1/32"],
            "egress_allow_hosts": ["news.example", f"news.example:{server.port}"],
        }
        | changes
    )


def fake_dns(table: dict[str, Sequence[str]]) -> Any:
    """A resolver over a fixed table (unknown names fail like NXDOMAIN); no real DNS is used."""

    async def resolve(host: str, port: int) -> Sequence[str]:
        if host not in table:
            raise OSError("unknown host")
        return table[host]

    return resolve


async def web_turns(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, *, dns: dict[str, Sequence[str]] | None = None,
    naturalizer: Any = None, extra: Sequence[ToolSpec] = (),
) -> Turns:
    """The real compiled graph on PostgreSQL, with the built-in tools plus the web tools (and ``extra``)."""
    values = settings.model_dump()
    registry = Registry((*builtin_tools(), *web_tools(values, resolver=fake_dns(dns or {})), *extra), values)
    services = Services(
        settings=settings, db=db, registry=registry, picker_model=model, naturalizer_model=naturalizer, clock=clock
    )
    saver = await open_checkpointer(db)
    return Turns(TurnRunner(build_graph(services, checkpointer=saver), services))


async def audit_rows(db: Database, owner: str) -> list[dict[str, Any]]:
    """The owner's audit rows, oldest first."""
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT * FROM audit_log WHERE owner_id = %s ORDER BY seq", (owner,))
        return list(await cur.fetchall())
