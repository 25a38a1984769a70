"""TurnSaver inside a turn (serialization inline) stores and loads exactly what LangGraph's own code does."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row

from graph import turn_db
from graph.checkpointer import INTERRUPT_CHANNEL, TurnSaver, open_checkpointer
from graph.db import Database
from graph.runner import _lock_key

# What the inline copies in TurnSaver were taken from (langgraph-checkpoint-postgres, pinned).
_UPSTREAM = {"aput": "c685c7a8c88b7431", "aput_writes": "a2970ab04a7d7d5d", "_load_checkpoint_tuple": "507a19e7faee9d0d"}


@pytest.mark.parametrize("name", list(_UPSTREAM))
def test_the_upstream_code_the_inline_copies_follow_is_unchanged(name: str) -> None:
    source = inspect.getsource(getattr(AsyncPostgresSaver, name))
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    assert digest == _UPSTREAM[name], f"AsyncPostgresSaver.{name} changed: bring TurnSaver's inline copy in line with it"


async def _save(saver: TurnSaver, thread_id: str) -> None:
    base = empty_checkpoint()
    values: dict[str, Any] = {
        "messages": [HumanMessage("add a task", id="m1"), AIMessage("", id="m2")],
        "plan": {"tool": "tasks", "action": "create", "args": {"title": "water the plants"}},
        "steps": 2,
        "reply": "ok",
        "pending": None,
    }
    versions = {name: f"{i + 1:032}.0.5" for i, name in enumerate(values)}
    checkpoint = create_checkpoint(base, None, 1) | {"channel_values": values, "channel_versions": versions}
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    saved = await saver.aput(config, checkpoint, {"source": "loop", "step": 1}, versions)  # type: ignore[arg-type]
    await saver.aput_writes(saved, [("plan", {"x": 1}), (INTERRUPT_CHANNEL, [])], "task-1")


def _comparable(found: Any) -> tuple[Any, ...]:
    assert found is not None
    checkpoint = {k: v for k, v in found.checkpoint.items() if k not in ("id", "ts")}
    return checkpoint, found.metadata, [(task, channel, value) for task, channel, value in found.pending_writes or []]


async def test_inside_a_turn_the_saver_stores_and_loads_what_it_does_outside(db: Database) -> None:
    saver = await open_checkpointer(db)
    assert isinstance(saver, TurnSaver)
    await _save(saver, "t-inline-outside")  # LangGraph's own code (no turn)
    async with db.pool.connection() as conn:
        turn = turn_db.TurnDb(pool=db.pool, conn=conn, thread_id="t-inline-turn", lock_key=_lock_key("t-inline-turn"))
        turn.released = True  # nothing to release: the test holds no lock
        with turn_db.bound(turn):
            await _save(saver, "t-inline-turn")  # the inline copies
            loaded_in_turn = await saver.aget_tuple({"configurable": {"thread_id": "t-inline-turn"}})
    outside = await saver.aget_tuple({"configurable": {"thread_id": "t-inline-outside"}})
    inside = await saver.aget_tuple({"configurable": {"thread_id": "t-inline-turn"}})
    assert _comparable(inside) == _comparable(outside)
    assert _comparable(loaded_in_turn) == _comparable(outside)
    assert outside is not None and outside.checkpoint["channel_values"]["plan"]["args"] == {"title": "water the plants"}


async def test_priming_loads_the_latest_checkpoint_inline_as_langgraph_loads_it(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver = await open_checkpointer(db)
    assert isinstance(saver, TurnSaver)
    await _save(saver, "t-prime")
    async with db.pool.connection() as conn:
        cur = await conn.cursor(binary=True, row_factory=dict_row).execute(*saver.latest_query("t-prime"))
        row = await cur.fetchone()

    async def no_thread(*_: Any, **__: Any) -> None:
        raise AssertionError("priming hopped to a worker thread")

    with monkeypatch.context() as patched:
        patched.setattr(asyncio, "to_thread", no_thread)
        loaded, primed = await saver.load_latest(row)  # as the runner primes a turn, before it is bound
    assert loaded
    assert _comparable(primed) == _comparable(await saver.aget_tuple({"configurable": {"thread_id": "t-prime"}}))
