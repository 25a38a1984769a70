"""Fail closed: every refusal carries its typed code, nothing executes, the reply is honest."""

from __future__ import annotations

from typing import Any

import pytest

from tollgate.graph.runner import TurnOutcome, TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.turn import build_graph
from tollgate.policies.arguments import ArgsModel
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns
from tollgate.tools.builtin import builtin_tools
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, Registry, ToolSpec


async def _changes(db: Database, owner: str) -> int:
    async with all_rows(db) as conn:
        cur = await conn.execute(
            """SELECT (SELECT count(*) FROM effects WHERE owner_id = %(o)s)
                    + (SELECT count(*) FROM calendar_events WHERE owner_id = %(o)s AND status = 'cancelled')
                    + (SELECT count(*) FROM mail_outbox WHERE owner_id = %(o)s) AS n""",
            {"o": owner},
        )
        row = await cur.fetchone()
        return int(row["n"]) if row else -1


def _codes(out: TurnOutcome) -> list[str]:
    return [str(e["data"].get("code")) for e in out.events if e["data"].get("code")]


@pytest.mark.parametrize(
    ("attempts", "code"),
    [
        pytest.param([call("calendar__teleport", {})] * 2, "invalid_args", id="unknown-function"),
        pytest.param([call("calendar__list", {"range": "today", "owner_id": "victim"})] * 2, "invalid_args", id="extra-owner-key"),
        pytest.param([call("calendar__list", {"limit": "5"})] * 2, "invalid_args", id="wrong-type"),
        pytest.param([call("calendar__list", {"range": "yesterday"})] * 2, "invalid_args", id="off-enum"),
        pytest.param([call("mail__send", {"to": ["a@b.example"], "subject": "hi", "body": "x\u202ey"})] * 2, "invalid_args", id="bidi-text"),
        pytest.param([call("mail__send", {"to": ["a@b.example"], "subject": "hi\x00", "body": "x"})] * 2, "invalid_args", id="nul-text"),
        pytest.param([call("mail__send", {"to": ["a@b.example"], "subject": "hi", "body": "pa\u200bss"})] * 2, "invalid_args", id="zero-width-text"),
    ],
)
async def test_invalid_calls_get_one_correction_then_clarify(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database, attempts: list[Any], code: str
) -> None:
    before = await _changes(db, ctx.owner_id)
    model.push(*attempts)
    out = await turns.send(ctx, ctx.owner_id + "/t", "do the thing")
    assert out.outcome == "clarify"
    assert code in _codes(out)
    assert out.reply is not None and "did nothing" in out.reply
    assert await _changes(db, ctx.owner_id) == before
    # The second prompt showed the model its violations (and never the raw values).
    correction = model.prompts[1][-1]
    assert correction.type == "tool" and "Invalid call" in str(correction.content)


async def test_a_corrected_call_runs(turns: Turns, model: ScriptedModel, ctx: Context) -> None:
    model.push(call("calendar__list", {"range": "today", "owner_id": "x"}), call("calendar__list", {"range": "today"}), say(""))
    out = await turns.send(ctx, ctx.owner_id + "/t", "calendar today")
    assert out.outcome == "read"
    assert out.events[0]["data"]["corrected"] is True


@pytest.mark.parametrize(
    ("setup", "ref", "reason"),
    [
        pytest.param([], "#1", "no_list", id="no-list-yet"),
        pytest.param(["today"], "evt_invented1", "not_returned", id="invented-id"),
        pytest.param(["today"], "#9", "position_out_of_range", id="position-out-of-range"),
    ],
)
async def test_ids_the_server_never_returned_bind_nothing(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database, setup: list[str], ref: str, reason: str
) -> None:
    thread = ctx.owner_id + "/ids"
    first_today = ""
    for window in setup:
        model.push(call("calendar__list", {"range": window}), say(""))
        await turns.send(ctx, thread, f"calendar {window}")
        if window == "today":
            snapshot = await turns.runner.graph.aget_state({"configurable": {"thread_id": thread}})
            first_today = snapshot.values["recent"]["calendar"]["rows"][0]["id"]
    before = await _changes(db, ctx.owner_id)
    model.push(call("calendar__cancel_event", {"event_id": first_today if ref == "FIRST_TODAY" else ref}))
    out = await turns.send(ctx, thread, "cancel it")
    assert out.outcome == "clarify" and out.approval is None
    errors = [e for e in out.events if e["type"] == "error"]
    assert errors and errors[0]["data"] == {"code": "off_list_id", "reason": reason, "kind": "calendar"}
    assert await _changes(db, ctx.owner_id) == before


