"""The reminders tool: list, set, (softly) cancel and snooze reminders.

Cancelling keeps the row (``status = 'cancelled'``). Snoozing pushes the reminder to
``greatest(due_at, now) + minutes`` and schedules it again, so a reminder that already went
off can be snoozed too.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

from tollgate.policies.errors import NotFound
from tollgate.tools._ids import new_id
from tollgate.tools._render import (
    clip,
    count_summary,
    fetch_all,
    fetch_one,
    fmt_duration,
    fmt_when,
    list_result,
    load_owned,
    quoted,
    render_list,
    render_summary,
    write_result,
)
from tollgate.tools.args import ReminderCancelArgs, ReminderCreateArgs, ReminderListArgs, ReminderSnoozeArgs
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, ResultRow, ToolSpec

__all__ = [
    "REMINDERS",
    "cancel_reminder",
    "create_reminder",
    "list_reminders",
    "preview_cancel_reminder",
    "preview_create_reminder",
    "preview_snooze",
    "snooze_reminder",
    "snoozed_due",
]

_TOOL: Final = "reminders"
_KIND: Final = "reminder"
_COLUMNS: Final = "id, text, due_at, status, created_at, updated_at"


def snoozed_due(due_at: datetime, now: datetime, minutes: int) -> datetime:
    """When a snoozed reminder goes off: ``max(due_at, now) + minutes``."""
    return max(due_at, now) + timedelta(minutes=minutes)


def _label(row: dict[str, Any], tz: str) -> str:
    text = f"{clip(row['text'])} — {fmt_when(row['due_at'], tz)}"
    return text + (f" ({row['status']})" if row["status"] != "scheduled" else "")


async def list_reminders(ctx: ExecContext, args: ReminderListArgs) -> ActionResult:
    """Scheduled (or all) reminders, soonest first."""
    where = " AND status = 'scheduled'" if args.status == "scheduled" else ""
    rows = await fetch_all(
        ctx,
        f"SELECT {_COLUMNS} FROM reminders WHERE owner_id = %s{where} ORDER BY due_at, id LIMIT %s",
        (ctx.owner_id, args.limit + 1),
    )
    noun = "scheduled reminder" if args.status == "scheduled" else "reminder"
    shown, summary = count_summary(rows, args.limit, noun)
    result_rows: list[ResultRow] = [{"id": r["id"], "label": _label(r, ctx.timezone)} for r in shown]
    return list_result(_TOOL, "list", "reminders", result_rows, summary)


async def preview_create_reminder(ctx: ExecContext, args: ReminderCreateArgs) -> str:
    """``Set a reminder “Call the bank” for Mon 30 Nov, 17:00``."""
    text = f"Set a reminder {quoted(args.text)} for {fmt_when(args.due_at, ctx.timezone)}"
    if args.repeat == "daily":
        text += ", repeating every day at that time"
    return text + (" (that time has already passed, so it would go off at once)" if args.due_at <= ctx.now else "")


async def create_reminder(ctx: ExecContext, args: ReminderCreateArgs) -> ActionResult:
    """Insert a scheduled reminder."""
    row = await fetch_one(
        ctx,
        "INSERT INTO reminders (id, owner_id, text, due_at, created_at, updated_at, recurrence, recurrence_tz)"
        f" VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
        (new_id("rem"), ctx.owner_id, args.text, args.due_at, ctx.now, ctx.now,
         "daily" if args.repeat == "daily" else None, ctx.timezone),
    )
    assert row is not None  # INSERT ... RETURNING always yields the row
    every = ", every day" if args.repeat == "daily" else ""
    summary = f"Set a reminder {quoted(row['text'])} for {fmt_when(row['due_at'], ctx.timezone)}{every}."
    return write_result(_TOOL, "create", row, 1, summary)


async def _load(ctx: ExecContext, reminder_id: str, *, lock: bool = False) -> dict[str, Any]:
    return await load_owned(ctx, "reminders", _COLUMNS, _KIND, reminder_id, lock=lock)


def _not_scheduled(row: dict[str, Any], tz: str) -> str:
    if row["status"] == "cancelled":
        return "it is already cancelled"
    return f"it already went off ({fmt_when(row['due_at'], tz)})"


async def preview_cancel_reminder(ctx: ExecContext, args: ReminderCancelArgs) -> str:
    """``Cancel the reminder “Call the bank” (Mon 30 Nov, 17:00)``."""
    row = await _load(ctx, args.reminder_id)
    text = f"Cancel the reminder {quoted(row['text'])} ({fmt_when(row['due_at'], ctx.timezone)})"
    if row["status"] != "scheduled":
        text += f" ({_not_scheduled(row, ctx.timezone)}: approving changes nothing)"
    return text


async def cancel_reminder(ctx: ExecContext, args: ReminderCancelArgs) -> ActionResult:
    """Soft-cancel a scheduled reminder; one that is cancelled or already went off is left as it is."""
    row = await _load(ctx, args.reminder_id, lock=True)
    if row["status"] != "scheduled":
        summary = f"The reminder {quoted(row['text'])} was not changed: {_not_scheduled(row, ctx.timezone)}."
        return write_result(_TOOL, "cancel", row, 0, summary)
    updated = await fetch_one(
        ctx,
        "UPDATE reminders SET status = 'cancelled', updated_at = %s"
        f" WHERE owner_id = %s AND id = %s AND status = 'scheduled' RETURNING {_COLUMNS}",
        (ctx.now, ctx.owner_id, row["id"]),
    )
    if updated is None:
        raise NotFound(_KIND, args.reminder_id)
    summary = f"Cancelled the reminder {quoted(updated['text'])} ({fmt_when(updated['due_at'], ctx.timezone)})."
    return write_result(_TOOL, "cancel", updated, 1, summary)


async def preview_snooze(ctx: ExecContext, args: ReminderSnoozeArgs) -> str:
    """``Snooze “Call the bank” (due Mon 30 Nov, 17:00) by 1 hour, to Mon 30 Nov, 18:00``."""
    row = await _load(ctx, args.reminder_id)
    head = f"Snooze {quoted(row['text'])} (due {fmt_when(row['due_at'], ctx.timezone)})"
    if row["status"] == "cancelled":
        return head + " (it is cancelled: approving changes nothing)"
    new_due = snoozed_due(row["due_at"], ctx.now, args.minutes)
    return f"{head} by {fmt_duration(args.minutes)}, to {fmt_when(new_due, ctx.timezone)}"


async def snooze_reminder(ctx: ExecContext, args: ReminderSnoozeArgs) -> ActionResult:
    """Push a scheduled or already-fired reminder later; a cancelled one is left as it is."""
    row = await _load(ctx, args.reminder_id, lock=True)
    if row["status"] == "cancelled":
        summary = f"The reminder {quoted(row['text'])} is cancelled, so it was not snoozed; nothing changed."
        return write_result(_TOOL, "snooze", row, 0, summary)
    updated = await fetch_one(
        ctx,
        "UPDATE reminders SET due_at = greatest(due_at, %s) + %s, status = 'scheduled', updated_at = %s"
        f" WHERE owner_id = %s AND id = %s AND status <> 'cancelled' RETURNING {_COLUMNS}",
        (ctx.now, timedelta(minutes=args.minutes), ctx.now, ctx.owner_id, row["id"]),
    )
    if updated is None:
        raise NotFound(_KIND, args.reminder_id)
    when = fmt_when(updated["due_at"], ctx.timezone)
    summary = f"Snoozed {quoted(updated['text'])} by {fmt_duration(args.minutes)}, to {when}."
    return write_result(_TOOL, "snooze", updated, 1, summary)


_REMINDER_ID = {"reminder_id": "reminders"}

REMINDERS = ToolSpec(
    database=True,
    name=_TOOL,
    description="Your reminders.",
    capability_phrase="set and manage reminders",
    actions=(
        ActionSpec(
            name="list",
            description="List your scheduled (or all) reminders.",
            args=ReminderListArgs,
            tier="allowlist",
            executor=list_reminders,
            renderer=render_list,
            usage_examples=("What reminders do I have?", "Show my reminders", "List all my reminders, old ones too"),
        ),
        ActionSpec(
            name="create",
            description="Set a reminder for a given time (after your approval).",
            args=ReminderCreateArgs,
            tier="confirmation",
            executor=create_reminder,
            renderer=render_summary,
            preview=preview_create_reminder,
            idempotent=False,
            effect="write",
            usage_examples=(
                "Remind me to call the bank at 5pm",
                "Set a reminder for tomorrow at 8:30 to take the bins out",
                "Ping me in 2 hours to stretch",
            ),
        ),
        ActionSpec(
            name="cancel",
            description="Cancel a reminder from the latest reminder list (it is kept).",
            args=ReminderCancelArgs,
            tier="confirmation",
            executor=cancel_reminder,
            renderer=render_summary,
            preview=preview_cancel_reminder,
            id_fields=_REMINDER_ID,
            effect="write",
            usage_examples=("Cancel the bank reminder", "Drop reminder #2", "I don't need the bins reminder anymore"),
        ),
        ActionSpec(
            name="snooze",
            description="Push a reminder from the latest reminder list later by some minutes.",
            args=ReminderSnoozeArgs,
            tier="confirmation",
            executor=snooze_reminder,
            renderer=render_summary,
            preview=preview_snooze,
            id_fields=_REMINDER_ID,
            idempotent=False,
            effect="write",
            usage_examples=(
                "Snooze that for an hour",
                "Push #1 back 15 minutes",
                "Remind me about the bank again in 30 minutes",
            ),
        ),
    ),
)
"""The reminders tool."""
