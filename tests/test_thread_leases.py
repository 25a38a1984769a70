"""Thread leases: renewed while a turn runs, free the moment it ends, and a late writer is fenced off."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

from tollgate.graph.ledger import approvals

from tollgate.graph.app import open_app
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store import leases
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.store.leases import LeaseLost, Leases
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, say


async def _holder(db: Database, thread: str) -> Any:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT holder, fence FROM thread_leases WHERE thread_id = %s", (thread,))
        return await cur.fetchone()


async def test_a_holder_whose_lease_was_taken_over_can_write_nothing(db: Database, owner: str) -> None:
    thread = owner + "/fenced"
    async with all_rows(db) as conn:
        await conn.execute("INSERT INTO threads (thread_id, owner_id) VALUES (%s, %s)", (thread, owner))
    quick = Leases(db.pool, ttl_seconds=0.2, wait_seconds=5)
    old = await quick.acquire(thread)
    await asyncio.sleep(0.5)  # it stalls past its lease...
    new = await quick.acquire(thread)  # ...and another holder takes the thread
    assert new.fence == old.fence + 1 and new.stale
    saver = await open_checkpointer(db)
    checkpoint = create_checkpoint(empty_checkpoint(), None, 1)
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    request: Any = {"action_requests": [{"name": "mail__send", "args": {}, "description": "Send"}],
                    "review_configs": [], "approval": {"id": "apv_" + "1" * 32, "token": "t", "args_hash": "0" * 64,
                                                       "expires_at": "2030-01-01T00:00:00+00:00", "tool": "mail",
                                                       "action": "send"}}
    with leases.bound(old):  # the late writer: every write of its turn is refused
        with pytest.raises(LeaseLost):
            await saver.aput(config, checkpoint, {"source": "loop", "step": 1}, {})
        with pytest.raises(LeaseLost):
            await approvals.list_pending(db.pool, owner, thread, request)
        with pytest.raises(LeaseLost):
            async with leases.fenced(db.pool, owner=owner) as conn:
                await conn.execute("SELECT 1")
    assert await saver.aget_tuple(config) is None
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM approvals WHERE thread_id = %s", (thread,))
        assert await cur.fetchone() == {"n": 0}
    with leases.bound(new):  # the holder writes
        await saver.aput(config, checkpoint, {"source": "loop", "step": 1}, {})
    assert await saver.aget_tuple(config) is not None
    await quick.release(new)
    await quick.release(old)  # a release by the old holder leaves the new state alone
    assert (await _holder(db, thread))["holder"] is None


async def test_a_turn_longer_than_its_lease_keeps_its_thread_and_frees_it_when_done(
    settings: Settings, db: Database, ctx: Context
) -> None:
    short = settings.model_copy(update={"thread_lease_seconds": 0.6})
    model = ScriptedModel(steps=[call("calendar__list", {"range": "today"}), say("")], latency=0.9)
    thread = ctx.owner_id + "/long"
    async with open_app(short, picker_model=model) as app:
        turn = asyncio.create_task(app.runner.send(ctx, thread, "what's on my calendar today?"))
        await asyncio.sleep(1.2)  # past twice the lease: renewed meanwhile
        other = Leases(db.pool, ttl_seconds=0.6, wait_seconds=0)
        assert await other.try_acquire(thread) is None
        out = await turn
    assert out.outcome == "read"
    assert (await _holder(db, thread))["holder"] is None  # released with the turn, not left to run out


async def test_a_turn_waits_for_the_thread_a_turn_elsewhere_holds(settings: Settings, db: Database, ctx: Context) -> None:
    """Another process holds the thread: the turn waits, then runs (never alongside it)."""
    thread = ctx.owner_id + "/wait"
    model = ScriptedModel(steps=[call("calendar__list", {"range": "today"}), say("")])
    elsewhere = Leases(db.pool, ttl_seconds=30, wait_seconds=0)
    held = await elsewhere.acquire(thread)
    async with open_app(settings, picker_model=model) as app:
        turn = asyncio.create_task(app.runner.send(ctx, thread, "what's on my calendar today?"))
        await asyncio.sleep(0.3)
        assert not turn.done() and model.prompts == []  # nothing of it ran
        await elsewhere.release(held)
        assert (await asyncio.wait_for(turn, 5)).outcome == "read"
