"""Natural times in the owner's timezone, relative to the context's ``now``.

A small grammar for the forms an assistant must get right, with ``dateparser`` for the long
tail of day phrases (:mod:`nodes.offline.dates`, which lists where the library is wrong and
why the grammar keeps those forms). The library alone is not enough: to find a time *inside* a
request one needs ``search_dates``, which reads ordinary words as dates ("read the 2nd one"
-> 1 Feb next year, "may I see my mail" -> May) and does not know our conventions ("at 5pm"
after 5pm means tomorrow; "at 5" means 17:00). The grammar reports the character spans it
consumed (so titles can be cut out around them) and builds every wall-clock time through
``zoneinfo``, so offsets are right on both sides of a DST change.

Conventions (documented because they are choices):

* "at 5pm" / "noon" with no day: today if still ahead of ``now``, else tomorrow.
* A bare hour with no am/pm ("at 5", "9:30"): 1-6 -> afternoon, 7-11 -> morning, unless a
  period word ("tonight", "morning") says otherwise; 13-23 are read as 24-hour times.
* "friday" / "on friday" / "next friday": the nearest friday strictly after today ("this
  friday" said on a friday is today).
* "in 2 hours" is elapsed time (UTC arithmetic); "in 3 days" keeps the wall-clock time.
* A month-day with no year is this year, or next year once it has passed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from typing import Final

from tollgate.nodes.offline.dates import long_tail_day
from tollgate.nodes.offline.text import NUMBER_WORDS, number_of

__all__ = ["Span", "When", "day_name", "find_amount", "find_duration", "find_offset", "find_range_minutes", "find_when", "on_day"]

Span = tuple[int, int]
"""A ``(start, end)`` character span in the normalised request."""

_WEEKDAYS: Final = {
    "monday": 0, "mon": 0, "tuesday": 1, "tue": 1, "tues": 1, "wednesday": 2, "wed": 2,
    "thursday": 3, "thu": 3, "thur": 3, "thurs": 3, "friday": 4, "fri": 4, "saturday": 5,
    "sat": 5, "sunday": 6, "sun": 6,
}
_MONTHS: Final = {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6, "jul": 7, "aug": 8,
    "sep": 9, "oct": 10, "nov": 11, "dec": 12,
}
_PERIODS: Final = {
    "morning": time(9), "afternoon": time(15), "evening": time(18), "tonight": time(20),
    "night": time(20), "noon": time(12), "midday": time(12), "lunchtime": time(12),
    "end of day": time(17), "end of the day": time(17), "eod": time(17), "midnight": time(0),
    "first thing": time(9), "first thing in the morning": time(9),
}
_PM_WORDS: Final = frozenset({"afternoon", "evening", "tonight", "night"})

_NUM: Final = "(?:" + "|".join(sorted((re.escape(w) for w in NUMBER_WORDS), key=len, reverse=True)) + r"|\d+(?:\.\d+)?)"
_UNIT: Final = r"(?P<unit>minutes?|mins?|m|hours?|h|days?|d|weeks?|wks?)"
_AMOUNT: Final = rf"(?P<n>{_NUM})\s*-?\s*{_UNIT}(?P<half>\s+and\s+a\s+half)?\b"

_OFFSET_RES: Final = (
    re.compile(
        rf"\b(?:in|within|after)\s+(?:another\s+|about\s+)?(?:{_AMOUNT}"
        r"|(?P<halfhour>half\s+an?\s+hour)|(?P<quarter>a\s+quarter\s+of\s+an\s+hour))",
        re.I,
    ),
    re.compile(rf"\b{_AMOUNT}\s+from\s+now\b", re.I),
)
_DURATION_RE: Final = re.compile(
    rf"\bfor\s+(?:about\s+|around\s+)?(?:{_AMOUNT}|(?P<halfhour>half\s+an?\s+hour))"
    rf"|\b(?P<n2>\d+)\s*-?\s*(?P<unit2>minutes?|mins?|hours?|hr|h)(?=\s+\w)",
    re.I,
)
_BARE_AMOUNT_RE: Final = re.compile(
    rf"\b(?:(?:by|for|another|an\s+extra|extra)\s+)?(?:{_AMOUNT}|(?P<halfhour>half\s+an?\s+hour))", re.I
)
_RANGE_RE: Final = re.compile(
    r"\bfrom\s+(?P<a>\d{1,2}(?::\d{2})?\s*(?:am|pm)?)\s*(?:to|until|till|-|–)\s*(?P<b>\d{1,2}(?::\d{2})?\s*(?:am|pm)?)\b"
    r"|\b(?P<c>\d{1,2}(?::\d{2})?\s*(?:am|pm)?)\s*(?:-|–)\s*(?P<d>\d{1,2}:\d{2}\s*(?:am|pm)?|\d{1,2}\s*(?:am|pm))(?![\w:])",
    re.I,
)
_CLOCK_RE: Final = re.compile(
    r"(?:\b(?:at|@|by|around|from)\s*)?"
    r"(?:\b(?P<h>\d{1,2})(?:[:.](?P<m>[0-5]\d))?\s*(?P<ap>a\.?m\.?|p\.?m\.?)(?![a-z])"
    r"|\b(?P<h24>[01]?\d|2[0-3])(?::|h)(?P<m24>[0-5]\d)\b"
    r"|(?:(?<=\bat )|(?<=\bfrom ))(?P<hat>\d{1,2})\b(?!\s*(?:st|nd|rd|th|%|minutes?|mins?|hours?|days?|weeks?|people)\b)"
    r"|(?P<hp>half|quarter)\s+(?P<rel>past|to)\s+(?P<hh>\d{1,2}|" + "|".join(
        w for w in NUMBER_WORDS if w.isalpha() and number_of(w) in {float(i) for i in range(1, 13)}
    ) + r")\b)",
    re.I,
)
_PERIOD_RE: Final = re.compile(
    r"\b(?:(?:this|in\s+the|at|by|tomorrow|tmrw)\s+)?(?:the\s+)?"
    r"(?P<p>first\s+thing(?:\s+in\s+the\s+morning)?|morning|afternoon|evening|tonight|night|noon|midday|lunchtime|midnight|end\s+of\s+(?:the\s+)?day|eod)\b",
    re.I,
)
_DAY_RE: Final = re.compile(
    r"\b(?:(?P<pre>on|by|for|until|before|this|next|coming|due)\s+)?(?:the\s+)?(?:"
    r"(?P<dat>day\s+after\s+tomorrow)|(?P<tom>tomorrow)|(?P<tod>today|tonight)"
    r"|(?P<wk>(?:next|this)\s+week(?:end)?|(?:the\s+)?weekend|end\s+of\s+(?:the\s+)?week)"
    r"|(?P<eom>end\s+of\s+(?:the\s+|this\s+|next\s+)?month)"
    r"|(?P<iso>\d{4}-\d{2}-\d{2})"
    r"|(?P<mon>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?\s+(?P<md>\d{1,2})(?:st|nd|rd|th)?(?:,?\s+(?P<my>\d{4}))?"
    r"|(?P<dm>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<mon2>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\b(?:,?\s+(?P<dmy>\d{4}))?"
    r"|(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)(?P<after>\s+after\s+next)?"
    r"|(?<=\bthe\s)(?P<ord>[12]?\d|3[01])(?:st|nd|rd|th)(?!\s+(?:one|email|mail|message|event|task|reminder|note|item)s?\b)"
    r"|(?P<wdab>mon|tues?|wed|thu(?:rs?)?|fri|sat|sun)(?=\W|$)"
    r")\b",
    re.I,
)


@dataclass(frozen=True, slots=True)
class When:
    """A time phrase found in a request."""

    day: date
    """The day it names (today when only a clock time was given)."""
    at: datetime | None
    """The full time in the owner's timezone, when the phrase names one."""
    spans: tuple[Span, ...]
    """The character spans the phrase occupies, for cutting it out of titles."""
    day_given: bool = True
    """Whether the phrase named the day (false for "at 5pm", "noon", "in 2 hours")."""

    @property
    def has_time(self) -> bool:
        """Whether a time of day (or an offset from now) was given, not just a day."""
        return self.at is not None


