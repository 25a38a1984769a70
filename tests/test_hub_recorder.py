"""How a run's events reach the log: the first at once, later ones sharing writes, none held back for long."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from graph.db import Database
from graph.events import TurnEvent
from web import store
from web.hub import LiveRun, TurnHub


def _event(thread_id: str, seq: int, kind: str = "tool_progress") -> TurnEvent:
    data = {"text": "ok", "outcome": "read"} if kind == "message_complete" else {"n": seq}
    return TurnEvent(type=kind, seq=seq, turn_id="turn-1", ts="2026-11-30T00:00:00+00:00", data=data,  # type: ignore[typeddict-item]
                     thread_id=thread_id)


async def _hub_with_writes(db: Database, monkeypatch: pytest.MonkeyPatch) -> tuple[TurnHub, list[list[int]]]:
    """A hub on the real log, noting the seqs of each write it makes."""
    hub = TurnHub(db, idle_seconds=5)
    writes: list[list[int]] = []
    log = hub.log

    async def noted(run: store.EventsOf) -> list[TurnEvent]:
        writes.append([event["seq"] for event in run.events])
        return await log(run)

    monkeypatch.setattr(hub, "log", noted)
    return hub, writes


class _Started:
    """The run a test's event source belongs to, once the hub has started it."""

    run: LiveRun | None = None

    async def recorded(self, count: int) -> None:
        """Wait until the run has ``count`` events in the log (it may not have been handed over yet)."""
        async with asyncio.timeout(5):
            while self.run is None or len(self.run.recorded) < count:
                await asyncio.sleep(0.001)


async def _run_to_end(
    hub: TurnHub, owner: str, thread: str, source: Callable[[_Started], AsyncIterator[TurnEvent]]
) -> tuple[LiveRun, TurnEvent]:
    """Start the run of ``source``'s events and wait for its end; (the run, its first event)."""
    started = _Started()
    run, first = await hub.start(owner, thread, source(started))
    started.run = run
    await run.done.wait()
    return run, first


async def test_the_first_event_is_written_alone_and_what_follows_shares_a_write_with_the_end(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, writes = await _hub_with_writes(db, monkeypatch)
    thread = await store.create_thread(db, "alice")

    async def events(started: _Started) -> AsyncIterator[TurnEvent]:
        yield _event(thread, 1)
        await started.recorded(1)
        for seq in (2, 3, 4):
            yield _event(thread, seq)
        yield _event(thread, 5, "message_complete")

    run, first = await _run_to_end(hub, "alice", thread, events)
    assert first["seq"] == 1
    assert writes == [[1], [2, 3, 4, 5]]  # the middle events waited for company; the end took them along
    assert [event["seq"] for event in run.recorded] == [1, 2, 3, 4, 5]
    assert [event["seq"] for event in await store.events_after(db, thread, "turn-1", 0)] == [1, 2, 3, 4, 5]


async def test_an_event_in_a_run_that_goes_on_is_written_after_the_linger_without_waiting_for_the_end(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, writes = await _hub_with_writes(db, monkeypatch)
    thread = await store.create_thread(db, "bob")

    async def events(started: _Started) -> AsyncIterator[TurnEvent]:
        yield _event(thread, 1)
        await started.recorded(1)
        yield _event(thread, 2)
        await started.recorded(2)  # shown while the run goes on
        yield _event(thread, 3, "message_complete")

    await _run_to_end(hub, "bob", thread, events)
    assert writes == [[1], [2], [3]]


async def test_on_a_busy_server_a_runs_first_event_waits_for_company_but_not_for_the_end(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, writes = await _hub_with_writes(db, monkeypatch)
    other, quick_thread, slow_thread = [await store.create_thread(db, "carol") for _ in range(3)]
    release = asyncio.Event()

    async def waiting() -> AsyncIterator[TurnEvent]:  # another run, live and not done
        await release.wait()
        yield _event(other, 1, "message_complete")

    other_run = asyncio.ensure_future(hub.start("carol", other, waiting()))
    await asyncio.sleep(0)

    async def quick(_: _Started) -> AsyncIterator[TurnEvent]:
        yield _event(quick_thread, 1)
        yield _event(quick_thread, 2)
        yield _event(quick_thread, 3, "message_complete")

    _, first = await _run_to_end(hub, "carol", quick_thread, quick)
    assert first["seq"] == 1 and writes == [[1, 2, 3]]  # the first event waited, and the end took it along

    async def slow(started: _Started) -> AsyncIterator[TurnEvent]:
        yield _event(slow_thread, 1)
        await started.recorded(1)  # written while the run goes on
        yield _event(slow_thread, 2, "message_complete")

    await _run_to_end(hub, "carol", slow_thread, slow)
    assert writes[1:] == [[1], [2]]
    release.set()
    await (await other_run)[0].done.wait()
    assert writes[3:] == [[1]]
