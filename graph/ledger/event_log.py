"""The thread's event log (``turn_events``) as the next holder of a thread leaves it: no run left open.

A server records a run's events as they come and ends the run with a terminal event
(``message_complete``, ``approval_required``) or a fatal ``error``. A process that dies mid-run
(SIGKILL, a lost machine) ends nothing: its run would read as running, and its followers would
wait for an event that never comes. Whoever takes the thread over from the dead holder
(:meth:`graph.governed.GovernedGraph.take_over`) closes that run with a fatal ``error`` event
(code ``unavailable``), in a transaction fenced by its own lease: the thread's status is then
honest, and every follower, in any process, ends with that event.
"""

from __future__ import annotations

from typing import Any, Final

from psycopg_pool import AsyncConnectionPool

from tollgate.graph.store import leases

__all__ = ["INTERRUPTED_RUN_MESSAGE", "close_abandoned"]

INTERRUPTED_RUN_MESSAGE: Final = ("the turn was interrupted before it completed (the process running it stopped); "
                                  "what had already run stays done")
"""The message of the ``error`` event that closes a run whose holder died."""

# The latest event of the thread, if it does not end its run, gets its successor: a fatal error
# of the same turn, in the shape every stored event has (graph.events.TurnEvent).
_CLOSE_SQL: Final = """
INSERT INTO turn_events (thread_id, turn_id, seq, owner_id, type, event)
SELECT last.thread_id, last.turn_id, last.seq + 1, last.owner_id, 'error',
       jsonb_build_object('type', 'error', 'seq', last.seq + 1, 'turn_id', last.turn_id, 'thread_id', last.thread_id,
                          'ts', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
                          'data', jsonb_build_object('code', 'unavailable', 'message', %(message)s::text,
                                                     'fatal', true))
FROM (SELECT * FROM turn_events WHERE thread_id = %(thread)s ORDER BY id DESC LIMIT 1) AS last
WHERE last.type NOT IN ('message_complete', 'approval_required')
  AND NOT (last.type = 'error' AND coalesce((last.event -> 'data' ->> 'fatal')::boolean, false))
ON CONFLICT (thread_id, turn_id, seq) DO NOTHING
RETURNING id
"""


async def close_abandoned(pool: AsyncConnectionPool[Any], thread_id: str, owner_id: str) -> bool:
    """Close the run the thread's log left open, if any; whether one was closed. Called under the
    thread's lease by the holder that took it over (the write is fenced by that lease)."""
    async with leases.fenced(pool, owner=owner_id) as conn:
        cur = await conn.execute(_CLOSE_SQL, {"thread": thread_id, "message": INTERRUPTED_RUN_MESSAGE})
        return await cur.fetchone() is not None
