"""Id validation — the injection boundary.

Every id an action carries must be a member of the server-recorded latest list of its kind
in this thread; positions ("#2") are resolved from that list here. Fail closed: a refusal
binds nothing and turns into a clarifying question.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from graph.services import ServicesProvider
from graph.state import Context, Gate, RecentList, TurnState
from nodes._common import finalized, seal, sink_for, thread_id_of
from policies.approval import args_hash
from policies.ids import IdBinding, bind_ids
from tools.registry import ActionSpec

__all__ = ["bind_plan_ids", "make_id_validation"]

_MESSAGES = {
    "no_list": "Which {kind} do you mean? Ask me to list your {kind} first, then pick one by number.",
    "position_out_of_range": "That number isn't in your latest {kind} list. Which one do you mean?",
    "not_in_latest_list": "I can only act on {kind} items from your latest list. Which one do you mean?",
    "duplicate": "The same {kind} item was named twice. Which ones do you mean?",
    "blank": "Which {kind} item do you mean?",
    "empty": "Which {kind} items do you mean?",
}


def bind_plan_ids(
    spec: ActionSpec, args: dict[str, Any], recent: dict[str, RecentList]
) -> tuple[dict[str, Any], IdBinding | None, str]:
    """Bind every id field of ``args``; return new args, the failing binding (or None) and its kind."""
    bound = dict(args)
    for field, kind in spec.id_fields.items():
        value = args.get(field)
        if value is None:
            continue
        refs = value if isinstance(value, list) else [value]
        ids = [row["id"] for row in (recent.get(kind) or {}).get("rows", [])]
        binding = bind_ids([str(r) for r in refs], ids)
        if not binding.ok:
            return args, binding, kind
        bound[field] = list(binding.ids) if isinstance(value, list) else binding.ids[0]
    return bound, None, ""


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
        args, failure, kind = bind_plan_ids(spec, plan["args"], state.get("recent") or {})
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
                    message=_MESSAGES[failure.refusal].format(kind=kind),
                ),
            }
        proposed_at = int(svc.clock().timestamp()) if gate["verdict"] == "propose" else None
        final = finalized(plan, args, args_hash(args), proposed_at=proposed_at)
        return {"plan": seal(svc, final, runtime.context, thread_id_of(config), state.get("turn_id", ""), purpose="gate")}

    return id_validation
