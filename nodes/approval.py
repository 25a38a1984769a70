"""The approval interrupt: wait for a person, then check their decision before anything runs.

Nothing before ``interrupt()`` has side effects, so re-running the node on resume is safe. The
resume value must carry the token of *this* pending request; the signature, expiry, caller
(owner from the run context), thread, nonce and args hash are all checked
(:func:`check_decision`, which the runner also applies before it resumes, so a bad resume is
refused with a typed error and never reaches the graph). A decision that fails its checks
leaves the request pending: the node asks again (a fresh ``interrupt()``), up to
:data:`_MAX_REFUSED` times. An edit goes back through decoding, the gate's bounds and id
validation, and is sealed anew. The decision is recorded in the approvals table
(:mod:`graph.approvals`) before execute may run it; an expired request resolves honestly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from graph import approvals
from graph.services import Services, ServicesProvider
from graph.state import Context, Gate, Pending, Plan, TurnState
from nodes._common import seal, sink_for, thread_id_of
from nodes.id_validation import bind_plan_ids
from policies.approval import args_hash, check_binding, read_token
from policies.arguments import validate_args
from policies.errors import ApprovalExpired, ApprovalInvalid, ErrorCode, InvalidArgs, OffListId, TollgateError
from policies.hitl import EditDecision, RejectDecision, parse_resume
from policies.tiers import classify_tier
from tools.registry import function_name

__all__ = ["Decided", "check_decision", "make_approval"]

_MAX_REFUSED: Final = 5
"""Refused resumes a request survives in one node before it is closed as rejected."""


@dataclass(frozen=True, slots=True)
class Decided:
    """A decision that passed every check."""

    kind: Literal["approve", "edit", "reject", "expired"]
    """What the person decided (``expired``: the request ran out before they did)."""
    args: dict[str, Any] | None = None
    """For ``approve`` and ``edit``: the exact arguments that may run."""
    message: str = ""
    """For ``reject``: the person's reason."""


def check_decision(
    svc: Services, ctx: Context, thread_id: str, plan: Plan, pending: Pending, thread: Mapping[str, Any], value: object
) -> Decided:
    """Check a resume ``value`` against the pending request; raise a typed error to refuse it.

    Refusals (the request then stays pending): :class:`ApprovalInvalid` for a malformed value,
    a wrong count, a foreign or tampered token or an edit of another action;
    :class:`InvalidArgs` for edited arguments that break the schema or the tier;
    :class:`OffListId` for an edit naming an item the server never listed.
    """
    resume = parse_resume(value)
    try:
        claims = read_token(resume.token, svc.key(), now=svc.clock())
    except ApprovalExpired:
        claims = None
    if claims is not None:
        check_binding(claims, thread_id=thread_id, owner_id=ctx.owner_id, tool=plan["tool"], action=plan["action"],
                      hash_=plan["args_hash"], nonce=pending["approval_id"])
    elif resume.token != pending["token"]:
        raise ApprovalInvalid("token is not for the pending approval")
    decision = resume.decisions[0]
    if claims is None:
        return Decided("expired")
    if isinstance(decision, RejectDecision):
        return Decided("reject", message=decision.message or "")
    if not isinstance(decision, EditDecision):
        return Decided("approve", args=plan["args"])
    if decision.edited_action.name != function_name(plan["tool"], plan["action"]):
        raise ApprovalInvalid("an edit can change the details of the action, not the action")
    spec = svc.registry.action(plan["tool"], plan["action"])
    if spec is None or classify_tier(plan["tool"], plan["action"], svc.registry.tier_map(), spec.effect).run != "propose":
        raise InvalidArgs(function_name(plan["tool"], plan["action"]), ["the action can no longer be edited"])
    checked = validate_args(spec.args, decision.edited_action.args)
    if checked.value is None:
        raise InvalidArgs(function_name(plan["tool"], plan["action"]), list(checked.violations))
    args = checked.value.model_dump(mode="json", exclude_none=True)
    bound, failure, kind = bind_plan_ids(svc.registry, spec, args, thread)
    if failure is not None:
        raise OffListId(kind, failure.refusal or "not_returned")
    return Decided("edit", args=bound)


def make_approval(provider: ServicesProvider) -> Any:
    """Build the approval (interrupt) node."""

    async def approval(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        request = state.get("approval_request")
        plan = state.get("plan")
        pending = state.get("pending")
        if request is None or plan is None or pending is None:
            return {}
        svc = await provider()
        ctx = runtime.context
        thread_id = thread_id_of(config)
        decided: Decided | None = None
        for _ in range(_MAX_REFUSED + 1):
            value = interrupt(request)
            try:
                decided = check_decision(svc, ctx, thread_id, plan, pending, state, value)
                break
            except TollgateError:
                continue  # the request stays pending: ask again
        sink = sink_for(state, runtime)

        def closed(decision: Literal["expired", "invalid", "reject"], code: ErrorCode | None, reason: str,
                   message: str, outcome: Any) -> dict[str, Any]:
            sink.emit("approval_decided", approval_id=pending["approval_id"], decision=decision,
                      **({"code": code} if code else {}))
            return {
                "seq": sink.seq,
                "plan": None,
                "approval_request": None,
                "pending": pending | {"decision": decision, **({"message": message} if decision == "reject" else {})},
                "outcome": outcome,
                "gate": Gate(verdict="refuse", reason=reason, **({"code": code} if code else {}), message=message),
            }

        if decided is None:  # every decision refused: close it rather than ask forever
            await approvals.decide(svc.db.pool, pending["approval_id"], thread_id, "reject")
            return closed("invalid", "approval_invalid", "too_many_refusals",
                          "That approval kept receiving invalid decisions, so I closed it; nothing ran.", "refused")
        if decided.kind == "expired":
            await approvals.close(svc.db.pool, pending["approval_id"], thread_id, "expired", "approval_expired")
            what = f"{pending['preview'][:1].lower()}{pending['preview'][1:]}"
            return closed("expired", "approval_expired", "expired",
                          f"That approval expired, so I did not {what}. Nothing was changed.", "expired")
        if decided.kind == "reject":
            await approvals.decide(svc.db.pool, pending["approval_id"], thread_id, "reject")
            note = f" You said: “{decided.message}”" if decided.message else ""
            return closed("reject", None, "rejected", f"OK, I won't do that; nothing was changed.{note}", "rejected")
        assert decided.args is not None
        digest = args_hash(decided.args)
        if not await approvals.decide(svc.db.pool, pending["approval_id"], thread_id, decided.kind, digest):
            return closed("invalid", "approval_invalid", "not_pending",
                          "That approval is no longer pending (it expired or was replaced), so nothing ran.", "refused")
        sink.emit("approval_decided", approval_id=pending["approval_id"], decision=decided.kind)
        update: dict[str, Any] = {
            "seq": sink.seq,
            "approval_request": None,
            "pending": pending | {"decision": decided.kind},
            "gate": Gate(verdict="execute", reason="edited" if decided.kind == "edit" else "approved"),
        }
        if decided.kind == "edit":
            edited: Plan = {**plan, "args": decided.args, "args_hash": digest}  # type: ignore[typeddict-item]
            update["plan"] = seal(svc, edited, ctx, thread_id, state.get("turn_id", ""), purpose="gate")
        return update

    return approval
