"""The thread lock: computed alike in Python and SQL, released by a run's last write, and
taken for a decision by approval id only while the approval is pending."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from psycopg import AsyncConnection

from bench.roundtrips import open_counted_database
from graph import turn_db
from graph.checkpointer import INTERRUPT_CHANNEL, TurnSaver, open_checkpointer
from graph.db import Database
from graph.runner import _LOCK_KEY_OF_THREAD_ID, TurnRunner, _lock_key
from graph.services import Services
from graph.turn import build_graph
from graph.state import Context
from policies.errors import ApprovalInvalid, NotFound
from tests.fakes import ScriptedModel, call
from tests.harness import Turns


async def _lock_is_free(db: Database, thread_id: str) -> bool:
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (_lock_key(thread_id),))
        row = await cur.fetchone()
        if row and row["got"]:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_lock_key(thread_id),))
        return bool(row and row["got"])


async def _proposed(turns: Turns, model: ScriptedModel, ctx: Context, name: str) -> tuple[str, str]:
    """(thread id, approval id) of a task proposed on the owner's thread ``name``."""
    thread_id = ctx.owner_id + "/" + name
    model.push(call("tasks__create", {"title": "water the plants"}))
    out = await turns.send(ctx, thread_id, "add a task to water the plants")
    assert out.approval is not None
    return thread_id, out.approval.approval_id


@pytest.mark.parametrize("thread_id", ["t", "owner/pool-1", "é thread ☃", "x" * 300])
async def test_postgres_computes_the_same_lock_key_as_python(db: Database, thread_id: str) -> None:
    async with db.pool.connection() as conn:
        cur = await conn.execute(f"SELECT {_LOCK_KEY_OF_THREAD_ID} AS key FROM (VALUES (%s)) AS v(thread_id)", (thread_id,))
        row = await cur.fetchone()
    assert row is not None and row["key"] == _lock_key(thread_id)


async def test_an_interrupts_writes_release_the_lock_only_when_they_end_the_run(turns: Turns, db: Database) -> None:
    saver = turns.runner.graph.checkpointer
    assert isinstance(saver, TurnSaver)
    config = {"configurable": {"thread_id": "t-lock-writes", "checkpoint_ns": "", "checkpoint_id": "c1"}}
    for ends_run, written, writes, released in (
        (True, "c1", [("plan", None)], False),  # not an interrupt: more may follow
        (False, "c1", [(INTERRUPT_CHANNEL, [])], False),  # a run that does not write its checkpoint at its exit
        (True, "c0", [(INTERRUPT_CHANNEL, [])], False),  # the checkpoint they belong to is not written yet
        (True, "c1", [(INTERRUPT_CHANNEL, [])], True),
    ):
        async with db.pool.connection() as conn:
            key = _lock_key("t-lock-writes")
            await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            turn = turn_db.TurnDb(pool=db.pool, conn=conn, thread_id="t-lock-writes", lock_key=key)
            turn.release_with_interrupt = ends_run
            turn.written_checkpoint = written
            with turn_db.bound(turn):
                await saver.aput_writes(config, writes, "task-1")  # type: ignore[arg-type]
            assert turn.released is released
            assert await _lock_is_free(db, "t-lock-writes") is released
            if not released:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    async with db.pool.connection() as conn:  # what released the lock had committed first
        cur = await conn.execute(
            "SELECT count(*) AS n FROM checkpoint_writes WHERE thread_id = %s AND channel = %s",
            ("t-lock-writes", INTERRUPT_CHANNEL),
        )
        row = await cur.fetchone()
    assert row is not None and row["n"] == 1


