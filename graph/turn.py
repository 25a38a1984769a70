"""The turn graph: an agent loop of governed steps.

Each step is one model answer, which may hold several tool calls; each call passes the gates
on its own, and one refused never blocks the others::

    START → picker ─┬─ calls ─→ tier_gate ─→ id_validation (calls with ids) ─┐
                    └─ text / clarify ─────────────────────────→ naturalize  │
        ┌────────────────────────────────────────────────────────────────────┘
        └→ execute (reads concurrently, approval-free writes in order)
             └→ propose (one request listing every write that needs approval)
                  └→ approval (interrupt; one decision per action) ─┬─ approved → execute
                                                                    ├─ edited → propose (new preview)
                                                                    └─ expired / invalid → naturalize
        step done ─┬─ budget left → picker (it sees every result of the turn)
                   ├─ budget spent → offer ─┬─ chat → propose (continue as a background run?)
                   │                        └─ otherwise → naturalize
                   └─ the offer decided → naturalize → END

Refused, rejected and failed calls come back to the model as error tool messages. The loop
ends when the model answers without a call, or when the step budget (model answers with
calls) is spent.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.types import Checkpointer

from tollgate.graph.governed import GovernedGraph
from tollgate.graph.observe import tracing
from tollgate.graph.services import Services, ServicesProvider
from tollgate.graph.state import Context, Plan, TurnInput, TurnOutput, TurnState
from tollgate.nodes.approval import check_resume, make_approval
from tollgate.nodes.execute import make_execute, runnable
from tollgate.nodes.id_validation import make_id_validation
from tollgate.nodes.naturalize import make_naturalize
from tollgate.nodes.offer import OFFER_CALL_PREFIX, make_offer
from tollgate.nodes.picker import make_picker
from tollgate.nodes.propose import make_propose
from tollgate.nodes.tier_gate import make_tier_gate

__all__ = ["EDGES", "NODES", "build_graph"]

NODES = ("picker", "tier_gate", "id_validation", "propose", "approval", "execute", "naturalize")
"""The node names, in turn order."""


_STEP_DONE: Final = ("picker", "offer", "naturalize")
EDGES: Final[dict[str, tuple[str, ...]]] = {
    "picker": ("tier_gate", "naturalize"),
    "tier_gate": ("id_validation", "execute", "propose", *_STEP_DONE),
    "id_validation": ("execute", "propose", *_STEP_DONE),
    "execute": ("propose", *_STEP_DONE),
    "propose": ("approval", *_STEP_DONE),
    "approval": ("execute", "propose", *_STEP_DONE),
    "offer": ("propose", "naturalize"),
}
"""Where each node may route to (the drawn graph has exactly these edges, plus START and END)."""


def _plans(state: TurnState) -> list[Plan]:
    return state.get("plans") or []


def _ready(state: TurnState) -> bool:
    return any(runnable(p) for p in _plans(state))


def _proposals(state: TurnState) -> bool:
    return any(p.get("verdict") == "propose" and "approval_id" not in p and "args_hash" in p for p in _plans(state))


# Routing functions are coroutines: LangGraph runs a plain function edge in a thread pool, a
# thread hop per edge for a dictionary lookup.
def _routes(budget: int) -> dict[str, Any]:
    def next_step(state: TurnState) -> str:
        """A step with nothing left to run or decide: back to the picker while the budget lasts,
        else the background offer; once the offer was decided, the reply."""
        if any(c["call_id"].startswith(OFFER_CALL_PREFIX) for c in state.get("calls") or []):
            return "naturalize"
        return "picker" if state.get("steps", 0) < budget else "offer"

    def run_or_propose(state: TurnState) -> str:
        """Calls ready to run first, then the ones that need approval, then the next step."""
        if _ready(state):
            return "execute"
        return "propose" if _proposals(state) else next_step(state)

    async def after_picker(state: TurnState) -> Literal["tier_gate", "naturalize"]:
        return "tier_gate" if _plans(state) else "naturalize"

    async def after_gate(state: TurnState) -> str:
        # The gate hashes the final arguments of a call without ids (nothing to bind); all else binds ids.
        if any("args_hash" not in p for p in _plans(state)):
            return "id_validation"
        return run_or_propose(state)

    async def after_ids(state: TurnState) -> str:
        return run_or_propose(state)

    async def after_execute(state: TurnState) -> str:
        if (state.get("gate") or {}).get("verdict") == "refuse":
            return "naturalize"  # a call ran without its authority: the turn ends
        return "propose" if _proposals(state) else next_step(state)

    async def after_propose(state: TurnState) -> str:
        return "approval" if state.get("approval_request") is not None else next_step(state)

    async def after_approval(state: TurnState) -> str:
        if (state.get("gate") or {}).get("verdict") == "refuse":
            return "naturalize"  # expired, or closed after invalid decisions: the turn ends
        return run_or_propose(state)

    async def after_offer(state: TurnState) -> Literal["propose", "naturalize"]:
        return "propose" if _proposals(state) else "naturalize"

    return {"picker": after_picker, "tier_gate": after_gate, "id_validation": after_ids, "execute": after_execute,
            "propose": after_propose, "approval": after_approval, "offer": after_offer}


def build_graph(
    services: Services | ServicesProvider,
    *,
    checkpointer: Checkpointer = None,
    step_budget: int = 8,
    context_schema: type[Context] = Context,
) -> GovernedGraph:
    """Compile the turn graph over ``services`` (or a provider of them) and ``checkpointer``;
    ``context_schema`` is :class:`Context` or a subclass that only changes its defaults. Its runs
    hold their thread and refuse routing and state edits from outside (:mod:`graph.governed`)."""
    if isinstance(services, Services):
        fixed = services

        async def provider() -> Services:
            return fixed

        step_budget = services.settings.step_budget
    else:
        provider = services

    builder = StateGraph(TurnState, context_schema=context_schema, input_schema=TurnInput, output_schema=TurnOutput)
    # Every node audits its own refusals, per call, and runs in a span of its own (graph.observe.tracing).
    builder.add_node("picker", tracing.node("picker", make_picker(provider)))
    builder.add_node("tier_gate", tracing.node("tier_gate", make_tier_gate(provider)))
    builder.add_node("id_validation", tracing.node("id_validation", make_id_validation(provider)))
    builder.add_node("propose", tracing.node("propose", make_propose(provider)))
    builder.add_node("approval", tracing.node("approval", make_approval(provider)))
    builder.add_node("execute", tracing.node("execute", make_execute(provider)))
    builder.add_node("naturalize", tracing.node("naturalize", make_naturalize(provider)))
    builder.add_node("offer", tracing.node("offer", make_offer(provider)))
    builder.add_edge(START, "picker")
    for node, route in _routes(step_budget).items():
        builder.add_conditional_edges(node, route, list(EDGES[node]))
    builder.add_edge("naturalize", END)
    return GovernedGraph.of(builder.compile(checkpointer=checkpointer, name="tollgate_turn"), provider, check_resume)
