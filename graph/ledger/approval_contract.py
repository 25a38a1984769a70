"""The approval contract, as an executable checker: the approvals table, the checkpoint and the
effects ledger never disagree.

For every thread that no turn holds (its lease is free or ran out and was reconciled):

* at most one approval is ``pending``, and the thread's latest checkpoint waits on exactly it;
* an approval the checkpoint waits on exists in the table (in any state: one that expired,
  failed or was superseded is never resumed, the runner refuses it);
* nothing is ``approved`` or ``executing``: an approved action has run (``executed``) or ended
  ``failed``;
* an approval is ``executed`` exactly when the effects ledger has its effect as done.

Tests run it after every run that touches approvals (``tests/harness.py``), as the event
contract runs on every run's events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from langgraph.graph.state import CompiledStateGraph
from psycopg_pool import AsyncConnectionPool

from tollgate.graph.ledger.approvals import requested
from tollgate.graph.store import owner_scope

__all__ = ["ApprovalContractViolation", "ApprovalRow", "check_approvals"]

_ROWS_SQL = """SELECT a.approval_id, a.request_id, a.thread_id, a.status, coalesce(e.state = 'done', false) AS ran,
                      (l.holder IS NOT NULL AND l.expires_at > clock_timestamp()) AS held
               FROM approvals a
               LEFT JOIN effects e ON e.idem_key = a.approval_id
               LEFT JOIN thread_leases l ON l.thread_id = a.thread_id
               WHERE a.thread_id = ANY(%s)"""


class ApprovalContractViolation(AssertionError):
    """The approvals table, a checkpoint and the effects ledger disagree."""


@dataclass(frozen=True, slots=True)
class ApprovalRow:
    """One approval as the checker saw it."""

    approval_id: str
    thread_id: str
    status: str
    ran: bool


async def _waits_on(graph: CompiledStateGraph[Any, Any, Any, Any], thread_id: str) -> str | None:
    request = requested(await graph.aget_state({"configurable": {"thread_id": thread_id}}))
    return request["approval"]["id"] if request is not None else None


async def check_approvals(
    pool: AsyncConnectionPool[Any], graph: CompiledStateGraph[Any, Any, Any, Any], thread_ids: Iterable[str]
) -> list[ApprovalRow]:
    """Check the contract for ``thread_ids``; return the rows seen, or raise on the first breach."""
    threads = sorted(set(thread_ids))
    async with pool.connection() as conn, conn.transaction():
        await owner_scope.all_owners(conn)  # a checker of every owner's threads
        cur = await conn.execute(_ROWS_SQL, (threads,))
        rows = list(await cur.fetchall())
    seen = [ApprovalRow(r["approval_id"], r["thread_id"], r["status"], bool(r["ran"])) for r in rows]
    for thread_id in threads:
        mine = [r for r in rows if r["thread_id"] == thread_id]
        if any(r["held"] for r in mine):
            continue  # a turn holds it: its approvals are moving
        pending = sorted({r["request_id"] for r in mine if r["status"] == "pending"})
        if len(pending) > 1:
            raise ApprovalContractViolation(f"thread {thread_id!r} has {len(pending)} pending approval requests")
        for r in mine:
            if r["status"] in ("approved", "executing"):
                raise ApprovalContractViolation(f"approval {r['approval_id']!r} is {r['status']} with no turn running")
            if (r["status"] == "executed") != bool(r["ran"]):
                raise ApprovalContractViolation(
                    f"approval {r['approval_id']!r} is {r['status']} but the ledger "
                    f"{'has' if r['ran'] else 'lacks'} its effect"
                )
        waits = await _waits_on(graph, thread_id)
        if pending and waits != pending[0]:
            raise ApprovalContractViolation(
                f"approval {pending[0]!r} is pending but its thread's checkpoint waits on {waits!r}"
            )
        if waits is not None and waits not in {r["approval_id"] for r in mine}:
            raise ApprovalContractViolation(f"thread {thread_id!r} waits on {waits!r}, which is not in the table")
    return seen
