"""The approval interrupt: wait for a person, then check their decision before anything runs.

One request lists every action of the step that needs approval. Nothing before
``interrupt()`` has side effects, so re-running the node on resume is safe. The resume value
must carry the token of *this* pending request and one decision per action, in order; the
signature, expiry, caller (owner from the run context), thread, nonce, request hash, count and
each action's allowed decisions are all checked (:func:`check_decision`, which the runner also
applies before it resumes, so a bad resume is refused with a typed error and never reaches the
graph). A resume that fails any check leaves the whole request pending: the node asks again (a
fresh ``interrupt()`` whose payload's ``refused`` says why: code, message, attempts left; the
run says it too, as ``approval_decided`` ``refused``, an ``error`` and the card again), up to
:data:`_MAX_REFUSED` times; one more closes the request as ``refused`` by the server (not
``rejected``: nobody decided) and ends the turn saying so. LangChain's standard resume, ``{"decisions": [...]}`` without a token,
is taken as this request's: the server holds the token and checks its binding to the run's owner.

Each decision is recorded on its action's row (:mod:`graph.ledger.approvals`) before execute may run
it. Approved calls run; rejected ones come back to the model as error tool messages, and the
loop goes on. An edit goes back through decoding, the gate's bounds and id validation, and is
sealed anew; it is shown again as a new preview (a new approval) unless the decision asks to
run it (``run``). An expired request resolves honestly and ends the turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.errors import GraphInterrupt
from langgraph.types import interrupt

from tollgate.graph.events import EventSink
from tollgate.graph.governed import Waiting
from tollgate.graph.ledger import approvals
from tollgate.graph.ledger.audit import AuditRecord, append_audit
from tollgate.graph.services import Services, ServicesProvider
from tollgate.graph.state import Context, Gate, Pending, PendingAction, Plan, TurnState
from tollgate.nodes._common import NotRun, not_run, seal, thread_id_of, with_calls
from tollgate.nodes.id_validation import bind_plan_ids
from tollgate.nodes.propose import announcement
from tollgate.policies.approval import args_hash, check_binding, read_token
from tollgate.policies.arguments import validate_args
from tollgate.policies.errors import ApprovalExpired, ApprovalInvalid, ErrorCode, InvalidArgs, OffListId, TollgateError
from tollgate.policies.hitl import ApprovalRequest, EditDecision, RefusedResume, RejectDecision, parse_resume
from tollgate.tools.perimeter.config import governance_policy
from tollgate.policies.tiers import classify_tier
from tollgate.tools.registry import function_name

__all__ = ["Decided", "allowed_of", "check_decision", "check_resume", "make_approval", "waiting_actions"]

_MAX_REFUSED: Final = 5
"""Refused resumes a request survives in one run of the node; the next closes it as ``refused`` (by
the server: nobody decided, nothing ran), never ``rejected`` as if a person had."""


_SAID: Final = 3
"""Events a refused resume's run emits: the refusal, its error, the card asked again."""


@dataclass(frozen=True, slots=True)
class Decided:
    """A decision on one action that passed every check."""

    kind: Literal["approve", "edit", "reject", "expired"]
    """What the person decided (``expired``: the request ran out before they did)."""
    args: dict[str, Any] | None = None
    """For ``approve`` and ``edit``: the exact arguments that may run (or be shown again)."""
    message: str = ""
    """For ``reject``: the person's reason."""
    run: bool = True
    """For ``edit``: run the edited call now (``False``: show its new preview for approval first)."""


