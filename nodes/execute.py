"""Execute: run the action for the context's owner, once.

Identity comes from the run context, arguments from the validated (and, for writes,
approved) plan. A write commits its idempotency-ledger row in the same transaction as its
effect, keyed by the approval id (or by thread, turn and call for the approval-free write),
so a replayed step returns the recorded result instead of writing again. Transient failures
retry (bounded, with jitter) only for idempotent actions. A failure is a result, not a crash.
List results replace the thread's recent list of their kind.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from graph import turn_db
from graph.audit import AuditRecord, record_decision
from graph.perimeter import governance_policy
from graph.services import Services, ServicesProvider
from graph.state import Context, Gate, Plan, RecentList, TurnState
from nodes._common import sink_for, thread_id_of
from policies.arguments import load_args
from policies.errors import EgressDenied, TollgateError, Transient
from policies.fencing import fence, new_nonce
from policies.governance import ActionFacts, govern
from policies.ids import bind_ids
from tools.registry import ActionResult, ActionSpec, ExecContext

__all__ = ["ledger_statement", "make_execute"]

_LEDGER_GET = "SELECT result FROM effects WHERE idem_key = %s AND owner_id = %s"
_LEDGER_PUT = "INSERT INTO effects (idem_key, owner_id, tool, action, result) VALUES (%s, %s, %s, %s, %s)"


def ledger_statement(key: str, owner_id: str) -> tuple[str, tuple[str, str]]:
    """The statement reading the effect-ledger row of ``key`` (its ``result``), for reading it ahead."""
    return _LEDGER_GET, (key, owner_id)


def _idem_key(state: TurnState, plan: Plan, thread_id: str) -> str:
    pending = state.get("pending")
    if pending is not None and pending.get("decision") in ("approve", "edit"):
        return pending["approval_id"]
    return f"{thread_id}:{state.get('turn_id', '')}:{plan['call_id']}"


async def _run_once(svc: Services, spec: ActionSpec, ctx: Context, plan: Plan, key: str | None) -> tuple[ActionResult, bool]:
    """One attempt; returns the result and whether it was a ledger replay.

    A write runs in one transaction with its ledger row; a read needs no transaction.
    """
    args = load_args(spec.args, plan["args"])
    try:
        if key is None:
            # A read: one statement or a few, no transaction round trips needed.
            async with turn_db.connection(svc.db.pool) as conn:
                return await spec.executor(ExecContext(ctx.owner_id, ctx.timezone, svc.clock(), conn), args), False
        async with turn_db.connection(svc.db.pool, transaction_next=True) as conn:
            turn = turn_db.current(svc.db.pool)
            read_ahead, row = turn.take_ledger(key, ctx.owner_id) if turn is not None else (False, None)
            async with turn_db.transaction(conn):
                if not read_ahead:
                    cur = await conn.execute(_LEDGER_GET, (key, ctx.owner_id))
                    row = await cur.fetchone()
                if row is not None:
                    return row["result"], True
                result = await spec.executor(ExecContext(ctx.owner_id, ctx.timezone, svc.clock(), conn, key), args)
                await conn.execute(_LEDGER_PUT, (key, ctx.owner_id, plan["tool"], plan["action"], json.dumps(result)))
    except (psycopg.OperationalError, psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected):
        raise Transient(f"{plan['tool']}.{plan['action']}") from None
    if svc.hooks.after_effect_commit is not None:
        svc.hooks.after_effect_commit(key)
    return result, False


async def _run(svc: Services, spec: ActionSpec, ctx: Context, plan: Plan, key: str | None) -> tuple[ActionResult, bool]:
    attempts = 3 if spec.idempotent else 1
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=wait_random_exponential(multiplier=0.05, max=1.0),
        retry=retry_if_exception_type(Transient),
        reraise=True,
    ):
        with attempt:
            return await _run_once(svc, spec, ctx, plan, key)
    raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover


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
    return ToolMessage(content=fence("tool_result", data, new_nonce()), tool_call_id=plan["call_id"])


async def _audit(
    svc: Services, ctx: Context, config: RunnableConfig, state: TurnState, plan: Plan, decision: str, reason: str,
    code: str, detail: dict[str, Any] | None = None,
) -> None:
    await record_decision(
        svc.db.pool,
        AuditRecord(
            owner_id=ctx.owner_id, stage="execute", decision=decision, reason=reason, code=code, tool=plan["tool"],
            action=plan["action"], args_hash=plan.get("args_hash", ""), thread_id=thread_id_of(config),
            turn_id=state.get("turn_id", ""), detail=detail or {},
        ),
        now=svc.clock(),
    )


def make_execute(provider: ServicesProvider) -> Any:
    """Build the execute node."""

    async def execute(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        svc = await provider()
        plan = state.get("plan")
        if plan is None:
            return {}
        spec = svc.registry.action(plan["tool"], plan["action"])
        if spec is None:
            return {"plan": None, "gate": Gate(verdict="refuse", reason="unknown_action", code="permission_denied")}
        ctx = runtime.context
        sink = sink_for(state, runtime)
        update: dict[str, Any] = {}
        if (state.get("pending") or {}).get("decision") == "edit":
            # Edited arguments get the same egress and DLP checks as the model's; a finding the
            # reviewer was never warned about refuses the edit instead of running it.
            check = govern(plan["tool"], plan["action"], plan["args"], ActionFacts(spec.args, spec.writes),
                           svc.registry.tier_map(), governance_policy(svc.settings))
            if check.verdict == "refuse" or (check.dlp and check.mode == "enforce"):
                reason = "edit_" + check.reason
                await _audit(svc, ctx, config, state, plan, "refuse", reason, check.code or "egress_denied",
                             check.audit_detail())
                sink.emit("error", code=check.code or "egress_denied", reason=reason)
                return {
                    "seq": sink.seq,
                    "plan": None,
                    "outcome": "refused",
                    "gate": Gate(verdict="refuse", reason=reason, code=check.code or "egress_denied",
                                 message="The edited details contain something I won't send (it looks like a secret "
                                         "or a blocked address), so nothing ran."),
                }
        if spec.writes and spec.tier == "allowlist":
            # The approval-free write re-checks its ids against the list right before writing.
            for field, kind in spec.id_fields.items():
                value = plan["args"].get(field)
                refs = value if isinstance(value, list) else [value]
                rows = (state.get("recent") or {}).get(kind, {}).get("rows", [])
                if value is not None and not bind_ids([str(r) for r in refs], [r["id"] for r in rows]).ok:
                    sink.emit("error", code="off_list_id", reason="recheck_failed", kind=kind)
                    await _audit(svc, ctx, config, state, plan, "clarify", "recheck_failed", "off_list_id")
                    return {
                        "seq": sink.seq,
                        "plan": None,
                        "outcome": "clarify",
                        "gate": Gate(verdict="clarify", reason="recheck_failed", code="off_list_id",
                                     message=f"I can only act on {kind} items from your latest list."),
                    }
        key = _idem_key(state, plan, thread_id_of(config)) if spec.writes else None
        sink.emit("tool_start", call_id=plan["call_id"], tool=plan["tool"], action=plan["action"])
        result: ActionResult | None = None
        error: TollgateError | None = None
        replayed = False
        try:
            result, replayed = await _run(svc, spec, ctx, plan, key)
        except TollgateError as exc:
            error = exc
        if error is not None:
            sink.emit("tool_end", call_id=plan["call_id"], tool=plan["tool"], action=plan["action"],
                      status="error", code=error.code,
                      **({"reason": error.reason} if isinstance(error, EgressDenied) else {}))
            update |= {"outcome": "failed", "gate": Gate(verdict="refuse", reason="execution_failed",
                                                          code=error.code, message=error.message)}
            reason = error.reason if isinstance(error, EgressDenied) else "execution_failed"
            await _audit(svc, ctx, config, state, plan, "failed", reason, error.code)
        else:
            assert result is not None
            sink.emit("tool_end", call_id=plan["call_id"], tool=plan["tool"], action=plan["action"],
                      status="ok", summary=result["summary"], replayed=replayed)
            update["outcome"] = "executed" if spec.writes else "read"
            if result["kind"] == "list" and "list_kind" in result:
                update["recent"] = {
                    result["list_kind"]: RecentList(
                        rows=list(result.get("rows", [])),
                        turn_id=state.get("turn_id", ""),
                        listed_at=svc.clock().isoformat(),
                    )
                }
                update["lists_run"] = [*(state.get("lists_run") or []), f"{plan['tool']}.list"]
        return update | {
            "seq": sink.seq,
            "result": result,
            "steps": state.get("steps", 0) + 1,
            "messages": [_tool_message(plan, result, error)],
        }

    return execute
