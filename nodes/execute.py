"""Execute: run the action for the context's owner, once, and only with its authority.

Identity comes from the run context, arguments from the plan. Before anything runs the node
checks its own authority instead of trusting how it was reached:

* the plan carries the gate's seal over this exact call (thread, owner, turn, call, tool,
  action, args hash): a plan written into the state by ``Command(update=...)``,
  ``update_state`` or a hand-edited checkpoint has none and runs nothing;
* :func:`policies.governance.govern` runs again (tier, schema, egress, DLP);
* a call that needs approval runs only if, in the effect's own transaction, a decided approval
  of this thread and owner approved arguments with exactly this hash
  (:func:`graph.ledger.approvals.claim`), which moves it to ``executing`` and, with the effect and its
  idempotency-ledger row, to ``executed``. An effect that fails or does not commit leaves
  ``failed`` behind, never ``approved``.

Every refusal is audited. Transient failures retry (bounded, with jitter) only for idempotent
actions. A failure is a result, not a crash. The result is made storable (third-party content
may hold anything) before it enters the state; list results replace the thread's recent list
of their kind, and the ids a result returns (rows, a read or created item) become bindable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import AsyncConnection
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from tollgate.graph.ledger import approvals, effects

from tollgate.graph.events import EventSink
from tollgate.graph.ledger.audit import AuditRecord, append_audit
from tollgate.graph.observe import tracing
from tollgate.tools.perimeter.config import governance_policy
from tollgate.graph.services import Services, ServicesProvider
from tollgate.graph.state import CallRecord, Context, Gate, Plan, RecentList, TurnState, outcome_of
from tollgate.graph.store import leases, owner_scope
from tollgate.nodes.flow_check import is_outbound, outbound_values
from tollgate.nodes._common import not_run, runs_unasked, sink_for, thread_id_of
from tollgate.nodes.id_validation import bind_plan_ids, refusal_message
from tollgate.policies.approval import verify_seal
from tollgate.policies.arguments import load_args
from tollgate.policies.errors import EgressDenied, OutcomeUnknown, PermissionDenied, TollgateError, Transient, Unavailable
from tollgate.policies.fencing import fence, new_nonce
from tollgate.policies.governance import ActionFacts, GovernanceDecision, govern
from tollgate.policies.storable import storable
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext

__all__ = ["make_execute"]



_log = logging.getLogger(__name__)


class ToolFailed(Unavailable):
    """A tool raised something outside the error taxonomy (a bug): nothing it did was committed."""

    def __init__(self, action: str) -> None:
        super().__init__(f"the tool behind {action!r}")
        self.message = f"{action} failed unexpectedly, so nothing was changed"


class _NoApproval(PermissionDenied):
    """The call needs an approval that no decided approval grants."""

    def __init__(self, action: str) -> None:
        super().__init__(action, "no decided approval for these exact arguments")


async def _call(spec: ActionSpec, plan: Plan, exec_ctx: ExecContext, args: Any) -> ActionResult:
    """The executor; a failure outside the error taxonomy (a tool's bug) becomes :class:`ToolFailed`.

    Raised inside the effect's transaction, so nothing the tool did is committed.
    """
    try:
        return await spec.executor(exec_ctx, args)
    except (TollgateError, psycopg.Error):
        raise
    except Exception as exc:
        _log.warning("tool %s.%s raised %s", plan["tool"], plan["action"], type(exc).__name__)
        raise ToolFailed(f"{plan['tool']}.{plan['action']}") from None


@asynccontextmanager
async def _read_connection(svc: Services, owner_id: str, database: bool) -> AsyncIterator[AsyncConnection[Any] | None]:
    """A pooled connection scoped to the owner, for a read of a tool that asked for one; none (and
    no pool request) otherwise."""
    if not database:
        yield None
        return
    async with owner_scope.owner_reads(svc.db.pool, owner_id) as conn:
        yield conn


def _context(
    svc: Services, ctx: Context, plan: Plan, conn: AsyncConnection[Any] | None, key: str | None = None
) -> ExecContext:
    return svc.exec_context(ctx.owner_id, ctx.timezone, plan["tool"], conn, key)


async def _claim(conn: AsyncConnection[Any], svc: Services, ctx: Context, plan: Plan, thread_id: str, key: str,
                 approval: str | None) -> None:
    """Inside the effect's first transaction: the approval moves to ``executing``, or nothing runs."""
    if approval is not None and not await approvals.claim(
        conn, approval, thread_id=thread_id, owner_id=ctx.owner_id, tool=plan["tool"], action=plan["action"],
        args_hash=plan["args_hash"],
    ):
        raise _NoApproval(f"{plan['tool']}.{plan['action']}")
    if svc.hooks.inside_effect is not None:
        await svc.hooks.inside_effect(key)


async def _run_once(
    svc: Services, spec: ActionSpec, ctx: Context, plan: Plan, thread_id: str, key: str | None, approval: str | None
) -> tuple[ActionResult, bool, bool]:
    """One attempt; returns the result (made storable), whether it was a ledger replay and whether
    making it storable changed it.

    A read runs in a transaction scoped to the owner. A local write runs in one fenced transaction with its
    authority check, its ledger row and its approval's move to ``executed``; a remote write is
    recorded in two (:func:`_run_remote`).
    """
    args = load_args(spec.args, plan["args"])
    tool = svc.registry.tool(plan["tool"])
    # An owner whose store is their own server reads it without holding one of the pool's connections.
    database = tool is not None and tool.database and not spec.leaves_tollgate(ctx.owner_id)
    try:
        if key is None:
            async with _read_connection(svc, ctx.owner_id, database) as conn:
                cleaned = storable(await _call(spec, plan, _context(svc, ctx, plan, conn), args))
                return cleaned.value, False, cleaned.changed
        if _is_remote(svc, spec, plan, ctx.owner_id):
            return await _run_remote(svc, spec, ctx, plan, thread_id, key, approval, args)
        async with leases.fenced_transaction(svc.db.pool, owner=ctx.owner_id) as conn:
            await _claim(conn, svc, ctx, plan, thread_id, key, approval)
            if approval is None:
                entry = await effects.replay(conn, key, ctx.owner_id)
                if entry is not None and entry.result is not None:
                    return entry.result, True, False
            cleaned = storable(await _call(spec, plan, _context(svc, ctx, plan, conn, key), args))
            result = cleaned.value
            await effects.record(conn, key, ctx.owner_id, plan["tool"], plan["action"], result)
            if approval is not None:
                await approvals.finish(conn, approval)
    except (psycopg.OperationalError, psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected):
        raise Transient(f"{plan['tool']}.{plan['action']}") from None
    if svc.hooks.after_effect_commit is not None:
        svc.hooks.after_effect_commit(key)
    return result, False, cleaned.changed


def _is_remote(svc: Services, spec: ActionSpec, plan: Plan, owner_id: str) -> bool:
    """Whether a write's effect leaves Tollgate: declared so (for every owner, or this one), or its
    tool has no database to write to."""
    tool = svc.registry.tool(plan["tool"])
    return spec.leaves_tollgate(owner_id) or tool is None or not tool.database


def _ambiguous(error: TollgateError) -> bool:
    """Whether a failed remote call may still have happened (a bug in the tool, or no answer in time)."""
    return isinstance(error, ToolFailed | OutcomeUnknown) or (isinstance(error, EgressDenied) and error.reason == "timeout")


async def _run_remote(
    svc: Services, spec: ActionSpec, ctx: Context, plan: Plan, thread_id: str, key: str, approval: str | None, args: Any
) -> tuple[ActionResult, bool, bool]:
    """A write whose effect leaves Tollgate: its intent is committed first, its outcome after.

    An intent found from an earlier attempt that stopped in between is never run again: the
    tool's ``reconcile`` hook settles it (:func:`graph.ledger.effects.settle`), and an outcome it cannot
    establish raises :class:`OutcomeUnknown`. Right before the call the turn's lease is renewed, or
    :class:`~graph.store.leases.LeaseLost` is raised and nothing is sent: a process that stalled
    past its lease never sends after its successor settled the intent as not run, and the call
    (bounded by ``egress_timeout_seconds``) starts with a whole lease's time ahead of it.
    """
    action = f"{plan['tool']}.{plan['action']}"
    async with leases.fenced_transaction(svc.db.pool, owner=ctx.owner_id) as conn:
        await _claim(conn, svc, ctx, plan, thread_id, key, approval)
        entry = await effects.replay(conn, key, ctx.owner_id)
        if entry is None:
            await effects.begin(conn, key, ctx.owner_id, plan["tool"], plan["action"], plan["args"])
    if entry is not None:
        state = entry.state
        if state == "intent":
            state = await effects.settle(svc, {"idem_key": key, "owner_id": ctx.owner_id, "tool": plan["tool"],
                                               "action": plan["action"], "args": plan["args"]}, timezone=ctx.timezone)
            entry = await _entry(svc, key, ctx.owner_id)
        if state == "done" and entry is not None and entry.result is not None:
            await _finish(svc, ctx.owner_id, approval)
            return entry.result, True, False
        if state == "failed":
            raise ToolFailed(action)
        raise OutcomeUnknown(action)
    if svc.hooks.before_remote_call is not None:
        await svc.hooks.before_remote_call(key)
    await _renewed_or_lost(svc)
    try:
        cleaned = storable(await _call(spec, plan, _context(svc, ctx, plan, None, key), args))
    except TollgateError as exc:
        async with leases.fenced(svc.db.pool, owner=ctx.owner_id) as conn:
            await effects.conclude(conn, key, ctx.owner_id, "unknown" if _ambiguous(exc) else "failed")
        raise OutcomeUnknown(action) if _ambiguous(exc) else exc from None
    async with leases.fenced_transaction(svc.db.pool, owner=ctx.owner_id) as conn:
        await effects.conclude(conn, key, ctx.owner_id, "done", cleaned.value)
        if approval is not None:
            await approvals.finish(conn, approval)
    if svc.hooks.after_effect_commit is not None:
        svc.hooks.after_effect_commit(key)
    return cleaned.value, False, cleaned.changed


async def _renewed_or_lost(svc: Services) -> None:
    """Renew the turn's lease now; :class:`~graph.store.leases.LeaseLost` when another holder took it."""
    lease = leases.current()
    if lease is not None and lease not in await leases.shared(svc.db.pool, svc.settings).renew([lease]):
        raise leases.LeaseLost(lease.thread_id, lease.fence)


async def _entry(svc: Services, key: str, owner_id: str) -> effects.Entry | None:
    async with owner_scope.owner_reads(svc.db.pool, owner_id) as conn:
        return await effects.replay(conn, key, owner_id)


async def _finish(svc: Services, owner_id: str, approval: str | None) -> None:
    if approval is not None:
        async with leases.fenced(svc.db.pool, owner=owner_id) as conn:
            await approvals.finish(conn, approval)


async def _run(
    svc: Services, spec: ActionSpec, ctx: Context, plan: Plan, thread_id: str, key: str | None, approval: str | None
) -> tuple[ActionResult, bool, bool]:
    # A remote write is never retried here: a second attempt would only settle its first.
    attempts = 3 if spec.idempotent and not spec.changes_state and not (
        spec.writes and _is_remote(svc, spec, plan, ctx.owner_id)) else 1
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=wait_random_exponential(multiplier=0.05, max=1.0),
        retry=retry_if_exception_type(Transient),
        reraise=True,
    ):
        with attempt:
            return await _run_once(svc, spec, ctx, plan, thread_id, key, approval)
    raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover


