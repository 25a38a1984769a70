"""Id validation — the injection boundary.

Every id an action carries must be one the tools returned in this thread for its kind (a list
row, an item read, an item a write created); positions ("#2") are resolved from the latest
list of the kind here. Fail closed: a refusal
binds nothing and turns into a clarifying question.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from graph.services import ServicesProvider
from graph.state import Context, Gate, RecentList, TurnState
from nodes._common import finalized, seal, sink_for, thread_id_of
from policies.approval import args_hash
from policies.ids import IdBinding, Location, bind_ids, id_refs, with_ids
from tools.registry import ActionSpec, Registry

__all__ = ["bind_plan_ids", "make_id_validation", "refusal_message"]

_MESSAGES = {
    "no_list": "Which {kind} do you mean? Ask me to list your {kind} items first, then pick one by number.",
    "position_out_of_range": "That number isn't in your latest {kind} list. Which one do you mean?",
    "not_returned": "I can only act on {kind} items I've shown you in this conversation. Which one do you mean?",
    "bad_id": "That doesn't look like a {kind} id. Which one do you mean?",
    "duplicate": "The same {kind} item was named twice. Which ones do you mean?",
    "blank": "Which {kind} item do you mean?",
    "empty": "Which {kind} items do you mean?",
}


def refusal_message(refusal: str, kind: str) -> str:
    """The clarifying question for an id refusal of ``kind``."""
    return _MESSAGES.get(refusal, _MESSAGES["not_returned"]).format(kind=kind)


def bind_plan_ids(
    registry: Registry, spec: ActionSpec, args: dict[str, Any], thread: Mapping[str, Any]
) -> tuple[dict[str, Any], IdBinding | None, str]:
    """Bind every id field of ``args``; return new args, the failing binding (or None) and the kind's noun.

    ``thread`` is the thread's state (its ``recent`` lists and ``known`` ids). Every path of
    every id field is bound against the ids the thread was given, all or nothing.
    """
    recent: dict[str, RecentList] = thread.get("recent") or {}
    known: dict[str, list[str]] = thread.get("known") or {}
    bound: list[tuple[Location, str]] = []
    for path, kind_name in spec.id_fields.items():
        found = id_refs(args, path)
        if not found:
            continue
        kind = registry.id_kind(kind_name)
        latest = [row["id"] for row in (recent.get(kind_name) or {}).get("rows", [])]
        binding = bind_ids([ref for _, ref in found], latest, {*known.get(kind_name, ()), *latest},
                           accepts=kind.accepts, positions=kind.positions)
        if not binding.ok:
            return args, binding, kind.label
        bound += [(location, value) for (location, _), value in zip(found, binding.ids, strict=True)]
    return (with_ids(args, bound) if bound else args), None, ""


def make_id_validation(provider: ServicesProvider) -> Any:
    """Build the id validation node."""

    async def id_validation(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        svc = await provider()
        plan = state.get("plan")
        gate = state.get("gate")
        if plan is None or gate is None:
            return {}
        spec = svc.registry.action(plan["tool"], plan["action"])
        if spec is None:  # the gate already refused unknown actions; stay closed anyway
            return {"plan": None, "gate": Gate(verdict="refuse", reason="unknown_action", code="permission_denied")}
        args, failure, kind = bind_plan_ids(svc.registry, spec, plan["args"], state)
        if failure is not None and failure.refusal is not None:
            sink = sink_for(state, runtime)
            sink.emit("error", code="off_list_id", reason=failure.refusal, kind=kind)
            return {
                "seq": sink.seq,
                "plan": None,
                "outcome": "clarify",
                "gate": Gate(
                    verdict="clarify",
                    reason=failure.refusal,
                    code="off_list_id",
                    message=refusal_message(failure.refusal, kind),
                ),
            }
        proposed_at = int(svc.clock().timestamp()) if gate["verdict"] == "propose" else None
        final = finalized(plan, args, args_hash(args), proposed_at=proposed_at)
        return {"plan": seal(svc, final, runtime.context, thread_id_of(config), state.get("turn_id", ""), purpose="gate")}

    return id_validation
