"""The explicit count grammar: "top 5", "last three", "10 emails", clamped to an action's ceiling.

A count the user typed is theirs, not the model's: when the request states one and the chosen
action takes a ``limit``, the server sets it (clamped), whatever the model sent.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["clamp_count", "explicit_count"]

_WORDS: Final = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
    "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30, "fifty": 50,
}
_NUM: Final = r"(\d{1,3}|" + "|".join(_WORDS) + r")"
_NOUNS: Final = r"(?:e-?mails?|mails?|messages?|events?|meetings?|appointments?|tasks?|to-?dos?|reminders?|items?|results?)"
_PATTERNS: Final = (
    re.compile(rf"\b(?:top|first|last|latest|newest|next|up to|at most|only)\s+{_NUM}\b(?!\s*(?:am|pm|:|minutes?|hours?|days?|weeks?))", re.I),
    re.compile(rf"\b{_NUM}\s+(?:(?:most\s+)?(?:recent|latest|newest|unread|new|upcoming|open|next|more)\s+)*{_NOUNS}\b", re.I),
)


def explicit_count(text: str) -> int | None:
    """The count the request states, or ``None``."""
    for pattern in _PATTERNS:
        match = pattern.search(text)
        if match:
            word = match.group(1).lower()
            value = int(word) if word.isdigit() else _WORDS[word]
            if value >= 1:
                return value
    return None


def clamp_count(value: int, lo: int, hi: int) -> int:
    """``value`` inside ``[lo, hi]``."""
    return min(max(value, lo), hi)
