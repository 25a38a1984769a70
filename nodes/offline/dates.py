"""The long tail of day phrases, through ``dateparser``, where the grammar (``times``) finds none.

The grammar keeps the forms an assistant must get right and the library gets wrong. Measured
with dateparser 1.5 on Monday 30 Nov 2026, 10:00 (``PREFER_DATES_FROM="future"``):

* "on the 15th" -> 15 Nov, in the past;
* "next tuesday" said on a Monday -> tomorrow;
* "tonight at 8" -> today 10:00, and "the day after tomorrow" -> tomorrow;
* "a week today" -> a week ago, "first monday of december" -> 30 Dec.

Everything else with a date word in it ("in a fortnight", "the 3rd of next month", "two weeks
from tomorrow", "24.12.2026") is the library's, and its answer is refused when it is in the
past, names a weekday (the grammar's) or a whole week or month rather than a day, covers only
the end of a phrase ("the first monday of | next month"), or is a numeric date whose day and
month could be read either way (12/11: the owner's locale would have to decide). Only the
day is taken: the clock stays the grammar's, so "at 9am" inside the phrase is left to it.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Final

from dateparser.search import search_dates

__all__ = ["long_tail_day"]

Span = tuple[int, int]

# Month names are the grammar's ("may 5"): alone they are ordinary words ("may I see my mail").
_DATE_WORDS: Final = re.compile(r"\b(?:fortnight|weeks?|months?|years?)\b|\b\d{1,2}[/.]\d{1,2}(?:[/.]\d{2,4})?\b", re.I)
_WEEKDAY: Final = re.compile(
    r"\b(?:mon(?:day)?|tue(?:s(?:day)?)?|wed(?:nesday)?|thu(?:rs?(?:day)?)?|fri(?:day)?|sat(?:urday)?|sun(?:day)?)\b", re.I)
_AMBIGUOUS_NUMERIC: Final = re.compile(r"\b(?P<a>\d{1,2})[/.](?P<b>\d{1,2})\b")
_SPAN_ONLY: Final = re.compile(r"^(?:in\s+|on\s+)?(?:the\s+)?(?:next|this|last|coming)\s+(?:week|month|year)$", re.I)
_CUT_SHORT: Final = re.compile(r"(?:\b\w+day|\d+(?:st|nd|rd|th)|first|second|third|fourth|last)\s+of\s+(?:the\s+)?$", re.I)
_CLOCK_TAIL: Final = re.compile(r"\s+(?:at|by|around|from)\s+\d|\s+\d{1,2}(?::\d{2})?\s*(?:am|pm)\b|\s+(?:noon|midnight|tonight)\b", re.I)


def long_tail_day(text: str, now: datetime, *, day_first: bool | None = None) -> tuple[date, Span] | None:
    """The day a date phrase of ``text`` names (``now``: aware, in the owner's zone), or ``None``.

    ``day_first`` says how the owner's locale reads 12/11 (from their profile); ``None`` refuses it."""
    if _DATE_WORDS.search(text) is None:
        return None  # most requests: no call into the library at all
    base = now.replace(tzinfo=None, second=0, microsecond=0)
    settings: dict[str, object] = {"RELATIVE_BASE": base, "PREFER_DATES_FROM": "future", "RETURN_AS_TIMEZONE_AWARE": False}
    if day_first is not None:
        settings["DATE_ORDER"] = "DMY" if day_first else "MDY"
    found = search_dates(text, languages=["en"], settings=settings)
    for phrase, value in found or ():
        if _DATE_WORDS.search(phrase) is None or _WEEKDAY.search(phrase) or _SPAN_ONLY.match(phrase.strip()):
            continue  # not a day the library can name: a weekday's, or a whole week or month
        numeric = _AMBIGUOUS_NUMERIC.search(phrase)
        if numeric is not None and day_first is None and int(numeric.group("a")) <= 12 and int(numeric.group("b")) <= 12:
            continue
        if value.date() < now.date():
            continue
        start = text.lower().find(phrase.lower())
        if start < 0 or _CUT_SHORT.search(text[:start]):
            continue  # "the first monday of | next month": the library read only the end of it
        clock = _CLOCK_TAIL.search(phrase)
        end = start + (clock.start() if clock else len(phrase))
        return value.date(), (start, end)
    return None
