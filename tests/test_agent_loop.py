"""The agent loop: several calls per model answer, one approval per step, writes mid-task, results the model sees."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, ToolMessage

from tollgate.graph.app import approval_rules
from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.turn import build_graph
from tollgate.nodes.picker_prompt import context_of
from tollgate.policies.approval_rules import RulesError, parse_rules
from tollgate.policies.arguments import ArgsModel
from tollgate.policies.errors import ApprovalInvalid, InvalidArgs
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, calls, say
from tests.harness import Turns
from tollgate.tools.builtin import builtin_tools, default_registry
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, Registry, ToolSpec

SAM = {"to": ["sam@example.com"], "subject": "Lunch", "body": "I'll be there."}


async def _scalar(db: Database, sql: str, *args: Any) -> Any:
    async with all_rows(db) as conn:
        cur = await conn.execute(sql, args)
        row = await cur.fetchone()
    return next(iter(row.values())) if row else None


async def _outbox(db: Database, owner: str) -> int:
    return int(await _scalar(db, "SELECT count(*) FROM mail_outbox WHERE owner_id = %s", owner))


async def _event_status(db: Database, owner: str, title: str) -> str:
    return str(await _scalar(db, "SELECT status FROM calendar_events WHERE owner_id = %s AND title = %s", owner, title))


async def _tasks_titled(db: Database, owner: str, title: str) -> int:
    return int(await _scalar(db, "SELECT count(*) FROM tasks WHERE owner_id = %s AND title = %s", owner, title))


async def _approval_rows(db: Database, owner: str) -> list[tuple[str, str, int, str]]:
    async with all_rows(db) as conn:
        cur = await conn.execute(
            "SELECT tool || '.' || action AS name, request_id, position, status FROM approvals WHERE owner_id = %s"
            " ORDER BY created_at, position", (owner,))
        return [(r["name"], r["request_id"], r["position"], r["status"]) for r in await cur.fetchall()]


def _tool_messages(prompt: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in prompt if isinstance(m, ToolMessage)]


async def _listed(turns: Turns, model: ScriptedModel, ctx: Context, thread: str) -> None:
    model.push(call("calendar__list", {"range": "today"}), say(""))
    await turns.send(ctx, thread, "what's on my calendar today")


async def test_two_writes_in_one_answer_are_one_request_and_each_decision_applies_to_its_own_action(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    thread = ctx.owner_id + "/two-writes"
    await _listed(turns, model, ctx, thread)
    model.push(calls(("calendar__cancel_event", {"event_id": "#2"}), ("mail__send", SAM)))
    out = await turns.send(ctx, thread, "cancel the lunch and tell Sam")
    assert out.outcome == "proposed" and out.approval is not None
    first, second = out.approval.actions
    assert (first.tool, first.action, second.tool, second.action) == ("calendar", "cancel_event", "mail", "send")
    assert "Lunch with Sam" in first.preview and "sam@example.com" in second.preview
    assert first.approval_id == out.approval.approval_id != second.approval_id
    rows = await _approval_rows(db, ctx.owner_id)
    assert [(n, p, s) for n, _, p, s in rows] == [("calendar.cancel_event", 0, "pending"), ("mail.send", 1, "pending")]
    assert {r for _, r, _, _ in rows} == {out.approval.approval_id}  # one request
    (listed,) = await turns.runner.pending_approvals(ctx)
    assert [a.approval_id for a in listed.actions] == [first.approval_id, second.approval_id]

    model.push(say("I cancelled the lunch; I did not write to Sam, as you asked."))
    done = await turns.decide(ctx, out.approval.approval_id, [{"type": "approve"}, {"type": "reject", "message": "not now"}])
    assert done.outcome == "executed"
    assert await _event_status(db, ctx.owner_id, "Lunch with Sam") == "cancelled"
    assert await _outbox(db, ctx.owner_id) == 0
    assert [s for *_, s in await _approval_rows(db, ctx.owner_id)] == ["executed", "rejected"]
    # The model saw both outcomes: the cancel's result and the rejection, with its reason, as an error.
    results = {m.tool_call_id: m for m in _tool_messages(model.prompts[-1])}
    assert len(results) == 2
    rejected = next(m for m in results.values() if m.status == "error")
    assert "rejected" in str(rejected.content) and "not now" in str(rejected.content)
    assert done.reply == "I cancelled the lunch; I did not write to Sam, as you asked."


async def test_a_read_and_a_write_in_one_answer_the_read_runs_and_the_write_waits(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    thread = ctx.owner_id + "/read-write"
    model.push(calls(("calendar__list", {"range": "today"}), ("tasks__create", {"title": "buy oat milk"})))
    out = await turns.send(ctx, thread, "what's on today, and add a task to buy oat milk")
    assert out.outcome == "proposed" and out.approval is not None and len(out.approval.actions) == 1
    assert [e["data"]["action"] for e in out.events if e["type"] == "tool_start"] == ["list"]
    assert await _tasks_titled(db, ctx.owner_id, "buy oat milk") == 0
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed" and await _tasks_titled(db, ctx.owner_id, "buy oat milk") == 1
    assert done.reply is not None and "Standup" in done.reply and "oat milk" in done.reply


async def test_a_call_refused_by_a_gate_never_blocks_the_answers_other_calls(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    thread = ctx.owner_id + "/mixed"
    model.push(calls(
        ("calendar__teleport", {}),                               # unknown: refused at decoding
        ("mail__read", {"message_id": "msg_never_listed"}),       # an id the thread was never given
        ("tasks__create", {"title": "call the plumber"}),         # fine: asks for approval
    ))
    out = await turns.send(ctx, thread, "do three things")
    assert out.outcome == "proposed" and out.approval is not None
    assert [(a.tool, a.action) for a in out.approval.actions] == [("tasks", "create")]
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert await _tasks_titled(db, ctx.owner_id, "call the plumber") == 1
    errors = [m for m in _tool_messages(model.prompts[-1]) if m.status == "error"]
    assert len(errors) == 2 and any("unknown function" in str(m.content) for m in errors)
    assert any("off_list_id" in str(m.content) for m in errors)
    assert done.reply is not None and "plumber" in done.reply


async def test_a_five_step_task_completes_in_one_user_message_with_two_approvals(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """Read, write (approved), read, write (approved), reply: each step sees every earlier result."""
    thread = ctx.owner_id + "/five"

    def read_first_mail(prompt: list[BaseMessage]) -> Any:
        (listed,) = _tool_messages(prompt)
        assert "Lunch today?" in str(listed.content)
        return call("mail__read", {"message_id": "#1"})

    def add_task(prompt: list[BaseMessage]) -> Any:
        assert "12:30" in str(_tool_messages(prompt)[-1].content)  # the mail's body reached the model
        return call("tasks__create", {"title": "lunch with Sam at 12:30"})

    def list_calendar(prompt: list[BaseMessage]) -> Any:
        assert "lunch with Sam at 12:30" in str(_tool_messages(prompt)[-1].content)  # the write's result too
        return call("calendar__list", {"range": "today"})

    def reply_to_sam(prompt: list[BaseMessage]) -> Any:
        assert len(_tool_messages(prompt)) == 4
        return call("mail__send", SAM)

    model.push(call("mail__list", {}), read_first_mail, add_task, list_calendar, reply_to_sam,
               say("Done: I added the task and sent Sam your reply."))
    first = await turns.send(ctx, thread, "read Sam's mail, add a task for the lunch, check my day and tell Sam I'll come")
    assert first.approval is not None and first.approval.actions[0].action == "create"
    second = await turns.decide(ctx, first.approval.approval_id, {"type": "approve"})
    assert second.approval is not None and second.approval.actions[0].action == "send"
    done = await turns.decide(ctx, second.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed" and done.reply == "Done: I added the task and sent Sam your reply."
    assert await _tasks_titled(db, ctx.owner_id, "lunch with Sam at 12:30") == 1 and await _outbox(db, ctx.owner_id) == 1
    assert first.events[0]["turn_id"] == done.events[-1]["turn_id"]  # one user turn


async def test_a_resume_with_the_wrong_count_or_a_bad_edit_is_refused_and_the_request_stays_pending(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    thread = ctx.owner_id + "/counts"
    await _listed(turns, model, ctx, thread)
    model.push(calls(("calendar__cancel_event", {"event_id": "#2"}), ("tasks__create", {"title": "book a table"})))
    out = await turns.send(ctx, thread, "cancel lunch and remind me to book a table")
    assert out.approval is not None and len(out.approval.actions) == 2
    request = out.approval.approval_id
    for wrong in ({"type": "approve"}, [{"type": "approve"}] * 3, [{"type": "approve"}, {"type": "maybe"}]):
        with pytest.raises(ApprovalInvalid):
            await turns.runner.decide(ctx, request, wrong)
    bad_edit = {"type": "edit", "edited_action": {"name": "tasks__create", "args": {"title": ""}}}
    with pytest.raises(InvalidArgs):
        await turns.runner.decide(ctx, request, [{"type": "approve"}, bad_edit])
    # Deciding by the second action's own id reaches the same request; it is still whole and pending.
    assert [s for *_, s in await _approval_rows(db, ctx.owner_id)] == ["pending", "pending"]
    assert await _event_status(db, ctx.owner_id, "Lunch with Sam") == "confirmed"
    done = await turns.decide(ctx, out.approval.actions[1].approval_id, [{"type": "reject"}, {"type": "approve"}])
    assert done.outcome == "executed"
    assert await _event_status(db, ctx.owner_id, "Lunch with Sam") == "confirmed"
    assert await _tasks_titled(db, ctx.owner_id, "book a table") == 1


async def test_a_task_continues_in_the_next_user_turn_with_a_result_of_the_previous_one(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    thread = ctx.owner_id + "/next-turn"
    model.push(call("mail__list", {"from_contains": "alex"}), call("mail__read", {"message_id": "#1"}), say(""))
    await turns.send(ctx, thread, "what did Alex say about the timeline?")

    def reply_from_memory(prompt: list[BaseMessage]) -> Any:
        context = context_of(prompt)
        assert context is not None
        (earlier,) = context["earlier_turns"]
        read = next(r for r in earlier["tool_results"] if r["call"] == "mail.read")
        item = read["item"]
        assert read["from"] == "tool result (server)" and "launch on the 15th" in item["body"]
        return call("mail__send", {"to": [item["from"]], "subject": "Re: " + item["subject"],
                                   "body": "Great, the 15th it is."})

    model.push(reply_from_memory)
    out = await turns.send(ctx, thread, "reply that the date works for me")
    assert out.approval is not None and "alex@example.com" in out.approval.preview


# --- reads run concurrently -----------------------------------------------------------------


class _Slow(ArgsModel):
    """Which call this is."""

    n: int


def _slow_tool(started: list[int], both: asyncio.Event) -> ToolSpec:
    async def look(ctx: ExecContext, args: _Slow) -> ActionResult:
        started.append(args.n)
        if len(started) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), timeout=5)  # waits for the other call: only concurrent reads get past
        return {"tool": "slow", "action": "look", "kind": "item", "summary": f"looked {args.n}"}

    return ToolSpec(name="slow", description="A slow lookup.", capability_phrase="look slowly",
                    actions=(ActionSpec("look", "Look something up slowly.", _Slow, "allowlist", look,
                                        lambda r: r["summary"], ()),))


async def test_independent_reads_of_one_answer_run_concurrently(
    services: Services, db: Database, model: ScriptedModel, ctx: Context
) -> None:
    started: list[int] = []
    both = asyncio.Event()
    svc = replace(services, registry=Registry((*builtin_tools(), _slow_tool(started, both))))
    turns = Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))
    model.push(calls(("slow__look", {"n": 1}), ("slow__look", {"n": 2})))
    out = await turns.send(ctx, ctx.owner_id + "/slow", "look twice")
    assert out.outcome == "read" and sorted(started) == [1, 2]
    assert out.reply is not None and "looked 1" in out.reply and "looked 2" in out.reply


async def test_calls_beyond_the_per_answer_cap_are_refused_back_to_the_model(
    services: Services, db: Database, model: ScriptedModel, ctx: Context
) -> None:
    capped = replace(services, settings=services.settings.model_copy(update={"max_calls_per_step": 2}))
    turns = Turns(TurnRunner(build_graph(capped, checkpointer=await open_checkpointer(db)), capped))
    model.push(calls(*[("tasks__list", {"status": s}) for s in ("open", "done", "all")]))
    out = await turns.send(ctx, ctx.owner_id + "/cap", "tasks three ways")
    assert len([e for e in out.events if e["type"] == "tool_start"]) == 2  # the first two; the third refused
    errors = [m for m in _tool_messages(model.prompts[-1]) if m.status == "error"]
    assert len(errors) == 1 and "more than 2 calls" in str(errors[0].content)


# --- approval rules as data -------------------------------------------------------------------


RULES = """
[[rule]]
name = "tasks need no approval"
action = "tasks.create"
run_unasked = true

