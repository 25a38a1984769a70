"""LangChain's standard HITL resume drives Tollgate's interrupt, as Studio and agent UIs send it.

The compiled graph is driven as ``langgraph dev`` drives it (``Command(resume=...)`` with the
run's context), not through the runner, which checks a decision before it resumes.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from tollgate.graph.event_contract import EventContract
from tollgate.graph.events import TurnEvent
from tollgate.graph.state import Context
from tollgate.policies.errors import NotFound
from tollgate.graph.store.db import Database
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns


async def _tasks(db: Database, owner: str) -> list[str]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT title FROM tasks WHERE owner_id = %s ORDER BY title", (owner,))
        return [row["title"] for row in await cur.fetchall()]


async def _interrupt(turns: Turns, config: dict[str, Any]) -> dict[str, Any] | None:
    snapshot = await turns.runner.graph.aget_state(config)
    waiting = [i for t in snapshot.tasks for i in t.interrupts]
    return dict(waiting[-1].value) if waiting else None


async def test_decisions_without_a_token_approve_the_pending_request_once(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    thread = ctx.owner_id + "/std"
    config = {"configurable": {"thread_id": thread}}
    before = await _tasks(db, ctx.owner_id)
    model.push(call("tasks__create", {"title": "Renew the passport"}), say("Done."))
    out = await turns.send(ctx, thread, "add a task: renew the passport")
    assert out.approval is not None
    await turns.runner.graph.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), config, context=ctx)
    assert await _tasks(db, ctx.owner_id) == sorted([*before, "Renew the passport"])
    assert await _interrupt(turns, config) is None


async def test_a_refused_standard_resume_says_why_and_the_request_stays_decidable(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    thread = ctx.owner_id + "/std-bad"
    config = {"configurable": {"thread_id": thread}}
    before = await _tasks(db, ctx.owner_id)
    model.push(call("tasks__create", {"title": "Water the ferns"}), say("Done."))
    assert (await turns.send(ctx, thread, "add a task: water the ferns")).approval is not None
    # Two decisions for a request of one action: refused, asked again with the reason.
    await turns.runner.graph.ainvoke(
        Command(resume={"decisions": [{"type": "approve"}, {"type": "approve"}]}), config, context=ctx)
    asked = await _interrupt(turns, config)
    assert asked is not None and asked["refused"]["code"] == "approval_invalid"
    assert "send one decision for each" in asked["refused"]["message"] and asked["refused"]["attempts_left"] == 5
    assert await _tasks(db, ctx.owner_id) == before
    # Another owner's context cannot decide it with the standard form either: their run cannot
    # even hold the thread.
    other = Context(owner_id=ctx.owner_id + "x", timezone=ctx.timezone)
    with pytest.raises(NotFound):
        await turns.runner.graph.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), config, context=other)
    assert await _tasks(db, ctx.owner_id) == before
    await turns.runner.graph.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), config, context=ctx)
    assert await _tasks(db, ctx.owner_id) == sorted([*before, "Water the ferns"])


async def test_a_new_message_says_it_replaced_a_request_only_when_one_was_still_pending(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """The note is built from the approvals' real state: a request the ledger already closed while the
    checkpoint still held it (the expiry scheduler's close, a crash after the call ran) was replaced
    by nothing, and the reply does not say it was."""
    thread = ctx.owner_id + "/superseded"
    model.push(call("tasks__create", {"title": "Renew the passport"}))
    out = await turns.send(ctx, thread, "add a task: renew the passport")
    assert out.approval is not None
    async with all_rows(db) as conn:  # the scheduler closed it; the checkpoint still holds the request
        await conn.execute("UPDATE approvals SET status = 'expired', decided_at = now(), finished_at = now()"
                           " WHERE thread_id = %s", (thread,))
    model.push(say("Hello."))
    out = await turns.send(ctx, thread, "hello")
    assert "replaced the earlier request" not in (out.reply or "")
    # Still pending: then it is replaced, and said.
    thread = ctx.owner_id + "/superseded-pending"
    model.push(call("tasks__create", {"title": "Water the ferns"}))
    assert (await turns.send(ctx, thread, "add a task: water the ferns")).approval is not None
    model.push(say("Hello."))
    out = await turns.send(ctx, thread, "hello")
    assert "replaced the earlier request awaiting approval" in (out.reply or "")


async def _run(turns: Turns, ctx: Context, thread: str, value: Any, contract: EventContract, *,
               resume: bool = True) -> list[TurnEvent]:
    """One run of the bare graph as ``langgraph dev`` runs it (a resume by default); its events, contract-checked."""
    events: list[TurnEvent] = []
    async for chunk in turns.runner.graph.astream(Command(resume=value) if resume else value,
                                                  {"configurable": {"thread_id": thread}}, context=ctx,
                                                  stream_mode="custom"):
        events.append(chunk["tollgate_event"])
    contract.check_run(events, resume=resume)
    return events


async def test_a_refused_resume_is_said_as_events_and_the_cap_closes_the_request_as_refused_by_the_server(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """Each refused resume's run says why (``approval_decided`` ``refused`` with the reason, then the card
    again), and the sixth closes the request as ``refused``: nobody decided, so never ``rejected``."""
    thread = ctx.owner_id + "/std-cap"
    before = await _tasks(db, ctx.owner_id)
    contract = EventContract()
    model.push(call("tasks__create", {"title": "Water the ferns"}))
    events = await _run(turns, ctx, thread, {"messages": [HumanMessage("add a task: water the ferns")]}, contract,
                        resume=False)
    approval_id = events[-1]["data"]["approval_id"]
    two = {"decisions": [{"type": "approve"}, {"type": "approve"}]}
    for left in (5, 4, 3, 2, 1):
        said = await _run(turns, ctx, thread, two, contract)
        assert [e["type"] for e in said] == ["approval_decided", "error", "approval_required"]
        assert said[0]["data"]["decision"] == "refused" and said[0]["data"]["attempts_left"] == left
        assert said[1]["data"]["code"] == "approval_invalid" and said[1]["data"]["reason"] == "resume_refused"
        assert "send one decision for each" in said[0]["data"]["message"]
        assert said[2]["data"]["approval_id"] == approval_id
    closed = await _run(turns, ctx, thread, two, contract)
    assert closed[0]["data"] == {"approval_id": approval_id, "decision": "invalid", "code": "approval_invalid"}
    assert "the server closed it; nobody decided and nothing ran" in closed[-1]["data"]["text"]
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT status, decision, error_code FROM approvals WHERE approval_id = %s",
                                 (approval_id,))
        assert await cur.fetchone() == {"status": "refused", "decision": None, "error_code": "too_many_refusals"}
    assert await _tasks(db, ctx.owner_id) == before