def day_name(day: date) -> str:
    """``Friday 4 December`` (fixed English names, never the process locale)."""
    names = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
    months = ("January", "February", "March", "April", "May", "June", "July", "August",
              "September", "October", "November", "December")
    return f"{names[day.weekday()]} {day.day} {months[day.month - 1]}"


def on_day(day: date, clock: time, tz: tzinfo) -> datetime:
    """``day`` at ``clock`` in ``tz``; a time inside a spring-forward gap moves past the gap."""
    naive = datetime.combine(day, clock).replace(tzinfo=tz)
    return naive.astimezone(timezone.utc).astimezone(tz)


def _amount_minutes(match: re.Match[str]) -> float | None:
    groups = match.groupdict()
    if groups.get("halfhour"):
        return 30.0
    if groups.get("quarter"):
        return 15.0
    n = number_of(groups.get("n") or groups.get("n2") or "")
    if n is None:
        return None
    unit = (groups.get("unit") or groups.get("unit2") or "").lower()
    scale = 1.0
    if unit.startswith("h"):
        scale = 60.0
    elif unit.startswith("d"):
        scale = 1440.0
    elif unit.startswith("w"):
        scale = 10080.0
    if groups.get("half"):
        n += 0.5
    return n * scale


def find_offset(text: str) -> tuple[timedelta, Span] | None:
    """An offset from now ("in 2 hours", "45 minutes from now"), with its span."""
    found = [m for m in (r.search(text) for r in _OFFSET_RES) if m is not None]
    if not found:
        return None
    match = min(found, key=lambda m: m.start())
    minutes = _amount_minutes(match)
    if minutes is None or minutes <= 0:
        return None
    return timedelta(minutes=round(minutes)), match.span()


