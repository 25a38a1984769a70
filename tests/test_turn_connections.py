"""A turn takes a pooled connection per operation and none while it waits on a model."""

from __future__ import annotations

import asyncio

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from tollgate.graph.app import open_app
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tests.fakes import ScriptedModel, call, say

_ASK = "what's on my calendar today?"


async def _transcript_rows(db: Database, thread_id: str) -> int:
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM transcript WHERE thread_id = %s", (thread_id,))
        row = await cur.fetchone()
    return int(row["n"]) if row else 0


async def test_more_concurrent_turns_than_pool_connections_all_complete(
    settings: Settings, db: Database, ctx: Context
) -> None:
    small = settings.model_copy(update={"pool_max_size": 2})
    threads = [f"{ctx.owner_id}/pool-{i}" for i in range(8)]
    async with open_app(small) as app:
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(app.runner.send(ctx, thread, _ASK) for thread in threads)), timeout=120
        )
    assert [out.outcome for out in outcomes] == ["read"] * len(threads)
    # Each turn's request, its tool exchange and its reply.
    assert [await _transcript_rows(db, thread) for thread in threads] == [3] * len(threads)


async def test_turns_waiting_on_a_slow_model_hold_no_connection(settings: Settings, db: Database, ctx: Context) -> None:
    """Twenty turns on a pool of two, each waiting half a second on its model, run at once."""
    small = settings.model_copy(update={"pool_max_size": 2, "max_turns_per_owner": 50})
    model = ScriptedModel(steps=[], latency=0.5)

    def answer(messages: list[BaseMessage]) -> AIMessage:  # list first, then reply: whatever the order of turns
        listed = any(isinstance(m, ToolMessage) for m in messages)
        return say("") if listed else call("calendar__list", {"range": "today"})

    model.push(*[answer] * 40)
    threads = [f"{ctx.owner_id}/slow-{i}" for i in range(20)]
    async with open_app(small, picker_model=model) as app:
        pool = app.services.db.pool
        sends = [asyncio.create_task(app.runner.send(ctx, thread, _ASK)) for thread in threads]
        in_use: list[int] = []
        while not all(task.done() for task in sends):
            stats = pool.get_stats()
            in_use.append(stats["pool_size"] - stats["pool_available"])
            await asyncio.sleep(0.05)
        outcomes = [task.result() for task in sends]
    assert [out.outcome for out in outcomes] == ["read"] * len(threads)
    assert max(in_use) <= 2
    # Two model calls of 0.5 s each per turn: all twenty ran together, not two at a time.
    assert len(in_use) * 0.05 < 8
    model.assert_complete()
