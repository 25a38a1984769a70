"""Fault injection: a turn cancelled at any of its database statements or model calls frees its
thread at once and leaves the approvals table, the checkpoint and the ledger in agreement.

Each scenario first counts the statements (and model calls) of a clean run, then runs it again
once per statement, cancelling the turn while that statement is in flight: the cancel is
scheduled as the statement is sent, so it lands while psycopg waits for the server. After
each cancellation the next message on the same thread must complete within 2 s, and the
approval contract (:mod:`graph.ledger.approval_contract`) must hold.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from psycopg import AsyncCursor
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from tollgate.graph.ledger.approval_contract import check_approvals
from tollgate.graph.runner import TurnOutcome, TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.store.owner_scope import owner_transaction
from tollgate.graph.turn import build_graph
from tests.conftest import NOW, all_rows
from tests.fakes import ScriptedModel, call, say
from tests.harness import Clock
from tollgate.tools.builtin import default_registry
from tollgate.tools.demo import seed_demo

_NEXT_TURN_SECONDS = 2.0


@dataclass
class _Fault:
    """Cancel ``target`` when the ``at``-th statement (1-based) is sent; count them either way."""

    at: int | None = None
    target: asyncio.Task[Any] | None = None
    count: int = 0
    fired: bool = False

    def sent(self) -> None:
        self.count += 1
        if self.count == self.at and self.target is not None and not self.fired:
            self.fired = True
            asyncio.get_running_loop().call_soon(self.target.cancel)  # lands while the statement is in flight


_fault: ContextVar[_Fault | None] = ContextVar("tollgate_test_fault", default=None)


class _CountingCursor(AsyncCursor[Any]):
    """psycopg's cursor, noting each statement the turn in this context sends."""

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        fault = _fault.get()
        if fault is not None:
            fault.sent()
        return await super().execute(query, params, **kwargs)

    async def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
        fault = _fault.get()
        if fault is not None:
            fault.sent()
        await super().executemany(query, params_seq, **kwargs)


def _answer(messages: list[BaseMessage]) -> AIMessage:
    """The picker, for any order of turns: lists first and replies after a result; "cancel" proposes."""
    request = next(str(m.content) for m in reversed(messages) if isinstance(m, HumanMessage))
    if any(isinstance(m, ToolMessage) for m in messages[-2:]):
        return say("")
    if "cancel" in request:
        return call("calendar__cancel_event", {"event_id": "#2"})
    if "email" in request:
        return call("mail__send", {"to": ["sam@example.com"], "subject": "Late", "body": "Ten minutes."})
    return call("calendar__list", {"range": "today"})


@dataclass
class _Rig:
    """A runner on a pool whose cursors count statements, a model that counts calls."""

    runner: TurnRunner
    model: ScriptedModel
    pool: AsyncConnectionPool[Any]
    ctx: Context
    model_fault: _Fault = field(default_factory=_Fault)

    async def attempt(self, send: Callable[[], Awaitable[TurnOutcome]], fault: _Fault) -> TurnOutcome | None:
        """Run ``send`` under ``fault``; ``None`` if the fault cancelled it."""
        token = _fault.set(fault)
        try:
            task = asyncio.ensure_future(send())
        finally:
            _fault.reset(token)
        fault.target = task
        self.model_fault.target = task
        try:
            return await task
        except asyncio.CancelledError:
            if not fault.fired and not self.model_fault.fired:
                raise
            return None
        finally:
            self.model_fault = _Fault()

    async def next_turn_completes(self, thread: str) -> None:
        out = await asyncio.wait_for(self.runner.send(self.ctx, thread, "what's on my calendar today?"),
                                     _NEXT_TURN_SECONDS)
        assert out.outcome == "read"
        await check_approvals(self.pool, self.runner.graph, [thread])