def returned_ids(result: ActionResult) -> dict[str, list[str]]:
    """The ids a result hands the thread, per kind: its rows' (``list_kind``) and its item's (``item_kind``)."""
    out: dict[str, list[str]] = {}
    if "list_kind" in result:
        out.setdefault(result["list_kind"], []).extend(
            str(row["id"]) for row in result.get("rows", []) if _is_id(row.get("id")))
    item = result.get("item")
    if "item_kind" in result and isinstance(item, dict) and _is_id(item.get("id")):
        out.setdefault(result["item_kind"], []).append(str(item["id"]))
    return out


def _is_id(value: Any) -> bool:
    """An id as a tool may return one: a string, or an integer (kept in the thread as its digits)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _tool_message(plan: Plan, result: ActionResult | None, error: TollgateError | None) -> ToolMessage:
    if error is not None:
        return ToolMessage(
            content=f"Failed ({error.code}): {error.message}", tool_call_id=plan["call_id"], status="error"
        )
    assert result is not None
    data: dict[str, Any] = {"summary": result["summary"]}
    if "rows" in result:
        data["rows"] = result["rows"]
    if "item" in result:
        data["item"] = result["item"]
    if "content" in result:
        data["content"] = result["content"]
    return ToolMessage(content=fence("tool_result", data, new_nonce()), tool_call_id=plan["call_id"])


async def _audit(
    svc: Services, ctx: Context, config: RunnableConfig, state: TurnState, plan: Plan, decision: str, reason: str,
    code: str, detail: dict[str, Any] | None = None,
) -> None:
    digest = plan.get("args_hash", "")
    await append_audit(
        svc.db.pool,
        AuditRecord(
            owner_id=ctx.owner_id, stage="execute", decision=decision, reason=reason, code=code,
            tool=str(plan.get("tool", ""))[:200], action=str(plan.get("action", ""))[:200],
            args_hash=digest if isinstance(digest, str) and len(digest) == 64 else "",
            thread_id=thread_id_of(config), turn_id=state.get("turn_id", ""), detail=detail or {},
        ),
        now=svc.clock(),
    )


def _authority(
    svc: Services, spec: ActionSpec, ctx: Context, thread_id: str, state: TurnState, plan: Plan
) -> tuple[GovernanceDecision | None, str]:
    """(the decision to run under, ``""``) or (``None``, why nothing may run)."""
    purpose = verify_seal(
        svc.key(), plan.get("seal"), thread_id=thread_id, owner_id=ctx.owner_id, turn_id=state.get("turn_id", ""),
        call_id=plan["call_id"], tool=plan["tool"], action=plan["action"], args_hash=plan.get("args_hash", ""),
        verdict=plan.get("verdict", ""),
    )
    if purpose is None:
        return None, "unsealed_plan"
    check = govern(plan["tool"], plan["action"], plan["args"], ActionFacts(spec.args, spec.effect),
                   svc.registry.tier_map(), governance_policy(svc.settings))
    if check.args_hash != plan["args_hash"]:
        return None, "args_changed"
    if check.verdict == "refuse" and purpose == "server" and check.reason == "operator_only":
        # A call the server built itself (the background offer): operator-only for the model,
        # it still runs only with its person's approval.
        return GovernanceDecision("propose", "server_call", check.tier, mode=check.mode, args=check.args,
                                  args_hash=check.args_hash), ""
    if check.verdict in ("refuse", "clarify"):
        return None, check.reason
    if check.verdict == "execute" and plan.get("verdict") == "propose":
        # The gate sent it to approval for a reason of the turn (data it carries out): it runs
        # only approved, whatever the call alone would need.
        return GovernanceDecision("propose", "sealed_for_approval", check.tier, mode=check.mode, args=check.args,
                                  args_hash=check.args_hash), ""
    rule = runs_unasked(svc, ctx, plan["tool"], plan["action"], check)
    if rule is not None and plan.get("policy_rule") == rule and "approval_id" not in plan:
        # The deployment's rule lets this exact call run unasked (the gate audited which rule).
        return GovernanceDecision("execute", f"approval_rule:{rule}"[:200], check.tier, mode=check.mode,
                                  args=check.args, args_hash=check.args_hash), ""
    return check, ""


def _may_run(
    svc: Services, spec: ActionSpec | None, ctx: Context, thread_id: str, state: TurnState, plan: Plan
) -> tuple[GovernanceDecision | None, str]:
    """(the decision to run ``plan`` under, ``""``) or (``None``, why it may not run now)."""
    if spec is None:
        return None, "unknown_action"
    check, refused = _authority(svc, spec, ctx, thread_id, state, plan)
    approval = plan.get("approval_id")
    if check is not None and check.verdict == "propose" and approval is None:
        return None, "no_approval"
    if check is not None and approval is not None and plan.get("edited") and check.dlp and check.mode == "enforce":
        # Edited arguments get the same DLP checks as the model's; a finding the reviewer was
        # never warned about refuses the edit instead of running it.
        return None, "edit_dlp_finding"
    return check, refused


async def _execute_one(
    svc: Services, ctx: Context, config: RunnableConfig, state: TurnState, plan: Plan, sink: EventSink
) -> tuple[CallRecord, ToolMessage]:
    """Run one call of the step under its own authority; its record and its tool message
    (:data:`~nodes._common.NotRun` when it did not run)."""
    thread_id = thread_id_of(config)
    spec = svc.registry.action(plan["tool"], plan["action"])
    check, refused = _may_run(svc, spec, ctx, thread_id, state, plan)
    approval = plan.get("approval_id")
    writes = spec is not None and spec.writes
    if check is None or spec is None:
        code = "egress_denied" if refused in ("edit_dlp_finding", "dlp_finding") else "permission_denied"
        await _audit(svc, ctx, config, state, plan, "refuse", refused, code)
        if approval is not None:
            await approvals.fail(svc.db.pool, approval, code, f"refused at execution ({refused})", owner_id=ctx.owner_id)
        sink.emit("error", code=code, reason=refused)
        return not_run(plan, "refused", writes=writes, code=code,
                       message="I couldn't confirm that this was allowed to run, so nothing ran."
                       if code == "permission_denied" else
                       "The edited details contain something I won't send (it looks like a secret or a "
                       "blocked address), so nothing ran.")
    needs_approval = check.verdict == "propose"
    if spec.writes and not needs_approval:
        # The approval-free write re-checks its ids against the thread's right before writing.
        _, failure, kind = bind_plan_ids(svc.registry, spec, plan["args"], state, ctx.owner_id)
        if failure is not None:
            sink.emit("error", code="off_list_id", reason="recheck_failed", kind=kind)
            await _audit(svc, ctx, config, state, plan, "clarify", "recheck_failed", "off_list_id")
            return not_run(plan, "clarify", writes=True, code="off_list_id",
                           message=refusal_message(failure.refusal or "not_returned", kind))
    key: str | None = None
    if spec.writes or needs_approval:
        key = approval if needs_approval else f"{thread_id}:{state.get('turn_id', '')}:{plan['call_id']}"
    sink.emit("tool_start", call_id=plan["call_id"], tool=plan["tool"], action=plan["action"])
    try:
        with tracing.tool_call(plan["tool"], plan["action"], check.tier, writes=spec.writes) as traced:
            if approval is not None:
                traced.set(approval_id=approval)
            result, replayed, sanitized = await _run(svc, spec, ctx, plan, thread_id, key,
                                                     approval if needs_approval else None)
            traced.outcome = "replayed" if replayed else "ok"
    except leases.LeaseLost:
        raise  # this turn lost its thread: it may not write, not even its failure
    except TollgateError as error:
        sink.emit("tool_end", call_id=plan["call_id"], tool=plan["tool"], action=plan["action"],
                  status="error", code=error.code,
                  **({"reason": error.reason} if isinstance(error, EgressDenied) else {}))
        reason = error.reason if isinstance(error, (EgressDenied, PermissionDenied, OutcomeUnknown)) else "execution_failed"
        if needs_approval and approval is not None:
            await approvals.fail(svc.db.pool, approval, error.code, error.message, owner_id=ctx.owner_id)
        await _audit(svc, ctx, config, state, plan, "failed", reason[:200], error.code)
        record = CallRecord(call_id=plan["call_id"], tool=plan["tool"], action=plan["action"], status="failed",
                            writes=spec.writes, code=error.code, message=error.message)
        return record, _tool_message(plan, None, error)
    sink.emit("tool_end", call_id=plan["call_id"], tool=plan["tool"], action=plan["action"],
              status="ok", summary=result["summary"], replayed=replayed,
              **({"sanitized": True} if sanitized else {}))
    if spec.changes_state:
        await _audit(svc, ctx, config, state, plan, "ran", "read_changed_state", "")
    record = CallRecord(call_id=plan["call_id"], tool=plan["tool"], action=plan["action"], status="ran",
                        writes=spec.writes, result=result)
    return record, _tool_message(plan, result, None)


_OUTBOUND_KEPT = 32
"""Outbound values a turn keeps for the flow check of its later calls."""


def runnable(plan: Plan) -> bool:
    """Whether execute runs ``plan`` now: the gate let it run, or a person approved it."""
    return "approval_id" in plan or plan.get("verdict") == "execute"


def make_execute(provider: ServicesProvider) -> Any:
    """Build the execute node: runs every call of the step that may run now.

    Reads run concurrently (they are independent by construction: the model issued them in one
    answer); writes run one after another, in the model's order. Calls waiting for approval stay.
    """

    async def execute(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        svc = await provider()
        plans = state.get("plans") or []
        ready = [p for p in plans if runnable(p)]
        ctx = runtime.context
        sink = sink_for(state, runtime)
        if not ready:
            # Only a route from outside the graph (``Command(goto="execute")``) gets here with calls
            # still waiting for their approval: they stay waiting, and the attempt is audited.
            for plan in plans:
                spec = svc.registry.action(plan["tool"], plan["action"])
                _, refused = _may_run(svc, spec, ctx, thread_id_of(config), state, plan)
                await _audit(svc, ctx, config, state, plan, "refuse", refused or "no_approval", "permission_denied")
                sink.emit("error", code="permission_denied", reason=refused or "no_approval")
            if not plans:
                return {}
            if any(p.get("verdict") == "propose" for p in plans):
                return {"seq": sink.seq}  # they go on waiting for their approval
            return {"seq": sink.seq, "plans": [], "gate": Gate(
                verdict="refuse", reason="no_authority", code="permission_denied",
                message="I couldn't confirm that this was allowed to run, so nothing ran.")}

        def writes(plan: Plan) -> bool:
            spec = svc.registry.action(plan["tool"], plan["action"])
            return spec is None or spec.writes

        reads = [p for p in ready if not writes(p)]
        outcomes: dict[str, tuple[CallRecord, ToolMessage]] = {}
        if reads:
            done = await asyncio.gather(*(_execute_one(svc, ctx, config, state, p, sink) for p in reads))
            outcomes.update({p["call_id"]: r for p, r in zip(reads, done, strict=True)})
        for plan in ready:
            if plan["call_id"] not in outcomes:
                outcomes[plan["call_id"]] = await _execute_one(svc, ctx, config, state, plan, sink)
        records = [outcomes[p["call_id"]][0] for p in ready]
        update: dict[str, Any] = {}
        recent: dict[str, RecentList] = {}
        known: dict[str, list[str]] = {}
        lists_run = list(state.get("lists_run") or [])
        for record in records:
            result = record.get("result")
            if result is None:
                continue
            if record["writes"]:
                lists_run = []  # a write changes what a list shows: the next list runs again
            elif result["kind"] == "list" and "list_kind" in result:
                kind = result["list_kind"]
                rows = list(result.get("rows", []))
                if kind in recent:  # a second list of the kind in one answer: which is "the 2nd one"?
                    seen = {row["id"] for row in recent[kind]["rows"]}
                    rows = [*recent[kind]["rows"], *(row for row in rows if row["id"] not in seen)]
                listed = RecentList(rows=rows, turn_id=state.get("turn_id", ""), listed_at=svc.clock().isoformat())
                if kind in recent:
                    listed["ambiguous"] = True
                recent[kind] = listed
                lists_run.append(f"{result['tool']}.list")
            for kind, ids in returned_ids(result).items():
                known.setdefault(kind, []).extend(ids)
        sent = [v for p, r in zip(ready, records, strict=True) if r["status"] == "ran" and is_outbound(svc, p)
                for v in outbound_values(svc, p)]
        if sent:
            update["outbound"] = [*(state.get("outbound") or []), *sent][-_OUTBOUND_KEPT:]
            update["sent_out"] = [*(state.get("sent_out") or []), *sent][-_OUTBOUND_KEPT:]
        if recent:
            update["recent"] = recent
        if known:
            update["known"] = known
        calls = [*(state.get("calls") or []), *records]
        if any(r["status"] == "refused" and r.get("code") == "permission_denied" for r in records):
            # A call without its authority came from outside the graph's own routing (a forged
            # plan, a route past its approval): the turn ends here instead of asking the model on.
            update["gate"] = Gate(verdict="refuse", reason="no_authority", code="permission_denied",
                                  message="I couldn't confirm that this was allowed to run, so nothing ran.")
        return update | {
            "seq": sink.seq,
            "plans": [p for p in plans if not runnable(p)],
            "calls": calls,
            "lists_run": lists_run,
            "outcome": outcome_of(calls),
            "messages": [outcomes[p["call_id"]][1] for p in ready],
        }

    return execute
