"""The multi-step tasks: each a request, the steps a model that follows it takes, and a check
of the stores' final state (SQL over the owner's rows, ``%(o)s``; one boolean ``ok``).

Our own cases, in the style of multi-step agent benchmarks, over the built-in tools and the
demo data (Monday 30 November 2026, 10:00 in Paris; see ``tools/demo.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tollgate.evals.tasks.model import Calls, Item, Row, Say, Step

__all__ = ["TASKS", "Task"]


@dataclass(frozen=True)
class Task:
    """One task."""

    name: str
    request: str
    script: tuple[Step, ...]
    check: str
    """SQL returning one row with a boolean ``ok``: the task's effect is in the stores, and nothing else changed."""


def _c(*pairs: tuple[str, dict[str, Any]]) -> Calls:
    return Calls(tuple(pairs))


def _one(name: str, **args: Any) -> Calls:
    return Calls(((name, args),))


SAM, PRIYA, ALEX = "sam@example.com", "priya@example.org", "alex@example.com"
TODAY, TUE, WED, FRI, NEXT_MON = "2026-11-30", "2026-12-01", "2026-12-02", "2026-12-04", "2026-12-07"


def _at(day: str, hhmm: str) -> str:
    return f"{day}T{hhmm}:00+01:00"


def _sent(to: str, subject_like: str, body_like: str = "%") -> str:
    return (f"EXISTS (SELECT 1 FROM mail_outbox WHERE owner_id = %(o)s AND '{to}' = ANY(to_addrs)"
            f" AND subject ILIKE '{subject_like}' AND body ILIKE '{body_like}')")


def _event(title: str, status: str = "confirmed", start: str | None = None) -> str:
    at = f" AND starts_at = '{start}'::timestamptz" if start else ""
    return f"EXISTS (SELECT 1 FROM calendar_events WHERE owner_id = %(o)s AND title = '{title}' AND status = '{status}'{at})"


def _task(title_like: str, status: str = "open", due: str | None = None) -> str:
    on = f" AND due_date = '{due}'" if due else ""
    return f"EXISTS (SELECT 1 FROM tasks WHERE owner_id = %(o)s AND title ILIKE '{title_like}' AND status = '{status}'{on})"


def _reminder(text_like: str, due: str, repeat: str | None = None) -> str:
    every = f"recurrence = '{repeat}'" if repeat else "recurrence IS NULL"
    return (f"EXISTS (SELECT 1 FROM reminders WHERE owner_id = %(o)s AND text ILIKE '{text_like}'"
            f" AND due_at = '{due}'::timestamptz AND {every})")


def _note(title: str, body_like: str = "%", status: str = "active") -> str:
    return (f"EXISTS (SELECT 1 FROM notes WHERE owner_id = %(o)s AND title = '{title}' AND body ILIKE '{body_like}'"
            f" AND status = '{status}')")


def _mail(subject: str, condition: str) -> str:
    return f"EXISTS (SELECT 1 FROM mail_messages WHERE owner_id = %(o)s AND subject = '{subject}' AND {condition})"


def _outbox(n: int) -> str:
    return f"(SELECT count(*) FROM mail_outbox WHERE owner_id = %(o)s) = {n}"


def _all(*parts: str) -> str:
    return _escaped("SELECT (" + " AND ".join(parts) + ") AS ok")


def _escaped(sql: str) -> str:
    """LIKE wildcards doubled for the driver's placeholder syntax (``%(o)s`` stays a placeholder)."""
    return re.sub(r"%(?!\(o\)s)", "%%", sql)


