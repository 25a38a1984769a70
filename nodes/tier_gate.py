"""The tier gate: one governance decision per call, from the server's own facts.

:func:`policies.governance.govern` decides from the registry's tier map and metadata, never
from the model: tier, then the closed schema (decoded again and clamped, so an edit or a
replay cannot slip past the bounds), then egress for URL arguments, then DLP. Each decision is
written to the audit log once, as codes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal


from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from tollgate.graph.ledger.audit import AuditRecord, append_audit
from tollgate.tools.perimeter.config import governance_policy
from tollgate.graph.services import ServicesProvider
from tollgate.graph.state import Context, Plan, TurnState
from tollgate.nodes.flow_check import carried_by, is_outbound, outbound_values
from tollgate.nodes.shown import shown_to_model
from tollgate.policies.provenance import Shown
from tollgate.nodes._common import NotRun, finalized, not_run, runs_unasked, seal, sink_for, thread_id_of, with_calls
from tollgate.policies.dlp import KIND_LABELS, scan_across
from tollgate.policies.governance import ActionFacts, govern

__all__ = ["make_tier_gate"]


def _refusal_message(tool: str, action: str, reason: str, dlp: tuple[str, ...]) -> str:
    if reason == "outbound_data":
        return ("I won't send that out: it copies what your data or a third party showed me, or contact "
                "details you didn't type. Nothing was sent.")
    if reason == "dlp_finding":
        what = ", ".join(KIND_LABELS.get(k, k) for k in dlp)
        return f"I won't send that: it looks like it contains {what}. Nothing was sent or changed."
    if reason in ("operator_only", "blocklisted", "hard_delete", "unclassified", "unknown_action"):
        return f"I can't run {tool} {action.replace('_', ' ')} from here, so nothing was changed."
    return "I can't reach that address from here, so nothing was fetched or changed."


def make_tier_gate(provider: ServicesProvider) -> Any:
    """Build the tier gate node: each call of the step is decided on its own.

    A refused call gets an error tool message with the reason (the model sees it at the next
    step) and a record in the turn's calls; it never blocks the step's other calls.
    """

    async def tier_gate(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        svc = await provider()
        plans = state.get("plans") or []
        if not plans:
            return {}
        ctx = runtime.context
        thread_id = thread_id_of(config)
        turn_id = state.get("turn_id", "")
        sink = sink_for(state, runtime)
        kept: list[Plan] = []
        done: list[NotRun] = []
        shown: Shown | None = None  # what the model was shown: gathered once, for the first outbound read
        policy = governance_policy(svc.settings)
        # What the thread sent out (across turns, for DLP's joined scan), then what this step will send.
        sent = list(state.get("sent_out") or [])
        for plan in plans:
            spec = svc.registry.action(plan["tool"], plan["action"])
            facts = ActionFacts(spec.args, spec.effect) if spec is not None else None
            decision = govern(plan["tool"], plan["action"], plan["args"], facts, svc.registry.tier_map(), policy)
            flow: dict[str, Any] = {}
            mode = svc.settings.outbound_flow
            outbound = decision.verdict == "execute" and decision.args is not None and is_outbound(svc, plan)
            if outbound and decision.mode == "enforce":
                values = outbound_values(svc, {**plan, "args": decision.args})  # type: ignore[typeddict-item]
                split = scan_across(sent, values, policy.dlp)
                if not split.clean:  # a secret split over this call and the one before it
                    decision = replace(decision, verdict="refuse", reason="dlp_finding", code="egress_denied",
                                       dlp=split.kinds, dlp_fields=("(across calls)",))
                    outbound = False
                else:
                    sent += values
            if outbound and mode != "off":
                if shown is None:
                    shown = await shown_to_model(svc, state, thread_id)
                out = carried_by(svc, {**plan, "args": decision.args}, shown, state)  # type: ignore[typeddict-item]
                if not out.clean:
                    # An outbound read that carries what the model was shown is a write of that data.
                    flow = {"sources": list(out.sources), "contacts": out.contacts}
                    decision = replace(decision, verdict="propose" if mode == "approve" else "refuse",
                                       reason="outbound_data", code=None if mode == "approve" else "egress_denied")
            rule = runs_unasked(svc, ctx, plan["tool"], plan["action"], decision) or ""
            detail = decision.audit_detail() | ({"flow_sources": flow["sources"], "flow_contacts": flow["contacts"]}
                                                if flow else {})
            await append_audit(
                svc.db.pool,
                AuditRecord(
                    owner_id=ctx.owner_id, stage="gate", decision="execute" if rule else decision.verdict,
                    reason=f"approval_rule:{rule}"[:200] if rule else decision.reason,
                    code=decision.code or "", tool=plan["tool"], action=plan["action"], args_hash=decision.args_hash,
                    thread_id=thread_id, turn_id=turn_id, mode=decision.mode, detail=detail,
                ),
                now=svc.clock(),
            )
            writes = spec is not None and spec.writes
            if decision.verdict == "refuse":
                code = decision.code or "permission_denied"
                sink.emit("error", code=code, reason=decision.reason, tool=plan["tool"], action=plan["action"])
                message = _refusal_message(plan["tool"], plan["action"], decision.reason, decision.dlp)
                done.append(not_run(plan, "refused", writes=writes, code=code, message=message))
                continue
            if decision.verdict == "clarify" or decision.args is None:
                done.append(not_run(plan, "clarify", writes=writes, code="invalid_args",
                                    message="Those details aren't valid, so I did nothing. Could you rephrase?"))
                continue
            verdict: Literal["execute", "propose"] = "execute" if rule else decision.verdict  # type: ignore[assignment]
            marks: dict[str, Any] = {"verdict": verdict, **({"policy_rule": rule} if rule else {}),
                                     **({"flow": flow} if flow else {})}
            if spec is not None and not spec.id_fields:
                # A call that carries no ids has nothing to bind: its arguments are final here, so the
                # gate seals them as id validation would, and the call goes straight on: a read to
                # execute (DESIGN's "read (allowlist) -> execute"), a write to propose. Anything with
                # ids passes id validation.
                proposing = verdict == "propose"
                final = finalized(plan, decision.args, decision.args_hash,
                                  proposed_at=int(svc.clock().timestamp()) if proposing else None)
                kept.append(seal(svc, final | marks, ctx, thread_id, turn_id, purpose="gate"))  # type: ignore[arg-type]
            else:
                unsealed = {k: v for k, v in plan.items() if k not in ("args_hash", "seal")}
                kept.append(unsealed | {"args": decision.args} | marks)  # type: ignore[arg-type]
        return {"plans": kept, "seq": sink.seq, "gate": None} | with_calls(state, done)

    return tier_gate
