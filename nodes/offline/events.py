"""Calendar requests: list a window, read, create, update and cancel (soft) an event."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from typing import Any, Final

from tollgate.nodes.offline.plan import Call, Plan, Turn, clarify
from tollgate.nodes.offline.refs import Row, find_count
from tollgate.nodes.offline.select import cut, pick_ids
from tollgate.nodes.offline.text import clean_fragment
from tollgate.nodes.offline.times import When, day_name, find_amount, find_duration, find_range_minutes, on_day

__all__ = ["REPEATING", "cancel_event", "create_event", "get_event", "list_events", "update_event"]

_CREATE_HEAD: Final = re.compile(
    r"^(?:schedule|book|set\s+up|arrange|organi[sz]e|plan|pencil(?:\s+me)?\s+in|block(?:\s+out|\s+off)?(?:\s+time)?|add|create|put|make|new|insert|calendar)\b"
    r"(?:\s+(?:me|us)\b)?(?:\s+in\b)?(?:\s+(?:a|an|the|my|some)\b)?(?:\s+new\b)?"
    r"(?:\s+(?:calendar\s+)?(?:event|entry|appointment|meeting|slot)?\s*(?:called|named|titled|for|:|-))?",
    re.I,
)
REPEATING: Final = re.compile(
    r"\bevery\s+(?:day|morning|evening|night|week|weekday|month|year|monday|tuesday|wednesday|thursday|friday|saturday|sunday|other)\b"
    r"|\b(?:daily|weekly|monthly|yearly|annually|recurring|repeating)\b",
    re.I,
)
"""Recurrence: neither built-in tool can repeat, so such requests get a question, not one item."""
_CAL_TAIL: Final = re.compile(r"\b(?:to|on|in|into|onto)\s+(?:my|the)\s+(?:calendar|agenda|diary|schedule)\b", re.I)
_LOCATION_RE: Final = re.compile(
    r"\b(?:at|in)\s+(?P<loc>(?:the\s+)?(?:office|home|gym|library|park|cafe|café|restaurant|clinic|hospital|school|studio|"
    r"room\s+\w+|[A-Z0-9][\w'&-]*(?:\s+(?:[A-Z0-9][\w'&-]*|of|de|la|du))*))",
)
_EXPLICIT_LOC_RE: Final = re.compile(r"\b(?:location|venue|place|where)\s*[:=]\s*(?P<loc>[^,;]+)", re.I)
_NOT_PLACES: Final = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday january february march april may june july august "
    "september october november december noon midnight i".split()
)


def _day_range(turn: Turn, text: str) -> str | date:
    """The list's window: a range name, or one day the request names (not today or tomorrow)."""
    if re.search(r"\bnext\s+week\b(?!end)", text, re.I):
        return "next_week"
    if re.search(r"\b(?:next|coming|following)\s+(?:7|seven)\s+days\b|\bnext\s+(?:few|couple(?:\s+of)?)\s+days\b|\bcoming\s+week\b|\bweek\s+ahead\b", text, re.I):
        return "next_7_days"
    if re.search(r"\bmy\s+day\b", text, re.I):
        return "today"
    if re.search(r"\b(?:this|the|my|rest\s+of\s+the)\s+week(?:end)?\b|\bweekly\b|\bthis\s+weekend\b", text, re.I):
        return "this_week"
    if re.search(r"\b(?:upcoming|coming\s+up|next\s+(?:event|meeting|appointment)s?|what'?s\s+next|soon|later|ahead)\b", text, re.I):
        return "upcoming"
    if turn.now is None or turn.tz is None:
        return "today" if re.search(r"\b(?:today|tonight)\b", text, re.I) else "upcoming"
    when = turn.when(text)
    if when is None:
        return "upcoming"
    today = turn.now.date()
    if when.day == today:
        return "today"
    if when.day == today + timedelta(days=1):
        return "tomorrow"
    if when.day_given and when.day > today and re.search(r"\b(?:on|for)\s+(?:the\s+)?\w+\s*\??$|\bon\s+", text, re.I):
        return when.day  # "what do I have on thursday", "anything on the 15th?"
    if when.day.isocalendar()[:2] == today.isocalendar()[:2]:
        return "this_week"
    return "next_7_days" if (when.day - today).days <= 7 else "upcoming"


_NOT_PEOPLE: Final = frozenset({"today", "tomorrow", "tonight", "this", "next", "whom", "who", "no", "nobody", "friends",
                                  "family", "work", "zoom", "video", "phone", "lunch", "dinner", "coffee"})
_WITH: Final = re.compile(r"\b(?:with|meeting|seeing)\s+(?!(?:me|my|the|a|an|you|us|them|anyone|someone|everyone)\b)"
                          r"(?P<who>[A-Za-z][\w'-]{1,30})\b", re.I)


