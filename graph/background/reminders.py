"""Reminder firing: a due reminder is delivered to its owner's notice thread exactly once.

A periodic job takes due, scheduled reminders with ``FOR UPDATE SKIP LOCKED`` (two workers take
disjoint rows), claims each occurrence in ``reminder_fires`` (primary key: reminder and due
time) and delivers it under that key, all in one transaction. A one-off reminder becomes
``fired``; a daily one moves to its next occurrence at the same wall-clock time in its
``recurrence_tz`` and stays scheduled. Cancelled reminders are never taken; a snoozed one is
simply due later (a new occurrence).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

from psycopg.rows import dict_row

from tollgate.graph.app import App
from tollgate.graph.background.delivery import deliver
from tollgate.graph.background.store import ensure_inbox
from tollgate.graph.store import owner_scope

__all__ = ["fire_reminders", "next_daily"]

_BATCH: Final = 100

_DUE_SQL: Final = """
SELECT id, owner_id, text, due_at, recurrence, recurrence_tz FROM reminders
WHERE status = 'scheduled' AND due_at <= %s
ORDER BY due_at, id LIMIT %s
FOR UPDATE SKIP LOCKED
"""


def next_daily(due_at: datetime, tz: str, now: datetime) -> datetime:
    """The first daily occurrence after ``now``, keeping ``due_at``'s wall-clock time in ``tz``."""
    zone = ZoneInfo(tz)
    local = due_at.astimezone(zone)
    day = local.date() + timedelta(days=1)
    while True:
        candidate = datetime.combine(day, local.timetz().replace(tzinfo=None), tzinfo=zone)
        if candidate > now:
            return candidate
        day += timedelta(days=1)


async def fire_reminders(app: App, *, now: datetime | None = None) -> int:
    """Deliver every due reminder once; return how many occurrences this call delivered."""
    at = now or app.services.clock()
    key = app.services.key()
    fired = 0
    async with app.services.db.pool.connection() as conn, conn.transaction():
        await owner_scope.all_owners(conn)  # every owner's due reminders; each is delivered to its own owner
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_DUE_SQL, (at, _BATCH))
            due: list[dict[str, Any]] = await cur.fetchall()
        for row in due:
            thread = await ensure_inbox(conn, key, row["owner_id"])
            claimed = await conn.execute(
                """INSERT INTO reminder_fires (reminder_id, due_at, thread_id) VALUES (%s, %s, %s)
                   ON CONFLICT (reminder_id, due_at) DO NOTHING RETURNING reminder_id""",
                (row["id"], row["due_at"], thread),
            )
            if await claimed.fetchone() is not None:
                occurrence = row["due_at"].isoformat()
                fired += await deliver(
                    conn, owner_id=row["owner_id"], thread_id=thread, key=f"reminder:{row['id']}:{occurrence}",
                    text=f"Reminder: {row['text']}",
                    data={"reminder_id": row["id"], "due_at": occurrence},
                )
            if row["recurrence"] == "daily":
                await conn.execute(
                    "UPDATE reminders SET due_at = %s, updated_at = %s WHERE id = %s",
                    (next_daily(row["due_at"], row["recurrence_tz"], at), at, row["id"]),
                )
            else:
                await conn.execute(
                    "UPDATE reminders SET status = 'fired', updated_at = %s WHERE id = %s", (at, row["id"])
                )
    return fired