def waiting_actions(plans: list[Plan], pending: Pending) -> list[tuple[PendingAction, Plan]]:
    """The request's actions, in order, each with the call it would run; raises ``ApprovalInvalid``
    when the state no longer holds a call of the request."""
    by_call = {p["call_id"]: p for p in plans}
    actions = pending.get("actions")
    if not actions:  # a request of one action saved before requests could list several
        if len(plans) != 1:
            raise ApprovalInvalid("the request's call is no longer waiting")
        plan = plans[0]
        actions = [PendingAction(approval_id=pending["approval_id"], call_id=plan["call_id"], tool=plan["tool"],
                                 action=plan["action"], args_hash=plan["args_hash"], preview=pending["preview"])]
    out = []
    for action in actions:
        plan = by_call.get(action["call_id"])
        if plan is None or plan.get("args_hash") != action["args_hash"]:
            raise ApprovalInvalid("the request's calls are no longer waiting")
        out.append((action, plan))
    return out


def check_decision(
    svc: Services, ctx: Context, thread_id: str, plans: list[Plan], pending: Pending, thread: Mapping[str, Any],
    value: object, allowed: list[list[str]] | None = None,
) -> list[Decided]:
    """Check a resume ``value`` against the pending request; one :class:`Decided` per action, in order.

    Refusals raise a typed error, and the request then stays pending: :class:`ApprovalInvalid`
    for a malformed value, a count of decisions other than the request's actions, a foreign or
    tampered token, a decision the action's review config does not allow (``allowed``, per
    action) or an edit of another action; :class:`InvalidArgs` for edited arguments that break
    the schema or the tier; :class:`OffListId` for an edit naming an item the server never listed.
    """
    if isinstance(value, Mapping) and "token" not in value and "decisions" in value:
        # LangChain's standard HITL resume carries no token: the server holds this request's and
        # checks its binding (thread, nonce, and the owner of the run's context) as for any other.
        value = {**value, "token": pending["token"]}
    resume = parse_resume(value)
    actions = waiting_actions(plans, pending)
    try:
        claims = read_token(resume.token, svc.key(), now=svc.clock())
    except ApprovalExpired:
        claims = None
    first = actions[0][0]
    if claims is not None:
        check_binding(claims, thread_id=thread_id, owner_id=ctx.owner_id, tool=first["tool"], action=first["action"],
                      hash_=pending.get("args_hash", first["args_hash"]), nonce=pending["approval_id"])
    elif resume.token != pending["token"]:
        raise ApprovalInvalid("token is not for the pending approval")
    if len(resume.decisions) != len(actions):
        raise ApprovalInvalid(f"the request lists {len(actions)} action(s): send one decision for each, in order")
    if claims is None:
        return [Decided("expired") for _ in actions]
    out: list[Decided] = []
    for index, ((_, plan), decision) in enumerate(zip(actions, resume.decisions, strict=True)):
        name = function_name(plan["tool"], plan["action"])
        if allowed is not None and index < len(allowed) and decision.type not in allowed[index]:
            raise ApprovalInvalid(f"{name} allows only {', '.join(allowed[index])}")
        out.append(_checked(svc, plan, thread, decision, ctx.owner_id))
    return out


def _checked(svc: Services, plan: Plan, thread: Mapping[str, Any], decision: Any, owner_id: str) -> Decided:
    if isinstance(decision, RejectDecision):
        return Decided("reject", message=decision.message or "")
    if not isinstance(decision, EditDecision):
        return Decided("approve", args=plan["args"])
    name = function_name(plan["tool"], plan["action"])
    if decision.edited_action.name != name:
        raise ApprovalInvalid("an edit can change the details of the action, not the action")
    spec = svc.registry.action(plan["tool"], plan["action"])
    approvable = governance_policy(svc.settings).approvable_destructive
    if spec is None or classify_tier(plan["tool"], plan["action"], svc.registry.tier_map(), spec.effect,
                                     approvable).run != "propose":
        raise InvalidArgs(name, ["the action can no longer be edited"])
    checked = validate_args(spec.args, decision.edited_action.args)
    if checked.value is None:
        raise InvalidArgs(name, list(checked.violations))
    args = checked.value.model_dump(mode="json", exclude_none=True)
    bound, failure, kind = bind_plan_ids(svc.registry, spec, args, thread, owner_id)
    if failure is not None:
        raise OffListId(kind, failure.refusal or "not_returned")
    return Decided("edit", args=bound, run=decision.run)