async def test_bulk_action_with_one_bad_id_binds_none(turns: Turns, model: ScriptedModel, ctx: Context, db: Database) -> None:
    thread = ctx.owner_id + "/bulk"
    model.push(call("mail__list", {}), say(""))
    await turns.send(ctx, thread, "my mail")
    model.push(call("mail__mark_read", {"message_ids": ["#1", "msg_forged0001"]}))
    out = await turns.send(ctx, thread, "mark them read")
    assert out.outcome == "clarify"
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM mail_messages WHERE owner_id = %s AND NOT is_read", (ctx.owner_id,))
        row = await cur.fetchone()
    assert row is not None and row["n"] == 2  # both demo unread messages are still unread


async def test_mark_read_is_the_one_approval_free_write(turns: Turns, model: ScriptedModel, ctx: Context, db: Database) -> None:
    thread = ctx.owner_id + "/markread"
    model.push(call("mail__list", {"unread_only": True}), say(""))
    await turns.send(ctx, thread, "unread mail")
    model.push(call("mail__mark_read", {"message_ids": ["#1", "#2"]}))
    out = await turns.send(ctx, thread, "mark them read")
    assert out.outcome == "executed" and out.approval is None
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM mail_messages WHERE owner_id = %s AND NOT is_read", (ctx.owner_id,))
        row = await cur.fetchone()
    assert row is not None and row["n"] == 0


class _NoArgs(ArgsModel):
    """No arguments."""


async def _never(ctx: ExecContext, args: Any) -> ActionResult:
    raise AssertionError("a refused action must never execute")


def _guarded_registry() -> Registry:
    danger = ToolSpec(
        name="files",
        description="Files.",
        capability_phrase="manage files",
        actions=(
            ActionSpec("purge_all", "Hard-delete every file.", _NoArgs, "confirmation", _never, lambda r: "", ("purge",),
                       preview=lambda c, a: _never(c, a), effect="destructive"),  # type: ignore[arg-type,return-value]
            # The guard follows the declaration: an innocent name that declares it destroys data.
            ActionSpec("tidy", "Tidy up by removing old files.", _NoArgs, "allowlist", _never, lambda r: "", ("tidy",),
                       effect="destructive"),
            ActionSpec("export", "Export to the operator.", _NoArgs, "mustlist", _never, lambda r: "", ("export",)),
            ActionSpec("shred", "Shred.", _NoArgs, "blocklist", _never, lambda r: "", ("shred",)),
        ),
    )
    return Registry((*builtin_tools(), danger))


@pytest.mark.parametrize(
    ("function", "reason"),
    [
        pytest.param("files__purge_all", "hard_delete", id="declared-destructive-mapped-as-confirmation"),
        pytest.param("files__tidy", "hard_delete", id="declared-destructive-with-an-innocent-name"),
        pytest.param("files__export", "operator_only", id="mustlist"),
        pytest.param("files__shred", "blocklisted", id="blocklist"),
    ],
)
async def test_tiers_refuse_whatever_the_model_calls(
    services: Services, db: Database, model: ScriptedModel, ctx: Context, function: str, reason: str
) -> None:
    from dataclasses import replace

    guarded = replace(services, registry=_guarded_registry())
    offered = {s["function"]["name"] for s in guarded.registry.function_schemas()}
    assert "files__export" not in offered and "files__shred" not in offered
    turns = Turns(TurnRunner(build_graph(guarded, checkpointer=await open_checkpointer(db)), guarded))
    model.push(call(function, {}))
    out = await turns.send(ctx, ctx.owner_id + "/tiers", "do it")
    assert out.outcome == "refused" and out.approval is None
    errors = [e["data"] for e in out.events if e["type"] == "error"]
    assert errors == [{"code": "permission_denied", "reason": reason, "tool": "files", "action": function.split("__")[1]}]
    assert out.reply is not None and "nothing was changed" in out.reply