def list_events(turn: Turn, text: str | None = None) -> Plan:
    """``calendar.list`` of the window the request names (default: upcoming), of one day it names,
    and of the events with the person it names ("with Sam")."""
    text = turn.text if text is None else text
    window = _day_range(turn, text)
    args: dict[str, Any] = {"day": window.isoformat()} if isinstance(window, date) else {"range": window}
    who = _WITH.search(text)
    if who is not None and who.group("who").lower() not in _NOT_PEOPLE:
        args["contains"] = who.group("who")
    count = find_count(text)
    if count is not None:
        args["limit"] = min(max(count, 1), 25)
    return Call(("calendar", "list"), args)


def _row_for(turn: Turn, ref: str) -> Mapping[str, Any] | None:
    rows = turn.recent.get("calendar") or ()
    for row in rows:
        if ref == f"#{row.get('position')}" or ref == row.get("id"):
            return row
    return None


def get_event(turn: Turn, target: str) -> Plan:
    """``calendar.get`` of one event from the latest list."""
    if not turn.recent.get("calendar"):
        return list_events(turn, target)
    picked = pick_ids(turn, "calendar", target, bulk=False, by_day=True)
    if not isinstance(picked, list):
        return picked
    return Call(("calendar", "get"), {"event_id": picked[0]})


def cancel_event(turn: Turn, target: str) -> Plan:
    """``calendar.cancel_event`` (soft, reversible) of one event from the latest list."""
    picked = pick_ids(turn, "calendar", target, bulk=False, by_day=True)
    if not isinstance(picked, list):
        return picked
    return Call(("calendar", "cancel_event"), {"event_id": picked[0]})


def _location(rest: str) -> tuple[str, tuple[int, int]] | None:
    explicit = _EXPLICIT_LOC_RE.search(rest)
    if explicit is not None:
        return clean_fragment(explicit.group("loc")), explicit.span()
    for match in _LOCATION_RE.finditer(rest):
        loc = match.group("loc").strip()
        if loc.split()[0].lower() not in _NOT_PLACES and not re.fullmatch(r"\d+", loc):
            return loc, match.span()
    return None


def create_event(turn: Turn) -> Plan:
    """``calendar.create``: title, start, length and place from the request, or a question."""
    if turn.now is None or turn.tz is None:
        return clarify("When should it be? I don't know your current date and time.")
    text = turn.text
    when = turn.when(text)
    if REPEATING.search(text):
        return clarify("I can't create repeating events yet. Shall I add just the next one? Tell me its day and time.")
    if when is None:
        return clarify("When should it be? For example “tomorrow at 3pm”.")
    if when.at is None:
        return clarify(f"What time on {day_name(when.day)}?")
    if when.at <= turn.now:
        return clarify("That time has already passed. When should it be?")
    spans = list(when.spans)
    args: dict[str, Any] = {}
    ranged = find_range_minutes(text)
    duration = find_duration(text, exclude=when.spans)
    if ranged is not None:
        args["duration_minutes"] = ranged
    elif duration is not None:
        args["duration_minutes"] = min(max(duration[0], 5), 1440)
        spans.append(duration[1])
    rest = cut(text, spans)
    rest = re.sub(r"\s+", " ", rest).strip(" ,")
    head = _CREATE_HEAD.search(rest)
    if head is not None:
        rest = rest[head.end() :]
    rest = _CAL_TAIL.sub(" ", rest)
    place = _location(rest)
    if place is not None:
        args["location"] = place[0][:200]
        rest = cut(rest, [place[1]])
    title = clean_fragment(re.sub(r"\s+", " ", rest))
    title = re.sub(r"^(?:(?:event|entry|appointment)\s+)?(?:called|named|titled)\s+", "", title, flags=re.I)
    title = title.strip("\"' ")
    if not title:
        return clarify("What should I call the event?")
    return Call(("calendar", "create"), {"title": (title[:1].upper() + title[1:])[:200], "start": when.at.isoformat(), **args})