async def test_a_turn_stopped_for_approval_is_unlocked_listed_and_resumable(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    thread_id, approval_id = await _proposed(turns, model, ctx, "t-lock-1")
    assert await _lock_is_free(db, thread_id)
    assert [p.approval_id for p in await turns.runner.pending_approvals(ctx)] == [approval_id]
    done = await turns.decide(ctx, approval_id, {"type": "approve"})
    assert done.outcome == "executed"
    assert await _lock_is_free(db, thread_id)


async def test_a_decision_refused_before_it_runs_leaves_no_lock(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    thread_id, approval_id = await _proposed(turns, model, ctx, "t-lock-2")
    intruder = Context(owner_id=ctx.owner_id + "x", timezone="UTC")
    with pytest.raises(NotFound):
        await turns.runner.decide(intruder, approval_id, {"type": "approve"})
    with pytest.raises(NotFound):
        await turns.runner.decide(ctx, "apv_" + "0" * 32, {"type": "approve"})
    assert await _lock_is_free(db, thread_id)
    await turns.decide(ctx, approval_id, {"type": "reject"})
    with pytest.raises(ApprovalInvalid, match="already rejected"):
        await turns.runner.decide(ctx, approval_id, {"type": "approve"})
    assert await _lock_is_free(db, thread_id)


async def test_a_decision_waiting_on_a_busy_thread_sees_what_the_lock_holder_left(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """The approval was pending when the decision asked for the lock, superseded when it got it."""
    thread_id, approval_id = await _proposed(turns, model, ctx, "t-lock-3")
    url = db.pool.conninfo
    async with await AsyncConnection.connect(url, autocommit=True) as holder:
        await holder.execute("SELECT pg_advisory_lock(%s)", (_lock_key(thread_id),))
        deciding = asyncio.create_task(turns.runner.decide(ctx, approval_id, {"type": "approve"}))
        for _ in range(500):  # until the decision waits on the lock
            cur = await holder.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            row = await cur.fetchone()
            if row and row[0]:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the decision never waited on the thread's lock")
        await holder.execute("UPDATE approvals SET status = 'superseded' WHERE approval_id = %s", (approval_id,))
        await holder.execute("SELECT pg_advisory_unlock(%s)", (_lock_key(thread_id),))
        with pytest.raises(ApprovalInvalid, match="already superseded"):
            await deciding
    assert await _lock_is_free(db, thread_id)


async def _checkpoints_of(db: Database, thread_id: str) -> tuple[int, int]:
    """(checkpoints, interrupt writes) stored for ``thread_id``."""
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %s) AS checkpoints,"
            " (SELECT count(*) FROM checkpoint_writes WHERE thread_id = %s AND channel = %s) AS interrupts",
            (thread_id, thread_id, INTERRUPT_CHANNEL),
        )
        row = await cur.fetchone()
    assert row is not None
    return row["checkpoints"], row["interrupts"]


@asynccontextmanager
async def _held_copy(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database, name: str, *, locked: bool = False
) -> AsyncIterator[tuple[TurnSaver, turn_db.TurnDb, RunnableConfig, str]]:
    """A real interrupted run's exit checkpoint (on the owner's thread ``name``), put on that thread
    id + ``-copy`` inside an interrupted turn (its lock taken with ``locked``): (saver, turn, the
    config it was put at, its id)."""
    thread_id, _ = await _proposed(turns, model, ctx, name)
    saver = turns.runner.graph.checkpointer
    assert isinstance(saver, TurnSaver)
    saved = await saver.aget_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    assert saved is not None
    other = thread_id + "-copy"
    async with db.pool.connection() as conn:
        key = _lock_key(other)
        if locked:
            await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        turn = turn_db.TurnDb(pool=db.pool, conn=conn, thread_id=other, lock_key=key)
        turn.release_with_interrupt = turn.interrupted = True
        with turn_db.bound(turn):
            written = await saver.aput({"configurable": {"thread_id": other, "checkpoint_ns": ""}}, saved.checkpoint,
                                       saved.metadata, dict(saved.checkpoint["channel_versions"]))  # type: ignore[arg-type]
            yield saver, turn, written, saved.checkpoint["id"]


async def test_an_interrupted_runs_checkpoint_is_held_then_committed_with_its_writes(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """The exit checkpoint of a run stopped at an interrupt goes in the interrupt writes' transaction."""
    other = ctx.owner_id + "/t-held-copy"
    async with _held_copy(turns, model, ctx, db, "t-held", locked=True) as (saver, turn, written, _):
        assert turn.held and await _checkpoints_of(db, other) == (0, 0)  # held: nothing sent yet
        await saver.aput_writes(written, [(INTERRUPT_CHANNEL, [])], "task-1")
    assert not turn.held and turn.released
    assert await _checkpoints_of(db, other) == (1, 1)
    assert await _lock_is_free(db, other)


@pytest.mark.parametrize("read", ["checkpointer", "read-only transaction"])
async def test_a_read_in_the_turn_sees_a_held_checkpoint(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database, read: str
) -> None:
    name = "t-held-read-" + read.split()[0]
    async with _held_copy(turns, model, ctx, db, name) as (saver, turn, written, checkpoint_id):
        assert turn.held
        if read == "checkpointer":
            again = await saver.aget_tuple(written)
            assert again is not None and again.checkpoint["id"] == checkpoint_id
        else:
            async with turn_db.transaction(turn.conn, read_only=True):
                cur = await turn.conn.execute("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s",
                                              (f"{ctx.owner_id}/{name}-copy",))
                row = await cur.fetchone()
            assert row is not None and row["n"] == 1
    assert not turn.held


async def test_a_held_checkpoint_whose_writes_never_come_is_written_when_the_run_ends(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver = turns.runner.graph.checkpointer
    assert isinstance(saver, TurnSaver)
    original = saver.aput_writes

    async def no_interrupt_writes(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        if not any(channel == INTERRUPT_CHANNEL for channel, _ in writes):
            await original(config, writes, task_id, task_path)

    monkeypatch.setattr(saver, "aput_writes", no_interrupt_writes)
    thread_id, _ = await _proposed(turns, model, ctx, "t-held-end")
    assert await _checkpoints_of(db, thread_id) == (1, 0)  # the checkpoint, without the writes that never came
    assert [p.thread_id for p in await turns.runner.pending_approvals(ctx, thread_id=thread_id)] == [thread_id]
    assert await _lock_is_free(db, thread_id)


async def test_a_write_turn_is_three_round_trips_and_its_approval_five(
    services: Services, model: ScriptedModel, db: Database
) -> None:
    """The lock's round trip; the gate's record, committed while the turn goes on to the approval;
    then one for the approval row, the checkpoint and the interrupt's writes. The approval takes
    the lock, commits its decision's record while the turn goes on to the effect, runs the effect
    (two) and commits."""
    await open_checkpointer(db)  # its tables, migrated on the session's pool
    async with open_counted_database(db.url) as (counted, trips):
        local = dataclasses.replace(services, db=counted)
        runner = TurnRunner(build_graph(local, checkpointer=await open_checkpointer(counted, setup=False)), local)
        ctx = Context(owner_id="trips-owner", timezone="UTC")
        counts: list[tuple[int, int]] = []
        for round_ in range(8):
            model.push(call("tasks__create", {"title": "water the plants"}))
            with trips.window() as write:
                out = await runner.send(ctx, f"trips-owner/t-{round_}", "add a task to water the plants")
            assert out.approval is not None
            with trips.window() as approve:
                done = await runner.decide(ctx, out.approval.approval_id, {"type": "approve"})
            assert done.outcome == "executed"
            counts.append((write[0], approve[0]))
    # The count is of replies after requests, so a reply that comes back while the client is still
    # sending the same pipeline (the audit record's own commit is quick) counts as a trip more,
    # depending on timing: the fewest seen are the turn's own.
    assert (min(w for w, _ in counts), min(a for _, a in counts)) == (3, 5), counts
