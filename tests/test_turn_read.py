"""Read turns through the real compiled graph on PostgreSQL."""

from __future__ import annotations

from tollgate.graph.state import Context
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns


async def test_calendar_today_lists_events_and_stores_recent_list(turns: Turns, model: ScriptedModel, ctx: Context) -> None:
    model.push(call("calendar__list", {"range": "today"}), say(""))
    out = await turns.send(ctx, "t-read-1", "what's on my calendar today")
    assert out.outcome == "read"
    assert out.reply is not None
    assert "Standup" in out.reply and "Lunch with Sam" in out.reply and "Design review" in out.reply
    assert "Dentist" not in out.reply  # tomorrow
    types = [e["type"] for e in out.events]
    assert types == ["planner_decision", "tool_start", "tool_end", "planner_decision", "message_complete"]
    snapshot = await turns.runner.graph.aget_state({"configurable": {"thread_id": "t-read-1"}})
    rows = snapshot.values["recent"]["calendar"]["rows"]
    assert [r["label"].split(" — ")[0] for r in rows] == ["Standup", "Lunch with Sam", "Design review"]
    # The model's second look saw the result as fenced data, never as instructions.
    second_prompt = model.prompts[1]
    assert "<data kind=tool_result" in str(second_prompt[-1].content)
