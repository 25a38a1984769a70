"""A turn runs on one pooled connection, so more concurrent turns than connections all complete."""

from __future__ import annotations

import asyncio
import uuid

from graph.app import open_app
from graph.db import Database
from graph.settings import Settings
from graph.state import Context

_ASK = "what's on my calendar today?"


async def _transcript_rows(db: Database, thread_id: str) -> int:
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM transcript WHERE thread_id = %s", (thread_id,))
        row = await cur.fetchone()
    return int(row["n"]) if row else 0


async def test_more_concurrent_turns_than_pool_connections_all_complete(
    settings: Settings, db: Database, ctx: Context
) -> None:
    # Each turn holds a connection for its thread lock; with a statement needing a second one,
    # eight turns on a pool of two used to wait on each other until the pool timed out.
    small = settings.model_copy(update={"pool_max_size": 2})
    threads = [f"{ctx.owner_id}/pool-{i}" for i in range(8)]
    async with open_app(small) as app:
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(app.runner.send(ctx, thread, _ASK) for thread in threads)), timeout=120
        )
    assert [out.outcome for out in outcomes] == ["read"] * len(threads)
    assert [await _transcript_rows(db, thread) for thread in threads] == [2] * len(threads)


async def test_a_read_turn_takes_one_connection_from_the_pool(settings: Settings, db: Database, ctx: Context) -> None:
    roomy = settings.model_copy(update={"checkpoint_prune_every": 0})
    async with open_app(roomy) as app:
        await app.runner.send(ctx, f"{ctx.owner_id}/warm", _ASK)
        thread = f"{ctx.owner_id}/one-{uuid.uuid4().hex[:6]}"
        before = app.services.db.pool.get_stats()["requests_num"]
        out = await app.runner.send(ctx, thread, _ASK)
        taken = app.services.db.pool.get_stats()["requests_num"] - before
    assert out.outcome == "read"
    assert taken == 1  # the lock's connection also served the checkpoint, the nodes and the audit record
    assert await _transcript_rows(db, thread) == 2  # the transcript committed with the checkpoint
