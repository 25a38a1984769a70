"""Propose: build the approval request for a confirmation-tier call and announce it.

It renders the server's preview (a read), mints the token and emits ``approval_required``;
the interrupt itself lives in :mod:`nodes.approval`, so the interrupting node has nothing
before its ``interrupt()`` that a resume could repeat. The token is deterministic for the
turn (nonce derived from thread, turn, call and args hash; expiry from ``proposed_at``), so
a replayed node produces the same request.
"""

from __future__ import annotations

from datetime import UTC, datetime
from collections.abc import Mapping
from typing import Any, NoReturn, cast
from zoneinfo import ZoneInfo

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from psycopg import AsyncConnection

from graph import approvals
from graph.audit import AuditRecord, append_audit
from graph.perimeter import governance_policy
from graph.services import Services, ServicesProvider
from graph.state import Context, Gate, Pending, Plan, TurnState
from nodes._common import sink_for, thread_id_of
from policies.approval import ApprovalClaims, derive_nonce, mint_token
from policies.arguments import load_args
from policies.dlp import scan_values
from policies.errors import TollgateError
from policies.hitl import ApprovalRequest
from tools.registry import ActionSpec, function_name

__all__ = ["build_request", "make_propose"]


def build_request(plan: Plan, preview: str, claims: ApprovalClaims, token: str) -> ApprovalRequest:
    """The interrupt payload for ``plan``."""
    name = function_name(plan["tool"], plan["action"])
    return ApprovalRequest(
        action_requests=[{"name": name, "args": plan["args"], "description": preview}],
        review_configs=[{"action_name": name, "allowed_decisions": ["approve", "edit", "reject"]}],
        approval={
            "id": claims.nonce,
            "token": token,
            "args_hash": claims.args_hash,
            "expires_at": claims.expires_at.isoformat(),
            "tool": plan["tool"],
            "action": plan["action"],
        },
    )


def _generic_preview(spec: ActionSpec, args: dict[str, Any]) -> str:
    """For a write that normally needs no approval (DLP sent it here): what it is and its exact arguments."""
    fields = "; ".join(f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in sorted(args.items()))
    return f"{spec.description.rstrip('.')}.\n{fields}"


class _StoreNeeded(Exception):
    """A preview reached for the store during its store-free attempt."""


class _NoStore:
    """The connection of a preview's store-free attempt: any use of it ends the attempt."""

    def __getattr__(self, name: str) -> NoReturn:
        raise _StoreNeeded(name)


async def _render_preview(
    spec: ActionSpec, args: Any, ctx: Context, svc: Services, *, tool: str, database: bool,
    labels: Mapping[str, str] | None = None,
) -> str:
    """The preview, from the arguments alone when it can be, else from one read-only snapshot.

    Many previews ("Add the task ...") need no store: a first attempt runs with a connection
    that stops it at its first use, so those open no transaction. One that reads the store runs
    again in a read-only transaction, where it cannot write (a preview only reads, so running
    it again is safe).
    """
    render = spec.preview
    if render is None:
        raise ValueError(f"{spec.name} has no preview")
    if not database:
        return await render(svc.exec_context(ctx.owner_id, ctx.timezone, tool, None, labels=labels), args)
    try:
        no_store = cast("AsyncConnection[Any]", _NoStore())
        return await render(svc.exec_context(ctx.owner_id, ctx.timezone, tool, no_store, labels=labels), args)
    except _StoreNeeded:
        pass
    async with svc.db.pool.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION READ ONLY")
        return await render(svc.exec_context(ctx.owner_id, ctx.timezone, tool, conn, labels=labels), args)


def make_propose(provider: ServicesProvider) -> Any:
    """Build the propose node."""

    async def propose(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        svc = await provider()
        plan = state.get("plan")
        if plan is None or "args_hash" not in plan:
            return {}
        spec = svc.registry.action(plan["tool"], plan["action"])
        if spec is None or (spec.preview is None and not spec.writes):
            raise RuntimeError(f"confirmation action {plan['tool']}.{plan['action']} has no preview")
        ctx = runtime.context
        key = svc.key()
        thread_id = thread_id_of(config)
        sink = sink_for(state, runtime)
        try:
            args = load_args(spec.args, plan["args"])
            if spec.preview is None:
                preview = _generic_preview(spec, plan["args"])  # from the arguments alone: no statement
            else:
                found = svc.registry.tool(plan["tool"])
                labels = {row["id"]: row["label"] for listed in (state.get("recent") or {}).values()
                          for row in listed.get("rows", [])}
                preview = await _render_preview(spec, args, ctx, svc, tool=plan["tool"],
                                                database=found is not None and found.database, labels=labels)
        except TollgateError as exc:
            sink.emit("error", code=exc.code, message=exc.message)
            await append_audit(
                svc.db.pool,
                AuditRecord(
                    owner_id=ctx.owner_id, stage="propose", decision="refuse", reason="preview_failed", code=exc.code,
                    tool=plan["tool"], action=plan["action"], args_hash=plan["args_hash"], thread_id=thread_id,
                    turn_id=state.get("turn_id", ""),
                ),
                now=svc.clock(),
            )
            return {
                "seq": sink.seq,
                "plan": None,
                "outcome": "failed",
                "gate": Gate(verdict="refuse", reason="preview_failed", code=exc.code, message=exc.message),
            }
        # The warning is derived from the exact arguments that will run, like the preview itself.
        warning = scan_values(plan["args"], governance_policy(svc.settings).dlp).warning()
        if warning:
            preview = f"{warning}\n\n{preview}"
        claims = ApprovalClaims(
            thread_id=thread_id,
            owner_id=ctx.owner_id,
            tool=plan["tool"],
            action=plan["action"],
            args_hash=plan["args_hash"],
            exp=plan.get("proposed_at", int(svc.clock().timestamp())) + svc.settings.approval_ttl_seconds,
            nonce=derive_nonce(key, thread_id, state.get("turn_id", ""), plan["call_id"], plan["args_hash"]),
        )
        token = mint_token(claims, key)
        request = build_request(plan, preview, claims, token)
        local_expiry = datetime.fromtimestamp(claims.exp, UTC).astimezone(ZoneInfo(ctx.timezone))
        sink.emit(
            "approval_required",
            approval_id=claims.nonce,
            tool=plan["tool"],
            action=plan["action"],
            preview=preview,
            args=plan["args"],
            expires_at=local_expiry.isoformat(),
        )
        pending = Pending(
            approval_id=claims.nonce, token=token, expires_at=claims.expires_at.isoformat(), preview=preview
        )
        await approvals.list_pending(svc.db.pool, ctx.owner_id, thread_id, request)  # for the approval API, on every surface
        return {"seq": sink.seq, "pending": pending, "outcome": "proposed", "approval_request": request}

    return propose
