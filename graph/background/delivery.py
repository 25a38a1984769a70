"""Delivery: post a message (and its event) into a chat thread exactly once.

The message is a transcript row and the event a ``message_complete`` row of the thread's event
log (``turn_events``), both under a key the sender derives from what it delivers (a run id, a
reminder occurrence). A retry finds the keys taken and writes nothing: a result is delivered
once however often the worker that delivers it crashes. The thread must belong to the owner.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from psycopg import AsyncConnection

from tollgate.graph.events import TurnEvent

__all__ = ["deliver"]

_MESSAGE_SQL = """
INSERT INTO transcript (thread_id, turn_id, role, content)
SELECT %(thread)s, %(key)s, 'assistant', %(text)s
WHERE EXISTS (SELECT 1 FROM threads WHERE thread_id = %(thread)s AND owner_id = %(owner)s)
ON CONFLICT (thread_id, turn_id, role) DO NOTHING
RETURNING id
"""

_EVENT_SQL = """
INSERT INTO turn_events (thread_id, turn_id, seq, owner_id, type, event)
VALUES (%(thread)s, %(key)s, 1, %(owner)s, 'message_complete', %(event)s::jsonb)
ON CONFLICT (thread_id, turn_id, seq) DO NOTHING
"""


async def deliver(
    conn: AsyncConnection[Any], *, owner_id: str, thread_id: str, key: str, text: str, data: dict[str, Any]
) -> bool:
    """Post ``text`` to ``thread_id`` under ``key``; ``False`` when it was already delivered (or the thread is not the owner's)."""
    async with conn.transaction():
        cur = await conn.execute(_MESSAGE_SQL, {"thread": thread_id, "key": key, "text": text, "owner": owner_id})
        if await cur.fetchone() is None:
            return False
        event = TurnEvent(
            type="message_complete",
            seq=1,
            turn_id=key,
            ts=datetime.now(UTC).isoformat(),
            data={"text": text, "outcome": "reply", **data},
            thread_id=thread_id,
        )
        await conn.execute(
            _EVENT_SQL, {"thread": thread_id, "key": key, "owner": owner_id, "event": json.dumps(event)}
        )
        await conn.execute("UPDATE threads SET updated_at = now() WHERE thread_id = %s", (thread_id,))
    return True