_RENAME_RE: Final = re.compile(
    r"\b(?:rename|retitle)\s+(?P<t>.+?)\s+(?:to|as)\s+(?P<new>.+)$"
    r"|\bchange\s+the\s+(?:title|name)\s+(?:of\s+)?(?P<t2>.+?)\s+to\s+(?P<new2>.+)$",
    re.I,
)
_PLACE_RE: Final = re.compile(
    r"\b(?:change|set|update|move)\s+the\s+(?:location|place|venue|room)\s+(?:of|for)\s+(?P<t>.+?)\s+to\s+(?P<new>.+)$"
    r"|\b(?:move|change|switch)\s+(?P<t2>.+?)\s+to\s+(?P<new2>room\s+\w+|the\s+\w+\s+room|zoom|teams|google\s+meet)\s*$",
    re.I,
)
_LENGTH_RE: Final = re.compile(
    r"\b(?:make|change|set|extend|shorten|cut|lengthen)\s+(?P<t>.+?)\s+(?:to\s+)?(?:last\s+)?(?P<d>(?:\d+|an?|one|two|three|half\s+an?)\s*(?:minutes?|mins?|hours?|hrs?|h)(?:\s+and\s+a\s+half)?)\s*(?:long)?$",
    re.I,
)
_SHIFT_RE: Final = re.compile(
    r"\b(?:push|move|shift|bump|delay|bring|pull)\s+(?P<t>.+?)\s+(?P<dir>back|later|forward|earlier|up)\s+(?:by\s+)?(?P<d>.+)$"
    r"|\b(?:push|move|shift|bump|delay|bring|pull)\s+(?P<t2>.+?)\s+(?:by\s+)?(?P<d2>(?:\d+|an?|one|two|half\s+an?)\s*(?:minutes?|mins?|hours?|h))\s+(?P<dir2>later|earlier)$",
    re.I,
)
_MOVE_RE: Final = re.compile(
    r"\b(?:move|reschedule|shift|push|postpone|change|bump|put|switch|make)\s+(?P<t>.+?)\s+(?:to|until|till|for|on|at)\s+(?P<when>.+)$",
    re.I,
)


def _target_call(turn: Turn, target: str, changes: dict[str, Any]) -> Plan:
    picked = pick_ids(turn, "calendar", target, bulk=False)
    if not isinstance(picked, list):
        return picked
    return Call(("calendar", "update"), {"event_id": picked[0], **changes})


def _label_when(turn: Turn, row: Mapping[str, Any] | None) -> When | None:
    if row is None or turn.now is None or turn.tz is None:
        return None
    return turn.when(str(row.get("label", "")))


def _new_start(turn: Turn, when_text: str, row: Row | None) -> datetime | str:
    assert turn.now is not None and turn.tz is not None
    when = turn.when(when_text)
    old = _label_when(turn, row)
    if when is None:
        return "When should I move it to?"
    if when.at is not None and when.day_given:
        return when.at
    if when.at is not None:
        if old is not None and old.at is not None:
            start = on_day(old.day, when.at.timetz().replace(tzinfo=None), turn.tz)
            return start
        return when.at
    if old is not None and old.at is not None:
        return on_day(when.day, old.at.timetz().replace(tzinfo=None), turn.tz)
    return f"What time on {day_name(when.day)}?"


def update_event(turn: Turn) -> Plan:
    """``calendar.update``: move, shift, rename, relocate or resize one event from the latest list."""
    text = turn.text
    if (m := _RENAME_RE.search(text)) is not None:
        title = clean_fragment(m.group("new") or m.group("new2")).strip("\"'")
        return _target_call(turn, m.group("t") or m.group("t2"), {"title": title[:200]})
    if (m := _PLACE_RE.search(text)) is not None:
        place = clean_fragment(m.group("new") or m.group("new2")).strip("\"'")
        return _target_call(turn, m.group("t") or m.group("t2"), {"location": place[:200]})
    if (m := _LENGTH_RE.search(text)) is not None:
        amount = find_amount(m.group("d"))
        if amount is not None:
            return _target_call(turn, m.group("t"), {"duration_minutes": min(max(amount[0], 5), 1440)})
    if turn.now is None or turn.tz is None:
        return clarify("When should I move it to? I don't know your current date and time.")
    if (m := _SHIFT_RE.search(text)) is not None:
        target, direction, amount_text = (m.group("t"), m.group("dir"), m.group("d")) if m.group("t") else (m.group("t2"), m.group("dir2"), m.group("d2"))
        amount = find_amount(amount_text)
        if amount is not None:
            picked = pick_ids(turn, "calendar", target, bulk=False)
            if not isinstance(picked, list):
                return picked
            old = _label_when(turn, _row_for(turn, picked[0]))
            if old is None or old.at is None:
                return clarify("What time should it move to?")
            sign = -1 if direction.lower() in {"forward", "earlier", "up"} else 1
            start = (old.at + sign * timedelta(minutes=amount[0])).astimezone(turn.tz)
            return Call(("calendar", "update"), {"event_id": picked[0], "start": start.isoformat()})
    if (m := _MOVE_RE.search(text)) is not None:
        picked = pick_ids(turn, "calendar", m.group("t"), bulk=False)
        if not isinstance(picked, list):
            return picked
        start = _new_start(turn, m.group("when"), _row_for(turn, picked[0]))
        if isinstance(start, str):
            return clarify(start)
        if start <= turn.now:
            return clarify("That time has already passed. When should it be?")
        return Call(("calendar", "update"), {"event_id": picked[0], "start": start.isoformat()})
    return clarify("What should I change about it — the time, the title, the place or the length?")

