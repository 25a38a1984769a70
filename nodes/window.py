"""The window of earlier turns: what the transcript keeps of a thread's latest turns.

Read by the picker (the model sees it, fenced as DATA) and by the flow check (what the model was
shown is what an outbound call may carry out). Each turn is its request, its tool exchange
(:func:`nodes.naturalize.exchange_of`) and its reply.
"""

from __future__ import annotations

import json
from typing import Any, Final

from tollgate.graph.services import Services
from tollgate.nodes.picker_prompt import EarlierTurn

__all__ = ["WINDOW_SQL", "earlier_turns", "window_rows"]

# The picker's window: the latest earlier turns of the thread, each its request, its tool
# exchange and its reply (oldest first; the running turn has no transcript rows yet).
WINDOW_SQL: Final = """
    SELECT coalesce(json_agg(json_build_object('turn', t.turn_id, 'parts', t.parts) ORDER BY t.first_id), '[]'::json)
    FROM (
        SELECT turn_id, min(id) AS first_id, json_object_agg(role, content) AS parts
        FROM transcript
        WHERE thread_id = %(thread)s AND turn_id IN (
            SELECT turn_id FROM transcript WHERE thread_id = %(thread)s AND role = 'user'
            ORDER BY id DESC LIMIT %(limit)s)
        GROUP BY turn_id
    ) t
"""


async def window_rows(svc: Services, thread_id: str) -> list[dict[str, Any]]:
    """The transcript rows of the thread's latest ``history_turns`` turns, oldest first."""
    if not svc.settings.history_turns:
        return []
    async with svc.db.pool.connection() as conn:
        cur = await conn.execute("SELECT (" + WINDOW_SQL + ") AS prior",
                                 {"thread": thread_id, "limit": svc.settings.history_turns})
        found = await cur.fetchone()
    return list((found or {}).get("prior") or [])


def earlier_turns(rows: list[dict[str, Any]], token_budget: int) -> list[EarlierTurn]:
    """The window of earlier turns the picker sees: newest kept first until ``token_budget``
    (about four characters a token) is spent, returned oldest first. Each part is labelled
    with where it came from; tool results keep the labels the server gave them."""
    budget = token_budget * 4
    window: list[EarlierTurn] = []
    for row in reversed(rows):
        parts = row.get("parts") or {}
        turn = EarlierTurn(user_said=str(parts.get("user", "")))
        exchange = parts.get("exchange")
        if exchange:
            try:
                calls = json.loads(exchange)
            except ValueError:
                calls = []
            if isinstance(calls, list) and calls:
                turn["tool_results"] = [c | {"from": "tool result (server)"} for c in calls if isinstance(c, dict)]
        if parts.get("assistant"):
            turn["assistant_replied"] = str(parts["assistant"])
        size = len(json.dumps(turn, ensure_ascii=False, default=str))
        if size > budget:
            break
        budget -= size
        window.insert(0, turn)
    return window