def check_resume(svc: Services, ctx: Context, thread_id: str, waiting: Waiting, value: object) -> list[Decided]:
    """:func:`check_decision` of ``value`` against what the thread waits on (the runner's check
    before it resumes, given to the graph by :func:`graph.turn.build_graph`)."""
    return check_decision(svc, ctx, thread_id, waiting.plans, waiting.pending, waiting.ids, value,
                          allowed_of(waiting.request))


def allowed_of(request: ApprovalRequest | None) -> list[list[str]] | None:
    """The decisions each action of ``request`` allows, in order."""
    if request is None:
        return None
    return [list(c["allowed_decisions"]) for c in request["review_configs"]]


def make_approval(provider: ServicesProvider) -> Any:
    """Build the approval (interrupt) node."""

    async def approval(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        request = state.get("approval_request")
        plans = state.get("plans") or []
        pending = state.get("pending")
        if request is None or not plans or pending is None:
            return {}
        svc = await provider()
        ctx = runtime.context
        thread_id = thread_id_of(config)
        turn_id = state.get("turn_id", "")
        decided: list[Decided] | None = None
        asked: ApprovalRequest = request
        refusals = 0
        for attempt in range(_MAX_REFUSED + 1):
            try:
                value = interrupt(asked)
            except GraphInterrupt:
                if refusals:
                    # This run's resume was refused: it says so, then asks again (the earlier
                    # refusals, replayed on this re-run, were said by their own runs).
                    said = EventSink(runtime.stream_writer, turn_id, state.get("seq", 0) + _SAID * (refusals - 1))
                    said.emit("approval_decided", approval_id=pending["approval_id"], decision="refused",
                              **asked["refused"])
                    said.emit("error", reason="resume_refused", **asked["refused"])
                    said.emit("approval_required", **announcement(asked, ctx.timezone))
                raise
            try:
                decided = check_decision(svc, ctx, thread_id, plans, pending, state, value, allowed_of(request))
                break
            except TollgateError as exc:
                # The request stays pending; the question asked again says why the last answer was refused.
                refusals += 1
                asked = request | {"refused": RefusedResume(code=exc.code, message=exc.message,
                                                            attempts_left=_MAX_REFUSED - attempt)}
        sink = EventSink(runtime.stream_writer, turn_id, state.get("seq", 0) + _SAID * refusals)
        actions = waiting_actions(plans, pending)
        done: list[NotRun] = []

        async def audit(action: PendingAction, decision: str, reason: str, code: str = "", digest: str = "",
                        detail: dict[str, Any] | None = None) -> None:
            await append_audit(svc.db.pool, AuditRecord(
                owner_id=ctx.owner_id, stage="approval", decision=decision, reason=reason, code=code,
                tool=action["tool"], action=action["action"], args_hash=digest or action["args_hash"],
                thread_id=thread_id, turn_id=turn_id, mode=svc.settings.governance_mode, detail=detail or {},
            ), now=svc.clock())

        def closed_all(decision: Literal["expired", "invalid"], code: ErrorCode, reason: str, message: str,
                       status: Literal["expired", "refused"]) -> dict[str, Any]:
            for action, plan in actions:
                sink.emit("approval_decided", approval_id=action["approval_id"], decision=decision, code=code)
                done.append(not_run(plan, status, writes=True, code=code, message=message))
            return {
                "seq": sink.seq, "plans": [], "approval_request": None, "pending": pending | {"decision": decision},
                "gate": Gate(verdict="refuse", reason=reason, code=code, message=message),
            } | with_calls(state, done)

        if decided is None:  # every decision refused: close it rather than ask forever
            for action, _ in actions:
                await approvals.close(svc.db.pool, action["approval_id"], thread_id, "refused", "too_many_refusals",
                                      owner_id=ctx.owner_id)
                await audit(action, "invalid", "too_many_refusals", "approval_invalid")
            return closed_all("invalid", "approval_invalid", "too_many_refusals",
                              "That approval kept receiving invalid decisions, so the server closed it; nobody "
                              "decided and nothing ran.", "refused")
        if decided[0].kind == "expired":
            for action, _ in actions:
                await approvals.close(svc.db.pool, action["approval_id"], thread_id, "expired", "approval_expired",
                                      owner_id=ctx.owner_id)
                await audit(action, "expired", "expired", "approval_expired")
            what = f"{pending['preview'][:1].lower()}{pending['preview'][1:]}"
            return closed_all("expired", "approval_expired", "expired",
                              f"That approval expired, so I did not {what}. Nothing was changed.", "expired")
        kept: list[Plan] = []
        waiting_ids = {plan["call_id"] for _, plan in actions}
        for (action, plan), choice in zip(actions, decided, strict=True):
            approval_id = action["approval_id"]
            if choice.kind == "reject":
                await approvals.decide(svc.db.pool, approval_id, thread_id, "reject", owner_id=ctx.owner_id, via=ctx.channel)
                await audit(action, "reject", "rejected")
                sink.emit("approval_decided", approval_id=approval_id, decision="reject")
                note = f" You said: “{choice.message}”" if choice.message else ""
                done.append(not_run(
                    plan, "rejected", writes=True, code="rejected", message=f"OK, I won't do that; nothing was changed.{note}",
                    told="the person reviewing it rejected it; nothing ran."
                         + (f" Their reason: {choice.message}" if choice.message else "")))
                continue
            assert choice.args is not None
            digest = args_hash(choice.args)
            if choice.kind == "edit" and not choice.run:
                # The edited call is shown again as a new preview; this request's action is closed.
                await approvals.close(svc.db.pool, approval_id, thread_id, "superseded", "edited", owner_id=ctx.owner_id)
                await audit(action, "edit", "edited_for_review", digest=digest, detail={"edited": True})
                sink.emit("approval_decided", approval_id=approval_id, decision="edit")
                revised: Plan = {**plan, "args": choice.args, "args_hash": digest,  # type: ignore[typeddict-item]
                                 "revision": plan.get("revision", 0) + 1, "proposed_at": int(svc.clock().timestamp())}
                kept.append(seal(svc, revised, ctx, thread_id, turn_id, purpose="gate"))
                continue
            if not await approvals.decide(svc.db.pool, approval_id, thread_id, choice.kind, digest, owner_id=ctx.owner_id,
                                          via=ctx.channel):
                await audit(action, "invalid", "not_pending", "approval_invalid")
                sink.emit("approval_decided", approval_id=approval_id, decision="invalid", code="approval_invalid")
                done.append(not_run(
                    plan, "refused", writes=True, code="approval_invalid",
                    message="That approval is no longer pending (it expired or was replaced), so nothing ran."))
                continue
            edited = choice.kind == "edit"
            await audit(action, choice.kind, "edited" if edited else "approved", digest=digest,
                        detail={"edited": True} if edited else None)
            sink.emit("approval_decided", approval_id=approval_id, decision=choice.kind)
            approved: Plan = {**plan, "approval_id": approval_id}  # type: ignore[typeddict-item]
            if edited:
                approved = seal(svc, {**approved, "args": choice.args, "args_hash": digest, "edited": True},  # type: ignore[typeddict-item]
                                ctx, thread_id, turn_id, purpose="gate")
            kept.append(approved)
        others = [p for p in plans if p["call_id"] not in waiting_ids]
        return {
            "seq": sink.seq,
            "approval_request": None,
            "pending": pending | {"decision": decided[0].kind},
            "plans": others + kept,
            "gate": None,
        } | with_calls(state, done)

    return approval
