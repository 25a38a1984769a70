"""The approvals table: the lifecycle of every approval request, kept in step with the effect.

::

    pending ──approve/edit──▶ approved ──▶ executing ──▶ executed
       │                          │            └───────▶ failed
       ├──reject──▶ rejected      └──(not run: error, cancel, crash)──▶ failed
       ├──expiry──▶ expired
       ├──too many invalid decisions──▶ refused   (closed by the server: nobody decided)
       └──new message / run cancelled──▶ superseded

The propose node lists a request (``pending``); the approval node records the person's decision
(``approved``, with the hash of the exact arguments approved, or ``rejected``); the effect
itself moves it to ``executing`` and ``executed`` in the transaction that runs it
(:func:`claim`, :func:`finish`), so ``executed`` and the effects ledger always agree. An
execution that does not commit ends ``failed`` (:func:`fail`), never ``approved`` with nothing
run; a turn that died half way is brought back in line by :func:`reconcile`.

Every statement that moves an approval runs in a transaction fenced by the turn's lease
(:func:`graph.store.leases.fenced`): a turn that lost its thread cannot list, decide or run one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from langgraph.types import StateSnapshot
from psycopg_pool import AsyncConnectionPool

from tollgate.graph.store import leases, owner_scope
from tollgate.policies.hitl import ActionBinding, ApprovalRequest

__all__ = [
    "OPEN_STATUSES",
    "actions_of",
    "ApprovalStatus",
    "Closed",
    "claim",
    "close",
    "decide",
    "expire_due",
    "fail",
    "finish",
    "list_pending",
    "reconcile",
    "requested",
    "supersede",
]

ApprovalStatus = Literal["pending", "approved", "executing", "executed", "failed", "rejected", "expired", "superseded",
                         "refused"]
"""Where an approval is in its life."""
OPEN_STATUSES: Final[tuple[ApprovalStatus, ...]] = ("pending", "approved", "executing")
"""Statuses that are not final."""

_PENDING_SQL: Final = """INSERT INTO approvals (approval_id, thread_id, owner_id, tool, action, args_hash,
                                                preview, request, expires_at, request_id, position)
                         SELECT a.id, %(thread)s, %(owner)s, a.tool, a.action, a.args_hash, a.preview,
                                %(request)s, %(expires)s,
                                %(request_id)s, a.position
                         FROM jsonb_to_recordset(%(actions)s)
                             AS a (id text, tool text, action text, args_hash text, preview text, position integer)
                         ON CONFLICT (approval_id) DO NOTHING"""
_DECIDE_SQL: Final = """UPDATE approvals SET status = %(status)s, decision = %(decision)s,
                               approved_args_hash = %(hash)s, decided_at = now(), decided_via = %(via)s
                        WHERE approval_id = %(id)s AND thread_id = %(thread)s AND status = 'pending'
                        RETURNING 1"""
_CLOSE_SQL: Final = """UPDATE approvals SET status = %s, decided_at = now(), finished_at = now(), error_code = %s
                       WHERE approval_id = %s AND thread_id = %s AND status = 'pending' RETURNING 1"""
_CLAIM_SQL: Final = """UPDATE approvals SET status = 'executing'
                       WHERE approval_id = %s AND thread_id = %s AND owner_id = %s AND tool = %s AND action = %s
                         AND status = 'approved' AND approved_args_hash = %s
                       RETURNING 1"""
_FINISH_SQL: Final = """UPDATE approvals SET status = 'executed', finished_at = now()
                        WHERE approval_id = %s AND status = 'executing'"""
_FAIL_SQL: Final = """UPDATE approvals SET status = 'failed', finished_at = now(), error_code = %s, error = %s
                      WHERE approval_id = %s AND status IN ('approved', 'executing') RETURNING 1"""
_SUPERSEDE_SQL: Final = """UPDATE approvals SET status = 'superseded', decided_at = now(), finished_at = now()
                           WHERE thread_id = %s AND owner_id = %s AND status = 'pending'
                           RETURNING approval_id, preview"""
_EXPIRE_SQL: Final = """UPDATE approvals SET status = 'expired', decided_at = now(), finished_at = now(),
                               error_code = 'approval_expired'
                        WHERE status = 'pending' AND expires_at <= %s
                        RETURNING approval_id, thread_id, owner_id, tool, action, args_hash, preview"""
_OPEN_OF_THREAD_SQL: Final = """SELECT a.approval_id, a.request_id, a.status, coalesce(e.state = 'done', false) AS ran,
                                       e.state AS effect
                                FROM approvals a LEFT JOIN effects e ON e.idem_key = a.approval_id
                                WHERE a.thread_id = %s AND a.status IN ('pending', 'approved', 'executing')
                                FOR UPDATE OF a"""
_INTENTS_OF_THREAD_SQL: Final = """SELECT a.approval_id FROM approvals a JOIN effects e ON e.idem_key = a.approval_id
                                   WHERE a.thread_id = %s AND a.status IN ('approved', 'executing')
                                     AND e.state = 'intent'"""
_UNKNOWN: Final = ("the turn stopped while the action was running and its service could not confirm whether it "
                   "happened; check before asking again")
_RECONCILE_SQL: Final = """UPDATE approvals SET status = %s, finished_at = now(), error_code = %s, error = %s
                           WHERE approval_id = %s AND status = %s"""


@dataclass(frozen=True, slots=True)
class Closed:
    """An approval that a sweep or a reconciliation closed."""

    approval_id: str
    """Its id."""
    thread_id: str
    """Its thread."""
    owner_id: str
    """Its owner."""
    status: ApprovalStatus
    """Where it ended."""
    tool: str = ""
    """Its tool."""
    action: str = ""
    """Its action."""
    args_hash: str = ""
    """The hash of the arguments it asked for."""
    preview: str = ""
    """What it would have done."""


def requested(snapshot: StateSnapshot) -> ApprovalRequest | None:
    """The approval request a thread's state (its latest checkpoint) is interrupted on, if any."""
    for intr in snapshot.interrupts:
        if isinstance(intr.value, dict) and "approval" in intr.value:
            request: ApprovalRequest = intr.value
            return request
    return None


