"""The compiled turn graph as Studio draws it: every designed edge, and no other."""

from __future__ import annotations

import tollgate.graph._env  # noqa: F401
from tollgate.graph.state import Context
from tollgate.graph.studio.platform import graph
from tollgate.policies.approval import args_hash
from tests.fakes import ScriptedModel
from tests.harness import Clock, Turns


def test_the_drawn_graph_has_exactly_the_designed_edges() -> None:
    edges = {(e.source, e.target) for e in graph.get_graph().edges}
    step_done = {"picker", "offer", "naturalize"}
    assert edges == {
        ("__start__", "picker"),
        ("picker", "tier_gate"), ("picker", "naturalize"),
        *{("tier_gate", t) for t in {"id_validation", "execute", "propose", *step_done}},
        *{("id_validation", t) for t in {"execute", "propose", *step_done}},
        *{("execute", t) for t in {"propose", *step_done}},
        *{("propose", t) for t in {"approval", *step_done}},
        *{("approval", t) for t in {"execute", "propose", *step_done}},
        ("offer", "propose"), ("offer", "naturalize"),
        ("naturalize", "__end__"),
    }


async def _nodes_run(turns: Turns, ctx: Context, thread_id: str, message: str) -> list[str]:
    from langchain_core.messages import HumanMessage

    out: list[str] = []
    async for chunk in turns.runner.graph.astream(
        {"messages": [HumanMessage(message)]}, {"configurable": {"thread_id": thread_id}}, context=ctx,
        stream_mode="updates",
    ):
        out.extend(name for name in chunk if not name.startswith("__"))
    return out


async def test_a_read_without_ids_skips_id_validation_and_one_with_ids_does_not(
    turns: Turns, model: ScriptedModel, ctx: Context
) -> None:
    from tests.fakes import call, say

    model.push(call("calendar__list", {"range": "today"}), say(""))
    assert await _nodes_run(turns, ctx, "t-graph-1", "what's on today") == [
        "picker", "tier_gate", "execute", "picker", "naturalize"
    ]
    model.push(call("mail__list", {}), call("mail__read", {"message_id": "#1"}), say(""))
    assert await _nodes_run(turns, ctx, "t-graph-2", "read my first mail") == [
        "picker", "tier_gate", "execute", "picker", "tier_gate", "id_validation", "execute", "picker", "naturalize"
    ]
    # An id the latest list does not hold is still refused there (and the model is told so).
    model.push(call("mail__read", {"message_id": "msg_not_listed"}))
    nodes = await _nodes_run(turns, ctx, "t-graph-2", "read msg_not_listed")
    assert nodes == ["picker", "tier_gate", "id_validation", "picker", "naturalize"]


async def test_a_write_without_ids_skips_id_validation_and_one_with_ids_does_not(
    turns: Turns, model: ScriptedModel, ctx: Context, clock: Clock
) -> None:
    from tests.fakes import call

    model.push(call("tasks__create", {"title": "water the plants"}))
    assert await _nodes_run(turns, ctx, "t-graph-3", "add a task to water the plants") == ["picker", "tier_gate", "propose"]
    # The gate sealed the arguments as id validation would have: their hash and the proposal's start.
    state = (await turns.runner.graph.aget_state({"configurable": {"thread_id": "t-graph-3"}})).values
    (plan,) = state["plans"]
    assert plan["args_hash"] == args_hash(plan["args"])
    assert plan["proposed_at"] == int(clock().timestamp())
    done = await turns.runner.resume(ctx, "t-graph-3", {"token": state["pending"]["token"], "decisions": [{"type": "approve"}]})
    assert done.outcome == "executed"
    model.push(call("tasks__list", {}), call("tasks__complete", {"task_id": "#1"}))
    assert await _nodes_run(turns, ctx, "t-graph-3", "tick off the first task") == [
        "picker", "tier_gate", "execute", "picker", "tier_gate", "id_validation", "propose"
    ]
