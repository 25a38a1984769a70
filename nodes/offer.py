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

from graph.background.offer import CONTINUE_ACTION
from graph.background.store import new_run_id
from graph.services import ServicesProvider
from graph.state import Context, Plan, TurnState
from nodes._common import seal, thread_id_of
from policies.approval import args_hash
from policies.arguments import validate_args
from tools.registry import function_name

__all__ = ["OFFER_CALL_PREFIX", "make_offer"]

_TOOL: Final = "background"
OFFER_CALL_PREFIX: Final = "offer_"
"""The call id prefix of the server's own background offer (the turn ends once it is decided)."""
_CHANNELS: Final = frozenset({"chat", "cli"})


def make_offer(provider: ServicesProvider) -> Any:
    """Build the offer node."""

    async def offer(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        svc = await provider()
        spec = svc.registry.action(_TOOL, CONTINUE_ACTION)
        if spec is None or runtime.context.channel not in _CHANNELS:
            return {}
        human = next((m for m in reversed(state.get("messages") or []) if isinstance(m, HumanMessage)), None)
        turn_id = state.get("turn_id", "")
        if human is None or not turn_id:
            return {}
        thread_id = thread_id_of(config)
        raw = {
            "request": human.text,
            "origin_thread": thread_id,
            "run_key": new_run_id(derive_from=(svc.key(), f"offer|{thread_id}|{turn_id}")),
        }
        verdict = validate_args(spec.args, raw)
        if verdict.value is None:
            return {}  # e.g. a request too long to carry: no offer, the turn just answers
        args = verdict.value.model_dump(mode="json")
        call_id = f"{OFFER_CALL_PREFIX}{turn_id}"
        plan = seal(svc, Plan(
            call_id=call_id, tool=_TOOL, action=CONTINUE_ACTION, args=args, args_hash=args_hash(args),
            proposed_at=int(svc.clock().timestamp()), verdict="propose",
        ), runtime.context, thread_id, turn_id, purpose="server")
        call = AIMessage(
            content="",
            tool_calls=[{"name": function_name(_TOOL, CONTINUE_ACTION), "args": args, "id": call_id, "type": "tool_call"}],
        )
        return {"plans": [plan], "gate": None, "messages": [call]}

    return offer