[[rule]]
name = "mail to myself"
action = "mail.send"
owners = ["{owner}"]
run_unasked = true
when = [{{ field = "to", one_of = ["me@example.com"] }}]

[[rule]]
name = "no edits of cancellations"
action = "calendar.cancel_event"
decisions = ["approve", "reject"]
"""


async def _ruled(services: Services, db: Database, owner: str, tmp_path: Path) -> Turns:
    path = tmp_path / "rules.toml"
    path.write_text(RULES.format(owner=owner))
    settings = services.settings.model_copy(update={"approval_rules": path})
    svc = replace(services, settings=settings, approval_rules=approval_rules(settings, services.registry))
    return Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))


async def test_approval_rules_let_configured_writes_run_unasked_and_audit_which_rule(
    services: Services, db: Database, model: ScriptedModel, ctx: Context, tmp_path: Path
) -> None:
    turns = await _ruled(services, db, ctx.owner_id, tmp_path)
    model.push(call("tasks__create", {"title": "water the plants"}))
    out = await turns.send(ctx, ctx.owner_id + "/rules", "add a task to water the plants")
    assert out.outcome == "executed" and out.approval is None
    assert await _tasks_titled(db, ctx.owner_id, "water the plants") == 1
    reason = await _scalar(db, "SELECT reason FROM audit_log WHERE owner_id = %s AND stage = 'gate' ORDER BY seq DESC"
                               " LIMIT 1", ctx.owner_id)
    assert reason == "approval_rule:tasks need no approval"
    # Mail to the owner's own address runs unasked; to anyone else (or with a second recipient) it asks.
    model.push(call("mail__send", {"to": ["me@example.com"], "subject": "note", "body": "milk"}))
    assert (await turns.send(ctx, ctx.owner_id + "/rules", "mail me a note")).outcome == "executed"
    model.push(call("mail__send", {"to": ["me@example.com", "sam@example.com"], "subject": "note", "body": "milk"}))
    assert (await turns.send(ctx, ctx.owner_id + "/rules", "mail us a note")).outcome == "proposed"


async def test_approval_rules_apply_to_their_owners_only_and_never_to_what_dlp_sends_to_approval(
    services: Services, db: Database, model: ScriptedModel, ctx: Context, tmp_path: Path
) -> None:
    turns = await _ruled(services, db, "someone_else", tmp_path)
    model.push(call("mail__send", {"to": ["me@example.com"], "subject": "note", "body": "milk"}))
    assert (await turns.send(ctx, ctx.owner_id + "/rules-2", "mail me")).outcome == "proposed"
    model.push(call("tasks__create", {"title": "card 4111 1111 1111 1111"}))
    out = await turns.send(ctx, ctx.owner_id + "/rules-3", "task with my card")
    assert out.outcome == "proposed" and out.approval is not None and "payment card" in out.approval.preview


async def test_an_action_limited_to_approve_or_reject_refuses_an_edit_and_stays_pending(
    services: Services, db: Database, model: ScriptedModel, ctx: Context, tmp_path: Path
) -> None:
    turns = await _ruled(services, db, ctx.owner_id, tmp_path)
    thread = ctx.owner_id + "/no-edit"
    await _listed(turns, model, ctx, thread)
    model.push(call("calendar__cancel_event", {"event_id": "#2"}))
    out = await turns.send(ctx, thread, "cancel lunch")
    assert out.approval is not None and out.approval.actions[0].allowed_decisions == ("approve", "reject")
    edit = {"type": "edit", "edited_action": {"name": "calendar__cancel_event", "args": {"event_id": "#3"}}}
    with pytest.raises(ApprovalInvalid, match="allows only approve, reject"):
        await turns.runner.decide(ctx, out.approval.approval_id, edit)
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed" and await _event_status(db, ctx.owner_id, "Lunch with Sam") == "cancelled"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[[rule]]\nname = 'x'\naction = 'tasks.create'\n", "run_unasked or decisions"),
        ("[[rule]]\nname = 'x'\naction = 'tasks.create'\nrun_unasked = true\nwhen = [{ field = 'title' }]\n",
         "exactly one of"),
        ("[[rule]]\nname = 'x'\naction = 'tasks.create'\ndecisions = ['approve']\n", "must allow reject"),
        ("[[rule]]\nname = 'x'\naction = 'tasks.create'\nrun_unasked = true\nmodel_says = 'yes'\n", "rule.0.model_says"),
        ("not toml [", "not valid TOML"),
    ],
)
def test_an_unusable_rules_file_is_refused_with_what_is_wrong(text: str, fragment: str) -> None:
    with pytest.raises(RulesError, match=fragment.replace(".", r"\.").replace("[", r"\[")):
        parse_rules(text, "rules.toml")


def test_rules_naming_an_action_the_registry_lacks_refuse_to_start(services: Services, tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text("[[rule]]\nname = 'x'\naction = 'payments.send'\nrun_unasked = true\n")
    with pytest.raises(RulesError, match="no such action: payments.send"):
        approval_rules(services.settings.model_copy(update={"approval_rules": path}), default_registry())


async def test_two_lists_of_one_kind_in_one_answer_make_a_position_ambiguous_but_ids_still_bind(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """"The 2nd one" after two lists shown at once could mean either list's row: asked, never guessed."""
    thread = ctx.owner_id + "/two-lists"
    model.push(calls(("calendar__list", {"range": "tomorrow"}), ("calendar__list", {"range": "today"})), say(""))
    shown = await turns.send(ctx, thread, "what's on today and tomorrow?")
    assert shown.outcome == "read"
    model.push(call("calendar__cancel_event", {"event_id": "#2"}), say("Which event do you mean?"))
    asked = await turns.send(ctx, thread, "cancel the 2nd one")
    assert asked.approval is None
    assert await _scalar(db, "SELECT count(*) FROM approvals WHERE owner_id = %s", ctx.owner_id) == 0
    lunch = await _scalar(db, "SELECT id FROM calendar_events WHERE owner_id = %s AND title = 'Lunch with Sam'",
                          ctx.owner_id)
    model.push(call("calendar__cancel_event", {"event_id": lunch}))
    by_id = await turns.send(ctx, thread, "cancel the lunch with Sam")
    assert by_id.approval is not None and "Lunch with Sam" in by_id.approval.preview  # an id of either list binds