def find_duration(text: str, exclude: tuple[Span, ...] = ()) -> tuple[int, Span] | None:
    """A length ("for an hour", "for 45 minutes", "a 30-minute call") in minutes, with its span.

    Matches overlapping ``exclude`` (typically the spans of "in 30 minutes") are skipped.
    """
    for match in _DURATION_RE.finditer(text):
        if any(s < match.end() and match.start() < e for s, e in exclude):
            continue
        minutes = _amount_minutes(match)
        if minutes is not None and minutes > 0:
            return round(minutes), match.span()
    return None


def find_amount(text: str, exclude: tuple[Span, ...] = ()) -> tuple[int, Span] | None:
    """A bare amount of time ("30 minutes", "by an hour", "half an hour") in minutes, with its span."""
    for match in _BARE_AMOUNT_RE.finditer(text):
        if any(s < match.end() and match.start() < e for s, e in exclude):
            continue
        minutes = _amount_minutes(match)
        if minutes is not None and minutes > 0:
            return round(minutes), match.span()
    return None


def _clock_of(match: re.Match[str]) -> tuple[int, int, bool]:
    """(hour, minute, explicit) of a clock match; explicit when am/pm or 24-hour was given."""
    g = match.groupdict()
    if g.get("h") is not None:
        hour, minute = int(g["h"]), int(g["m"] or 0)
        pm = g["ap"].lower().startswith("p")
        if hour == 12:
            hour = 0
        return hour + (12 if pm else 0), minute, True
    if g.get("h24") is not None:
        return int(g["h24"]), int(g["m24"]), int(g["h24"]) >= 13 or g["h24"].startswith("0")
    if g.get("hat") is not None:
        return int(g["hat"]), 0, int(g["hat"]) >= 13
    base = int(number_of(g["hh"]) or 0)
    if g["hp"].lower() == "half":
        return base, 30, False
    return (base, 15, False) if g["rel"].lower() == "past" else (base - 1, 45, False)


