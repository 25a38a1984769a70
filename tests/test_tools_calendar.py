"""The calendar tool against real PostgreSQL: windows, soft cancel, updates, owner isolation."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from psycopg import AsyncConnection

from tollgate.policies.errors import NotFound
from tollgate.tools.args import CalendarCancelArgs, CalendarCreateArgs, CalendarGetArgs, CalendarListArgs, CalendarUpdateArgs
from tollgate.tools.calendar import (
    CALENDAR,
    calendar_window,
    cancel_event,
    create_event,
    get_event,
    list_events,
    preview_cancel,
    preview_create,
    preview_update,
    update_event,
)
from tollgate.tools.demo import seed_demo
from tollgate.tools.registry import ExecContext

PARIS = ZoneInfo("Europe/Paris")
NOW = datetime(2026, 11, 30, 8, 0, tzinfo=PARIS)  # a Monday


def ctx_for(conn: AsyncConnection[Any], owner: str, now: datetime = NOW) -> ExecContext:
    return ExecContext(owner_id=owner, timezone="Europe/Paris", now=now, conn=conn)


async def seeded(conn: AsyncConnection[Any], owner: str, now: datetime = NOW) -> ExecContext:
    assert await seed_demo(conn, owner, NOW, "Europe/Paris")
    return ctx_for(conn, owner, now)


async def event_id(ctx: ExecContext, title: str) -> str:
    result = await list_events(ctx, CalendarListArgs(range="this_week", limit=25))
    return next(r["id"] for r in result["rows"] if r["label"].startswith(title + " — "))


def _render(action: str, result: Any) -> str:
    spec = next(a for a in CALENDAR.actions if a.name == action)
    return spec.renderer(result)


async def test_today_lists_confirmed_events_in_order_with_local_labels(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    result = await list_events(ctx, CalendarListArgs(range="today"))
    assert result["kind"] == "list" and result["list_kind"] == "calendar"
    assert [r["label"] for r in result["rows"]] == [
        "Standup — Mon 30 Nov, 09:00–09:15 (Room 1)",
        "Lunch with Sam — Mon 30 Nov, 12:30–13:30 (Café Lumière)",
        "Design review — Mon 30 Nov, 15:00–16:00 (Room 3)",
    ]
    assert all(r["id"].startswith("evt_") for r in result["rows"])
    assert _render("list", result) == (
        "You have 3 events today:\n"
        "1. Standup — Mon 30 Nov, 09:00–09:15 (Room 1)\n"
        "2. Lunch with Sam — Mon 30 Nov, 12:30–13:30 (Café Lumière)\n"
        "3. Design review — Mon 30 Nov, 15:00–16:00 (Room 3)"
    )


async def test_tomorrow_excludes_cancelled_events(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    result = await list_events(ctx, CalendarListArgs(range="tomorrow"))
    assert [r["label"] for r in result["rows"]] == ["Dentist — Tue 1 Dec, 10:00–10:45 (Dr. Martin, 12 rue Oberkampf)"]
    assert "Team drinks" not in _render("list", result)


async def test_week_upcoming_and_limits(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    week = await list_events(ctx, CalendarListArgs(range="this_week", limit=25))
    assert len(week["rows"]) == 5 and week["summary"] == "You have 5 events this week."
    later = ctx_for(conn, owner, NOW.replace(hour=16, minute=30))
    upcoming = await list_events(later, CalendarListArgs(range="upcoming"))
    assert [r["label"].split(" — ")[0] for r in upcoming["rows"]] == ["Dentist", "1:1 with Priya"]
    first_two = await list_events(ctx, CalendarListArgs(range="this_week", limit=2))
    assert len(first_two["rows"]) == 2
    assert first_two["summary"] == "You have more than 2 events this week; here are the first 2."


async def test_empty_window_says_so(conn: AsyncConnection[Any], owner: str) -> None:
    result = await list_events(ctx_for(conn, owner), CalendarListArgs(range="next_7_days"))
    assert result["rows"] == []
    assert _render("list", result) == "You have no events in the next 7 days."


def test_windows_follow_the_owner_timezone_across_dst() -> None:
    dst_day = datetime(2026, 3, 29, 12, 0, tzinfo=PARIS)  # clocks go forward at 02:00
    start, end = calendar_window("today", dst_day, "Europe/Paris")
    assert start == datetime(2026, 3, 29, tzinfo=PARIS) and end is not None
    # Same-zone subtraction in Python is wall-clock; the database compares real instants.
    assert end.astimezone(UTC) - start.astimezone(UTC) == timedelta(hours=23)
    week_start, week_end = calendar_window("this_week", NOW, "Europe/Paris")
    assert (week_start.date().isoformat(), week_end and week_end.date().isoformat()) == ("2026-11-30", "2026-12-07")
    # "today" is the owner's day, not UTC's: 00:30 in Paris is still the previous day in UTC.
    start, _ = calendar_window("today", datetime(2026, 11, 30, 0, 30, tzinfo=PARIS), "Europe/Paris")
    assert start == datetime(2026, 11, 30, tzinfo=PARIS)


async def test_get_returns_the_item(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    result = await get_event(ctx, CalendarGetArgs(event_id=await event_id(ctx, "Design review")))
    assert result["kind"] == "item"
    item = result["item"]
    assert item["title"] == "Design review" and item["status"] == "confirmed"
    assert datetime.fromisoformat(item["start"]) == datetime(2026, 11, 30, 15, 0, tzinfo=PARIS)
    assert _render("get", result) == (
        "“Design review” is on Mon 30 Nov, 15:00–16:00 at Room 3.\nNotes: Walk through the new onboarding flow."
    )


async def test_create_previews_then_writes(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    start = datetime(2026, 11, 30, 12, 0, tzinfo=PARIS)
    args = CalendarCreateArgs(title="Call with Alex", start=start, duration_minutes=45)
    preview = await preview_create(ctx, args)
    assert preview == (
        "Create “Call with Alex” on Mon 30 Nov, 12:00–12:45\n"
        "It overlaps “Lunch with Sam” (Mon 30 Nov, 12:30–13:30)."
    )
    result = await create_event(ctx, args)
    assert result["kind"] == "write" and result["changed"] == 1
    assert result["item"]["id"].startswith("evt_")
    assert datetime.fromisoformat(result["item"]["end"]) == datetime(2026, 11, 30, 12, 45, tzinfo=PARIS)
    assert _render("create", result) == "Created “Call with Alex” on Mon 30 Nov, 12:00–12:45."
    today = await list_events(ctx, CalendarListArgs(range="today"))
    assert [r["label"].split(" — ")[0] for r in today["rows"]][1] == "Call with Alex"


async def test_update_changes_only_given_fields_and_recomputes_end(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    standup = await event_id(ctx, "Standup")
    moved = CalendarUpdateArgs(event_id=standup, start=datetime(2026, 11, 30, 9, 30, tzinfo=PARIS))
    assert await preview_update(ctx, moved) == (
        "Update “Standup” (Mon 30 Nov, 09:00–09:15): time Mon 30 Nov, 09:00–09:15 → Mon 30 Nov, 09:30–09:45"
    )
    result = await update_event(ctx, moved)
    assert result["changed"] == 1
    assert result["summary"] == "Updated “Standup”: time Mon 30 Nov, 09:00–09:15 → Mon 30 Nov, 09:30–09:45."
    assert (result["item"]["title"], result["item"]["location"]) == ("Standup", "Room 1")
    longer = await update_event(ctx, CalendarUpdateArgs(event_id=standup, duration_minutes=30, location="Room 2"))
    assert datetime.fromisoformat(longer["item"]["end"]) == datetime(2026, 11, 30, 10, 0, tzinfo=PARIS)
    assert longer["item"]["location"] == "Room 2"
    same = await update_event(ctx, CalendarUpdateArgs(event_id=standup, title="Standup"))
    assert same["changed"] == 0
    assert same["summary"] == "“Standup” (Mon 30 Nov, 09:30) already has those details; nothing changed."


async def test_cancel_is_soft_and_a_repeat_reports_no_change(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    standup = await event_id(ctx, "Standup")
    args = CalendarCancelArgs(event_id=standup)
    assert await preview_cancel(ctx, args) == "Cancel “Standup” on Mon 30 Nov, 09:00–09:15 at Room 1"
    first = await cancel_event(ctx, args)
    assert first["changed"] == 1 and first["item"]["status"] == "cancelled"
    assert _render("cancel_event", first) == "Cancelled “Standup” (Mon 30 Nov, 09:00)."
    cur = await conn.execute("SELECT status FROM calendar_events WHERE id = %s", (standup,))
    assert await cur.fetchall() == [{"status": "cancelled"}]
    today = await list_events(ctx, CalendarListArgs(range="today"))
    assert standup not in [r["id"] for r in today["rows"]]
    again = await cancel_event(ctx, args)
    assert again["changed"] == 0
    assert again["summary"] == "“Standup” (Mon 30 Nov, 09:00) was already cancelled; nothing changed."
    assert "already cancelled" in await preview_cancel(ctx, args)


async def test_another_owner_cannot_see_or_touch_events(conn: AsyncConnection[Any], owner: str) -> None:
    ctx_a = await seeded(conn, owner)
    standup = await event_id(ctx_a, "Standup")
    ctx_b = ctx_for(conn, owner + "_b")
    assert (await list_events(ctx_b, CalendarListArgs(range="this_week")))["rows"] == []
    with pytest.raises(NotFound):
        await get_event(ctx_b, CalendarGetArgs(event_id=standup))
    with pytest.raises(NotFound):
        await preview_cancel(ctx_b, CalendarCancelArgs(event_id=standup))
    with pytest.raises(NotFound):
        await cancel_event(ctx_b, CalendarCancelArgs(event_id=standup))
    with pytest.raises(NotFound):
        await update_event(ctx_b, CalendarUpdateArgs(event_id=standup, title="Hijacked"))
    item = (await get_event(ctx_a, CalendarGetArgs(event_id=standup)))["item"]
    assert (item["title"], item["status"]) == ("Standup", "confirmed")


async def test_missing_event_is_not_found(conn: AsyncConnection[Any], owner: str) -> None:
    with pytest.raises(NotFound) as raised:
        await get_event(ctx_for(conn, owner), CalendarGetArgs(event_id="evt_missing"))
    assert raised.value.code == "not_found"


async def test_a_day_a_next_week_and_a_word_narrow_the_list(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)  # Mon 30 Nov 2026, Paris
    wednesday = await list_events(ctx, CalendarListArgs(day=date(2026, 12, 2)))
    assert [r["label"].split(" — ")[0] for r in wednesday["rows"]] == ["1:1 with Priya"]
    assert "on Wed 2 Dec" in wednesday["summary"]
    assert (await list_events(ctx, CalendarListArgs(range="next_week")))["rows"] == []  # Mon 7 - Sun 13 Dec
    later = ctx_for(conn, owner, NOW - timedelta(days=7))  # a week earlier, this week's events are next week's
    assert len((await list_events(later, CalendarListArgs(range="next_week", limit=25)))["rows"]) == 5
    with_sam = await list_events(ctx, CalendarListArgs(range="this_week", contains="sam"))
    assert [r["label"].split(" — ")[0] for r in with_sam["rows"]] == ["Lunch with Sam"]
    notes = await list_events(ctx, CalendarListArgs(range="this_week", contains="onboarding"))  # in its notes
    assert [r["label"].split(" — ")[0] for r in notes["rows"]] == ["Design review"]
    assert (await list_events(ctx, CalendarListArgs(range="this_week", contains="%")))["rows"] == []  # literal
