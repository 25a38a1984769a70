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

from collections.abc import Callable
from typing import Any, Final, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Checkpointer, Command

from tollgate.graph.governed import GovernedGraph
from tollgate.graph.observe import tracing
from tollgate.graph.observe.tracing import NodeFn
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


Route = Callable[[TurnState], str]
"""Where the turn goes after a node, read from the state after its update."""

_ROUTE_KEYS: Final = ("plans", "calls", "steps", "gate", "approval_request")
"""The keys a route reads: all without a reducer, so the state after an update is the update over the state."""


def _routes(budget: int) -> dict[str, Route]:
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

    def after_picker(state: TurnState) -> Literal["tier_gate", "naturalize"]:
        return "tier_gate" if _plans(state) else "naturalize"

    def after_gate(state: TurnState) -> str:
        # The gate hashes the final arguments of a call without ids (nothing to bind); all else binds ids.
        if any("args_hash" not in p for p in _plans(state)):
            return "id_validation"
        return run_or_propose(state)

    def after_ids(state: TurnState) -> str:
        return run_or_propose(state)

    def after_execute(state: TurnState) -> str:
        if (state.get("gate") or {}).get("verdict") == "refuse":
            return "naturalize"  # a call ran without its authority: the turn ends
        return "propose" if _proposals(state) else next_step(state)

    def after_propose(state: TurnState) -> str:
        return "approval" if state.get("approval_request") is not None else next_step(state)

    def after_approval(state: TurnState) -> str:
        if (state.get("gate") or {}).get("verdict") == "refuse":
            return "naturalize"  # expired, or closed after invalid decisions: the turn ends
        return run_or_propose(state)

    def after_offer(state: TurnState) -> Literal["propose", "naturalize"]:
        return "propose" if _proposals(state) else "naturalize"

    return {"picker": after_picker, "tier_gate": after_gate, "id_validation": after_ids, "execute": after_execute,
            "propose": after_propose, "approval": after_approval, "offer": after_offer}


def _routed(fn: NodeFn, route: Route) -> NodeFn:
    """``fn``, returning its update with where the turn goes next (``Command(goto=...)``), as
    ``route`` decides on the state after the update.

    The route sees only :data:`_ROUTE_KEYS` (each the update's value, else the state's). A node
    routing by its return spares the conditional edge's read of the state, which copies every
    channel of the state to read it.
    """

    async def step(state: TurnState, runtime: Runtime[Any], config: RunnableConfig) -> Command[str]:
        update = await fn(state, runtime, config)
        merged = {**state, **(update or {})}
        return Command(update=update, goto=route({k: merged[k] for k in _ROUTE_KEYS if k in merged}))  # type: ignore[arg-type]

    step.__name__ = step.__qualname__ = fn.__name__
    step.__doc__ = fn.__doc__
    return step


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
    routes = _routes(step_budget)
    makers = {"picker": make_picker, "tier_gate": make_tier_gate, "id_validation": make_id_validation,
              "propose": make_propose, "approval": make_approval, "execute": make_execute,
              "naturalize": make_naturalize, "offer": make_offer}
    for name, make in makers.items():
        # Every node audits its own refusals, per call, and runs in a span of its own (graph.observe.tracing).
        fn = tracing.node(name, make(provider))
        if name in routes:
            builder.add_node(name, _routed(fn, routes[name]), destinations=EDGES[name])
        else:
            builder.add_node(name, fn)
    builder.add_edge(START, "picker")
    builder.add_edge("naturalize", END)
    return GovernedGraph.of(builder.compile(checkpointer=checkpointer, name="tollgate_turn"), provider, check_resume)
