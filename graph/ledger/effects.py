"""The effects ledger: what each write did, keyed by its idempotency key, so nothing runs twice.

A write to Tollgate's own tables commits with its ledger row (:func:`record`): it happened
exactly when the row exists (``done``). A *remote* write (a tool without Tollgate's database, or
one that declares ``remote=True``) cannot share a transaction with what it changes, so it is
recorded in two steps: an ``intent`` row committed before the remote call (:func:`begin`), and
its outcome after (:func:`conclude`). A crash between the two leaves the intent, and the intent
is never replayed blindly: the tool's ``reconcile`` hook says whether the effect happened
(:func:`settle`); without a hook, or when the hook cannot tell, the outcome is ``unknown`` and
is reported so, never retried.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Final, Literal

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from tollgate.graph.ledger.audit import AuditRecord, append_audit
from tollgate.graph.services import Services
from tollgate.graph.store import leases, owner_scope
from tollgate.policies.arguments import load_args
from tollgate.tools.registry import ActionResult, Reconciled

__all__ = ["Entry", "LedgerState", "begin", "conclude", "open_intents", "record", "replay", "settle", "settle_intents"]

_log = logging.getLogger("tollgate.effects")

LedgerState = Literal["intent", "done", "failed", "unknown"]
"""Where an effect stands in the ledger."""

_GET: Final = "SELECT state, result FROM effects WHERE idem_key = %s AND owner_id = %s FOR UPDATE"
_PUT: Final = """INSERT INTO effects (idem_key, owner_id, tool, action, result, state, args, finished_at)
                 VALUES (%s, %s, %s, %s, %s, %s, %s, CASE WHEN %s = 'done' THEN now() END)"""
_CONCLUDE: Final = """UPDATE effects SET state = %s, result = %s, finished_at = now()
                      WHERE idem_key = %s AND owner_id = %s AND state = 'intent'"""
_INTENTS: Final = """SELECT idem_key, owner_id, tool, action, args FROM effects
                     WHERE idem_key = ANY(%s) AND state = 'intent'"""


@dataclass(frozen=True, slots=True)
class Entry:
    """A ledger row as a write finds it."""

    state: LedgerState
    """Its state."""
    result: ActionResult | None
    """The recorded result (``done``), else ``None``."""


async def replay(conn: AsyncConnection[Any], key: str, owner_id: str) -> Entry | None:
    """The ledger row of ``key`` (locked for the transaction), or ``None`` when the write never started."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_GET, (key, owner_id))
        row = await cur.fetchone()
    return None if row is None else Entry(row["state"], row["result"])


async def record(conn: AsyncConnection[Any], key: str, owner_id: str, tool: str, action: str, result: ActionResult) -> None:
    """A local write's row, in the write's own transaction: done when it commits."""
    await conn.execute(_PUT, (key, owner_id, tool, action, json.dumps(result), "done", None, "done"))


async def begin(conn: AsyncConnection[Any], key: str, owner_id: str, tool: str, action: str, args: dict[str, Any]) -> None:
    """A remote write's intent, committed before the remote call (with the arguments, for reconcile)."""
    await conn.execute(_PUT, (key, owner_id, tool, action, None, "intent", json.dumps(args), "intent"))


async def conclude(conn: AsyncConnection[Any], key: str, owner_id: str, state: LedgerState,
                   result: ActionResult | None = None) -> None:
    """A remote write's outcome: ``done`` (with its result), ``failed`` (it did not happen) or ``unknown``."""
    await conn.execute(_CONCLUDE, (state, json.dumps(result) if result is not None else None, key, owner_id))


async def open_intents(conn: AsyncConnection[Any], keys: list[str]) -> list[dict[str, Any]]:
    """The ledger rows among ``keys`` still at ``intent`` (a write that stopped between its two steps)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_INTENTS, (keys,))
        return list(await cur.fetchall())


async def settle_intents(svc: Services, owner_id: str, keys: list[str]) -> None:
    """Settle every remote write of ``owner_id`` among ``keys`` still at its intent (see :func:`settle`)."""
    async with owner_scope.owner_reads(svc.db.pool, owner_id) as conn:
        intents = await open_intents(conn, keys)
    for intent in intents:
        await settle(svc, intent, timezone=svc.settings.default_timezone)


async def settle(svc: Services, intent: dict[str, Any], *, timezone: str) -> LedgerState:
    """Ask the tool whether an interrupted remote write happened, record the answer and return it.

    ``done`` records what the tool found; ``not done`` records ``failed`` (nothing happened); a
    tool without a ``reconcile`` hook, a hook that cannot tell or one that fails records
    ``unknown``. Never runs the write again.
    """
    found = svc.registry.lookup(f"{intent['tool']}__{intent['action']}")
    outcome = Reconciled.unknown()
    if found is not None and found[1].reconcile is not None:
        tool, spec = found
        ctx = svc.exec_context(intent["owner_id"], timezone, tool.name, None, intent["idem_key"])
        try:
            outcome = await spec.reconcile(ctx, load_args(spec.args, intent["args"] or {}))
        except Exception as exc:  # a hook that fails cannot tell either
            _log.warning("reconcile of %s.%s raised %s", intent["tool"], intent["action"], type(exc).__name__)
    state: LedgerState = {"done": "done", "not_done": "failed", "unknown": "unknown"}[outcome.outcome]
    async with leases.fenced(svc.db.pool, owner=intent["owner_id"]) as conn:
        await conclude(conn, intent["idem_key"], intent["owner_id"], state, outcome.result if state == "done" else None)
        await append_audit(conn, AuditRecord(
            owner_id=intent["owner_id"], stage="execute", decision="reconciled", reason=f"remote_{state}",
            code="" if state == "done" else "unavailable", tool=str(intent["tool"])[:200],
            action=str(intent["action"])[:200], detail={"effect": state},
        ), now=svc.clock())
    return state
