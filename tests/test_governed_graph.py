"""The compiled graph guards its own runs, whoever drives it (``langgraph dev``, an embedding app, a test).

Driven here as a LangGraph client drives it, with no runner in front: a run holds its thread's
lease until its last checkpoint is written, chat on run and inbox threads is refused, and a
``Command`` that routes or writes the state, or ``update_state`` in any form, is refused with a
typed error and audited before anything is stored, so the thread stays readable and its pending
approval decidable.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from tollgate.graph.governed import GovernedGraph
from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tollgate.policies.approval import args_hash
from tollgate.policies.errors import PermissionDenied, ThreadReadOnly
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns

_MAIL = {"to": ["sam@example.com"], "subject": "Late", "body": "Ten minutes."}


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def _forged_plan(args: dict[str, Any]) -> dict[str, Any]:
    return {"call_id": "call_forged", "tool": "mail", "action": "send", "args": args, "args_hash": args_hash(args)}


async def _graph_refusals(db: Database, owner: str) -> list[str]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT reason FROM audit_log WHERE owner_id = %s AND stage = 'graph'"
                                 " AND decision = 'refuse' ORDER BY seq", (owner,))
        return [r["reason"] for r in await cur.fetchall()]


async def _outbox(db: Database, owner: str) -> int:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM mail_outbox WHERE owner_id = %s", (owner,))
        row = await cur.fetchone()
    return int(row["n"]) if row else -1


async def _waiting_on_a_mail(turns: Turns, model: ScriptedModel, ctx: Context, thread: str) -> str:
    model.push(call("mail__send", _MAIL))
    out = await turns.send(ctx, thread, "email sam that I'm late")
    assert out.approval is not None
    return out.approval.approval_id


async def test_forged_gotos_on_a_waiting_thread_are_refused_and_its_approval_stays_decidable(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """The reported wedge: two ``Command(goto="execute", update={"plans": ...})`` on a thread waiting
    for approval left two writes to ``plans`` in one step; reading the state failed from then on."""
    thread = ctx.owner_id + "/goto-twice"
    approval_id = await _waiting_on_a_mail(turns, model, ctx, thread)
    forged = Command(goto="execute", update={"plans": [_forged_plan(_MAIL | {"to": ["x@evil.example"]})]})
    for _ in range(2):
        with pytest.raises(PermissionDenied, match="from outside the graph"):
            await turns.runner.graph.ainvoke(forged, _config(thread), context=ctx)
    with pytest.raises(PermissionDenied):
        await turns.runner.graph.ainvoke(Command(goto="execute"), _config(thread), context=ctx)
    assert await _graph_refusals(db, ctx.owner_id) == ["forged_route"] * 3
    snapshot = await turns.runner.graph.aget_state(_config(thread))  # readable
    assert snapshot.next == ("approval",)
    assert [p.approval_id for p in await turns.runner.pending_approvals(ctx, thread_id=thread)] == [approval_id]
    model.push(say("Sent."))
    out = await turns.decide(ctx, approval_id, {"type": "approve"})
    assert out.outcome == "executed"
    assert await _outbox(db, ctx.owner_id) == 1  # the approved mail, once; never the forged one


@pytest.mark.parametrize("as_node", [None, "approval", "execute", "picker"])
async def test_update_state_in_every_form_is_a_typed_refusal_and_the_approval_stays_decidable(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database, as_node: str | None
) -> None:
    thread = ctx.owner_id + f"/edit-{as_node}"
    approval_id = await _waiting_on_a_mail(turns, model, ctx, thread)
    graph = turns.runner.graph
    values = (await graph.aget_state(_config(thread))).values
    edit = {"plans": [values["plans"][0] | {"args": _MAIL | {"to": ["x@evil.example"]}}],
            "pending": values["pending"] | {"decision": "approve"}}
    with pytest.raises(PermissionDenied, match="editing a turn's state"):
        await graph.aupdate_state(_config(thread), edit, as_node=as_node)
    with pytest.raises(PermissionDenied):
        await graph.abulk_update_state(_config(thread), [[{"values": edit, "as_node": as_node or "approval"}]])
    with pytest.raises(PermissionDenied):
        graph.update_state(_config(thread), edit, as_node=as_node)
    assert await _graph_refusals(db, ctx.owner_id) == ["state_edit", "state_edit"]  # the async forms, audited
    assert (await graph.aget_state(_config(thread))).values["plans"] == values["plans"]
    model.push(say("Sent."))
    assert (await turns.decide(ctx, approval_id, {"type": "approve"})).outcome == "executed"
    assert await _outbox(db, ctx.owner_id) == 1


@pytest.mark.parametrize(("thread", "channel"), [
    ("inbox:{owner}", "chat"), ("inbox:{owner}", "background"), ("bg:{owner}-run", "chat"), ("bg:{owner}-run", "studio"), ("bg:{owner}-run", "cli"),
])
async def test_chat_on_a_run_or_inbox_thread_is_refused_by_the_graph_itself(
    turns: Turns, ctx: Context, thread: str, channel: str
) -> None:
    thread = thread.format(owner=ctx.owner_id)
    as_channel = Context(owner_id=ctx.owner_id, timezone=ctx.timezone, channel=channel)  # type: ignore[arg-type]
    with pytest.raises(ThreadReadOnly):
        await turns.runner.graph.ainvoke({"messages": [HumanMessage("hello")]}, _config(thread), context=as_channel)


async def test_a_bare_graph_run_and_a_runner_turn_on_one_thread_run_one_after_the_other(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """The graph driven directly (as ``langgraph dev`` drives it) holds the thread's lease for its
    whole run: a server turn on the same thread starts its model call only after that run ended."""
    thread = ctx.owner_id + "/two-surfaces"
    starts: list[float] = []
    model.latency = 0.6
    model.on_call = lambda: starts.append(time.monotonic())
    model.push(say("First."), say("Second."))
    bare = asyncio.create_task(turns.runner.graph.ainvoke(
        {"messages": [HumanMessage("hello")]}, _config(thread), context=ctx))
    while not starts:
        await asyncio.sleep(0.01)
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT holder IS NOT NULL AS held FROM thread_leases WHERE thread_id = %s", (thread,))
        assert await cur.fetchone() == {"held": True}
    server = asyncio.create_task(turns.send(ctx, thread, "hello again"))
    await bare
    ended = time.monotonic()
    assert (await server).reply is not None
    assert len(starts) == 2 and starts[1] >= ended  # the server's model call began after the bare run ended
    async with all_rows(db) as conn:  # both turns in the thread's transcript, one after the other
        cur = await conn.execute("SELECT content FROM transcript WHERE thread_id = %s AND role = 'assistant' ORDER BY id",
                                 (thread,))
        assert [r["content"] for r in await cur.fetchall()] == ["First.", "Second."]
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT holder FROM thread_leases WHERE thread_id = %s", (thread,))
        assert await cur.fetchone() == {"holder": None}  # freed when the run ended


async def test_a_cancelled_bare_run_frees_its_thread_at_once(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    thread = ctx.owner_id + "/cancelled"
    started = asyncio.Event()
    model.latency = 30
    model.on_call = started.set
    model.push(say("never"))
    run = asyncio.create_task(turns.runner.graph.ainvoke(
        {"messages": [HumanMessage("hello")]}, _config(thread), context=ctx))
    await started.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    model.steps.clear()
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT holder FROM thread_leases WHERE thread_id = %s", (thread,))
        assert await cur.fetchone() == {"holder": None}


def test_the_graph_refuses_synchronous_runs_and_keeps_its_guards_when_copied(turns: Turns, ctx: Context) -> None:
    graph = turns.runner.graph
    with pytest.raises(PermissionDenied, match="asynchronously"):
        graph.invoke({"messages": [HumanMessage("hello")]}, _config(ctx.owner_id + "/sync"), context=ctx)
    # The platform attaches its checkpointer with copy(); with_config is a copy too.
    assert isinstance(graph.copy(update={"checkpointer": graph.checkpointer}), GovernedGraph)
    assert isinstance(graph.with_config({"recursion_limit": 50}), GovernedGraph)
