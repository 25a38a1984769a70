"""How a run's events reach the log: in order, with the log's increasing ids, the last one only
once the runner is done with the run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tollgate.graph.events import TurnEvent
from tollgate.graph.store.db import Database
from tollgate.web import store
from tollgate.web.hub import TurnHub


def _event(thread_id: str, seq: int, kind: str = "tool_progress") -> TurnEvent:
    data = {"text": "ok", "outcome": "read"} if kind == "message_complete" else {"n": seq}
    return TurnEvent(type=kind, seq=seq, turn_id="turn-1", ts="2026-11-30T00:00:00+00:00", data=data,  # type: ignore[typeddict-item]
                     thread_id=thread_id)


async def test_a_runs_events_are_logged_in_order_with_increasing_ids(db: Database) -> None:
    hub = TurnHub(db, idle_seconds=5)
    thread = await store.create_thread(db, "alice")

    async def events() -> AsyncIterator[TurnEvent]:
        for seq in range(1, 6):
            yield _event(thread, seq)
            await asyncio.sleep(0)
        yield _event(thread, 6, "message_complete")

    run, first = await hub.start("alice", thread, events())
    await run.done.wait()
    assert first["seq"] == 1
    ids = [event["id"] for event in run.recorded]
    assert [event["seq"] for event in run.recorded] == [1, 2, 3, 4, 5, 6]
    assert ids == sorted(ids) and len(set(ids)) == 6
    logged = await store.events_after(db, thread, 0)
    assert [(e["id"], e["seq"]) for e in logged] == [(e["id"], e["seq"]) for e in run.recorded]
    assert await store.events_after(db, thread, ids[2]) == logged[3:]  # after an id: exactly what came later


async def test_the_last_event_is_logged_only_once_the_runner_is_done(db: Database) -> None:
    hub = TurnHub(db, idle_seconds=5)
    thread = await store.create_thread(db, "bob")
    finished = asyncio.Event()
    seen_when_done: list[list[int]] = []

    async def events() -> AsyncIterator[TurnEvent]:
        try:
            yield _event(thread, 1)
            yield _event(thread, 2, "message_complete")
        finally:  # the runner's clean-up (its thread is released here)
            seen_when_done.append([e["seq"] for e in await store.events_after(db, thread, 0)])
            finished.set()

    run, _ = await hub.start("bob", thread, events())
    await run.done.wait()
    assert finished.is_set() and 2 not in seen_when_done[0]  # not visible before the runner let go
    assert [e["seq"] for e in await store.events_after(db, thread, 0)] == [1, 2]
