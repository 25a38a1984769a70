"""Real HTTP for the server tests: uvicorn on a free loopback port, httpx + SSE, the event contract.

The server runs in a thread with its own event loop (``uvicorn.Server.run``), so async tests
on pytest's loop and sync tests (schemathesis, Playwright) reach it the same way: over a
socket on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from httpx_sse import aconnect_sse

from tollgate.graph.event_contract import EventContract
from tollgate.graph.events import TurnEvent
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tests.harness import Clock
from tollgate.tools.demo import seed_demo
from tollgate.web.auth import issue_token

__all__ = ["Api", "LiveServer", "Streamed", "api", "demo_token", "live_server", "serve"]

_TERMINAL = frozenset({"message_complete", "approval_required"})


@dataclass(frozen=True)
class LiveServer:
    """A running server."""

    url: str
    """``http://127.0.0.1:<port>``."""
    settings: Settings
    """The settings it runs with."""


@contextmanager
def serve(settings: Settings, *, access_log: bool = False, **app_options: Any) -> Iterator[LiveServer]:
    """Run ``server.create_app(settings, **app_options)`` under uvicorn on a free loopback port
    (with uvicorn's access log on, to the ``uvicorn.access`` logger, when ``access_log``)."""
    from tollgate.server import create_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(settings, **app_options), lifespan="on",
                            log_level="info" if access_log else "warning", ws="none",
                            access_log=access_log)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn:{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        yield LiveServer(url=f"http://127.0.0.1:{port}", settings=settings)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@dataclass
class Streamed:
    """What one streaming request returned."""

    status: int
    """HTTP status."""
    events: list[TurnEvent] = field(default_factory=list)
    """The turn events, in order."""
    ids: list[str | None] = field(default_factory=list)
    """The SSE ``id`` of each message."""
    types: list[str] = field(default_factory=list)
    """The SSE ``event`` of each message."""
    body: Any = None
    """The JSON body of a non-200 answer."""
    content_type: str = ""
    """The response's content type."""

    @property
    def last(self) -> TurnEvent:
        """The final event."""
        return self.events[-1]

    def runs(self) -> list[list[TurnEvent]]:
        """The events split into runs (each ends with a terminal event)."""
        out: list[list[TurnEvent]] = [[]]
        for event in self.events:
            out[-1].append(event)
            if event["type"] in _TERMINAL:
                out.append([])
        return [run for run in out if run]


@dataclass
class Api:
    """An authenticated client for one owner, checking the event contract on every run."""

    client: httpx.AsyncClient
    """Talks to the live server."""
    owner: str
    """The owner the token maps to."""
    token: str
    """The bearer token."""
    contract: EventContract = field(default_factory=EventContract)
    """The event-contract checker applied to every streamed run."""

    @property
    def auth(self) -> dict[str, str]:
        """The Authorization header."""
        return {"Authorization": f"Bearer {self.token}"}

    async def stream(self, method: str, path: str, *, json_body: Any = None, headers: dict[str, str] | None = None,
                     check: bool | None = None, resume: bool = False, token: str | None = None) -> Streamed:
        """One SSE request; when it streams, check the run against the contract (unless ``check=False``)."""
        hdrs = {"Authorization": f"Bearer {token or self.token}", **(headers or {})}
        kwargs: dict[str, Any] = {"headers": hdrs}
        if json_body is not None:
            kwargs["json"] = json_body
        async with aconnect_sse(self.client, method, path, **kwargs) as source:
            response = source.response
            out = Streamed(status=response.status_code, content_type=response.headers.get("content-type", ""))
            if response.status_code != 200:
                out.body = json.loads(await response.aread())
                return out
            async for message in source.aiter_sse():
                out.ids.append(message.id or None)
                out.types.append(message.event)
                out.events.append(message.json())
        if check if check is not None else bool(out.events):
            self.contract.check_run(out.events, resume=resume)
        return out

    async def chat(self, message: str, thread_id: str | None = None, **kw: Any) -> Streamed:
        """``POST /v1/chat``, streamed."""
        body: dict[str, Any] = {"message": message}
        if thread_id is not None:
            body["thread_id"] = thread_id
        return await self.stream("POST", "/v1/chat", json_body=body, **kw)

    async def decide(self, approval_id: str, decision: dict[str, Any], **kw: Any) -> Streamed:
        """``POST /v1/approvals/{id}/decision``, streamed (a resume, for the contract)."""
        return await self.stream("POST", f"/v1/approvals/{approval_id}/decision", json_body=decision, resume=True, **kw)

    async def get(self, path: str, *, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        """An authenticated GET."""
        return await self.client.get(path, headers={**self.auth, **(headers or {})}, **kw)

    async def list_then_propose(self) -> tuple[str, TurnEvent]:
        """List today's calendar on a new thread, then ask to cancel the 2nd event: (thread, approval event)."""
        listed = await self.chat("what's on my calendar today?")
        assert listed.status == 200 and listed.last["type"] == "message_complete", listed.body
        thread_id = listed.last["thread_id"]
        proposed = await self.chat("cancel the 2nd one", thread_id)
        assert proposed.status == 200 and proposed.last["type"] == "approval_required", proposed.body
        return thread_id, proposed.last


@pytest.fixture(scope="session")
def live_server(settings: Settings) -> Iterator[LiveServer]:
    """One server for the session: offline picker, a fixed clock, a generous rate limit."""
    from tests.conftest import NOW

    roomy = settings.model_copy(update={"rate_limit_burst": 100_000, "rate_limit_per_minute": 1_000_000,
                                       "body_read_seconds": 2.0})
    with serve(roomy, clock=Clock(NOW)) as server:
        yield server


@pytest.fixture
async def demo_token(db: Database, owner: str) -> str:
    """A bearer token for a fresh owner with the demo data (Europe/Paris, around the fixed clock),
    for tests that start a server of their own (with a scripted model)."""
    from tests.conftest import NOW, all_rows

    async with all_rows(db) as conn:
        await seed_demo(conn, owner, NOW, "Europe/Paris")
    return await issue_token(db, owner, label="test")


@pytest.fixture
async def api(live_server: LiveServer, db: Database, owner: str) -> AsyncIterator[Api]:
    """A fresh owner with demo data and a bearer token, and a client for the live server.

    When the test is done, the approval contract is checked on every thread of the owner.
    """
    from tests.conftest import NOW, all_rows

    async with all_rows(db) as conn:
        await seed_demo(conn, owner, NOW, "Europe/Paris")
    token = await issue_token(db, owner, label="test")
    async with httpx.AsyncClient(base_url=live_server.url, timeout=60) as client:
        yield Api(client=client, owner=owner, token=token)
    await _check_approvals(live_server.settings, db, owner)


async def _check_approvals(settings: Settings, db: Database, owner: str) -> None:
    from tollgate.graph.ledger.approval_contract import check_approvals
    from tollgate.graph.services import Services
    from tollgate.graph.store.checkpointer import open_checkpointer
    from tollgate.graph.turn import build_graph
    from tests.fakes import ScriptedModel
    from tests.conftest import all_rows
    from tollgate.tools.builtin import default_registry

    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT thread_id FROM threads WHERE owner_id = %s", (owner,))
        threads = [r["thread_id"] for r in await cur.fetchall()]
    services = Services(settings=settings, db=db, registry=default_registry(), picker_model=ScriptedModel(steps=[]))
    graph = build_graph(services, checkpointer=await open_checkpointer(db, setup=False))
    await check_approvals(db.pool, graph, threads)
