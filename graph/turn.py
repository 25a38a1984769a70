"""The turn graph: picker → tier_gate → id_validation → propose → approval → execute → naturalize.

```
START → picker ─┬─ call ──→ tier_gate ─┬─ carries ids ──→ id_validation ─┬─ read ──→ execute
                │                      │                                 ├─ write ─→ propose
                │                      │                                 └─ clarify → naturalize
                │                      ├─ read without ids ───────────────────────→ execute
                │                      ├─ write without ids ──────────────────────→ propose
                │                      └─ refuse / clarify ───────────────────────→ naturalize
                └─ reply / clarify ───────────────────────────────────────────────→ naturalize
propose ─┬─ request built → approval ─┬─ approved (an edit re-checked) → execute
         └─ preview failed → naturalize └─ rejected / expired / invalid → naturalize
execute ─┬─ read, budget left → picker (next step)
         ├─ read, budget spent → offer ─┬─ chat → propose (continue as a background run?)
         │                              └─ otherwise → naturalize
         └─ otherwise ────────→ naturalize → END
```
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer

from graph.audit import audited
from graph.services import Services, ServicesProvider
from graph.state import Context, TurnInput, TurnOutput, TurnState
from nodes.approval import make_approval
from nodes.execute import make_execute
from nodes.id_validation import make_id_validation
from nodes.naturalize import make_naturalize
from nodes.offer import make_offer
from nodes.picker import make_picker
from nodes.propose import make_propose
from nodes.tier_gate import make_tier_gate

__all__ = ["NODES", "build_graph"]

NODES = ("picker", "tier_gate", "id_validation", "propose", "approval", "execute", "naturalize")
"""The node names, in turn order."""


async def _after_picker(state: TurnState) -> Literal["tier_gate", "naturalize"]:
    return "tier_gate" if state.get("plan") is not None else "naturalize"


async def _after_gate(state: TurnState) -> Literal["id_validation", "execute", "propose", "naturalize"]:
    gate = state.get("gate") or {}
    plan = state.get("plan")
    verdict = gate.get("verdict")
    if plan is None or verdict not in ("execute", "propose"):
        return "naturalize"
    # The gate hashes the final arguments of a call without ids (nothing to bind); all else binds ids.
    if "args_hash" not in plan:
        return "id_validation"
    return "execute" if verdict == "execute" else "propose"


async def _after_ids(state: TurnState) -> Literal["execute", "propose", "naturalize"]:
    gate = state.get("gate") or {}
    if state.get("plan") is None:
        return "naturalize"
    return "propose" if gate.get("verdict") == "propose" else "execute"


async def _after_propose(state: TurnState) -> Literal["approval", "naturalize"]:
    return "approval" if state.get("approval_request") is not None else "naturalize"


async def _after_approval(state: TurnState) -> Literal["execute", "naturalize"]:
    gate = state.get("gate") or {}
    return "execute" if gate.get("verdict") == "execute" and state.get("plan") is not None else "naturalize"


async def _after_offer(state: TurnState) -> Literal["propose", "naturalize"]:
    gate = state.get("gate") or {}
    return "propose" if gate.get("verdict") == "propose" and state.get("plan") is not None else "naturalize"


# Routing functions are coroutines: LangGraph runs a plain function edge in a thread pool, a
# thread hop per edge for a dictionary lookup.
def _make_after_execute(budget: int) -> Any:
    async def after_execute(state: TurnState) -> Literal["picker", "offer", "naturalize"]:
        result = state.get("result")
        if state.get("outcome") != "read" or result is None or result["kind"] == "write":
            return "naturalize"
        return "picker" if state.get("steps", 0) < budget else "offer"

    return after_execute


def build_graph(
    services: Services | ServicesProvider,
    *,
    checkpointer: Checkpointer = None,
    step_budget: int = 3,
) -> CompiledStateGraph[TurnState, Context, TurnInput, TurnOutput]:
    """Compile the turn graph over ``services`` (or a provider of them) and ``checkpointer``."""
    if isinstance(services, Services):
        fixed = services

        async def provider() -> Services:
            return fixed

        step_budget = services.settings.step_budget
    else:
        provider = services

    builder = StateGraph(TurnState, context_schema=Context, input_schema=TurnInput, output_schema=TurnOutput)
    # Refusals of these three nodes are audited by the wrapper; the gate, propose and execute audit their own.
    builder.add_node("picker", audited("picker", make_picker(provider), provider))
    builder.add_node("tier_gate", make_tier_gate(provider))
    builder.add_node("id_validation", audited("id_validation", make_id_validation(provider), provider))
    builder.add_node("propose", make_propose(provider))
    builder.add_node("approval", audited("approval", make_approval(provider), provider))
    builder.add_node("execute", make_execute(provider))
    builder.add_node("naturalize", make_naturalize(provider))
    builder.add_node("offer", make_offer(provider))
    builder.add_edge(START, "picker")
    builder.add_conditional_edges("picker", _after_picker)
    builder.add_conditional_edges("tier_gate", _after_gate)
    builder.add_conditional_edges("id_validation", _after_ids)
    builder.add_conditional_edges("propose", _after_propose)
    builder.add_conditional_edges("approval", _after_approval)
    builder.add_conditional_edges("execute", _make_after_execute(step_budget))
    builder.add_conditional_edges("offer", _after_offer)
    builder.add_edge("naturalize", END)
    return builder.compile(checkpointer=checkpointer, name="tollgate_turn")
