"""Propose: build one approval request for the step's confirmation-tier calls and announce it.

It renders each call's server preview (a read), mints each action's token and the request's,
and emits ``approval_required`` (listing every action);
the interrupt itself lives in :mod:`nodes.approval`, so the interrupting node has nothing
before its ``interrupt()`` that a resume could repeat. The token is deterministic for the
turn (nonce derived from thread, turn, call and args hash; expiry from ``proposed_at``), so
a replayed node produces the same request.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, NoReturn, cast
from zoneinfo import ZoneInfo

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
import psycopg
from psycopg import AsyncConnection

from tollgate.graph.ledger import approvals

from tollgate.graph.ledger.audit import AuditRecord, append_audit
from tollgate.tools.perimeter.config import governance_policy
from tollgate.graph.services import Services, ServicesProvider
from tollgate.graph.state import Context, Pending, PendingAction, Plan, TurnState
from tollgate.graph.store import owner_scope
from tollgate.nodes.card import Card, card_for, unknown_card, you_asked
from tollgate.nodes.flow_check import flow_warning
from tollgate.nodes.shown import shown_to_model, user_request
from tollgate.nodes._common import NotRun, not_run, sink_for, thread_id_of, with_calls
from tollgate.policies.approval import ApprovalClaims, args_hash, derive_nonce, mint_token
from tollgate.policies.arguments import load_args
from tollgate.policies.dlp import scan_values
from tollgate.policies.errors import TollgateError
from tollgate.policies.hitl import ApprovalRequest, CardWarning, DecisionType, joined_preview
from tollgate.policies.provenance import Shown
from tollgate.policies.storable import visible_controls
from tollgate.tools.registry import ActionSpec, function_name

__all__ = ["Proposed", "announcement", "build_request", "make_propose", "request_hash"]

_log = logging.getLogger(__name__)
_PROVENANCE_SECONDS: Final = 10.0
"""The longest the card waits for what the thread read; past it every value is of unknown source."""


@dataclass(frozen=True, slots=True)
class Proposed:
    """One action of a request: its call, its preview and its own claims and token."""

    plan: Plan
    preview: str
    claims: ApprovalClaims
    token: str
    allowed: list[DecisionType]
    card: Card
    """Where its values came from, and its warnings (including the flow check's and DLP's)."""

    @property
    def provenance(self) -> dict[str, str]:
        """Field -> where its value came from, in words."""
        return self.card.labels


def request_hash(actions: Sequence[Proposed]) -> str:
    """The request's hash: the one action's args hash, or a hash binding every action in order."""
    if len(actions) == 1:
        return actions[0].claims.args_hash
    return args_hash({"actions": [[a.plan["tool"], a.plan["action"], a.claims.args_hash] for a in actions]})


def build_request(actions: Sequence[Proposed], claims: ApprovalClaims, token: str, request: str = "") -> ApprovalRequest:
    """The interrupt payload listing every action of ``actions``; ``claims``/``token`` bind the
    request; ``request`` is what the person asked."""
    return ApprovalRequest(
        request=request,
        action_requests=[{"name": function_name(a.plan["tool"], a.plan["action"]), "args": a.plan["args"],
                          "description": a.preview, **({"provenance": a.provenance} if a.provenance else {}),
                          **({"provenance_detail": a.card.detail} if a.card.detail else {}),
                          "warnings": a.card.warnings}
                         for a in actions],
        review_configs=[{"action_name": function_name(a.plan["tool"], a.plan["action"]),
                         "allowed_decisions": a.allowed} for a in actions],
        approval={
            "id": claims.nonce,
            "token": token,
            "args_hash": claims.args_hash,
            "expires_at": claims.expires_at.isoformat(),
            "tool": claims.tool,
            "action": claims.action,
            "actions": [{"id": a.claims.nonce, "call_id": a.plan["call_id"], "tool": a.plan["tool"],
                         "action": a.plan["action"], "args_hash": a.claims.args_hash, "token": a.token}
                        for a in actions],
        },
    )


def announcement(request: ApprovalRequest, timezone: str) -> dict[str, Any]:
    """The ``approval_required`` event's data for ``request`` (every action, its card, the expiry in
    ``timezone``): what propose announces, and what the approval node announces again when it asks
    anew after a refused resume."""
    block = request["approval"]
    expires = datetime.fromisoformat(block["expires_at"]).astimezone(ZoneInfo(timezone))
    bindings = block.get("actions") or [{"id": block["id"], "tool": block["tool"], "action": block["action"]}]
    actions = [{"approval_id": b["id"], "tool": b["tool"], "action": b["action"], "preview": r["description"],
                "args": r["args"], "allowed_decisions": c["allowed_decisions"], "provenance": r.get("provenance") or {},
                "warnings": r.get("warnings") or []}
               for b, r, c in zip(bindings, request["action_requests"], request["review_configs"], strict=True)]
    return {"approval_id": block["id"], "tool": block["tool"], "action": block["action"],
            "preview": joined_preview([a["preview"] for a in actions]), "args": request["action_requests"][0]["args"],
            "expires_at": expires.isoformat(), "actions": actions, "request": request.get("request", "")}


def _generic_preview(spec: ActionSpec, args: dict[str, Any]) -> str:
    """For a call that normally needs no approval (DLP or the flow check sent it here): what it is
    and its exact arguments."""
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
        await owner_scope.scope(conn, ctx.owner_id)
        return await render(svc.exec_context(ctx.owner_id, ctx.timezone, tool, conn, labels=labels), args)


def make_propose(provider: ServicesProvider) -> Any:
    """Build the propose node: one approval request for every call of the step that needs one.

    Each action gets its own preview, approval id, args hash and token; the request binds them
    in order. A preview that fails refuses its call only (an error tool message and a record),
    never the others.
    """

    async def propose(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        svc = await provider()
        waiting = [p for p in state.get("plans") or [] if p.get("verdict") == "propose" and "approval_id" not in p
                   and "args_hash" in p]
        if not waiting:
            return {}
        ctx = runtime.context
        key = svc.key()
        thread_id = thread_id_of(config)
        turn_id = state.get("turn_id", "")
        sink = sink_for(state, runtime)
        labels = {row["id"]: row["label"] for listed in (state.get("recent") or {}).values()
                  for row in listed.get("rows", [])}
        actions: list[Proposed] = []
        done: list[NotRun] = []
        # Where each value came from, for the card: what the thread read, and the person's words.
        request_text = user_request(state)
        shown: Shown | None
        try:
            shown = await asyncio.wait_for(shown_to_model(svc, state, thread_id), _PROVENANCE_SECONDS)
        except (TimeoutError, OSError, ValueError, psycopg.Error) as exc:
            _log.warning("provenance check could not run (%s): values are labelled of unknown source", type(exc).__name__)
            shown = None
        for plan in waiting:
            spec = svc.registry.action(plan["tool"], plan["action"])
            if spec is None:
                raise RuntimeError(f"proposed action {plan['tool']}.{plan['action']} is not registered")
            # Id fields are bound by id validation to what the server listed; the preview names them.
            ids = {re.split(r"[.\[]", path, maxsplit=1)[0] for path in spec.id_fields}
            # A call the server built from its own facts (the background offer) has no model-chosen value.
            server_built = str(plan.get("seal", "")).startswith("server.")
            card = (unknown_card(spec, plan["args"], skip=ids) if shown is None and not server_built
                    else card_for(spec, plan["args"], shown or Shown(), request_text, skip=ids, server_built=server_built))
            try:
                preview, card = await _preview(svc, spec, plan, ctx, labels, card, request_text)
            except TollgateError as exc:
                sink.emit("error", code=exc.code, message=exc.message)
                await append_audit(
                    svc.db.pool,
                    AuditRecord(
                        owner_id=ctx.owner_id, stage="propose", decision="refuse", reason="preview_failed",
                        code=exc.code, tool=plan["tool"], action=plan["action"], args_hash=plan["args_hash"],
                        thread_id=thread_id, turn_id=turn_id,
                    ),
                    now=svc.clock(),
                )
                done.append(not_run(plan, "failed", writes=spec.writes, code=exc.code, message=exc.message))
                continue
            claims = ApprovalClaims(
                thread_id=thread_id,
                owner_id=ctx.owner_id,
                tool=plan["tool"],
                action=plan["action"],
                args_hash=plan["args_hash"],
                exp=plan.get("proposed_at", int(svc.clock().timestamp())) + svc.settings.approval_ttl_seconds,
                nonce=derive_nonce(key, thread_id, turn_id, plan["call_id"], plan["args_hash"],
                                   *((str(plan["revision"]),) if plan.get("revision") else ())),
            )
            allowed = svc.approval_rules.allowed_decisions(ctx.owner_id, plan["tool"], plan["action"])
            actions.append(Proposed(plan, preview, claims, mint_token(claims, key), allowed, card))
        update = with_calls(state, done)
        if done:
            dropped = {record["call_id"] for record, _ in done}
            update["plans"] = [p for p in state.get("plans") or [] if p["call_id"] not in dropped]
        if not actions:
            return update | {"seq": sink.seq}
        first = actions[0].claims
        claims = ApprovalClaims(thread_id=thread_id, owner_id=ctx.owner_id, tool=first.tool, action=first.action,
                                args_hash=request_hash(actions), exp=min(a.claims.exp for a in actions),
                                nonce=first.nonce)
        token = mint_token(claims, key)  # for one action: its own claims, so its own token
        request = build_request(actions, claims, token, request_text)
        preview = joined_preview([a.preview for a in actions])
        sink.emit("approval_required", **announcement(request, ctx.timezone))
        pending = Pending(
            approval_id=claims.nonce, token=token, expires_at=claims.expires_at.isoformat(), preview=preview,
            args_hash=claims.args_hash, actions=[PendingAction(approval_id=a.claims.nonce, call_id=a.plan["call_id"], tool=a.plan["tool"],
                                   action=a.plan["action"], args_hash=a.claims.args_hash, preview=a.preview)
                     for a in actions],
        )
        await approvals.list_pending(svc.db.pool, ctx.owner_id, thread_id, request)  # for the approval API, on every surface
        return update | {"seq": sink.seq, "pending": pending, "outcome": "proposed", "approval_request": request}

    return propose


async def _preview(
    svc: Services, spec: ActionSpec, plan: Plan, ctx: Context, labels: Mapping[str, str], card: Card, request: str,
) -> tuple[str, Card]:
    """The server's preview of ``plan`` as the card shows it: the request ("You asked: …"), its
    warnings (data it carries out, where its values came from, DLP findings), then the preview.
    Returns the text and the card with every warning on it."""
    args = load_args(spec.args, plan["args"])
    if spec.preview is None:
        preview = _generic_preview(spec, plan["args"])  # from the arguments alone: no statement
    else:
        found = svc.registry.tool(plan["tool"])
        preview = await _render_preview(spec, args, ctx, svc, tool=plan["tool"],
                                        database=found is not None and found.database, labels=labels)
    # The warnings are derived from the exact arguments that will run, like the preview itself.
    dlp = scan_values(plan["args"], governance_policy(svc.settings).dlp).warning()
    outbound = flow_warning(plan)
    warnings = ([CardWarning(code="outbound", text=outbound)] if outbound else []) + card.warnings + (
        [CardWarning(code="dlp", text=dlp)] if dlp else [])
    card = Card(card.labels, card.detail, warnings)
    # A preview quotes stored third-party text (a title, a sender): its bidi controls are shown.
    preview = visible_controls(preview)
    return "\n\n".join([you_asked(request), *(visible_controls(w["text"]) for w in warnings), preview]), card
