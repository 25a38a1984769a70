"""Reads chain within a step budget; a list runs once per turn; the naturalizer model and its fallback."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.turn import build_graph
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns


async def test_list_then_read_chains_in_one_turn(turns: Turns, model: ScriptedModel, ctx: Context) -> None:
    model.push(call("mail__list", {"unread_only": True}), call("mail__read", {"message_id": "#1"}), say(""))
    out = await turns.send(ctx, ctx.owner_id + "/chain", "read my newest unread mail")
    assert out.outcome == "read"
    assert [e["data"]["action"] for e in out.events if e["type"] == "tool_start"] == ["list", "read"]
    assert out.reply is not None and "Lunch today?" in out.reply


async def test_the_step_budget_bounds_a_turn(
    services: Services, db: Database, model: ScriptedModel, ctx: Context
) -> None:
    small = replace(services, settings=services.settings.model_copy(update={"step_budget": 2}))
    turns = Turns(TurnRunner(build_graph(small, checkpointer=await open_checkpointer(db)), small))
    model.strict = True  # a third model answer would fail the test: the budget must stop the loop first
    model.push(call("mail__list", {}), call("mail__read", {"message_id": "#1"}))
    out = await turns.send(ctx, ctx.owner_id + "/budget", "read everything")
    assert [e["data"]["action"] for e in out.events if e["type"] == "tool_start"] == ["list", "read"]
    # The budget ends the loop with an offer to go on in the background, as a proposal to approve.
    assert out.outcome == "proposed" and out.approval is not None and out.approval.tool == "background"
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT decision, reason, tool, detail FROM audit_log WHERE owner_id = %s AND stage = 'offer'", (ctx.owner_id,))
        assert await cur.fetchall() == [{"decision": "propose", "reason": "step_budget_exhausted",
                                         "tool": "background", "detail": {"steps": 2}}]


async def test_the_same_list_runs_at_most_once_per_turn(turns: Turns, model: ScriptedModel, ctx: Context) -> None:
    model.push(call("calendar__list", {"range": "today"}), call("calendar__list", {"range": "today"}))
    out = await turns.send(ctx, ctx.owner_id + "/once", "calendar")
    assert len([e for e in out.events if e["type"] == "tool_start"]) == 1
    assert out.reply is not None and "Standup" in out.reply


async def test_a_naturalizer_model_phrases_the_result_from_fenced_data(
    services: Services, db: Database, model: ScriptedModel, ctx: Context
) -> None:
    phraser = ScriptedModel(steps=[say("You have three things today, starting with Standup at 9.")])
    svc = replace(services, naturalizer_model=phraser)
    turns = Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))
    model.push(call("calendar__list", {"range": "today"}), say(""))
    out = await turns.send(ctx, ctx.owner_id + "/phrase", "what's on today")
    assert out.reply == "You have three things today, starting with Standup at 9."
    system = str(phraser.prompts[0][0].content)
    assert "<data kind=tool_result" in system and "Standup" in system
    phraser.assert_complete()


async def test_a_failing_naturalizer_falls_back_to_the_grounded_renderer(
    services: Services, db: Database, model: ScriptedModel, ctx: Context
) -> None:
    broken = ScriptedModel(steps=[])  # raises: script exhausted
    svc = replace(services, naturalizer_model=broken)
    turns = Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))
    model.push(call("calendar__list", {"range": "today"}), say(""))
    out = await turns.send(ctx, ctx.owner_id + "/fallback", "what's on today")
    assert out.reply is not None and "Standup" in out.reply and "Design review" in out.reply


async def test_a_naturalizer_claiming_a_write_during_a_read_is_rewritten(
    services: Services, db: Database, model: ScriptedModel, ctx: Context
) -> None:
    liar = ScriptedModel(steps=[say("I've cancelled your standup for you.")])
    svc = replace(services, naturalizer_model=liar)
    turns = Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))
    model.push(call("calendar__list", {"range": "today"}), say(""))
    out = await turns.send(ctx, ctx.owner_id + "/liar", "what's on today")
    assert out.reply is not None and "cancelled" not in out.reply and "nothing was changed" in out.reply
    liar.assert_complete()


async def test_finished_turns_prune_old_checkpoints_and_keep_the_thread_working(
    services: Services, db: Database, model: ScriptedModel, ctx: Context
) -> None:
    svc = replace(services, settings=services.settings.model_copy(update={"checkpoint_prune_every": 1}))
    turns = Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))
    thread = ctx.owner_id + "/prune"
    for _ in range(3):
        model.push(call("calendar__list", {"range": "today"}), say(""))
        await turns.send(ctx, thread, "calendar today")
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s", (thread,))
        row = await cur.fetchone()
    assert row is not None and row["n"] == 1
    # The recent list survived, so a positional write still binds and its approval still works.
    model.push(call("calendar__cancel_event", {"event_id": "#1"}))
    out = await turns.send(ctx, thread, "cancel the first one")
    assert out.approval is not None and "Standup" in out.approval.preview
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed"


async def _phrased(services: Services, db: Database, model: ScriptedModel, ctx: Context, thread: str,
                   reply: str, *steps: Any) -> tuple[Any, ScriptedModel]:
    phraser = ScriptedModel(steps=[say(reply)])
    svc = replace(services, naturalizer_model=phraser)
    turns = Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))
    model.push(*steps)
    return await turns.send(ctx, ctx.owner_id + thread, "do it"), phraser


async def test_the_naturalizers_claim_list_catches_a_phrasing_no_rule_knows(
    services: Services, db: Database, model: ScriptedModel, ctx: Context
) -> None:
    """"Dispatched" is in no rule's vocabulary; the model's own claim list says mail.send, which did not run."""
    liar = 'Your note to Sam has been dispatched.\nCLAIMS: [{"tool": "mail", "action": "send"}]'
    out, phraser = await _phrased(services, db, model, ctx, "/claims-liar", liar,
                                  call("calendar__list", {"range": "today"}), say(""))
    assert out.reply is not None and "dispatched" not in out.reply and "nothing was changed" in out.reply
    assert "CLAIMS" not in str(phraser.prompts[0][1].content)  # the request; the instruction is in the system text
    assert "CLAIMS:" in str(phraser.prompts[0][0].content)
    assert all("CLAIMS" not in e["data"].get("text", "") for e in out.events if e["type"] == "token_delta")


async def test_an_honest_claim_list_keeps_the_reply_and_never_shows(
    services: Services, db: Database, model: ScriptedModel, ctx: Context
) -> None:
    honest = "You have three things today.\nCLAIMS: []"
    out, _ = await _phrased(services, db, model, ctx, "/claims-honest", honest,
                            call("calendar__list", {"range": "today"}), say(""))
    assert out.reply == "You have three things today."
    streamed = "".join(e["data"]["text"] for e in out.events if e["type"] == "token_delta")
    assert streamed.strip() == "You have three things today."


async def test_a_malformed_claim_list_leaves_the_text_to_the_rules(
    services: Services, db: Database, model: ScriptedModel, ctx: Context
) -> None:
    out, _ = await _phrased(services, db, model, ctx, "/claims-bad", "I've cancelled your standup.\nCLAIMS: not json",
                            call("calendar__list", {"range": "today"}), say(""))
    assert out.reply is not None and "cancelled" not in out.reply and "CLAIMS" not in out.reply


def test_the_claim_line_is_held_back_even_when_it_arrives_in_pieces() -> None:
    from tollgate.nodes.naturalize import _Deltas

    class _Sink:
        def __init__(self) -> None:
            self.texts: list[str] = []

        def emit(self, kind: str, **data: Any) -> None:
            self.texts.append(data["text"])

    sink = _Sink()
    deltas = _Deltas(sink)  # type: ignore[arg-type]
    for token in ("All done for", " today.\nCL", "AI", "MS: [", '{"tool": "mail"}]'):
        deltas.add(token)
    assert "".join(sink.texts) == "All done for today.\n"
