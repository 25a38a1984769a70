"""Requests no tool serves, answered as such, and note-taking, which only a notes tool serves.

"Book me an uber at 3pm" has a time and a verb the calendar grammar knows, and "note to self:
..." reads like a task; turned into an event or a task they would be a write of another tool,
the one mistake the picker may not make. These are recognised first and answered honestly,
with what the assistant can do instead.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["NOTE_TAKING", "out_of_scope"]

_BOOKABLE: Final = (
    r"(?:an?\s+|me\s+an?\s+|us\s+an?\s+|the\s+|my\s+)?(?:uber|lyft|taxi|cab|ride|car|table|restaurant|flight|flights|plane|train|"
    r"hotel|room|airbnb|tickets?|seats?)"
)
# (pattern, what cannot be done, what can be offered instead)
_OUT: Final[tuple[tuple[re.Pattern[str], str, str], ...]] = tuple(
    (re.compile(pattern, re.I), cannot, offer)
    for pattern, cannot, offer in (
        (r"^(?:book|reserve|order|get|call|hail)\s+" + _BOOKABLE + r"\b", "book rides, tables, travel or tickets",
         "I can add it to your calendar or set a reminder if you like."),
        (r"^(?:order|buy|purchase|shop\s+for)\b", "order or buy things", "I can add it to your tasks so you don't forget."),
        (r"^(?:pay|transfer|send\s+money|venmo)\b", "make payments", "I can remind you to do it, or add it to your tasks."),
        (r"^(?:call|phone|ring|dial|facetime|video\s*call)\s+(?!off\b|with\b)(?:my\s+|the\s+)?\w+", "make phone calls",
         "I can remind you to call, or add the call to your calendar."),
        (r"^(?:text|sms|whatsapp|imessage|dm)\s+(?!me\b)\w+", "send text messages",
         "I can send an email instead if you give me an address."),
        (r"^(?:play|stream|shuffle|pause|skip)\b", "play music or media", ""),
        (r"^(?:turn|switch)\s+(?:on|off)\b|^(?:dim|brighten)\b|\b(?:thermostat|lights?)\s+(?:on|off)\b",
         "control devices", ""),
        (r"^translate\b", "translate text", ""),
        (r"^(?:set|start)\s+(?:an?\s+)?(?:timer|alarm|stopwatch)\b|^wake\s+me\b", "set timers or alarms",
         "I can set a reminder at that time instead."),
        (r"^tell\s+me\s+a\s+(?:joke|story)\b|^sing\b", "tell jokes", ""),
        (r"\b(?:permanently|forever)\s+(?:delete|erase|remove)\b|\b(?:delete|erase|remove)\b.*\b(?:permanently|forever|for\s+good)\b",
         "delete anything permanently",
         "I can move emails to the trash (you can get them back), or cancel events and reminders."),
    )
)

NOTE_TAKING: Final = re.compile(
    r"^(?:(?:make|take|write|add|create|save)\s+(?:a\s+|me\s+a\s+)?note\b|note\s+(?:to\s+self|this|that|down)\b"
    r"|(?:jot|write|note)\s+(?:this\s+|that\s+|it\s+)?down\b|(?:remember|keep\s+in\s+mind)\s+that\b)",
    re.I,
)
"""A request to write something down: a note, never a task or an event."""


def out_of_scope(text: str) -> str | None:
    """The honest answer to a request no tool serves (with an offer when one fits), else ``None``."""
    for pattern, cannot, offer in _OUT:
        if pattern.search(text):
            return f"I can't {cannot}. {offer}".strip()
    return None
