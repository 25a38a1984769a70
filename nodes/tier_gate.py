"""The tier gate: one governance decision per call, from the server's own facts.

:func:`policies.governance.govern` decides from the registry's tier map and metadata, never
from the model: tier, then the closed schema (decoded again and clamped, so an edit or a
replay cannot slip past the bounds), then egress for URL arguments, then DLP. Each decision is
written to the audit log once, as codes.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from graph.audit import AuditRecord, append_audit
from graph.perimeter import governance_policy
from graph.services import ServicesProvider
from graph.state import Context, Gate, Plan, TurnState
from nodes._common import finalized, seal, sink_for, thread_id_of
from policies.dlp import KIND_LABELS
from policies.governance import ActionFacts, govern

__all__ = ["make_tier_gate"]


def _refusal_message(tool: str, action: str, reason: str, dlp: tuple[str, ...]) -> str:
    if reason == "dlp_finding":
        what = ", ".join(KIND_LABELS.get(k, k) for k in dlp)
        return f"I won't send that: it looks like it contains {what}. Nothing was sent or changed."
    if reason in ("operator_only", "blocklisted", "hard_delete", "unclassified", "unknown_action"):
        return f"I can't run {tool} {action.replace('_', ' ')} from here, so nothing was changed."
    return "I can't reach that address from here, so nothing was fetched or changed."


def make_tier_gate(provider: ServicesProvider) -> Any:
    """Build the tier gate node."""

    async def tier_gate(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        svc = await provider()
        plan = state.get("plan")
        if plan is None:
            return {}
        spec = svc.registry.action(plan["tool"], plan["action"])
        facts = ActionFacts(spec.args, spec.effect) if spec is not None else None
        decision = govern(
            plan["tool"], plan["action"], plan["args"], facts, svc.registry.tier_map(), governance_policy(svc.settings)
        )
        await append_audit(
            svc.db.pool,
            AuditRecord(
                owner_id=runtime.context.owner_id, stage="gate", decision=decision.verdict, reason=decision.reason,
                code=decision.code or "", tool=plan["tool"], action=plan["action"], args_hash=decision.args_hash,
                thread_id=thread_id_of(config), turn_id=state.get("turn_id", ""), mode=decision.mode,
                detail=decision.audit_detail(),
            ),
            now=svc.clock(),
        )
        if decision.verdict == "refuse":
            sink = sink_for(state, runtime)
            code = decision.code or "permission_denied"
            sink.emit("error", code=code, reason=decision.reason, tool=plan["tool"], action=plan["action"])
            return {
                "seq": sink.seq,
                "plan": None,
                "outcome": "refused",
                "gate": Gate(
                    verdict="refuse",
                    reason=decision.reason,
                    code=code,
                    tier=decision.tier,
                    message=_refusal_message(plan["tool"], plan["action"], decision.reason, decision.dlp),
                ),
            }
        if decision.verdict == "clarify" or decision.args is None:
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
        fresh: Plan
        if spec is not None and not spec.id_fields:
            # A call that carries no ids has nothing to bind: its arguments are final here, so the
            # gate seals them as id validation would, and the call goes straight on: a read to
            # execute (DESIGN's "read (allowlist) -> execute"), a write to propose. Anything with
            # ids passes id validation.
            proposing = decision.verdict == "propose"
            fresh = seal(svc, finalized(plan, decision.args, decision.args_hash,
                                        proposed_at=int(svc.clock().timestamp()) if proposing else None),
                         runtime.context, thread_id_of(config), state.get("turn_id", ""), purpose="gate")
        else:
            fresh = {k: v for k, v in plan.items() if k not in ("args_hash", "seal")} | {"args": decision.args}  # type: ignore[assignment]
        return {"plan": fresh, "gate": Gate(verdict=decision.verdict, reason=decision.reason, tier=decision.tier)}

    return tier_gate
