"""Reminders fire when due, once, to the owner's notice thread; cancel and snooze hold; daily recurrence."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tollgate.graph.app import App, open_app
from tollgate.graph.background.reminders import fire_reminders, next_daily
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tests.background_harness import count
from tests.conftest import all_rows


@pytest.fixture(scope="module")
async def apps(bg_settings: Settings, db: Database) -> AsyncIterator[tuple[App, App]]:
    """Two apps with their own pools, as two workers would have."""
    async with open_app(bg_settings) as one, open_app(bg_settings) as two:
        yield one, two


async def _reminder(db: Database, owner: str, due: datetime, *, status: str = "scheduled",
                    recurrence: str | None = None, tz: str = "UTC") -> str:
    rem_id = f"rem_{secrets.token_hex(5)}"
    async with all_rows(db) as conn:
        await conn.execute(
            """INSERT INTO reminders (id, owner_id, text, due_at, status, recurrence, recurrence_tz)
               VALUES (%s, %s, %s, %s, %s, %s, %s)""",
            (rem_id, owner, f"Reminder {rem_id}", due, status, recurrence, tz),
        )
    return rem_id


async def _delivered(db: Database, owner: str) -> int:
    return await count(
        db, "SELECT count(*) FROM transcript t JOIN threads h USING (thread_id) WHERE h.owner_id = %s"
        " AND t.thread_id LIKE 'inbox:%%' AND t.turn_id LIKE 'reminder:%%'", owner,
    )


async def test_a_reminder_due_a_second_ago_fires_once_under_concurrent_firers(
    apps: tuple[App, App], db: Database, owner: str
) -> None:
    one, two = apps
    now = one.services.clock()
    rem = await _reminder(db, owner, now - timedelta(seconds=1))
    await asyncio.gather(*(fire_reminders(app, now=now) for app in (one, two, one, two)))
    await fire_reminders(two, now=now)
    assert await _delivered(db, owner) == 1
    assert await count(db, "SELECT count(*) FROM reminders WHERE id = %s AND status = 'fired'", rem) == 1
    assert await count(db, "SELECT count(*) FROM reminder_fires WHERE reminder_id = %s", rem) == 1
    assert await count(
        db, "SELECT count(*) FROM turn_events e JOIN threads h USING (thread_id) WHERE h.owner_id = %s"
        " AND e.type = 'message_complete'", owner,
    ) == 1


async def test_cancelled_and_snoozed_reminders_are_respected(apps: tuple[App, App], db: Database, owner: str) -> None:
    one, _ = apps
    now = one.services.clock()
    await _reminder(db, owner, now - timedelta(minutes=5), status="cancelled")
    snoozed = await _reminder(db, owner, now + timedelta(minutes=10))  # snoozed past now
    await fire_reminders(one, now=now)
    assert await _delivered(db, owner) == 0
    await fire_reminders(one, now=now + timedelta(minutes=11))
    assert await _delivered(db, owner) == 1
    assert await count(db, "SELECT count(*) FROM reminders WHERE id = %s AND status = 'fired'", snoozed) == 1


async def test_a_daily_reminder_fires_each_day_once_at_the_same_local_time(
    apps: tuple[App, App], db: Database, owner: str
) -> None:
    one, _ = apps
    paris = ZoneInfo("Europe/Paris")
    now = one.services.clock()
    first = (now - timedelta(minutes=1)).astimezone(paris)
    rem = await _reminder(db, owner, first, recurrence="daily", tz="Europe/Paris")
    await fire_reminders(one, now=now)
    await fire_reminders(one, now=now)
    assert await _delivered(db, owner) == 1
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT status, due_at FROM reminders WHERE id = %s", (rem,))
        row = await cur.fetchone()
    assert row is not None and row["status"] == "scheduled"
    assert row["due_at"].astimezone(paris).time() == first.time() and row["due_at"] > now
    await fire_reminders(one, now=row["due_at"])
    assert await _delivered(db, owner) == 2


def test_daily_recurrence_keeps_the_wall_clock_across_a_daylight_saving_change() -> None:
    paris = ZoneInfo("Europe/Paris")
    due = datetime(2026, 3, 28, 8, 0, tzinfo=paris)
    after = next_daily(due, "Europe/Paris", due)
    assert after == datetime(2026, 3, 29, 8, 0, tzinfo=paris)
    assert after.astimezone(UTC) - due.astimezone(UTC) == timedelta(hours=23)  # the clocks went forward
    # Missed days are skipped, not fired in a burst.
    assert next_daily(due, "Europe/Paris", due + timedelta(days=3, hours=1)) == datetime(2026, 4, 1, 8, 0, tzinfo=paris)
