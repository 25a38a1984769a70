"""Every Tollgate process, and every async test, runs on uvloop."""

from __future__ import annotations

import asyncio

import uvloop

from tollgate.graph.process import event_loop
from tollgate.graph.store.db import Database


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


def test_processes_run_their_main_coroutine_on_uvloop() -> None:
    assert event_loop.run(_loop_type()) is uvloop.Loop


async def test_the_tests_run_on_the_same_loop_as_the_processes(db: Database) -> None:
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
    async with db.pool.connection() as conn:  # psycopg's async connections work on it
        cur = await conn.execute("SELECT 1 AS one")
        assert (await cur.fetchone())["one"] == 1
