"""Offer: a chat turn that spent its step budget offers to continue in the background.

Reached when a step ends with the budget spent (the model was still calling tools). The node builds the plan itself, from server facts only: the turn's request text, the
thread id and a run key derived from both; the model takes no part. The plan then goes
through propose and approval like any write, so the person decides. Nothing is offered on
channels without an approvals inbox (a background run, Studio) or when the offer tool is off.
"""

from __future__ import annotations

from typing import Any, Final

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from tollgate.graph.background.offer import CONTINUE_ACTION
from tollgate.graph.background.store import new_run_id
from tollgate.graph.ledger.audit import AuditRecord, append_audit
from tollgate.graph.services import Services, ServicesProvider
from tollgate.graph.state import Context, Plan, TurnState
from tollgate.nodes._common import seal, thread_id_of
from tollgate.policies.approval import args_hash
from tollgate.policies.arguments import validate_args
from tollgate.tools.registry import function_name

__all__ = ["OFFER_CALL_PREFIX", "make_offer"]

_TOOL: Final = "background"
OFFER_CALL_PREFIX: Final = "offer_"
"""The call id prefix of the server's own background offer (the turn ends once it is decided)."""
_CHANNELS: Final = frozenset({"chat", "cli"})


def _offer_plan(svc: Services, state: TurnState, ctx: Context, thread_id: str, turn_id: str) -> Plan | None:
    """The server's own call continuing the turn in the background, sealed; ``None`` where none is
    offered (a channel without an approvals inbox, the offer tool off, a request too long to carry)."""
    spec = svc.registry.action(_TOOL, CONTINUE_ACTION)
    if spec is None or ctx.channel not in _CHANNELS:
        return None
    human = next((m for m in reversed(state.get("messages") or []) if isinstance(m, HumanMessage)), None)
    if human is None or not turn_id:
        return None
    raw = {
        "request": human.text,
        "origin_thread": thread_id,
        "run_key": new_run_id(derive_from=(svc.key(), f"offer|{thread_id}|{turn_id}")),
    }
    verdict = validate_args(spec.args, raw)
    if verdict.value is None:
        return None
    args = verdict.value.model_dump(mode="json")
    return seal(svc, Plan(
        call_id=f"{OFFER_CALL_PREFIX}{turn_id}", tool=_TOOL, action=CONTINUE_ACTION, args=args,
        args_hash=args_hash(args), proposed_at=int(svc.clock().timestamp()), verdict="propose",
    ), ctx, thread_id, turn_id, purpose="server")


def make_offer(provider: ServicesProvider) -> Any:
    """Build the offer node."""

    async def offer(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        svc = await provider()
        thread_id = thread_id_of(config)
        turn_id = state.get("turn_id", "")
        plan = _offer_plan(svc, state, runtime.context, thread_id, turn_id)
        # The budget stopping a turn is a governance decision like any other: audited, with the
        # offer it raises (or that none could be made).
        await append_audit(svc.db.pool, AuditRecord(
            owner_id=runtime.context.owner_id, stage="offer", decision="propose" if plan else "stop",
            reason="step_budget_exhausted", tool=_TOOL if plan else "", action=CONTINUE_ACTION if plan else "",
            args_hash=plan["args_hash"] if plan else "", thread_id=thread_id, turn_id=turn_id,
            detail={"steps": int(state.get("steps", 0))},
        ), now=svc.clock())
        if plan is None:
            return {}
        call = AIMessage(
            content="",
            tool_calls=[{"name": function_name(_TOOL, CONTINUE_ACTION), "args": plan["args"], "id": plan["call_id"],
                         "type": "tool_call"}],
        )
        return {"plans": [plan], "gate": None, "messages": [call]}

    return offer
