"""Reminder requests: list, create, cancel (soft) and snooze."""

from __future__ import annotations

import re
from datetime import time
from typing import Any, Final

from tollgate.nodes.offline.plan import Call, Plan, Turn, clarify
from tollgate.nodes.offline.refs import find_count
from tollgate.nodes.offline.select import cut, pick_ids
from tollgate.nodes.offline.text import clean_fragment
from tollgate.nodes.offline.events import REPEATING
from tollgate.nodes.offline.times import day_name, find_amount, on_day

__all__ = ["DEFAULT_REMINDER_TIME", "cancel_reminder", "create_reminder", "list_reminders", "snooze_reminder"]

DEFAULT_REMINDER_TIME: Final = time(9)
"""When a reminder for a day with no time fires ("remind me on friday to ...")."""

_CREATE_HEAD: Final = re.compile(
    r"^(?:don't\s+(?:let\s+me\s+)?forget|(?:please\s+)?remind\s+(?:me|us)\b|(?:set|create|add|make|schedule)\s+(?:up\s+)?(?:me\s+)?(?:a|an)?\s*(?:new\s+)?reminder|new\s+reminder|reminder|(?:ping|nudge|alert)\s+me)"
    r"\s*(?:to|about|that|of|for|:|-)?",
    re.I,
)


def list_reminders(turn: Turn, text: str | None = None) -> Plan:
    """``reminders.list``: scheduled (default) or all reminders, and a count."""
    text = turn.text if text is None else text
    args: dict[str, Any] = {}
    if re.search(r"\b(?:all|past|old|older|previous|fired|done|cancell?ed|including|history)\b", text, re.I):
        args["status"] = "all"
    else:
        args["status"] = "scheduled"
    count = find_count(text)
    if count is not None:
        args["limit"] = min(max(count, 1), 50)
    return Call(("reminders", "list"), args)


_DAILY: Final = re.compile(r"\b(?:every\s*day|each\s+day|daily|every\s+morning|every\s+evening|every\s+night)\b", re.I)


def create_reminder(turn: Turn) -> Plan:
    """``reminders.create``: what and when; a day with no time fires at 09:00; "every day" repeats daily."""
    if turn.now is None or turn.tz is None:
        return clarify("When should I remind you? I don't know your current date and time.")
    text = turn.text
    daily = _DAILY.search(text)
    if daily is not None:
        text = (text[: daily.start()] + " " + text[daily.end() :]).strip()
    when = turn.when(text)
    rest = cut(text, when.spans) if when is not None else text
    rest = re.sub(r"\s+", " ", rest).strip(" ,")
    head = _CREATE_HEAD.search(rest)
    if head is not None:
        rest = rest[head.end() :]
    what = clean_fragment(re.sub(r"\s+", " ", rest), articles=False)
    what = re.sub(r"^(?:to|about|that|of)\s+", "", what, flags=re.I).strip("\"'")
    if not what:
        return clarify("What should I remind you about?")
    if REPEATING.search(text):
        return clarify("I can only repeat reminders every day. Shall I set just the next one? Tell me when.")
    if when is None:
        if re.search(r"\d|^(?:the|at|on|in|by)\b", what, re.I):
            return clarify("When should I remind you? For example “tomorrow at 9am”.")
        return clarify(f"When should I remind you to {what}?")
    due = when.at if when.at is not None else on_day(when.day, DEFAULT_REMINDER_TIME, turn.tz)
    if due <= turn.now:
        if when.at is None:
            return clarify(f"What time on {day_name(when.day)}?")
        return clarify("That time has already passed. When should I remind you?")
    args: dict[str, Any] = {"text": what[:300], "due_at": due.isoformat()}
    if daily is not None:
        args["repeat"] = "daily"
    return Call(("reminders", "create"), args)


_CANCEL_WORDS: Final = re.compile(
    r"\b(?:cancel|delete|remove|drop|scrap|clear|turn\s+off|stop|kill|get\s+rid\s+of|i\s+don't\s+need|no\s+longer\s+need|anymore|any\s+more)\b",
    re.I,
)


def cancel_reminder(turn: Turn) -> Plan:
    """``reminders.cancel`` of one reminder from the latest list."""
    picked = pick_ids(turn, "reminders", _CANCEL_WORDS.sub(" ", turn.text), bulk=False, by_day=True)
    if not isinstance(picked, list):
        return picked
    return Call(("reminders", "cancel"), {"reminder_id": picked[0]})


_SNOOZE_WORDS: Final = re.compile(
    r"\b(?:snooze|postpone|delay|push(?:\s+back)?|back|later|remind\s+me\s+again|again|by|for)\b", re.I
)


_UNTIL_RE: Final = re.compile(r"\b(?:until|till|til|to)\s+(?P<when>.+)$", re.I)


def _minutes_until(turn: Turn, ref: str, when_text: str) -> int | None:
    """Minutes from the reminder's listed due time to ``when_text`` ("until tomorrow morning")."""
    if turn.now is None or turn.tz is None:
        return None
    row = next((r for r in turn.recent.get("reminders") or () if ref in (f"#{r.get('position')}", r.get("id"))), None)
    target = turn.when(when_text)
    due = turn.when(str(row.get("label", ""))) if row is not None else None
    if target is None or target.at is None or due is None or due.at is None:
        return None
    minutes = round((target.at - max(due.at, turn.now)).total_seconds() / 60)
    return minutes if minutes >= 5 else None


def snooze_reminder(turn: Turn) -> Plan:
    """``reminders.snooze`` of one reminder by the amount asked (default: the model's 60 minutes)."""
    text = turn.text
    amount = find_amount(text)
    if amount is None and turn.now is not None and turn.tz is not None:
        offset = turn.when(text)
        if offset is not None and offset.at is not None and not offset.day_given and re.search(r"\bin\s", text, re.I):
            amount = (round((offset.at - turn.now).total_seconds() / 60), offset.spans[0])
    until = _UNTIL_RE.search(text) if amount is None else None
    target = cut(text, [amount[1]]) if amount is not None else (text[: until.start()] if until else text)
    picked = pick_ids(turn, "reminders", _SNOOZE_WORDS.sub(" ", target), bulk=False, implicit_that=True)
    if not isinstance(picked, list):
        return picked
    if until is not None:
        minutes = _minutes_until(turn, picked[0], until.group("when"))
        if minutes is None:
            return clarify("By how long should I snooze it? For example “for 30 minutes” or “by 2 hours”.")
        amount = (minutes, until.span())
    args: dict[str, Any] = {"reminder_id": picked[0]}
    if amount is not None:
        args["minutes"] = min(max(amount[0], 5), 10080)
    return Call(("reminders", "snooze"), args)
