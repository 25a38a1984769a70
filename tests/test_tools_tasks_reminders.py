"""The tasks and reminders tools against real PostgreSQL, and the demo seed."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from psycopg import AsyncConnection

from tollgate.policies.errors import NotFound
from tollgate.tools._ids import new_id
from tollgate.tools.args import (
    ReminderCancelArgs,
    ReminderCreateArgs,
    ReminderListArgs,
    ReminderSnoozeArgs,
    TaskCompleteArgs,
    TaskCreateArgs,
    TaskListArgs,
)
from tollgate.tools.demo import seed_demo
from tollgate.tools.registry import ExecContext
from tollgate.tools.reminders import (
    REMINDERS,
    cancel_reminder,
    create_reminder,
    list_reminders,
    preview_cancel_reminder,
    preview_create_reminder,
    preview_snooze,
    snooze_reminder,
    snoozed_due,
)
from tollgate.tools.tasks import TASKS, complete_task, create_task, list_tasks, preview_complete, preview_create_task

PARIS = ZoneInfo("Europe/Paris")
NOW = datetime(2026, 11, 30, 8, 0, tzinfo=PARIS)


def ctx_for(conn: AsyncConnection[Any], owner: str) -> ExecContext:
    return ExecContext(owner_id=owner, timezone="Europe/Paris", now=NOW, conn=conn)


async def seeded(conn: AsyncConnection[Any], owner: str) -> ExecContext:
    assert await seed_demo(conn, owner, NOW, "Europe/Paris")
    return ctx_for(conn, owner)


def ids_by_label(result: Any) -> dict[str, str]:
    return {r["label"].split(" — ")[0]: r["id"] for r in result["rows"]}


async def add_reminder(ctx: ExecContext, text: str, due_at: datetime, status: str = "scheduled") -> str:
    reminder_id = new_id("rem")
    await ctx.conn.execute(
        "INSERT INTO reminders (id, owner_id, text, due_at, status) VALUES (%s, %s, %s, %s, %s)",
        (reminder_id, ctx.owner_id, text, due_at, status),
    )
    return reminder_id


# --- tasks -------------------------------------------------------------------------------


async def test_task_lists_by_status_soonest_due_first(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    open_ = await list_tasks(ctx, TaskListArgs())
    assert open_["list_kind"] == "tasks"
    assert TASKS.actions[0].renderer(open_) == (
        "You have 3 open tasks:\n"
        "1. Send the quarterly report — due Wed 2 Dec\n"
        "2. Book flights to Lisbon — due Sun 6 Dec\n"
        "3. Buy a birthday present for Sam"
    )
    done = await list_tasks(ctx, TaskListArgs(status="done"))
    assert [r["label"] for r in done["rows"]] == ["Renew passport — done"]
    every = await list_tasks(ctx, TaskListArgs(status="all"))
    assert [r["label"] for r in every["rows"]][-1] == "Renew passport — done" and len(every["rows"]) == 4
    empty = await list_tasks(ctx_for(conn, owner + "_empty"), TaskListArgs())
    assert TASKS.actions[0].renderer(empty) == "You have no open tasks."


async def test_overdue_lists_the_open_tasks_due_before_the_owners_today(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    assert (await list_tasks(ctx, TaskListArgs(status="overdue")))["rows"] == []  # the demo's are due later
    await create_task(ctx, TaskCreateArgs(title="Pay the rent", due_date=NOW.date() - timedelta(days=1)))
    await create_task(ctx, TaskCreateArgs(title="Due today", due_date=NOW.date()))
    overdue = await list_tasks(ctx, TaskListArgs(status="overdue"))
    assert list(ids_by_label(overdue)) == ["Pay the rent"]
    assert "overdue task" in overdue["summary"]


async def test_task_create_and_soft_complete(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = ctx_for(conn, owner)
    args = TaskCreateArgs(title="Buy milk", due_date=date(2026, 12, 1))
    assert await preview_create_task(ctx, args) == "Add the task “Buy milk”, due Tue 1 Dec"
    created = await create_task(ctx, args)
    assert created["changed"] == 1 and created["item"]["due_date"] == "2026-12-01"
    assert created["summary"] == "Added the task “Buy milk”, due Tue 1 Dec."
    task = TaskCompleteArgs(task_id=created["item"]["id"])
    assert await preview_complete(ctx, task) == "Mark “Buy milk” (due Tue 1 Dec) as done"
    done = await complete_task(ctx, task)
    assert done["changed"] == 1 and done["summary"] == "Marked “Buy milk” as done."
    cur = await conn.execute("SELECT status, completed_at FROM tasks WHERE id = %s", (task.task_id,))
    assert await cur.fetchone() == {"status": "done", "completed_at": NOW}
    again = await complete_task(ctx, task)
    assert again["changed"] == 0 and again["summary"] == "“Buy milk” was already done; nothing changed."
    assert (await list_tasks(ctx, TaskListArgs()))["rows"] == []


async def test_tasks_of_another_owner_are_not_found(conn: AsyncConnection[Any], owner: str) -> None:
    ctx_a = await seeded(conn, owner)
    report = ids_by_label(await list_tasks(ctx_a, TaskListArgs()))["Send the quarterly report"]
    ctx_b = ctx_for(conn, owner + "_b")
    assert (await list_tasks(ctx_b, TaskListArgs(status="all")))["rows"] == []
    with pytest.raises(NotFound):
        await preview_complete(ctx_b, TaskCompleteArgs(task_id=report))
    with pytest.raises(NotFound):
        await complete_task(ctx_b, TaskCompleteArgs(task_id=report))
    cur = await conn.execute("SELECT status FROM tasks WHERE id = %s", (report,))
    assert await cur.fetchone() == {"status": "open"}


# --- reminders ---------------------------------------------------------------------------


async def test_reminder_list_and_create(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    result = await list_reminders(ctx, ReminderListArgs())
    assert REMINDERS.actions[0].renderer(result) == (
        "You have 2 scheduled reminders:\n1. Call the bank — Mon 30 Nov, 17:00\n2. Take out the bins — Tue 1 Dec, 19:30"
    )
    args = ReminderCreateArgs(text="Stretch", due_at=datetime(2026, 11, 30, 10, 0, tzinfo=PARIS))
    assert await preview_create_reminder(ctx, args) == "Set a reminder “Stretch” for Mon 30 Nov, 10:00"
    past = ReminderCreateArgs(text="Too late", due_at=NOW - timedelta(minutes=1))
    assert "already passed" in await preview_create_reminder(ctx, past)
    created = await create_reminder(ctx, args)
    assert created["changed"] == 1 and created["item"]["id"].startswith("rem_")
    assert created["summary"] == "Set a reminder “Stretch” for Mon 30 Nov, 10:00."
    assert list(ids_by_label(await list_reminders(ctx, ReminderListArgs()))) == [
        "Stretch", "Call the bank", "Take out the bins"
    ]


async def test_reminder_cancel_is_soft_and_repeat_changes_nothing(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    bank = ids_by_label(await list_reminders(ctx, ReminderListArgs()))["Call the bank"]
    args = ReminderCancelArgs(reminder_id=bank)
    assert await preview_cancel_reminder(ctx, args) == "Cancel the reminder “Call the bank” (Mon 30 Nov, 17:00)"
    first = await cancel_reminder(ctx, args)
    assert first["changed"] == 1 and first["summary"] == "Cancelled the reminder “Call the bank” (Mon 30 Nov, 17:00)."
    assert bank not in ids_by_label(await list_reminders(ctx, ReminderListArgs())).values()
    every = await list_reminders(ctx, ReminderListArgs(status="all"))
    assert "Call the bank — Mon 30 Nov, 17:00 (cancelled)" in [r["label"] for r in every["rows"]]
    again = await cancel_reminder(ctx, args)
    assert again["changed"] == 0
    assert again["summary"] == "The reminder “Call the bank” was not changed: it is already cancelled."


async def test_snooze_pushes_from_the_later_of_due_and_now(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = ctx_for(conn, owner)
    future = await add_reminder(ctx, "Call the bank", datetime(2026, 11, 30, 17, 0, tzinfo=PARIS))
    overdue = await add_reminder(ctx, "Water the plants", datetime(2026, 11, 30, 7, 0, tzinfo=PARIS))
    fired = await add_reminder(ctx, "Stand up", datetime(2026, 11, 30, 7, 30, tzinfo=PARIS), status="fired")
    cancelled = await add_reminder(ctx, "Old", datetime(2026, 11, 30, 9, 0, tzinfo=PARIS), status="cancelled")

    args = ReminderSnoozeArgs(reminder_id=future, minutes=60)
    assert await preview_snooze(ctx, args) == (
        "Snooze “Call the bank” (due Mon 30 Nov, 17:00) by 1 hour, to Mon 30 Nov, 18:00"
    )
    pushed = await snooze_reminder(ctx, args)
    assert pushed["changed"] == 1 and pushed["summary"] == "Snoozed “Call the bank” by 1 hour, to Mon 30 Nov, 18:00."
    late = await snooze_reminder(ctx, ReminderSnoozeArgs(reminder_id=overdue, minutes=30))
    assert datetime.fromisoformat(late["item"]["due_at"]) == NOW + timedelta(minutes=30)
    again = await snooze_reminder(ctx, ReminderSnoozeArgs(reminder_id=fired, minutes=15))
    assert again["item"]["status"] == "scheduled"
    assert datetime.fromisoformat(again["item"]["due_at"]) == NOW + timedelta(minutes=15)
    refused = await snooze_reminder(ctx, ReminderSnoozeArgs(reminder_id=cancelled, minutes=15))
    assert refused["changed"] == 0 and "nothing changed" in refused["summary"]
    assert datetime.fromisoformat(refused["item"]["due_at"]) == datetime(2026, 11, 30, 9, 0, tzinfo=PARIS)


def test_snoozed_due_math() -> None:
    due = datetime(2026, 11, 30, 17, 0, tzinfo=PARIS)
    assert snoozed_due(due, NOW, 90) == datetime(2026, 11, 30, 18, 30, tzinfo=PARIS)
    assert snoozed_due(NOW - timedelta(hours=3), NOW, 5) == NOW + timedelta(minutes=5)


async def test_reminders_of_another_owner_are_not_found(conn: AsyncConnection[Any], owner: str) -> None:
    ctx_a = await seeded(conn, owner)
    bank = ids_by_label(await list_reminders(ctx_a, ReminderListArgs()))["Call the bank"]
    ctx_b = ctx_for(conn, owner + "_b")
    assert (await list_reminders(ctx_b, ReminderListArgs(status="all")))["rows"] == []
    cancel, snooze = ReminderCancelArgs(reminder_id=bank), ReminderSnoozeArgs(reminder_id=bank)
    with pytest.raises(NotFound):
        await preview_cancel_reminder(ctx_b, cancel)
    with pytest.raises(NotFound):
        await cancel_reminder(ctx_b, cancel)
    with pytest.raises(NotFound):
        await preview_snooze(ctx_b, snooze)
    with pytest.raises(NotFound):
        await snooze_reminder(ctx_b, snooze)
    cur = await conn.execute("SELECT status, due_at FROM reminders WHERE id = %s", (bank,))
    assert await cur.fetchone() == {"status": "scheduled", "due_at": datetime(2026, 11, 30, 17, 0, tzinfo=PARIS)}


# --- demo seed ---------------------------------------------------------------------------


async def test_demo_seeds_once_and_never_into_existing_data(conn: AsyncConnection[Any], owner: str) -> None:
    assert await seed_demo(conn, owner, NOW, "Europe/Paris") is True
    assert await seed_demo(conn, owner, NOW, "Europe/Paris") is False
    cur = await conn.execute(
        "SELECT (SELECT count(*) FROM calendar_events WHERE owner_id = %(o)s) AS events,"
        " (SELECT count(*) FROM mail_messages WHERE owner_id = %(o)s) AS mail,"
        " (SELECT count(*) FROM tasks WHERE owner_id = %(o)s) AS tasks,"
        " (SELECT count(*) FROM reminders WHERE owner_id = %(o)s) AS reminders",
        {"o": owner},
    )
    assert await cur.fetchone() == {"events": 6, "mail": 7, "tasks": 4, "reminders": 2}
    other = owner + "_own"
    await create_task(ctx_for(conn, other), TaskCreateArgs(title="My own task"))
    assert await seed_demo(conn, other, NOW, "Europe/Paris") is False
    assert [r["label"] for r in (await list_tasks(ctx_for(conn, other), TaskListArgs()))["rows"]] == ["My own task"]