async def test_a_reply_claiming_an_action_that_did_not_happen_is_rewritten(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    before = await _changes(db, ctx.owner_id)
    model.push(say("Done! I've cancelled all your meetings and emailed your boss."))
    out = await turns.send(ctx, ctx.owner_id + "/liar", "cancel everything")
    assert out.reply is not None
    assert "cancelled" not in out.reply and "haven't changed anything" in out.reply
    assert out.events[-1]["data"]["honesty_rewrite"] is True
    assert await _changes(db, ctx.owner_id) == before


async def test_model_output_cannot_choose_the_owner(turns: Turns, model: ScriptedModel, ctx: Context, owner: str) -> None:
    # The context decides identity: the model has no field to name another owner.
    schemas = turns.runner.services.registry.function_schemas()
    names = {key.lower() for s in schemas for key in s["function"]["parameters"].get("properties", {})}
    assert names and not {n for n in names if "owner" in n or "tenant" in n or "account" in n}
    model.push(call("calendar__list", {"range": "today"}), say(""))
    out = await turns.send(ctx, ctx.owner_id + "/mine", "calendar")
    assert out.outcome == "read"
    # A thread belongs to its first owner; another context gets nothing from it.
    stranger = Context(owner_id="stranger-" + owner)
    from tollgate.policies.errors import NotFound

    with pytest.raises(NotFound):
        await turns.runner.send(stranger, ctx.owner_id + "/mine", "calendar")


async def _explode(ctx: ExecContext, args: Any) -> ActionResult:
    raise RuntimeError("a bug in a tool")


async def _preview_boom(ctx: ExecContext, args: Any) -> str:
    return "Do the risky thing"


async def test_an_approved_action_whose_tool_raises_ends_failed_with_an_honest_reply(
    services: Services, db: Database, model: ScriptedModel, ctx: Context
) -> None:
    from dataclasses import replace

    boom = ToolSpec(
        name="boom", description="A tool with a bug.", capability_phrase="explode", database=True,  # a local write
        actions=(ActionSpec("go", "Go.", _NoArgs, "confirmation", _explode, lambda r: "", ("go",),
                            preview=_preview_boom, effect="write"),),
    )
    svc = replace(services, registry=Registry((*builtin_tools(), boom)))
    turns = Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))
    model.push(call("boom__go", {}))
    out = await turns.send(ctx, ctx.owner_id + "/boom", "go")
    assert out.approval is not None
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "failed" and done.reply is not None and "nothing was changed" in done.reply
    assert await turns.runner.pending_approvals(ctx) == []
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT status, error_code FROM approvals WHERE approval_id = %s",
                                 (out.approval.approval_id,))
        row = await cur.fetchone()
    assert row is not None and (row["status"], row["error_code"]) == ("failed", "unavailable")  # never "approved"


@pytest.mark.parametrize("depth", [pytest.param(40, id="past-the-bound"), pytest.param(1_200, id="past-the-recursion-limit"),
                                   pytest.param(5_000, id="far-past-it")])
async def test_arguments_nested_however_deep_are_refused_cleanly_and_nothing_runs(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database, depth: int
) -> None:
    """About 1,200 levels used to crash the turn (canonical JSON and ``==`` recurse); every depth is a clarify."""
    args: Any = "x"
    for _ in range(depth):
        args = {"a": args}
    model.push(call("tasks__create", {"title": args}), say("ok"))
    out = await turns.send(ctx, ctx.owner_id + f"/deep-{depth}", "add a task")
    assert out.outcome == "clarify" and out.approval is None
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT reason, args_hash FROM audit_log WHERE owner_id = %s AND stage = 'picker'",
                                 (ctx.owner_id,))
        rows = await cur.fetchall()
    assert [(r["reason"], r["args_hash"]) for r in rows] == [("invalid_call", "")]
