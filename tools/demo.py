"""A small, realistic demo data set for one owner, placed around a given moment.

Used by ``make run`` so a fresh install has something to show, and by tests with a fresh
owner id. Nothing is written for an owner who already has any tool data.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any, Final, LiteralString

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from tollgate.tools._ids import new_id
from tollgate.tools._render import local, zone

__all__ = ["DEMO_ADDRESS", "seed_demo"]

DEMO_ADDRESS: Final = "you@example.com"
"""The owner's address in the demo mailbox."""

# Any tool row at all means the owner has data of their own: never mix demo rows into it.
_HAS_ROWS: Final = """
SELECT EXISTS (SELECT 1 FROM calendar_events WHERE owner_id = %(o)s)
    OR EXISTS (SELECT 1 FROM mail_messages WHERE owner_id = %(o)s)
    OR EXISTS (SELECT 1 FROM mail_outbox WHERE owner_id = %(o)s)
    OR EXISTS (SELECT 1 FROM tasks WHERE owner_id = %(o)s)
    OR EXISTS (SELECT 1 FROM reminders WHERE owner_id = %(o)s) AS seeded
"""

# (day offset, start, minutes, title, location, description, status)
_EVENTS: Final = (
    (0, time(9, 0), 15, "Standup", "Room 1", "", "confirmed"),
    (0, time(12, 30), 60, "Lunch with Sam", "Café Lumière", "", "confirmed"),
    (0, time(15, 0), 60, "Design review", "Room 3", "Walk through the new onboarding flow.", "confirmed"),
    (1, time(10, 0), 45, "Dentist", "Dr. Martin, 12 rue Oberkampf", "", "confirmed"),
    (1, time(18, 0), 120, "Team drinks", "The Red Lion", "", "cancelled"),
    (2, time(14, 0), 30, "1:1 with Priya", "Video call", "Quarterly goals.", "confirmed"),
)

# (minutes before now, sender, subject, body, read, trashed)
_MAIL: Final = (
    (40, "sam@example.com", "Lunch today?",
     "Hi! Still on for lunch at 12:30? There is a new place near the office. Sam", False, False),
    (180, "billing@example.net", "Your invoice is ready",
     "Your monthly invoice of EUR 42.00 is available. Payment is due within 14 days.", False, False),
    (1500, "priya@example.org", "Notes for the design review",
     "Hi, a few points for the review: the sign-up form is too long, and the welcome screen needs"
     " a clearer next step. Priya", True, False),
    (1680, "news@weekly.example.com", "This week in tech",
     "Top stories: faster databases, smaller models and a new browser release.", True, False),
    (2900, "alex@example.com", "Re: Project timeline",
     "Thanks, the timeline looks good to me. Let's keep the launch on the 15th. Alex", True, False),
    (3300, "noreply@dentist.example", "Appointment reminder",
     "This is a reminder of your upcoming appointment with Dr. Martin.", True, False),
    (4400, "deals@promo.example.biz", "You won a prize!!!", "Click here to claim your prize.", True, True),
)

# (title, due day offset or None, done)
_TASKS: Final = (
    ("Send the quarterly report", 2, False),
    ("Book flights to Lisbon", 6, False),
    ("Buy a birthday present for Sam", None, False),
    ("Renew passport", None, True),
)


def _at(day: date, clock: time, tz: str) -> datetime:
    return datetime.combine(day, clock, tzinfo=zone(tz))


def _next_at(now: datetime, clock: time, tz: str) -> datetime:
    """Today at ``clock`` if that is still ahead, else tomorrow at ``clock``."""
    today = local(now, tz).date()
    at = _at(today, clock, tz)
    return at if at > now else _at(today + timedelta(days=1), clock, tz)


def _demo_rows(owner_id: str, now: datetime, tz: str) -> list[tuple[LiteralString, list[tuple[Any, ...]]]]:
    """(INSERT statement, rows) per table, placed around ``now`` in ``tz``."""
    today = local(now, tz).date()
    events: list[tuple[Any, ...]] = [
        (new_id("evt"), owner_id, title, start, start + timedelta(minutes=minutes), place, notes, status)
        for offset, clock, minutes, title, place, notes, status in _EVENTS
        for start in [_at(today + timedelta(days=offset), clock, tz)]
    ]
    mail: list[tuple[Any, ...]] = [
        (new_id("msg"), owner_id, sender, [DEMO_ADDRESS], subject, body, now - timedelta(minutes=ago), read,
         now - timedelta(minutes=ago // 2) if trashed else None)
        for ago, sender, subject, body, read, trashed in _MAIL
    ]
    tasks: list[tuple[Any, ...]] = [
        (new_id("tsk"), owner_id, title, None if due is None else today + timedelta(days=due),
         "done" if done else "open", now - timedelta(days=7) + timedelta(minutes=i),
         now - timedelta(days=1) if done else None)
        for i, (title, due, done) in enumerate(_TASKS)
    ]
    reminders: list[tuple[Any, ...]] = [
        (new_id("rem"), owner_id, "Call the bank", _next_at(now, time(17, 0), tz), now, now),
        (new_id("rem"), owner_id, "Take out the bins", _at(today + timedelta(days=1), time(19, 30), tz), now, now),
    ]
    return [
        ("INSERT INTO calendar_events (id, owner_id, title, starts_at, ends_at, location, description, status)"
         " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", events),
        ("INSERT INTO mail_messages (id, owner_id, from_addr, to_addrs, subject, body, received_at, is_read,"
         " trashed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)", mail),
        ("INSERT INTO tasks (id, owner_id, title, due_date, status, created_at, completed_at)"
         " VALUES (%s, %s, %s, %s, %s, %s, %s)", tasks),
        ("INSERT INTO reminders (id, owner_id, text, due_at, created_at, updated_at)"
         " VALUES (%s, %s, %s, %s, %s, %s)", reminders),
    ]


async def seed_demo(conn: AsyncConnection[Any], owner_id: str, now: datetime, timezone: str) -> bool:
    """Insert the demo data for ``owner_id`` around ``now`` unless they have data; return whether it did.

    Runs in the caller's transaction, which row-level security must let see ``owner_id``'s rows
    (``graph.store.owner_scope.owner_transaction``).
    """
    async with conn.transaction():
        # Two first requests for the same owner at once must not seed twice.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("tollgate-demo:" + owner_id,))
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_HAS_ROWS, {"o": owner_id})
            row = await cur.fetchone()
            if row is not None and row["seeded"]:
                return False
            for sql, rows in _demo_rows(owner_id, now, timezone):
                await cur.executemany(sql, rows)
    return True
