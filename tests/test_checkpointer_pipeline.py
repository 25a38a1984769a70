"""The one place Tollgate leans on how LangGraph's saver uses a public parameter (``pipe``), checked.

``graph/store/checkpointer.py`` gives ``AsyncPostgresSaver`` a stand-in pipeline whose ``sync`` is
deferred to the fenced block's own Sync (a round trip saved per checkpoint write). These tests
drive every fenced operation (``aput``, ``aput_writes``, ``adelete_thread``) through it on real
PostgreSQL under a lease: if a LangGraph release asks the stand-in for anything but ``sync``, or
stops taking ``pipe``, they fail, naming the stand-in, instead of a turn failing later.
"""

from __future__ import annotations

import uuid

from langgraph.checkpoint.base import empty_checkpoint

from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.store.leases import Leases, bound
from tests.conftest import all_rows


async def test_every_fenced_operation_of_langgraphs_saver_runs_through_the_stand_in_pipeline(
    db: Database, owner: str
) -> None:
    thread = f"{owner}/pipe-{uuid.uuid4().hex[:8]}"
    async with all_rows(db) as conn:
        await conn.execute("INSERT INTO threads (thread_id, owner_id) VALUES (%s, %s)", (thread, owner))
    saver = await open_checkpointer(db)
    leases = Leases(db.pool, ttl_seconds=30, wait_seconds=5)
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    async with leases.hold(thread) as lease:
        with bound(lease):
            checkpoint = empty_checkpoint()
            saved = await saver.aput(config, checkpoint, {"source": "input", "step": -1, "parents": {}}, {})
            await saver.aput_writes(saved, [("messages", ["hello"])], task_id="task-1")
            found = await saver.aget_tuple(saved)
            assert found is not None and found.checkpoint["id"] == checkpoint["id"]
            assert [(w[1], w[2]) for w in found.pending_writes or []] == [("messages", ["hello"])]
            await saver.adelete_thread(thread)
    assert await saver.aget_tuple(config) is None


def test_the_stand_in_refuses_anything_but_sync_loudly() -> None:
    from tollgate.graph.store.checkpointer import _SyncOnExit

    stand_in = _SyncOnExit()
    try:
        stand_in.flush  # noqa: B018 - the attribute access is the test
    except AttributeError as exc:
        assert "_SyncOnExit" in str(exc) and "update it" in str(exc)
    else:
        raise AssertionError("the stand-in pipeline answered for something other than sync()")
