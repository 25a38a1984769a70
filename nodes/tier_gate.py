"""The tier gate: the server's map decides whether a call runs, waits for approval or is refused.

The tier comes from the registry's explicit map, never from the model. Arguments are decoded
again here (clamping is idempotent), so an edit or a replay cannot slip past the bounds.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.services import ServicesProvider
from graph.state import Context, Gate, TurnState
from nodes._common import sink_for
from policies.arguments import validate_args
from policies.tiers import classify_tier

__all__ = ["make_tier_gate"]


def make_tier_gate(provider: ServicesProvider) -> Any:
    """Build the tier gate node."""

    async def tier_gate(state: TurnState, runtime: Runtime[Context]) -> dict[str, Any]:
        svc = await provider()
        plan = state.get("plan")
        if plan is None:
            return {}
        verdict = classify_tier(plan["tool"], plan["action"], svc.registry.tier_map())
        if verdict.run == "refuse":
            sink = sink_for(state, runtime)
            sink.emit("error", code="permission_denied", reason=verdict.reason, tool=plan["tool"], action=plan["action"])
            return {
                "seq": sink.seq,
                "plan": None,
                "outcome": "refused",
                "gate": Gate(
                    verdict="refuse",
                    reason=verdict.reason,
                    code="permission_denied",
                    tier=verdict.tier,
                    message=f"I can't run {plan['tool']} {plan['action'].replace('_', ' ')} from here, so nothing was changed.",
                ),
            }
        spec = svc.registry.action(plan["tool"], plan["action"])
        checked = validate_args(spec.args, plan["args"]) if spec is not None else None
        if checked is None or checked.value is None:
            return {
                "plan": None,
                "outcome": "clarify",
                "gate": Gate(
                    verdict="clarify",
                    reason="invalid_args",
                    code="invalid_args",
                    message="Those details aren't valid, so I did nothing. Could you rephrase?",
                ),
            }
        args = checked.value.model_dump(mode="json", exclude_none=True)
        return {
            "plan": plan | {"args": args},
            "gate": Gate(verdict=verdict.run, reason=verdict.reason, tier=verdict.tier),
        }

    return tier_gate
