"""The approvals table: the listing of pending requests that the approval API reads and decides.

A request is listed by the node that proposes it and closed by the node that takes its
decision, so every surface keeps the table the same way. In a runner's turn (the HTTP server,
the CLI, workers) each statement commits with the turn's checkpoint: the listing with the
interrupted checkpoint, the decision with the one that consumed the interrupt. In a graph run
without the runner (``langgraph dev`` and Studio) each commits at once (:func:`graph.turn_db.with_checkpoint`).
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from graph import turn_db
from policies.hitl import ApprovalRequest

__all__ = ["decided_statement", "list_pending", "record_decided"]

_PENDING_SQL = """INSERT INTO approvals (approval_id, thread_id, owner_id, tool, action, args_hash,
                                         preview, request, expires_at)
                  VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
                  ON CONFLICT (approval_id) DO NOTHING"""
# By thread alone: a decision consumed the thread's interrupt, whoever sent it. Through the runner
# that is always the thread's owner; in Studio (no authentication) a resume under another owner
# consumes it too (and runs nothing: the token binds the owner), so the listing must close as well.
_DECIDED_SQL = """UPDATE approvals SET status = %s, decided_at = now()
                  WHERE thread_id = %s AND status = 'pending'"""
_STATUS = {"approve": "approved", "edit": "edited", "reject": "rejected", "expired": "expired", "invalid": "rejected"}
"""The status a decision leaves; an invalid resume closes its request as rejected."""


def decided_statement(decision: str, thread_id: str) -> tuple[str, tuple[Any, ...]]:
    """The statement that closes the thread's pending request with ``decision``."""
    return _DECIDED_SQL, (_STATUS.get(decision, "rejected"), thread_id)


async def list_pending(pool: Any, owner_id: str, thread_id: str, request: ApprovalRequest) -> None:
    """List ``request`` as pending (with the turn's checkpoint, or at once outside a turn)."""
    block = request["approval"]
    row = (
        block["id"], thread_id, owner_id, block["tool"], block["action"], block["args_hash"],
        request["action_requests"][0]["description"], Jsonb(request), block["expires_at"],
    )
    await turn_db.with_checkpoint(pool, _PENDING_SQL, row)


async def record_decided(pool: Any, decision: str, thread_id: str) -> None:
    """Close the thread's pending request with ``decision`` (with the turn's checkpoint, or at once outside a turn)."""
    await turn_db.with_checkpoint(pool, *decided_statement(decision, thread_id))