def _adjust_ambiguous(hour: int, pm_hint: bool | None) -> int:
    if hour >= 12 or hour == 0:
        return hour % 24
    if pm_hint is True:
        return hour + 12
    if pm_hint is False:
        return hour
    return hour + 12 if 1 <= hour <= 6 else hour


def _day_of(match: re.Match[str], today: date) -> date | None:
    g = match.groupdict()
    if g["dat"]:
        return today + timedelta(days=2)
    if g["tom"]:
        return today + timedelta(days=1)
    if g["tod"]:
        return today
    if g["wk"]:
        phrase = g["wk"].lower()
        if "end of" in phrase:
            return today + timedelta(days=(4 - today.weekday()) % 7)
        if "weekend" in phrase:
            delta = (5 - today.weekday()) % 7
            return today + timedelta(days=delta + (7 if phrase.startswith("next") and delta < 5 else 0))
        if phrase.startswith("next"):
            return today + timedelta(days=7 - today.weekday())
        return today
    if g["eom"]:
        # "by the end of the month": its last day (today, on the last day); "of next month": the next one's.
        first = date(today.year + today.month // 12, today.month % 12 + 1, 1)
        if "next" in g["eom"].lower():
            first = date(first.year + first.month // 12, first.month % 12 + 1, 1)
        return first - timedelta(days=1)
    if g["iso"]:
        try:
            return date.fromisoformat(g["iso"])
        except ValueError:
            return None
    month_word, day_s, year_s = (g["mon"], g["md"], g["my"]) if g["mon"] else (g["mon2"], g["dm"], g["dmy"])
    if month_word:
        month = _MONTHS[month_word[:3].lower()]
        try:
            found = date(int(year_s) if year_s else today.year, month, int(day_s))
            if not year_s and found < today:
                found = date(today.year + 1, month, int(day_s))
        except ValueError:
            return None
        return found
    if g["ord"]:
        # Only "on the 15th" and the like: "the 2nd and 4th emails" are positions.
        return _day_of_month(int(g["ord"]), today) if g["pre"] else None
    word = (g["wd"] or g["wdab"] or "").lower()
    if g["wdab"] and not g["pre"]:
        return None  # "sun", "sat", "wed" alone are too often ordinary words
    delta = (_WEEKDAYS[word] - today.weekday()) % 7
    if delta == 0 and (g["pre"] or "").lower() != "this":
        delta = 7
    if delta == 1 and (g["pre"] or "").lower() == "next":
        # "next tuesday" said on a Monday is not tomorrow (that would be "tomorrow"): the week after.
        delta = 8
    if g["after"]:
        # "the tuesday after next": the one after next tuesday (read as the grammar reads "next").
        delta = (8 if delta == 1 else delta) + 7
    return today + timedelta(days=delta)


def _day_of_month(day: int, today: date) -> date | None:
    """"The 15th": this month's if it is still to come (or today), else next month's that has it."""
    year, month = today.year, today.month
    for _ in range(3):  # the 31st skips the months without one
        try:
            found = date(year, month, day)
        except ValueError:
            found = None
        if found is not None and found >= today:
            return found
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return None


def find_when(text: str, now: datetime, tz: tzinfo, *, day_first: bool | None = None) -> When | None:
    """The time phrase of ``text`` resolved against ``now`` in ``tz``, or ``None``.

    ``day_first`` is how the owner's locale reads a numeric date (12/11); ``None`` refuses one
    that could be read either way."""
    now = now.astimezone(tz)
    today = now.date()
    offset = find_offset(text)
    if offset is not None:
        delta, span = offset
        if delta < timedelta(days=1):
            at = (now.astimezone(timezone.utc) + delta).astimezone(tz)
            return When(at.date(), at, (span,), day_given=False)
    spans: list[Span] = []
    day: date | None = None
    for match in _DAY_RE.finditer(text):
        found = _day_of(match, today)
        if found is not None:
            day, spans = found, [match.span()]
            break
    if offset is None:
        # The library's phrase wins where it says more than the grammar's: "two weeks from
        # tomorrow" is not tomorrow, "the 3rd of next month" not this month's.
        tail = long_tail_day(text, now, day_first=day_first)
        if tail is not None and (day is None or (tail[1][0] <= spans[0][0] and spans[0][1] <= tail[1][1]
                                                 and tail[1] != spans[0])):
            day, spans = tail[0], [tail[1]]
    if offset is not None and day is None:
        delta, span = offset
        day, spans = (now + delta).date(), [span]  # whole days keep the wall-clock time
        clock_default: time | None = now.time().replace(second=0, microsecond=0)
    else:
        clock_default = None
    period = _PERIOD_RE.search(text)
    period_word = re.sub(r"\s+", " ", period.group("p").lower()) if period else None
    pm_hint: bool | None = None  # whether a bare hour ("at 8") is in the afternoon or evening
    if period_word in _PM_WORDS:
        pm_hint = True
    elif period_word is not None and period_word.startswith(("morning", "first thing")):
        pm_hint = False
    clock: time | None = None
    ranged = _range(text)
    if ranged is not None:
        clock, _end, span = ranged
        spans.append(span)
    for match in () if ranged is not None else _CLOCK_RE.finditer(text):
        if any(s <= match.start() < e for s, e in spans):
            continue
        hour, minute, explicit = _clock_of(match)
        if not explicit:
            hour = _adjust_ambiguous(hour, pm_hint)
        if 0 <= hour <= 23:
            clock = time(hour, minute)
            spans.append(match.span())
            break
    if period is not None:
        inside = any(s <= period.start() < e for s, e in spans)
        spans.append((period.start("p"), period.end()) if inside else period.span())
        if clock is None:
            clock = _PERIODS[period_word or ""]
            if period_word == "midnight" and day is None:
                day = today + timedelta(days=1)
    if clock is None:
        clock = clock_default
    if day is None and clock is None:
        return None
    if clock is None:
        assert day is not None
        return When(day, None, tuple(sorted(set(spans))))
    if day is None:
        at = on_day(today, clock, tz)
        if at <= now:
            at = on_day(today + timedelta(days=1), clock, tz)
        return When(at.date(), at, tuple(sorted(set(spans))), day_given=False)
    return When(day, on_day(day, clock, tz), tuple(sorted(set(spans))))


def _range(text: str) -> tuple[time, time, Span] | None:
    """An explicit clock range ("from 2 to 3pm", "14:00-15:30"): start, end and span."""
    match = _RANGE_RE.search(text)
    if match is None:
        return None
    a, b = (match.group("a"), match.group("b")) if match.group("a") else (match.group("c"), match.group("d"))
    start, start_explicit = _parse_clock(a)
    end, end_explicit = _parse_clock(b)
    if start is None or end is None:
        return None
    if not end_explicit:
        end = end.replace(hour=_adjust_ambiguous(end.hour, None))
    if not start_explicit:
        start = start.replace(hour=_adjust_ambiguous(start.hour, None))
        if "pm" in b.lower() and start.hour < 12 and start.hour + 12 <= end.hour:
            start = start.replace(hour=start.hour + 12)  # "from 2 to 3pm": the end's pm applies
        elif start > end and start.hour >= 12:
            start = start.replace(hour=start.hour - 12)  # "from 11 to 1": morning into afternoon
    return start, end, match.span()


def find_range_minutes(text: str) -> int | None:
    """The length of an explicit clock range ("from 2 to 3pm", "14:00-15:30"), in minutes."""
    ranged = _range(text)
    if ranged is None:
        return None
    start, end, _span = ranged
    minutes = (end.hour * 60 + end.minute) - (start.hour * 60 + start.minute)
    return minutes if minutes > 0 else None


def _parse_clock(fragment: str) -> tuple[time | None, bool]:
    """A range bound as written, and whether it carried am/pm or a 24-hour hour."""
    match = _CLOCK_RE.search("at " + fragment.strip())
    if match is None:
        return None, False
    hour, minute, explicit = _clock_of(match)
    return time(hour % 24, minute), explicit
