"""The effect checks its own authority: routing, state edits and forged plans run nothing, audited.

A write runs only with the gate's seal over that exact call and, when it needs approval, a
decided approval whose args hash matches, claimed in the effect's own transaction. The compiled
graph refuses routing and state edits from outside at its entry (``tests/test_governed_graph.py``);
here they are let through (:func:`tests.harness.unguarded`, as code holding the database's
credentials could), to show the effect's own checks hold even then.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.types import Command

from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tollgate.policies.approval import args_hash
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns, unguarded

_MAIL = {"to": ["sam@example.com"], "subject": "Late", "body": "Ten minutes."}


async def _sent(db: Database, owner: str) -> int:
    """Mail queued and effects recorded for ``owner`` (counted in a scope that sees every owner's
    rows: on a connection without one, row-level security would show 0 whatever ran)."""
    async with all_rows(db) as conn:
        cur = await conn.execute(
            """SELECT (SELECT count(*) FROM mail_outbox WHERE owner_id = %(o)s)
                    + (SELECT count(*) FROM effects WHERE owner_id = %(o)s) AS n""", {"o": owner})
        row = await cur.fetchone()
    return int(row["n"]) if row else -1


async def _execute_refusals(db: Database, owner: str) -> list[tuple[str, str]]:
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT reason, code FROM audit_log WHERE owner_id = %s AND stage = 'execute' AND decision = 'refuse'"
            " ORDER BY seq", (owner,))
        return [(r["reason"], r["code"]) for r in await cur.fetchall()]


def _forged(args: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"call_id": "call_forged", "tool": "mail", "action": "send", "args": args, "args_hash": args_hash(args)} | extra


async def _proposed(turns: Turns, model: ScriptedModel, ctx: Context, thread: str) -> None:
    """A mail to Sam proposed on ``thread``, waiting for approval (the gate's plan, sealed, in the state)."""
    model.push(call("mail__send", _MAIL))
    out = await turns.send(ctx, thread, "email sam")
    assert out.approval is not None


async def _run(turns: Turns, ctx: Context, thread: str, value: Any) -> None:
    await unguarded(turns.runner.graph).ainvoke(value, {"configurable": {"thread_id": thread}}, context=ctx)


async def test_command_goto_execute_with_a_forged_plan_runs_nothing(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    thread = ctx.owner_id + "/goto"
    model.push(call("calendar__list", {"range": "today"}), say(""))
    await turns.send(ctx, thread, "what's on my calendar today?")
    await _run(turns, ctx, thread, Command(goto="execute", update={"plans": [_forged(_MAIL)]}))
    assert await _sent(db, ctx.owner_id) == 0
    assert await _execute_refusals(db, ctx.owner_id) == [("unsealed_plan", "permission_denied")]


async def test_command_goto_execute_past_a_pending_approval_runs_nothing(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """The plan in the state is the gate's own (sealed), but nobody approved it."""
    thread = ctx.owner_id + "/skip-approval"
    await _proposed(turns, model, ctx, thread)
    await _run(turns, ctx, thread, Command(goto="execute"))
    assert await _sent(db, ctx.owner_id) == 0
    assert await _execute_refusals(db, ctx.owner_id) == [("no_approval", "permission_denied")]


async def test_a_plan_edited_into_the_state_after_approval_runs_nothing(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """update_state swaps the approved call's arguments (keeping its seal): the hash gives it away."""
    thread = ctx.owner_id + "/update-state"
    await _proposed(turns, model, ctx, thread)
    config = {"configurable": {"thread_id": thread}}
    state = (await turns.runner.graph.aget_state(config)).values
    other = _MAIL | {"to": ["attacker@evil.example"]}
    (genuine,) = state["plans"]
    approval_id = state["pending"]["approval_id"]
    plan = genuine | {"args": other, "args_hash": args_hash(other), "approval_id": approval_id}
    pending = state["pending"] | {"decision": "approve"}
    await unguarded(turns.runner.graph).aupdate_state(config, {"plans": [plan], "pending": pending, "approval_request": None},
                                           as_node="approval")
    await _run(turns, ctx, thread, None)
    assert await _sent(db, ctx.owner_id) == 0
    assert await _execute_refusals(db, ctx.owner_id) == [("unsealed_plan", "permission_denied")]


@pytest.mark.parametrize("field", ["seal", "args_hash"])
async def test_a_sealed_plan_for_other_arguments_runs_nothing(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database, field: str
) -> None:
    """A seal lifted from a genuine call does not cover other arguments, whatever hash is claimed."""
    thread = ctx.owner_id + "/lifted-" + field
    await _proposed(turns, model, ctx, thread)
    config = {"configurable": {"thread_id": thread}}
    values = (await turns.runner.graph.aget_state(config)).values
    (genuine,) = values["plans"]
    other = _MAIL | {"body": "the wire details"}
    forged = genuine | {"args": other, "approval_id": values["pending"]["approval_id"]} | (
        {"args_hash": args_hash(other)} if field == "args_hash" else {})
    await _run(turns, ctx, thread, Command(goto="execute", update={"plans": [forged], "pending": None}))
    assert await _sent(db, ctx.owner_id) == 0
    reasons = [reason for reason, _ in await _execute_refusals(db, ctx.owner_id)]
    assert reasons == ["unsealed_plan" if field == "args_hash" else "args_changed"]


async def test_a_plan_whose_verdict_is_flipped_from_propose_to_execute_runs_nothing(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """The seal covers the gate's verdict: a call it sent to approval cannot be marked runnable."""
    thread = ctx.owner_id + "/flipped"
    await _proposed(turns, model, ctx, thread)
    config = {"configurable": {"thread_id": thread}}
    (genuine,) = (await turns.runner.graph.aget_state(config)).values["plans"]
    await _run(turns, ctx, thread, Command(goto="execute", update={"plans": [genuine | {"verdict": "execute"}],
                                                                    "pending": None}))
    assert await _sent(db, ctx.owner_id) == 0
    assert [reason for reason, _ in await _execute_refusals(db, ctx.owner_id)] == ["unsealed_plan"]


async def test_the_nothing_sent_helper_sees_a_real_send(turns: Turns, model: ScriptedModel, ctx: Context, db: Database) -> None:
    """The positive control beside every ``_sent(...) == 0``: an approved send counts."""
    model.push(call("mail__send", {"to": ["sam@example.com"], "subject": "Hi", "body": "See you"}), say("Sent."))
    out = await turns.send(ctx, ctx.owner_id + "/control", "email sam: see you")
    assert out.approval is not None and await _sent(db, ctx.owner_id) == 0
    await turns.runner.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert await _sent(db, ctx.owner_id) >= 2  # the queued mail and its effect row
