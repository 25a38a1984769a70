"""Concurrent callers share one statement: the coalescer, the event log's batches, token lookups."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import psycopg
import pytest

from graph.db import Database
from graph.events import TurnEvent
from web import store
from web.auth import issue_token, owners_for_tokens, revoke_token, token_owners
from web.coalesce import Coalescer
from web.hub import TurnHub


class _Gate:
    """A batch function that records its batches and holds each one until released."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = asyncio.Event()
        self.entered = asyncio.Event()

    async def __call__(self, items: Sequence[str]) -> list[str]:
        self.batches.append(list(items))
        self.entered.set()
        await self.release.wait()
        if "bad" in items:
            raise ValueError("a bad item")
        return [item.upper() for item in items]


async def _behind_a_batch(*items: str) -> tuple[_Gate, Coalescer[str, str], asyncio.Task[str], list[asyncio.Task[str]]]:
    """A coalescer whose batch ``["x"]`` is in flight (held by its gate), and ``items`` queued behind it."""
    gate = _Gate()
    lookup = Coalescer(gate, name="test")
    held = asyncio.create_task(lookup("x"))
    await gate.entered.wait()
    queued = [asyncio.create_task(lookup(item)) for item in items]
    await asyncio.sleep(0)
    return gate, lookup, held, queued


async def test_a_lone_caller_goes_at_once_and_callers_during_a_batch_share_the_next() -> None:
    gate = _Gate()
    lookup = Coalescer(gate, name="test")
    first = asyncio.create_task(lookup("a"))
    await gate.entered.wait()
    assert gate.batches == [["a"]]  # alone: not kept waiting for company
    rest = [asyncio.create_task(lookup(item)) for item in ("b", "c", "d")]
    await asyncio.sleep(0)
    gate.release.set()
    assert await first == "A"
    assert await asyncio.gather(*rest) == ["B", "C", "D"]
    assert gate.batches == [["a"], ["b", "c", "d"]]


async def test_a_failing_batch_is_retried_alone_so_a_bad_item_fails_only_its_caller() -> None:
    gate, _, held, calls = await _behind_a_batch("b", "bad", "c")
    gate.release.set()
    assert await held == "X"
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert results[0] == "B" and results[2] == "C"
    assert isinstance(results[1], ValueError)
    assert gate.batches == [["x"], ["b", "bad", "c"], ["b"], ["bad"], ["c"]]


async def test_an_unreachable_database_fails_the_whole_batch_at_once_without_retries() -> None:
    calls: list[list[str]] = []

    async def down(items: Sequence[str]) -> list[str]:
        calls.append(list(items))
        await asyncio.sleep(0)
        raise psycopg.OperationalError("connection refused")

    lookup = Coalescer(down, name="down")
    results = await asyncio.gather(*(lookup(item) for item in ("a", "b", "c")), return_exceptions=True)
    assert all(isinstance(r, psycopg.OperationalError) for r in results)
    assert calls == [["a", "b", "c"]]  # not retried item by item: each would wait on the same outage


async def test_a_caller_that_stops_waiting_does_not_stop_its_batch() -> None:
    gate, _, held, (gone, stays) = await _behind_a_batch("gone", "stays")
    gone.cancel()
    gate.release.set()
    assert await held == "X" and await stays == "STAYS"
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert gate.batches == [["x"], ["gone", "stays"]]


async def test_a_batch_function_that_answers_the_wrong_number_of_results_fails_its_callers() -> None:
    async def short(items: Sequence[str]) -> list[str]:
        return []

    with pytest.raises(RuntimeError, match="0 results for 1 items"):
        await Coalescer(short, name="short")("a")


async def test_callers_are_not_left_waiting_when_the_coalescer_is_cancelled() -> None:
    _, lookup, held, (queued,) = await _behind_a_batch("y")  # the gate is never released
    assert lookup._task is not None
    lookup._task.cancel()  # as at shutdown
    for caller in (held, queued):
        with pytest.raises(asyncio.CancelledError):
            await caller


def _event(thread_id: str, turn_id: str, seq: int, text: str) -> TurnEvent:
    return TurnEvent(type="token_delta", seq=seq, turn_id=turn_id, ts="2026-11-30T00:00:00+00:00",
                     data={"text": text}, thread_id=thread_id)


async def _logged(db: Database, *threads: str) -> list[tuple[str, str, int, str]]:
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT thread_id, owner_id, seq, event -> 'data' ->> 'text' AS text FROM turn_events "
            "WHERE thread_id = ANY(%s) ORDER BY id", (list(threads),),
        )
        return [(r["thread_id"], r["owner_id"], r["seq"], r["text"]) for r in await cur.fetchall()]


async def test_the_events_of_several_runs_are_logged_in_one_statement_each_for_its_owner(db: Database) -> None:
    t1, t2 = await store.create_thread(db, "alice"), await store.create_thread(db, "bob")
    stored = await store.record_events(db, [
        store.EventsOf("alice", [_event(t1, "turn-1", 1, "a1"), _event(t1, "turn-1", 2, "a2")]),
        store.EventsOf("bob", [_event(t2, "turn-9", 1, "b1")]),
    ])
    assert [[e["data"]["text"] for e in run] for run in stored] == [["a1", "a2"], ["b1"]]
    assert await _logged(db, t1, t2) == [(t1, "alice", 1, "a1"), (t1, "alice", 2, "a2"), (t2, "bob", 1, "b1")]


async def test_runs_writing_at_once_share_the_hub_log_and_a_clash_falls_back_to_one_write_each(db: Database) -> None:
    hub = TurnHub(db, idle_seconds=5)
    t1, t2 = await store.create_thread(db, "alice"), await store.create_thread(db, "bob")
    # The same seq twice in one statement is refused by PostgreSQL; written one after the
    # other, the later replaces the earlier (a run retried after a crash), as without batching.
    runs = [
        store.EventsOf("alice", [_event(t1, "turn-1", 1, "first")]),
        store.EventsOf("bob", [_event(t2, "turn-2", 1, "b1")]),
        store.EventsOf("alice", [_event(t1, "turn-1", 1, "again")]),
    ]
    with pytest.raises(psycopg.errors.CardinalityViolation):
        await store.record_events(db, runs)
    assert await _logged(db, t1, t2) == []
    stored = await asyncio.gather(*(hub.log(run) for run in runs))  # queued in one tick: one batch
    assert [run[0]["data"]["text"] for run in stored] == ["first", "b1", "again"]
    assert sorted(await _logged(db, t1, t2)) == sorted([(t1, "alice", 1, "again"), (t2, "bob", 1, "b1")])


async def test_token_lookups_in_one_query_answer_each_token_for_itself(db: Database) -> None:
    live = await issue_token(db, "alice", label="test")
    other = await issue_token(db, "bob", label="test")
    revoked = await issue_token(db, "carol", label="test")
    assert await revoke_token(db, revoked)
    tokens = [live, "tg_unknown", revoked, other, "not-a-token", "", live]
    assert await owners_for_tokens(db, tokens) == ["alice", None, None, "bob", None, None, "alice"]
    lookup = token_owners(db)
    assert await asyncio.gather(*(lookup(token) for token in tokens)) == [
        "alice", None, None, "bob", None, None, "alice"
    ]
    assert await revoke_token(db, live)
    assert await lookup(live) is None  # a lookup after a revocation sees it