@pytest.fixture
async def rig(settings: Settings, database_url: str, clock: Clock, db: Database) -> AsyncIterator[_Rig]:
    """A runner whose pool counts statements (on the migrated session database)."""
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        database_url, min_size=1, max_size=10, open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row, "cursor_factory": _CountingCursor},
    )
    await pool.open(wait=True)
    try:
        db = Database(url=database_url, pool=pool)
        model = ScriptedModel(steps=[_answer] * 10_000)
        owner = "o_" + secrets.token_hex(6)
        async with owner_transaction(pool, owner) as conn:
            await seed_demo(conn, owner, NOW, "Europe/Paris")
        rig_ = _Rig(runner=None, model=model, pool=pool, ctx=Context(owner_id=owner, timezone="Europe/Paris"))  # type: ignore[arg-type]
        model.on_call = lambda: rig_.model_fault.sent()
        services = Services(settings=settings, db=db, registry=default_registry(), picker_model=model, clock=clock)
        rig_.runner = TurnRunner(build_graph(services, checkpointer=await open_checkpointer(db)), services)
        yield rig_
    finally:
        await pool.close()


def _thread(rig: _Rig, name: str) -> str:
    return f"{rig.ctx.owner_id}/{name}-{secrets.token_hex(3)}"


async def _proposed(rig: _Rig, thread: str) -> str:
    out = await rig.runner.send(rig.ctx, thread, "email sam that I'm late")  # a write that never runs out
    assert out.approval is not None
    return out.approval.approval_id


async def _cancelled_everywhere(
    rig: _Rig, prepare: Callable[[str], Awaitable[Any]], run: Callable[[str, Any], Awaitable[TurnOutcome]],
) -> tuple[int, int]:
    """Count a clean run's statements and model calls, then cancel it at each in turn; (statements, model calls)."""
    thread = _thread(rig, "clean")
    prepared = await prepare(thread)
    clean, calls = _Fault(), _Fault()
    rig.model_fault = calls
    assert await rig.attempt(lambda: run(thread, prepared), clean) is not None
    assert clean.count > 0
    for at in range(1, clean.count + 1):
        thread = _thread(rig, f"stmt{at}")
        prepared = await prepare(thread)
        await rig.attempt(lambda: run(thread, prepared), _Fault(at=at))
        await rig.next_turn_completes(thread)
    for at in range(1, calls.count + 1):
        thread = _thread(rig, f"model{at}")
        prepared = await prepare(thread)
        rig.model_fault = _Fault(at=at)
        await rig.attempt(lambda: run(thread, prepared), _Fault())
        await rig.next_turn_completes(thread)
    return clean.count, calls.count


async def _nothing(_thread: str) -> None:
    return None


async def test_a_read_turn_cancelled_at_any_statement_or_model_call_frees_its_thread(rig: _Rig) -> None:
    async def read(thread: str, _: Any) -> TurnOutcome:
        return await rig.runner.send(rig.ctx, thread, "what's on my calendar today?")

    statements, calls = await _cancelled_everywhere(rig, _nothing, read)
    assert statements >= 5 and calls == 2


async def test_a_write_turn_cancelled_at_any_statement_or_model_call_strands_no_approval(rig: _Rig) -> None:
    async def listed(thread: str) -> None:
        await rig.runner.send(rig.ctx, thread, "what's on my calendar today?")

    async def propose(thread: str, _: Any) -> TurnOutcome:
        return await rig.runner.send(rig.ctx, thread, "cancel the 2nd one")

    statements, calls = await _cancelled_everywhere(rig, listed, propose)
    assert statements >= 5 and calls == 1


async def test_an_approval_cancelled_at_any_statement_runs_at_most_once_and_never_stays_approved(
    rig: _Rig, db: Database
) -> None:
    async def decide(_thread: str, approval_id: str) -> TurnOutcome:
        return await rig.runner.decide(rig.ctx, approval_id, {"type": "approve"})

    statements, _ = await _cancelled_everywhere(rig, lambda thread: _proposed(rig, thread), decide)
    assert statements >= 5
    async with all_rows(db) as conn:
        cur = await conn.execute(
            """SELECT a.status, count(e.idem_key) AS effects FROM approvals a
               LEFT JOIN effects e ON e.idem_key = a.approval_id
               WHERE a.owner_id = %s GROUP BY a.approval_id, a.status""",
            (rig.ctx.owner_id,),
        )
        rows = await cur.fetchall()
    statuses = {r["status"] for r in rows}
    assert statuses <= {"executed", "failed", "superseded"}  # the next message superseded what stayed pending
    assert all(r["effects"] == (1 if r["status"] == "executed" else 0) for r in rows)
    assert "failed" in statuses and "executed" in statuses  # some cancels landed before the effect, some after