def actions_of(request: ApprovalRequest) -> list[ActionBinding]:
    """Each action's binding of ``request``, in order (a request from before multi-action requests has one)."""
    block = request["approval"]
    return block.get("actions") or [ActionBinding(id=block["id"], call_id="", tool=block["tool"],
                                                  action=block["action"], args_hash=block["args_hash"],
                                                  token=block["token"])]


async def list_pending(pool: AsyncConnectionPool[Any], owner_id: str, thread_id: str, request: ApprovalRequest) -> None:
    """List ``request`` as pending, one row per action, for the approval API of every surface
    (fenced by the turn's lease). Every row holds the whole request; the first action's id is the
    request's (``request_id``)."""
    block = request["approval"]
    actions = [{"id": a["id"], "tool": a["tool"], "action": a["action"], "args_hash": a["args_hash"],
                "preview": r["description"], "position": i}
               for i, (a, r) in enumerate(zip(actions_of(request), request["action_requests"], strict=True))]
    params = {"thread": thread_id, "owner": owner_id, "request": Jsonb(request),
              "expires": block["expires_at"], "request_id": block["id"], "actions": Jsonb(actions)}
    async with leases.fenced(pool, owner=owner_id) as conn:
        await conn.execute(_PENDING_SQL, params)


async def decide(
    pool: AsyncConnectionPool[Any],
    approval_id: str,
    thread_id: str,
    decision: Literal["approve", "edit", "reject"],
    approved_hash: str | None = None,
    *,
    owner_id: str,
    via: str | None = None,
) -> bool:
    """Record ``owner_id``'s decision on their pending approval; ``False`` if it was no longer pending.

    ``via`` is the surface it came through (the run context's channel), shown in the thread's history.

    ``approve`` and ``edit`` move it to ``approved`` with the hash of the arguments that may now
    run (the edited ones for an edit); ``reject`` closes it.
    """
    if decision != "reject" and not approved_hash:
        raise ValueError("an approval records the hash of the arguments it approves")
    params = {
        "status": "rejected" if decision == "reject" else "approved",
        "decision": decision,
        "hash": approved_hash if decision != "reject" else None,
        "id": approval_id,
        "thread": thread_id,
        "via": via,
    }
    async with leases.fenced(pool, owner=owner_id) as conn:
        cur = await conn.execute(_DECIDE_SQL, params)
        return await cur.fetchone() is not None


async def close(
    pool: AsyncConnectionPool[Any], approval_id: str, thread_id: str,
    status: Literal["expired", "superseded", "refused"],
    code: str | None = None, *, owner_id: str,
) -> bool:
    """Close ``owner_id``'s pending approval without running it; ``False`` if it was no longer pending."""
    async with leases.fenced(pool, owner=owner_id) as conn:
        cur = await conn.execute(_CLOSE_SQL, (status, code, approval_id, thread_id))
        return await cur.fetchone() is not None


