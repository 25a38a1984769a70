"""A database outage, as clients live it: the turn in flight ends with a clear ``unavailable``
error within a bounded time, a new request is answered 503 within a couple of seconds, and once
the database is back everything works again.

The server reaches the real PostgreSQL through a relay on loopback (:mod:`tests.flaky_proxy`)
that the test takes down: every open connection is cut and every new one refused, as when the
database's host goes away.
"""

from __future__ import annotations

import asyncio
import time
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tollgate.graph.settings import Settings
from tests.fakes import ScriptedModel, call, say
from tests.flaky_proxy import FlakyRelay
from tests.harness import Clock
from tests.server_harness import Api, serve


class _RelayThread:
    """A :class:`FlakyRelay` on an event loop of its own (the server under test runs in a thread
    that pytest's loop blocks on while it starts), driven from the test's loop."""

    def __init__(self, port: int, unix: str | None) -> None:
        self.loop = asyncio.new_event_loop()
        self.relay = FlakyRelay(port, unix_path=unix)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="db-relay")
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.relay.start(), self.loop).result(10)
        self.port = self.relay.port

    def go_down(self) -> None:
        self.loop.call_soon_threadsafe(self.relay.go_down)

    def come_back(self) -> None:
        self.loop.call_soon_threadsafe(self.relay.come_back)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.relay.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def relay(settings: Settings) -> Iterator[_RelayThread]:
    """A relay in front of the session's PostgreSQL (its Unix socket, or its TCP port)."""
    info = conninfo_to_dict(str(settings.database_url))
    host, port = str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432)
    unix = str(Path(host) / f".s.PGSQL.{port}") if host.startswith("/") else None
    running = _RelayThread(port, unix)
    try:
        yield running
    finally:
        running.close()


def _through(settings: Settings, relay: _RelayThread, **more: Any) -> Settings:
    url = make_conninfo(str(settings.database_url), host="127.0.0.1", port=str(relay.port))
    return settings.model_copy(update={"database_url": url, "rate_limit_burst": 100_000,
                                       "rate_limit_per_minute": 1_000_000} | more)


async def test_an_outage_ends_the_turn_in_flight_as_unavailable_and_new_requests_get_503_at_once(
    settings: Settings, relay: _RelayThread, demo_token: str
) -> None:
    from tests.conftest import NOW

    model = ScriptedModel(steps=[say("Hello.")])
    answers = 0

    def slow_after_the_list() -> None:
        nonlocal answers
        answers += 1
        # The turn lists the calendar at once (its stream is under way), then thinks for a while.
        model.latency = 2.0 if answers == 2 else 0.0

    with serve(_through(settings, relay), picker_model=model, clock=Clock(NOW)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            api = Api(client=client, owner="", token=demo_token)
            first = await api.chat("hi")
            assert first.last["type"] == "message_complete"
            thread_id = first.last["thread_id"]

            model.steps = [call("calendar__list", {"range": "today"}), say("never said")]
            model.on_call = slow_after_the_list
            turn = asyncio.create_task(api.chat("what is on my calendar?", thread_id, check=False))
            await asyncio.sleep(0.8)
            relay.go_down()
            cut = time.monotonic()

            started = time.monotonic()
            refused = await client.get("/v1/threads", headers=api.auth)
            answered_in = time.monotonic() - started
            assert refused.status_code == 503 and refused.json()["code"] == "unavailable", refused.text
            assert answered_in < 2.5, f"a new request waited {answered_in:.1f}s for its 503"
            assert "Retry-After" in refused.headers

            streamed = await asyncio.wait_for(turn, 20)
            ended_in = time.monotonic() - cut
            assert streamed.status == 200
            last = streamed.events[-1]
            assert last["type"] == "error" and last["data"]["code"] == "unavailable", streamed.events
            assert last["data"].get("fatal") is True
            assert ended_in < 10, f"the turn in flight took {ended_in:.1f}s to end"

            relay.come_back()
            deadline = time.monotonic() + 15
            while (back := await client.get("/v1/threads", headers=api.auth)).status_code != 200:
                assert time.monotonic() < deadline, f"the server never came back: {back.status_code} {back.text}"
                await asyncio.sleep(0.2)
            model.push(say("Back."))
            back = time.monotonic()
            again = await api.chat("still there?", thread_id, check=False)
            assert again.last["type"] == "message_complete" and again.last["data"]["text"] == "Back."
            # Its thread's lease, which could not be released during the outage, does not hold it up.
            assert time.monotonic() - back < 5


async def test_every_pooled_connection_has_a_statement_limit_and_a_connect_limit(settings: Settings) -> None:
    from tollgate.graph.store.db import open_database

    limited = settings.model_copy(update={"db_statement_timeout_seconds": 1.5, "db_connect_timeout_seconds": 3})
    async with open_database(limited, migrate=False) as db:
        async with db.pool.connection() as conn:
            shown = await (await conn.execute("SHOW statement_timeout")).fetchone()
            assert shown is not None and shown["statement_timeout"] == "1500ms"
            assert conn.info.get_parameters().get("connect_timeout") == "3"
            with pytest.raises(psycopg.errors.QueryCanceled):
                await conn.execute("SELECT pg_sleep(5)")
