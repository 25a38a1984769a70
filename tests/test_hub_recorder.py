"""How a run's events reach the log: in order, with the log's increasing ids, the last one only
once the runner is done with the run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tollgate.graph.events import TurnEvent
from tollgate.graph.store.db import Database
from tollgate.web import store
from tollgate.web.hub import DELTA_SECONDS, TurnHub


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


def _delta(thread_id: str, seq: int) -> TurnEvent:
    return TurnEvent(type="token_delta", seq=seq, turn_id="turn-1", ts="2026-11-30T00:00:00+00:00",
                     data={"text": f"w{seq} "}, thread_id=thread_id)


async def test_text_streamed_over_time_is_logged_in_a_few_writes_and_anything_else_at_once(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model streams a chunk every few milliseconds: its deltas are logged together, at most
    about one write per DELTA_SECONDS (a write per delta is a commit per chunk), every one of
    them in order; an event that is not a delta does not wait."""
    writes: list[list[int]] = []
    real = store.record_events

    async def counted(db_: Database, owner_id: str, events: list[TurnEvent]) -> list[TurnEvent]:
        writes.append([e["seq"] for e in events])
        return await real(db_, owner_id, events)

    monkeypatch.setattr(store, "record_events", counted)
    hub = TurnHub(db, idle_seconds=5)
    thread = await store.create_thread(db, "carol")
    logged_at_once: list[bool] = []

    async def events() -> AsyncIterator[TurnEvent]:
        yield _event(thread, 1, "tool_end")
        for seq in range(2, 42):  # 40 deltas over about 0.2 s
            yield _delta(thread, seq)
            await asyncio.sleep(0.005)
        yield _event(thread, 42)  # not a delta: written now, with the deltas still waiting
        await asyncio.sleep(DELTA_SECONDS / 2)
        logged_at_once.append(42 in [e["seq"] for e in await store.events_after(db, thread, 0)])
        yield _event(thread, 43, "message_complete")

    run, _ = await hub.start("carol", thread, events())
    await run.done.wait()
    assert [e["seq"] for e in await store.events_after(db, thread, 0)] == list(range(1, 44))
    assert [seq for batch in writes for seq in batch] == list(range(1, 44))
    assert len(writes) <= 8, writes  # a write per delta would be more than 40
    assert logged_at_once == [True]
