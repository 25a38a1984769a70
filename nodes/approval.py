"""The approval interrupt: wait for a person, then check their decision before anything runs.

Nothing before ``interrupt()`` has side effects, so re-running the node on resume is safe.
The resume value must carry the token of *this* pending request; the signature, expiry,
caller (owner from the run context), thread, nonce and args hash are all checked. An edit
goes back through decoding, the tier gate's bounds and id validation before it may run. An
expired request resolves as rejected; anything invalid is refused and nothing runs.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from graph.approvals import record_decided
from graph.services import ServicesProvider
from graph.state import Context, Gate, TurnState
from nodes._common import sink_for, thread_id_of
from nodes.id_validation import bind_plan_ids
from policies.approval import args_hash, check_binding, read_token
from policies.arguments import validate_args
from policies.errors import ApprovalExpired, ApprovalInvalid, ErrorCode
from policies.hitl import EditDecision, RejectDecision, parse_resume
from policies.honesty import Outcome
from policies.tiers import classify_tier
from tools.registry import function_name

__all__ = ["make_approval"]


def make_approval(provider: ServicesProvider) -> Any:
    """Build the approval (interrupt) node."""

    async def approval(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        request = state.get("approval_request")
        plan = state.get("plan")
        pending = state.get("pending")
        if request is None or plan is None or pending is None:
            return {}
        value = interrupt(request)

        svc = await provider()
        sink = sink_for(state, runtime)

        async def decided(decision: str, **extra: Any) -> None:
            """Announce the decision and close the listed request (see :mod:`graph.approvals`)."""
            sink.emit("approval_decided", approval_id=pending["approval_id"], decision=decision, **extra)
            await record_decided(svc.db.pool, decision, thread_id_of(config))

        async def closed(
            decision: Literal["expired", "invalid"], code: ErrorCode, reason: str, message: str, outcome: Outcome
        ) -> dict[str, Any]:
            await decided(decision, code=code)
            return {
                "seq": sink.seq,
                "plan": None,
                "approval_request": None,
                "pending": pending | {"decision": decision},
                "outcome": outcome,
                "gate": Gate(verdict="refuse", reason=reason, code=code, message=message),
            }

        try:
            resume = parse_resume(value)
            claims = read_token(resume.token, svc.key(), now=svc.clock())
            check_binding(
                claims,
                thread_id=thread_id_of(config),
                owner_id=runtime.context.owner_id,
                tool=plan["tool"],
                action=plan["action"],
                hash_=plan["args_hash"],
                nonce=pending["approval_id"],
            )
        except ApprovalExpired:
            return await closed(
                "expired",
                "approval_expired",
                "expired",
                f"That approval expired, so I did not {pending['preview'][:1].lower()}{pending['preview'][1:]}. Nothing was changed.",
                "expired",
            )
        except ApprovalInvalid as exc:
            return await closed("invalid", "approval_invalid", exc.reason, "That approval was not valid, so nothing ran.", "refused")

        decision = resume.decisions[0]
        if isinstance(decision, RejectDecision):
            await decided("reject")
            note = f" You said: “{decision.message}”" if decision.message else ""
            return {
                "seq": sink.seq,
                "plan": None,
                "approval_request": None,
                "pending": pending | {"decision": "reject", "message": decision.message or ""},
                "outcome": "rejected",
                "gate": Gate(
                    verdict="refuse",
                    reason="rejected",
                    message=f"OK, I won't do that; nothing was changed.{note}",
                ),
            }
        if isinstance(decision, EditDecision):
            if decision.edited_action.name != function_name(plan["tool"], plan["action"]):
                return await closed(
                    "invalid", "approval_invalid", "edit_changes_action",
                    "An edit can change the details but not the action, so nothing ran.", "refused",
                )
            spec = svc.registry.action(plan["tool"], plan["action"])
            tier = classify_tier(plan["tool"], plan["action"], svc.registry.tier_map())
            checked = validate_args(spec.args, decision.edited_action.args) if spec is not None else None
            if spec is None or tier.run != "propose" or checked is None or checked.value is None:
                return await closed(
                    "invalid", "invalid_args", "edit_invalid",
                    "The edited details aren't valid, so nothing ran.", "refused",
                )
            args = checked.value.model_dump(mode="json", exclude_none=True)
            args, failure, kind = bind_plan_ids(spec, args, state.get("recent") or {})
            if failure is not None:
                return await closed(
                    "invalid", "off_list_id", "edit_off_list",
                    f"The edit names a {kind} item that isn't in your latest list, so nothing ran.", "refused",
                )
            await decided("edit")
            return {
                "seq": sink.seq,
                "plan": plan | {"args": args, "args_hash": args_hash(args)},
                "approval_request": None,
                "pending": pending | {"decision": "edit"},
                "gate": Gate(verdict="execute", reason="edited"),
            }
        await decided("approve")
        return {
            "seq": sink.seq,
            "approval_request": None,
            "pending": pending | {"decision": "approve"},
            "gate": Gate(verdict="execute", reason="approved"),
        }

    return approval
