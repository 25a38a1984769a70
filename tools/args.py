"""Closed argument models of the built-in tools.

Bounded by construction: Literal sets, length limits, clamped counts. Owner, account and
tenant are never fields: identity comes from the run context. Id fields accept an item id
from the latest list or a display position (``"#2"``); id validation resolves both against
the server's own list, so neither carries authority.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import AwareDatetime, Field, StringConstraints

from tollgate.policies.arguments import ArgsModel, Count, IdRef, SafeText

__all__ = [
    "CalendarCancelArgs",
    "CalendarCreateArgs",
    "CalendarGetArgs",
    "CalendarListArgs",
    "CalendarUpdateArgs",
    "EmailAddress",
    "MailListArgs",
    "MailMarkReadArgs",
    "MailReadArgs",
    "MailSendArgs",
    "MailTrashArgs",
    "NoteArchiveArgs",
    "NoteCreateArgs",
    "NoteListArgs",
    "NoteReadArgs",
    "NoteUpdateArgs",
    "ReminderCancelArgs",
    "ReminderCreateArgs",
    "ReminderListArgs",
    "ReminderSnoozeArgs",
    "TaskCompleteArgs",
    "TaskCreateArgs",
    "TaskListArgs",
]

EmailAddress = Annotated[
    str,
    StringConstraints(
        min_length=3,
        max_length=254,
        pattern=r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$",
    ),
]
"""A plain ``local@domain`` address (no display names, no comments, no IP literals)."""

CalendarRange = Literal["today", "tomorrow", "this_week", "next_week", "next_7_days", "upcoming"]


class CalendarListArgs(ArgsModel):
    """List calendar events in a window."""

    range: CalendarRange = Field(default="upcoming", description="Which window of events to list.")
    day: date | None = Field(default=None, description="Only events on this day, YYYY-MM-DD (instead of range).")
    contains: SafeText(100) | None = Field(
        default=None, description="Only events whose title, place or notes contain this (a person, a word).")
    limit: Count(1, 25) = Field(default=10, description="Maximum number of events.")


class CalendarGetArgs(ArgsModel):
    """Read one event from the latest calendar list."""

    event_id: IdRef = Field(description="An event id or position ('#2') from the latest calendar list.")


class CalendarCreateArgs(ArgsModel):
    """Create an event."""

    title: SafeText(200) = Field(description="Event title.")
    start: AwareDatetime = Field(description="Start, ISO 8601 with UTC offset, in the owner's timezone.")
    duration_minutes: Count(5, 1440) = Field(default=30, description="Length in minutes.")
    location: SafeText(200, min_length=0) = ""


class CalendarUpdateArgs(ArgsModel):
    """Change an event from the latest calendar list (only the fields given)."""

    event_id: IdRef = Field(description="An event id or position ('#2') from the latest calendar list.")
    title: SafeText(200) | None = None
    start: AwareDatetime | None = None
    duration_minutes: Count(5, 1440) | None = Field(default=None, description="New length in minutes.")
    location: SafeText(200, min_length=0) | None = None


class CalendarCancelArgs(ArgsModel):
    """Cancel (soft, reversible) an event from the latest calendar list."""

    event_id: IdRef = Field(description="An event id or position ('#2') from the latest calendar list.")


MailFolder = Literal["inbox", "sent", "trash"]


class MailListArgs(ArgsModel):
    """List mail messages."""

    folder: MailFolder = "inbox"
    unread_only: bool = False
    from_contains: SafeText(100) | None = Field(default=None, description="Only mail whose sender contains this text.")
    limit: Count(1, 25) = Field(default=10, description="Maximum number of messages.")


class MailReadArgs(ArgsModel):
    """Read one message from the latest mail list."""

    message_id: IdRef = Field(description="A message id or position ('#1') from the latest mail list.")


class MailSendArgs(ArgsModel):
    """Send a message (queued to the outbox after approval)."""

    to: list[EmailAddress] = Field(min_length=1, max_length=10, description="Recipient addresses.")
    subject: SafeText(200) = Field(description="Subject line.")
    body: SafeText(5000) = Field(description="Plain-text body.")


class MailTrashArgs(ArgsModel):
    """Move messages from the latest mail list to the trash (soft, reversible)."""

    message_ids: list[IdRef] = Field(min_length=1, max_length=20, description="Message ids or positions.")


class MailMarkReadArgs(ArgsModel):
    """Mark messages from the latest mail list as read."""

    message_ids: list[IdRef] = Field(min_length=1, max_length=20, description="Message ids or positions.")


TaskStatus = Literal["open", "overdue", "done", "all"]
"""``overdue``: open tasks whose due date has passed."""


class TaskListArgs(ArgsModel):
    """List tasks."""

    status: TaskStatus = "open"
    limit: Count(1, 50) = Field(default=20, description="Maximum number of tasks.")


class TaskCreateArgs(ArgsModel):
    """Create a task."""

    title: SafeText(200) = Field(description="What needs doing.")
    due_date: date | None = Field(default=None, description="Optional due date, YYYY-MM-DD.")


class TaskCompleteArgs(ArgsModel):
    """Mark a task from the latest task list as done (reversible)."""

    task_id: IdRef = Field(description="A task id or position ('#3') from the latest task list.")


ReminderStatus = Literal["scheduled", "all"]


class ReminderListArgs(ArgsModel):
    """List reminders."""

    status: ReminderStatus = "scheduled"
    limit: Count(1, 50) = Field(default=20, description="Maximum number of reminders.")


class ReminderCreateArgs(ArgsModel):
    """Create a reminder."""

    text: SafeText(300) = Field(description="What to be reminded of.")
    due_at: AwareDatetime = Field(description="When, ISO 8601 with UTC offset, in the owner's timezone.")
    repeat: Literal["none", "daily"] = Field(default="none", description="'daily' repeats it every day at the same local time.")


class ReminderCancelArgs(ArgsModel):
    """Cancel (soft) a reminder from the latest reminder list."""

    reminder_id: IdRef = Field(description="A reminder id or position from the latest reminder list.")


class ReminderSnoozeArgs(ArgsModel):
    """Push a reminder from the latest reminder list later."""

    reminder_id: IdRef = Field(description="A reminder id or position from the latest reminder list.")
    minutes: Count(5, 10080) = Field(default=60, description="How many minutes to push it back.")


NoteStatus = Literal["active", "archived", "all"]


class NoteListArgs(ArgsModel):
    """List notes, most recently changed first."""

    status: NoteStatus = "active"
    contains: SafeText(100) | None = Field(default=None, description="Only notes whose title or text contains this.")
    limit: Count(1, 50) = Field(default=20, description="Maximum number of notes.")


class NoteReadArgs(ArgsModel):
    """Read one note."""

    note_id: IdRef = Field(description="A note id or position ('#2') from the latest notes list.")


class NoteCreateArgs(ArgsModel):
    """Write a new note."""

    title: SafeText(200) = Field(description="A short title.")
    body: SafeText(10_000, min_length=0) = Field(default="", description="The note's text.")


class NoteUpdateArgs(ArgsModel):
    """Change a note (only the fields given)."""

    note_id: IdRef = Field(description="A note id or position ('#2') from the latest notes list.")
    title: SafeText(200) | None = None
    body: SafeText(10_000, min_length=0) | None = None


class NoteArchiveArgs(ArgsModel):
    """Archive a note (soft: it can be brought back)."""

    note_id: IdRef = Field(description="A note id or position ('#2') from the latest notes list.")
