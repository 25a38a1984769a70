"""The calendar tool: list, read, create, update and (softly) cancel events.

Events live in ``calendar_events``. Cancelling sets ``status = 'cancelled'`` and keeps the row,
so it can be restored; lists never show cancelled events.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any, Final, Protocol

from tollgate.policies.errors import NotFound
from tollgate.tools._ids import new_id
from tollgate.tools._render import (
    clip,
    escape_like,
    fetch_all,
    fetch_one,
    fmt_day,
    fmt_span,
    fmt_when,
    item_result,
    list_result,
    load_owned,
    local,
    plural,
    quoted,
    render_list,
    render_summary,
    write_result,
    zone,
)
from tollgate.tools.args import (
    CalendarCancelArgs,
    CalendarCreateArgs,
    CalendarGetArgs,
    CalendarListArgs,
    CalendarUpdateArgs,
)
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, ResultRow, ToolSpec

__all__ = [
    "CALENDAR",
    "TABLE",
    "EventStore",
    "RANGE_PHRASE",
    "calendar_window",
    "cancel_event",
    "cancelled_result",
    "create_event",
    "created_result",
    "event_item",
    "event_label",
    "get_event",
    "list_events",
    "list_of",
    "list_window",
    "plan_update",
    "preview_cancel",
    "preview_create",
    "preview_update",
    "render_get",
    "update_event",
]

_TOOL: Final = "calendar"
_COLUMNS: Final = "id, title, starts_at, ends_at, location, description, status"

RANGE_PHRASE = {
    "today": "today",
    "tomorrow": "tomorrow",
    "this_week": "this week",
    "next_week": "next week",
    "next_7_days": "in the next 7 days",
    "upcoming": "coming up",
}


def calendar_window(range_: str, now: datetime, tz: str) -> tuple[datetime, datetime | None]:
    """The ``[start, end)`` window of a list range, in the owner's timezone (``None``: open end).

    ``this_week`` runs from the start of today through Sunday; ``next_7_days`` and
    ``upcoming`` start now, so an event already over is left out but one in progress is kept.
    """
    today = local(now, tz).date()

    def midnight(day: date) -> datetime:
        return datetime.combine(day, time(), tzinfo=zone(tz))

    if range_ == "today":
        return midnight(today), midnight(today + timedelta(days=1))
    if range_ == "tomorrow":
        return midnight(today + timedelta(days=1)), midnight(today + timedelta(days=2))
    if range_ == "this_week":
        return midnight(today), midnight(today + timedelta(days=7 - today.weekday()))
    if range_ == "next_week":
        monday = today + timedelta(days=7 - today.weekday())
        return midnight(monday), midnight(monday + timedelta(days=7))
    if range_ == "next_7_days":
        return now, now + timedelta(days=7)
    return now, None


def event_label(row: dict[str, Any], tz: str) -> str:
    text = f"{clip(row['title'])} — {fmt_span(row['starts_at'], row['ends_at'], tz)}"
    return text + f" ({clip(row['location'], 60)})" if row["location"] else text


def event_item(row: dict[str, Any], tz: str) -> dict[str, Any]:
    return {
        "id": row["id"],
        "title": row["title"],
        "start": row["starts_at"],
        "end": row["ends_at"],
        "location": row["location"],
        "description": row["description"],
        "status": row["status"],
        "when": fmt_span(row["starts_at"], row["ends_at"], tz),
    }


class EventStore(Protocol):
    """Where an owner's events are: Tollgate's own table (:data:`TABLE`), or their CalDAV server
    (``tools.connectors.caldav_calendar``). Rows are dicts with ``id``, ``title``, ``starts_at``,
    ``ends_at``, ``location``, ``description`` and ``status`` (``confirmed`` or ``cancelled``)."""

    id_kind: str
    """The kind its ids are (``calendar`` for Tollgate's table); what the thread binds them as."""

    async def load(self, ctx: ExecContext, event_id: str, *, lock: bool = False) -> dict[str, Any]:
        """One of the owner's events; :class:`NotFound` otherwise."""
        ...

    async def window(self, ctx: ExecContext, start: datetime, end: datetime | None, contains: str | None,
                     limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` confirmed events overlapping ``[start, end)``, earliest first."""
        ...

    async def overlaps(self, ctx: ExecContext, start: datetime, end: datetime, skip: str = "") -> list[dict[str, Any]]:
        """Up to 3 confirmed events other than ``skip`` overlapping ``[start, end)``."""
        ...

    async def insert(self, ctx: ExecContext, title: str, start: datetime, end: datetime, location: str) -> dict[str, Any]:
        """A new confirmed event (once per ``ctx.idempotency_key``)."""
        ...

    async def change(self, ctx: ExecContext, row: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        """``row`` with ``new``'s title, times and location; ``None`` when it is gone."""
        ...

    async def cancel(self, ctx: ExecContext, row: dict[str, Any]) -> dict[str, Any] | None:
        """``row`` marked cancelled (kept); ``None`` when it is gone or was cancelled meanwhile."""
        ...


class _Table:
    """The owner's events in ``calendar_events`` (the call's connection, scoped to its owner)."""

    id_kind = _TOOL

    async def load(self, ctx: ExecContext, event_id: str, *, lock: bool = False) -> dict[str, Any]:
        return await load_owned(ctx, "calendar_events", _COLUMNS, "calendar event", event_id, lock=lock)

    async def window(self, ctx: ExecContext, start: datetime, end: datetime | None, contains: str | None,
                     limit: int) -> list[dict[str, Any]]:
        pattern = f"%{escape_like(contains)}%" if contains else None
        return await fetch_all(
            ctx,
            f"SELECT {_COLUMNS} FROM calendar_events"
            " WHERE owner_id = %s AND status = 'confirmed' AND ends_at > %s"
            " AND (%s::timestamptz IS NULL OR starts_at < %s)"
            " AND (%s::text IS NULL OR title ILIKE %s OR location ILIKE %s OR description ILIKE %s)"
            " ORDER BY starts_at, id LIMIT %s",
            (ctx.owner_id, start, end, end, pattern, pattern, pattern, pattern, limit),
        )

    async def overlaps(self, ctx: ExecContext, start: datetime, end: datetime, skip: str = "") -> list[dict[str, Any]]:
        return await fetch_all(
            ctx,
            "SELECT title, starts_at, ends_at FROM calendar_events"
            " WHERE owner_id = %s AND status = 'confirmed' AND id <> %s AND starts_at < %s AND ends_at > %s"
            " ORDER BY starts_at, id LIMIT 3",
            (ctx.owner_id, skip, end, start),
        )

    async def insert(self, ctx: ExecContext, title: str, start: datetime, end: datetime, location: str) -> dict[str, Any]:
        row = await fetch_one(
            ctx,
            f"INSERT INTO calendar_events (id, owner_id, title, starts_at, ends_at, location, created_at, updated_at)"
            f" VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
            (new_id("evt"), ctx.owner_id, title, start, end, location, ctx.now, ctx.now),
        )
        assert row is not None  # INSERT ... RETURNING always yields the row
        return row

    async def change(self, ctx: ExecContext, row: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        return await fetch_one(
            ctx,
            "UPDATE calendar_events SET title = %s, starts_at = %s, ends_at = %s, location = %s, updated_at = %s"
            f" WHERE owner_id = %s AND id = %s RETURNING {_COLUMNS}",
            (new["title"], new["starts_at"], new["ends_at"], new["location"], ctx.now, ctx.owner_id, row["id"]),
        )

    async def cancel(self, ctx: ExecContext, row: dict[str, Any]) -> dict[str, Any] | None:
        return await fetch_one(
            ctx,
            "UPDATE calendar_events SET status = 'cancelled', updated_at = %s"
            f" WHERE owner_id = %s AND id = %s AND status = 'confirmed' RETURNING {_COLUMNS}",
            (ctx.now, ctx.owner_id, row["id"]),
        )


TABLE: Final[EventStore] = _Table()
"""Tollgate's own events table: the embedded default."""


def list_window(ctx: ExecContext, args: CalendarListArgs) -> tuple[datetime, datetime | None, str]:
    """The ``[start, end)`` a list covers (``day``'s, else the range's) and how a summary names it."""
    if args.day is not None:
        start = datetime.combine(args.day, time(), tzinfo=zone(ctx.timezone))
        end = datetime.combine(args.day + timedelta(days=1), time(), tzinfo=zone(ctx.timezone))
        return start, end, f"on {fmt_day(args.day)}"
    start, open_end = calendar_window(args.range, ctx.now, ctx.timezone)
    return start, open_end, RANGE_PHRASE[args.range]


def list_of(ctx: ExecContext, args: CalendarListArgs, rows: list[dict[str, Any]], phrase: str,
            id_kind: str) -> ActionResult:
    """The list result of ``rows`` (up to ``limit + 1`` events, earliest first, ids of ``id_kind``)."""
    if args.contains:
        phrase += f" with “{clip(args.contains, 40)}”"
    shown = rows[: args.limit]
    if not shown:
        summary = f"You have no events {phrase}."
    elif len(rows) > args.limit:
        summary = f"You have more than {plural(args.limit, 'event')} {phrase}; here are the first {args.limit}."
    else:
        summary = f"You have {plural(len(shown), 'event')} {phrase}."
    result_rows: list[ResultRow] = [{"id": r["id"], "label": event_label(r, ctx.timezone)} for r in shown]
    return list_result(_TOOL, "list", id_kind, result_rows, summary)


async def list_events(ctx: ExecContext, args: CalendarListArgs, store: EventStore = TABLE) -> ActionResult:
    """Confirmed events overlapping the window (``day``'s, else the range's), earliest first;
    with ``contains``, only those whose title, place or notes contain it."""
    start, end, phrase = list_window(ctx, args)
    rows = await store.window(ctx, start, end, args.contains, args.limit + 1)
    return list_of(ctx, args, rows, phrase, store.id_kind)


async def get_event(ctx: ExecContext, args: CalendarGetArgs, store: EventStore = TABLE) -> ActionResult:
    """One event with its details."""
    row = await store.load(ctx, args.event_id)
    when = fmt_span(row["starts_at"], row["ends_at"], ctx.timezone)
    summary = f"{quoted(row['title'])} is on {when}"
    if row["location"]:
        summary += f" at {clip(row['location'], 60)}"
    summary += " (cancelled)." if row["status"] == "cancelled" else "."
    return item_result(_TOOL, "get", event_item(row, ctx.timezone), summary, id_kind=store.id_kind)


def render_get(result: ActionResult) -> str:
    notes = (result.get("item") or {}).get("description") or ""
    return result["summary"] + (f"\nNotes: {clip(notes, 500)}" if notes else "")


def _overlap_note(rows: list[dict[str, Any]], tz: str) -> str:
    if not rows:
        return ""
    names = ", ".join(f"{quoted(r['title'])} ({fmt_span(r['starts_at'], r['ends_at'], tz)})" for r in rows)
    return f"\nIt overlaps {names}."


async def preview_create(ctx: ExecContext, args: CalendarCreateArgs, store: EventStore = TABLE) -> str:
    """``Create “Title” on Mon 30 Nov, 09:00–09:30 at Room 1``, noting overlapping events."""
    end = args.start + timedelta(minutes=args.duration_minutes)
    text = f"Create {quoted(args.title)} on {fmt_span(args.start, end, ctx.timezone)}"
    text += f" at {clip(args.location, 60)}" if args.location else ""
    return text + _overlap_note(await store.overlaps(ctx, args.start, end), ctx.timezone)


async def create_event(ctx: ExecContext, args: CalendarCreateArgs, store: EventStore = TABLE) -> ActionResult:
    """Add a confirmed event."""
    end = args.start + timedelta(minutes=args.duration_minutes)
    return created_result(ctx, await store.insert(ctx, args.title, args.start, end, args.location), store.id_kind)


def created_result(ctx: ExecContext, row: dict[str, Any], id_kind: str) -> ActionResult:
    """The result of creating ``row``, an event of ``id_kind`` (also what a reconciled create records)."""
    when = fmt_span(row["starts_at"], row["ends_at"], ctx.timezone)
    where = f" at {clip(row['location'], 60)}" if row["location"] else ""
    summary = f"Created {quoted(row['title'])} on {when}{where}."
    return write_result(_TOOL, "create", event_item(row, ctx.timezone), 1, summary, id_kind=id_kind)


def plan_update(row: dict[str, Any], args: CalendarUpdateArgs, tz: str) -> tuple[dict[str, Any], list[str]]:
    """The event's new values and one phrase per field that really changes."""
    title = args.title if args.title is not None else row["title"]
    start = args.start if args.start is not None else row["starts_at"]
    length = (
        timedelta(minutes=args.duration_minutes)
        if args.duration_minutes is not None
        else row["ends_at"] - row["starts_at"]
    )
    location = args.location if args.location is not None else row["location"]
    new = {"title": title, "starts_at": start, "ends_at": start + length, "location": location}
    changes: list[str] = []
    if title != row["title"]:
        changes.append(f"title {quoted(row['title'])} → {quoted(title)}")
    if new["starts_at"] != row["starts_at"] or new["ends_at"] != row["ends_at"]:
        old_span = fmt_span(row["starts_at"], row["ends_at"], tz)
        changes.append(f"time {old_span} → {fmt_span(new['starts_at'], new['ends_at'], tz)}")
    if location != row["location"]:
        old_place = quoted(row["location"]) if row["location"] else "none"
        changes.append(f"location {old_place} → {quoted(location) if location else 'none'}")
    return new, changes


async def preview_update(ctx: ExecContext, args: CalendarUpdateArgs, store: EventStore = TABLE) -> str:
    """``Update “Standup” (Mon 30 Nov, 09:00–09:15): time … → …``."""
    row = await store.load(ctx, args.event_id)
    new, changes = plan_update(row, args, ctx.timezone)
    head = f"Update {quoted(row['title'])} ({fmt_span(row['starts_at'], row['ends_at'], ctx.timezone)})"
    if not changes:
        return head + ": nothing would change."
    note = "\nThe event stays cancelled." if row["status"] == "cancelled" else ""
    overlaps = await store.overlaps(ctx, new["starts_at"], new["ends_at"], skip=row["id"])
    return head + ": " + "; ".join(changes) + note + _overlap_note(overlaps, ctx.timezone)


async def update_event(ctx: ExecContext, args: CalendarUpdateArgs, store: EventStore = TABLE) -> ActionResult:
    """Change only the given fields; the end follows the start and the (new or kept) duration."""
    row = await store.load(ctx, args.event_id, lock=True)
    new, changes = plan_update(row, args, ctx.timezone)
    if not changes:
        when = fmt_when(row["starts_at"], ctx.timezone)
        summary = f"{quoted(row['title'])} ({when}) already has those details; nothing changed."
        return write_result(_TOOL, "update", event_item(row, ctx.timezone), 0, summary, id_kind=store.id_kind)
    updated = await store.change(ctx, row, new)
    if updated is None:
        raise NotFound("calendar event", args.event_id)
    summary = f"Updated {quoted(updated['title'])}: " + "; ".join(changes) + "."
    if updated["status"] == "cancelled":
        summary += " It stays cancelled."
    return write_result(_TOOL, "update", event_item(updated, ctx.timezone), 1, summary, id_kind=store.id_kind)


async def preview_cancel(ctx: ExecContext, args: CalendarCancelArgs, store: EventStore = TABLE) -> str:
    """``Cancel “Standup” on Mon 30 Nov, 09:00–09:15``."""
    row = await store.load(ctx, args.event_id)
    text = f"Cancel {quoted(row['title'])} on {fmt_span(row['starts_at'], row['ends_at'], ctx.timezone)}"
    text += f" at {clip(row['location'], 60)}" if row["location"] else ""
    if row["status"] == "cancelled":
        text += " (it is already cancelled: approving changes nothing)"
    return text


async def cancel_event(ctx: ExecContext, args: CalendarCancelArgs, store: EventStore = TABLE) -> ActionResult:
    """Soft-cancel: mark the event cancelled and keep it; a second cancel changes nothing."""
    row = await store.load(ctx, args.event_id, lock=True)
    label = f"{quoted(row['title'])} ({fmt_when(row['starts_at'], ctx.timezone)})"
    if row["status"] == "cancelled":
        return write_result(_TOOL, "cancel_event", event_item(row, ctx.timezone), 0,
                            f"{label} was already cancelled; nothing changed.", id_kind=store.id_kind)
    updated = await store.cancel(ctx, row)
    if updated is None:
        raise NotFound("calendar event", args.event_id)
    return cancelled_result(ctx, updated, store.id_kind)


def cancelled_result(ctx: ExecContext, row: dict[str, Any], id_kind: str) -> ActionResult:
    """The result of cancelling ``row``, an event of ``id_kind`` (also what a reconciled cancel records)."""
    label = f"{quoted(row['title'])} ({fmt_when(row['starts_at'], ctx.timezone)})"
    return write_result(_TOOL, "cancel_event", event_item(row, ctx.timezone), 1, f"Cancelled {label}.",
                        id_kind=id_kind)


_EVENT_ID = {"event_id": "calendar"}

CALENDAR = ToolSpec(
    database=True,
    name=_TOOL,
    description="Your calendar of events.",
    capability_phrase="check and manage your calendar",
    actions=(
        ActionSpec(
            name="list",
            description="List your events today, tomorrow, this week, in the next 7 days or coming up.",
            args=CalendarListArgs,
            tier="allowlist",
            executor=list_events,
            renderer=render_list,
            usage_examples=("What's on my calendar today?", "Do I have anything tomorrow?", "Show me my week"),
        ),
        ActionSpec(
            name="get",
            description="Show the details of one event from the latest calendar list.",
            args=CalendarGetArgs,
            tier="allowlist",
            executor=get_event,
            renderer=render_get,
            id_fields=_EVENT_ID,
            third_party_fields=("description",),
            usage_examples=("Tell me more about the 2nd one", "Where is the design review?", "Details of #1"),
        ),
        ActionSpec(
            name="create",
            description="Create a new event (after your approval).",
            args=CalendarCreateArgs,
            tier="confirmation",
            executor=create_event,
            renderer=render_summary,
            preview=preview_create,
            idempotent=False,
            effect="write",
            usage_examples=(
                "Add lunch with Sam tomorrow at 12:30",
                "Put a dentist appointment on Friday at 10",
                "Schedule a 1-hour meeting with Priya on Monday at 14:00",
            ),
        ),
        ActionSpec(
            name="update",
            description="Change the title, time, length or place of an event from the latest calendar list.",
            args=CalendarUpdateArgs,
            tier="confirmation",
            executor=update_event,
            renderer=render_summary,
            preview=preview_update,
            id_fields=_EVENT_ID,
            effect="write",
            usage_examples=(
                "Move the standup to 9:30",
                "Make the design review 90 minutes",
                "Change the location of #2 to Room 4",
            ),
        ),
        ActionSpec(
            name="cancel_event",
            description="Cancel an event from the latest calendar list (it is kept and can be restored).",
            args=CalendarCancelArgs,
            tier="confirmation",
            executor=cancel_event,
            renderer=render_summary,
            preview=preview_cancel,
            id_fields=_EVENT_ID,
            effect="write",
            usage_examples=("Cancel the standup", "Cancel my 3pm meeting", "Call off the 2nd one"),
        ),
    ),
)
"""The calendar tool."""