TASKS: tuple[Task, ...] = (
    Task("reply-to-sam", "find Sam's mail about lunch and reply that I'll be there",
         (_one("mail__list", from_contains="sam"), _one("mail__read", message_id=Row("Lunch today?")),
          _one("mail__send", to=[SAM], subject="Re: Lunch today?", body="Yes, I'll be there at 12:30."),
          Say("I read Sam's mail and sent your reply.")),
         _all(_sent(SAM, "Re: Lunch today?", "%12:30%"), _outbox(1))),
    Task("priya-notes-to-task", "read Priya's notes for the design review and add a task for the first point",
         (_one("mail__list", from_contains="priya"), _one("mail__read", message_id=Row("Notes for the design review")),
          _one("tasks__create", title="Shorten the sign-up form"), Say("I added the task.")),
         _all(_task("Shorten the sign-up form"))),
    Task("cancel-lunch-tell-sam", "cancel my lunch with Sam today and tell him",
         (_one("calendar__list", range="today"),
          _c(("calendar__cancel_event", {"event_id": Row("Lunch with Sam")}),
             ("mail__send", {"to": [SAM], "subject": "Lunch", "body": "Sorry, I have to cancel today's lunch."})),
          Say("I cancelled the lunch and wrote to Sam.")),
         _all(_event("Lunch with Sam", "cancelled"), _sent(SAM, "Lunch", "%cancel%"))),
    Task("move-review-tell-priya", "move the design review to 16:00 and tell Priya",
         (_one("calendar__list", range="today"),
          _c(("calendar__update", {"event_id": Row("Design review"), "start": _at(TODAY, "16:00")}),
             ("mail__send", {"to": [PRIYA], "subject": "Design review moved", "body": "It now starts at 16:00."})),
          Say("Moved, and Priya knows.")),
         _all(_event("Design review", start=_at(TODAY, "16:00")), _sent(PRIYA, "Design review moved"))),
    Task("invoice-task", "add a task to pay the billing invoice, due when the mail says",
         (_one("mail__list", from_contains="billing"), _one("mail__read", message_id=Row("Your invoice is ready")),
          _one("tasks__create", title="Pay the EUR 42.00 invoice", due_date="2026-12-14"), Say("Task added.")),
         _all(_task("Pay the EUR 42.00 invoice", due="2026-12-14"))),
    Task("mark-unread-read", "mark all my unread mail as read",
         (_one("mail__list", unread_only=True),
          _one("mail__mark_read", message_ids=[Row("Lunch today?"), Row("Your invoice is ready")]),
          Say("Both are marked as read.")),
         "SELECT NOT EXISTS (SELECT 1 FROM mail_messages WHERE owner_id = %(o)s AND NOT is_read AND trashed_at IS NULL) AS ok"),
    Task("trash-newsletter", "trash the tech newsletter",
         (_one("mail__list", from_contains="news"), _one("mail__trash", message_ids=[Row("This week in tech")]),
          Say("Moved it to the trash.")),
         _all(_mail("This week in tech", "trashed_at IS NOT NULL"))),
    Task("complete-report-tell-alex", "tick off the quarterly report and tell Alex it's done",
         (_one("tasks__list"),
          _c(("tasks__complete", {"task_id": Row("quarterly report")}),
             ("mail__send", {"to": [ALEX], "subject": "Quarterly report", "body": "It's done."})),
          Say("Done, and Alex knows.")),
         _all(_task("Send the quarterly report", "done"), _sent(ALEX, "Quarterly report"))),
    Task("dentist-reminder", "remind me 30 minutes before the dentist tomorrow",
         (_one("calendar__list", range="tomorrow"),
          _one("reminders__create", text="Dentist at 10:00", due_at=_at(TUE, "09:30")), Say("Reminder set.")),
         _all(_reminder("Dentist%", _at(TUE, "09:30")))),
    Task("follow-up-after-1on1", "schedule an hour with Priya right after our 1:1 on Wednesday",
         (_one("calendar__list", range="this_week"),
          _one("calendar__create", title="Follow-up with Priya", start=_at(WED, "14:30"), duration_minutes=60),
          Say("Scheduled.")),
         _all(_event("Follow-up with Priya", start=_at(WED, "14:30")))),
    Task("note-launch-date", "write a note with the launch date Alex mentioned",
         (_one("mail__list", from_contains="alex"), _one("mail__read", message_id=Row("Project timeline")),
          _one("notes__create", title="Launch date", body="The launch stays on the 15th (Alex)."), Say("Noted.")),
         _all(_note("Launch date", "%15th%"))),
    Task("alex-reply-and-event", "reply to Alex that the timeline works and put the launch on my calendar",
         (_one("mail__list", from_contains="alex"), _one("mail__read", message_id=Row("Project timeline")),
          _c(("mail__send", {"to": [ALEX], "subject": "Re: Project timeline", "body": "Works for me."}),
             ("calendar__create", {"title": "Launch", "start": _at("2026-12-15", "09:00")})),
          Say("Replied, and the launch is on your calendar.")),
         _all(_sent(ALEX, "Re: Project timeline"), _event("Launch", start=_at("2026-12-15", "09:00")))),
    Task("cancel-dentist", "what's tomorrow? cancel the dentist",
         (_one("calendar__list", range="tomorrow"), _one("calendar__cancel_event", event_id=Row("Dentist")),
          Say("Cancelled.")),
         _all(_event("Dentist", "cancelled"))),
    Task("rename-lunch", "rename lunch with Sam to Lunch with Sam and Ana",
         (_one("calendar__list", range="today"),
          _one("calendar__update", event_id=Row("Lunch with Sam"), title="Lunch with Sam and Ana"), Say("Renamed.")),
         _all(_event("Lunch with Sam and Ana"))),
    Task("two-tasks", "add two tasks: buy milk and call mum",
         (_c(("tasks__create", {"title": "Buy milk"}), ("tasks__create", {"title": "Call mum"})), Say("Both added.")),
         _all(_task("Buy milk"), _task("Call mum"))),
    Task("forward-invoice", "forward the invoice to accounting@example.com",
         (_one("mail__list", from_contains="billing"), _one("mail__read", message_id=Row("Your invoice is ready")),
          _one("mail__send", to=["accounting@example.com"], subject="Fwd: Your invoice is ready",
               body="Your monthly invoice of EUR 42.00 is available. Payment is due within 14 days."),
          Say("Forwarded.")),
         _all(_sent("accounting@example.com", "Fwd: Your invoice is ready", "%EUR 42.00%"))),
    Task("reminder-tonight", "remind me at 7pm today to book a table",
         (_one("reminders__create", text="Book a table", due_at=_at(TODAY, "19:00")), Say("Reminder set.")),
         _all(_reminder("Book a table", _at(TODAY, "19:00")))),
    Task("note-dentist-address", "save a note with the dentist's address from my calendar",
         (_one("calendar__list", range="tomorrow"), _one("calendar__get", event_id=Row("Dentist")),
          _one("notes__create", title="Dentist address", body="Dr. Martin, 12 rue Oberkampf"), Say("Saved.")),
         _all(_note("Dentist address", "%Oberkampf%"))),
    Task("complete-present", "check my open tasks and complete the birthday present one",
         (_one("tasks__list", status="open"), _one("tasks__complete", task_id=Row("birthday present")), Say("Done.")),
         _all(_task("Buy a birthday present for Sam", "done"))),
    Task("sam-next-week", "ask Sam about lunch next week and pencil in Friday 12:30",
         (_c(("mail__send", {"to": [SAM], "subject": "Lunch next week?", "body": "Friday 12:30?"}),
             ("calendar__create", {"title": "Lunch with Sam (tbc)", "start": _at(FRI, "12:30"), "duration_minutes": 60})),
          Say("Asked Sam, and it's pencilled in.")),
         _all(_sent(SAM, "Lunch next week?"), _event("Lunch with Sam (tbc)", start=_at(FRI, "12:30")))),
    Task("dentist-mail-reminder", "read the dentist's mail and remind me tomorrow at 9 to go",
         (_one("mail__list", from_contains="dentist"), _one("mail__read", message_id=Row("Appointment reminder")),
          _one("reminders__create", text="Go to the dentist", due_at=_at(TUE, "09:00")), Say("Reminder set.")),
         _all(_reminder("Go to the dentist", _at(TUE, "09:00")))),
    Task("cancel-two", "cancel the standup and the design review",
         (_one("calendar__list", range="today"),
          _c(("calendar__cancel_event", {"event_id": Row("Standup")}),
             ("calendar__cancel_event", {"event_id": Row("Design review")})),
          Say("Both cancelled.")),
         _all(_event("Standup", "cancelled"), _event("Design review", "cancelled"), _event("Lunch with Sam"))),
    Task("move-1on1-tell-priya", "move my 1:1 with Priya to 15:00 and tell her",
         (_one("calendar__list", range="this_week"),
          _c(("calendar__update", {"event_id": Row("1:1 with Priya"), "start": _at(WED, "15:00")}),
             ("mail__send", {"to": [PRIYA], "subject": "Our 1:1", "body": "Can we move it to 15:00?"})),
          Say("Moved and told.")),
         _all(_event("1:1 with Priya", start=_at(WED, "15:00")), _sent(PRIYA, "Our 1:1"))),
    Task("call-alex", "set up a call with Alex tomorrow at 16:00 and send him the time",
         (_c(("calendar__create", {"title": "Call with Alex", "start": _at(TUE, "16:00")}),
             ("mail__send", {"to": [ALEX], "subject": "Call tomorrow", "body": "16:00 works?"})),
          Say("Done.")),
         _all(_event("Call with Alex", start=_at(TUE, "16:00")), _sent(ALEX, "Call tomorrow"))),
    Task("snooze-new-reminder", "remind me at 11 to stretch, then snooze it by 30 minutes",
         (_one("reminders__create", text="Stretch", due_at=_at(TODAY, "11:00")),
          _one("reminders__snooze", reminder_id=Item("id"), minutes=30), Say("Set and snoozed.")),
         _all(_reminder("Stretch", _at(TODAY, "11:30")))),
    Task("slides-and-reminder", "add a task to prepare the review slides due tomorrow and remind me at 14:00",
         (_c(("tasks__create", {"title": "Prepare the review slides", "due_date": TUE}),
             ("reminders__create", {"text": "Review slides", "due_at": _at(TODAY, "14:00")})),
          Say("Added both.")),
         _all(_task("Prepare the review slides", due=TUE), _reminder("Review slides", _at(TODAY, "14:00")))),
    Task("read-sam", "mark Sam's lunch mail as read",
         (_one("mail__list", from_contains="sam"), _one("mail__mark_read", message_ids=[Row("Lunch today?")]),
          Say("Marked as read.")),
         _all(_mail("Lunch today?", "is_read"), _mail("Your invoice is ready", "NOT is_read"))),
    Task("invoice-task-then-trash", "add a task to pay the invoice, then trash the mail",
         (_one("mail__list", from_contains="billing"),
          _c(("tasks__create", {"title": "Pay the invoice"}),
             ("mail__trash", {"message_ids": [Row("Your invoice is ready")]})),
          Say("Task added and the mail is in the trash.")),
         _all(_task("Pay the invoice"), _mail("Your invoice is ready", "trashed_at IS NOT NULL"))),
    Task("shopping-note", "look at my notes, then write a shopping list note",
         (_one("notes__list"), _one("notes__create", title="Shopping", body="eggs, bread, oat milk"), Say("Written.")),
         _all(_note("Shopping", "%oat milk%"))),
    Task("note-then-update", "start an Ideas note and then add 'offsite in March' to it",
         (_one("notes__create", title="Ideas", body="- team lunch"),
          _one("notes__update", note_id=Item("id"), body="- team lunch\n- offsite in March"), Say("Updated.")),
         _all(_note("Ideas", "%offsite in March%"))),
    Task("thank-priya", "reply to Priya thanking her for the notes",
         (_one("mail__list", from_contains="priya"), _one("mail__read", message_id=Row("Notes for the design review")),
          _one("mail__send", to=[PRIYA], subject="Re: Notes for the design review", body="Thank you, very useful."),
          Say("Sent.")),
         _all(_sent(PRIYA, "Re: Notes for the design review"))),
    Task("agenda-note", "make a note of the 1:1 agenda from the calendar",
         (_one("calendar__list", range="this_week"), _one("calendar__get", event_id=Row("1:1 with Priya")),
          _one("notes__create", title="1:1 agenda", body="Quarterly goals."), Say("Noted.")),
         _all(_note("1:1 agenda", "Quarterly goals."))),
    Task("dentist-later", "move the dentist an hour later",
         (_one("calendar__list", range="tomorrow"),
          _one("calendar__update", event_id=Row("Dentist"), start=_at(TUE, "11:00")), Say("Moved to 11:00.")),
         _all(_event("Dentist", start=_at(TUE, "11:00")))),
    Task("cancel-dentist-rebook", "cancel tomorrow's dentist and add a task to rebook it",
         (_one("calendar__list", range="tomorrow"),
          _c(("calendar__cancel_event", {"event_id": Row("Dentist")}), ("tasks__create", {"title": "Rebook the dentist"})),
          Say("Cancelled, and the task is there.")),
         _all(_event("Dentist", "cancelled"), _task("Rebook the dentist"))),
    Task("offsite-mail", "email Sam and Priya about the offsite",
         (_one("mail__send", to=[SAM, PRIYA], subject="Offsite", body="Shall we plan the offsite for March?"),
          Say("Sent to both.")),
         _all(_sent(SAM, "Offsite"), _sent(PRIYA, "Offsite"), _outbox(1))),
    Task("daily-stretch", "remind me every day at 8am to stretch",
         (_one("reminders__create", text="Stretch", due_at=_at(TUE, "08:00"), repeat="daily"), Say("Daily reminder set.")),
         _all(_reminder("Stretch", _at(TUE, "08:00"), "daily"))),
    Task("invoice-amount-to-me", "check what the invoice says and mail me the amount",
         (_one("mail__list", from_contains="billing"), _one("mail__read", message_id=Row("Your invoice is ready")),
          _one("mail__send", to=["you@example.com"], subject="Invoice amount", body="EUR 42.00, due within 14 days."),
          Say("Sent to you.")),
         _all(_sent("you@example.com", "Invoice amount", "%42.00%"))),
    Task("lisbon", "tick off the Lisbon flights and put the trip on my calendar next Monday at 8",
         (_one("tasks__list"),
          _c(("tasks__complete", {"task_id": Row("Lisbon")}),
             ("calendar__create", {"title": "Trip to Lisbon", "start": _at(NEXT_MON, "08:00"), "duration_minutes": 480})),
          Say("Done.")),
         _all(_task("Book flights to Lisbon", "done"), _event("Trip to Lisbon", start=_at(NEXT_MON, "08:00")))),
    Task("gym-then-move", "add gym tomorrow at 7, then move it to 7:30",
         (_one("calendar__create", title="Gym", start=_at(TUE, "07:00"), duration_minutes=60),
          _one("calendar__update", event_id=Item("id"), start=_at(TUE, "07:30")), Say("Gym is at 7:30.")),
         _all(_event("Gym", start=_at(TUE, "07:30")))),
    Task("lunch-full", "reply to Sam's lunch mail that I can't, cancel the lunch, and add a task to reschedule",
         (_one("mail__list", from_contains="sam"), _one("mail__read", message_id=Row("Lunch today?")),
          _one("calendar__list", range="today"),
          _c(("mail__send", {"to": [SAM], "subject": "Re: Lunch today?", "body": "Sorry, I can't make it today."}),
             ("calendar__cancel_event", {"event_id": Row("Lunch with Sam")}),
             ("tasks__create", {"title": "Reschedule lunch with Sam"})),
          Say("Replied, cancelled and added the task.")),
         _all(_sent(SAM, "Re: Lunch today?"), _event("Lunch with Sam", "cancelled"), _task("Reschedule lunch with Sam"))),
    Task("five-steps", "read Sam's mail, add a task for the lunch, check my day, and tell Sam I'll come",
         (_one("mail__list", from_contains="sam"), _one("mail__read", message_id=Row("Lunch today?")),
          _one("tasks__create", title="Lunch with Sam at 12:30"), _one("calendar__list", range="today"),
          _one("mail__send", to=[SAM], subject="Re: Lunch today?", body="See you at 12:30."),
          Say("Added the task and told Sam.")),
         _all(_task("Lunch with Sam at 12:30"), _sent(SAM, "Re: Lunch today?", "%12:30%"))),
    Task("archive-note", "write a note about the wifi password and archive it",
         (_one("notes__create", title="Wifi", body="The password is on the fridge."),
          _one("notes__archive", note_id=Item("id")), Say("Written and archived.")),
         _all(_note("Wifi", "%fridge%", "archived"))),
    Task("cancel-reminder", "set a reminder for 18:00 to water the plants, then cancel it",
         (_one("reminders__create", text="Water the plants", due_at=_at(TODAY, "18:00")),
          _one("reminders__cancel", reminder_id=Item("id")), Say("Cancelled.")),
         "SELECT EXISTS (SELECT 1 FROM reminders WHERE owner_id = %(o)s AND text = 'Water the plants'"
         " AND status = 'cancelled') AS ok"),
)