async def claim(
    conn: AsyncConnection[Any], approval_id: str, *, thread_id: str, owner_id: str, tool: str, action: str,
    args_hash: str,
) -> bool:
    """In the effect's transaction: move the approval to ``executing`` if it approves exactly this call.

    ``False`` (nothing may run) unless a decided approval of this thread and owner, for this
    tool and action, approved arguments whose hash is ``args_hash``.
    """
    cur = await conn.execute(_CLAIM_SQL, (approval_id, thread_id, owner_id, tool, action, args_hash))
    return await cur.fetchone() is not None


async def finish(conn: AsyncConnection[Any], approval_id: str) -> None:
    """In the effect's transaction, after it ran: ``executing`` -> ``executed``."""
    await conn.execute(_FINISH_SQL, (approval_id,))


async def fail(pool: AsyncConnectionPool[Any], approval_id: str, code: str, message: str, *, owner_id: str) -> bool:
    """``owner_id``'s approved action that did not run (or whose run did not commit) ends ``failed``."""
    async with leases.fenced(pool, owner=owner_id) as conn:
        cur = await conn.execute(_FAIL_SQL, (code, message[:500], approval_id))
        return await cur.fetchone() is not None


async def supersede(conn: AsyncConnection[Any], thread_id: str, owner_id: str) -> list[str]:
    """In the caller's (fenced) transaction: close the thread's pending approval; return the previews closed."""
    cur = await conn.execute(_SUPERSEDE_SQL, (thread_id, owner_id))
    return [str(row["preview"]) for row in await cur.fetchall()]


async def expire_due(pool: AsyncConnectionPool[Any], now: datetime) -> list[Closed]:
    """Close every owner's pending approvals past their expiry; return them (the caller audits and tells)."""
    async with pool.connection() as conn, conn.transaction():
        await owner_scope.all_owners(conn)
        cur = await conn.execute(_EXPIRE_SQL, (now,))
        rows = await cur.fetchall()
    return [
        Closed(approval_id=r["approval_id"], thread_id=r["thread_id"], owner_id=r["owner_id"], status="expired",
               tool=r["tool"], action=r["action"], args_hash=r["args_hash"], preview=r["preview"])
        for r in rows
    ]


async def reconcile(
    pool: AsyncConnectionPool[Any], thread_id: str, owner_id: str, interrupted_on: str | None,
    settle: Callable[[list[str]], Awaitable[None]] | None = None,
) -> list[Closed]:
    """Bring the open approvals of ``owner_id``'s thread in line with its checkpoint and the effects ledger.

    Run by whoever holds the thread (fenced) after a turn that did not end cleanly: cancelled,
    failed, or taken over from a holder whose lease ran out. ``interrupted_on`` is the approval
    the thread's latest checkpoint waits on, if any. First, the remote writes of approvals left
    at their intent are settled by ``settle``, called with their ids outside any transaction
    (the tool says whether each happened: :func:`graph.ledger.effects.settle`; without ``settle`` they
    stay unknown). Then:

    * an approval whose effect is in the ledger is ``executed``;
    * one approved (or executing) whose effect is not is ``failed``: nothing ran, or, for a
      remote write whose outcome is unknown, it may have, and its error says so;
    * one pending that the checkpoint does not wait on is ``failed``: its turn never saved the
      request, so no decision could resume it.
    """
    if settle is not None:
        async with owner_scope.owner_reads(pool, owner_id) as conn:
            cur = await conn.execute(_INTENTS_OF_THREAD_SQL, (thread_id,))
            keys = [str(r["approval_id"]) for r in await cur.fetchall()]
        if keys:
            await settle(keys)
    closed: list[Closed] = []
    async with leases.fenced(pool, owner=owner_id) as conn:
        cur = await conn.execute(_OPEN_OF_THREAD_SQL, (thread_id,))
        for row in await cur.fetchall():
            approval_id, status = str(row["approval_id"]), str(row["status"])
            if row["ran"]:
                new, code, why = "executed", None, None
            elif status in ("approved", "executing") and row["effect"] in ("intent", "unknown"):
                new, code, why = "failed", "unavailable", _UNKNOWN
            elif status in ("approved", "executing"):
                new, code, why = "failed", "unavailable", "the turn stopped before the action ran; nothing was changed"
            elif row["request_id"] != interrupted_on:
                new, code, why = "failed", "unavailable", "the turn stopped before the request was saved"
            else:
                continue
            await conn.execute(_RECONCILE_SQL, (new, code, why, approval_id, status))
            closed.append(Closed(approval_id=approval_id, thread_id=thread_id, owner_id=owner_id, status=new))
    return closed
