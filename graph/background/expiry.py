"""Expiry and recovery, on the scheduler's tick: nothing waits forever, nothing stays half done.

:func:`expire_approvals` closes every pending approval past its expiry (audited, one record
each), fails a background run that was waiting on one (saying so, delivered to its origin
thread), and tells a chat thread whose approval ran out, once. :func:`recover_threads` takes
the threads whose holder died with approvals open and reconciles them
(:meth:`graph.runner.TurnRunner.recover_stale`).
"""

from __future__ import annotations

from tollgate.graph.app import App
from tollgate.graph.background.delivery import deliver
from tollgate.graph.background.executor import Runtime, fail_run
from tollgate.graph.ledger import approvals
from tollgate.graph.ledger.audit import AuditRecord, append_audit
from tollgate.graph.threads import thread_kind

__all__ = ["expire_approvals", "recover_threads"]


def _what(preview: str) -> str:
    first = preview.splitlines()[0] if preview else "the action"
    return first[:200]


async def expire_approvals(rt: Runtime) -> int:
    """Close the approvals past their expiry; return how many."""
    app: App = rt.app
    pool = app.services.db.pool
    closed = await approvals.expire_due(pool, app.services.clock())
    for item in closed:
        await append_audit(pool, AuditRecord(
            owner_id=item.owner_id, stage="approval", decision="expired", reason="expired", code="approval_expired",
            tool=item.tool, action=item.action, args_hash=item.args_hash, thread_id=item.thread_id[:200],
        ), now=app.services.clock())
        message = f"The approval for “{_what(item.preview)}” expired before anyone decided it, so it did not run."
        if thread_kind(item.thread_id) == "run":
            await fail_run(rt, item.thread_id[3:], code="approval_expired", message=message)
            continue
        async with pool.connection() as conn:
            await deliver(conn, owner_id=item.owner_id, thread_id=item.thread_id, key=f"expired:{item.approval_id}",
                          text=message, data={"approval_id": item.approval_id, "status": "expired"})
    return len(closed)


async def recover_threads(rt: Runtime) -> int:
    """Reconcile threads whose turn died holding them with approvals open; return how many."""
    return await rt.app.runner.recover_stale()
