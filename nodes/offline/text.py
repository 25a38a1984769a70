"""Text normalisation for the offline picker: typo repair, politeness, number words.

Every pattern elsewhere in the package matches case-insensitively on the *normalised* text,
which keeps the user's own casing so titles, bodies and reminder texts are extracted
verbatim.
"""

from __future__ import annotations

import re
from typing import Final

from tollgate.nodes.offline.spelling import repair

__all__ = ["NUMBER_WORDS", "ORDINAL_WORDS", "clean_fragment", "normalize", "number_of"]

# Chat abbreviations and misspellings more than one edit away -> the word the grammar knows
# (single-edit typos are repaired by edit distance: nodes.offline.spelling). Word-level only, so a
# typo inside a title ("Calender review") is repaired too; that is the lesser harm.
_TYPOS: Final[dict[str, str]] = {
    "calander": "calendar", "tommorow": "tomorrow", "tmrw": "tomorrow", "tmr": "tomorrow",
    "tmrow": "tomorrow", "tonite": "tonight", "reminde": "reminder", "remindr": "reminder",
    "schedual": "schedule", "msg": "message", "msgs": "messages", "appt": "appointment",
    "wendsday": "wednesday", "wensday": "wednesday", "secnd": "second", "thrid": "third", "frist": "first",
    "adn": "and", "pls": "please", "plz": "please", "u": "you", "ur": "your", "wk": "week", "to-do": "todo",
    "to-dos": "todo", "taks": "task", "tsk": "task", "tasl": "task", "whats": "what's", "wats": "what's",
    "wat": "what", "im": "I'm", "dont": "don't", "didnt": "didn't", "doesnt": "doesn't",
    "shouldnt": "shouldn't", "mins": "minutes", "hrs": "hours", "hr": "hour", "tmw": "tomorrow",
}
_TYPO_RE: Final = re.compile(r"(?<![\w@.-])(" + "|".join(map(re.escape, _TYPOS)) + r")(?![\w@-])", re.I)

# Politeness and framing that carry no intent. Stripped from the front (repeatedly) and the end.
_LEAD: Final = re.compile(
    r"^(?:(?:hey|hi|hello|ok|okay|so|um+|uh+|alright|right|yo)\b[\s,!.]*"
    r"|(?:tollgate|assistant|bot)\b[\s,:]*"
    r"|(?:please|kindly|quickly|just)\s+"
    r"|(?:can|could|would|will)\s+you\s+(?:please\s+)?|(?:can|could)\s+we\s+(?:please\s+)?"
    r"|i\s*(?:'d|would)\s+like\s+(?:you\s+)?to\s+"
    r"|i\s+(?:want|need)\s+you\s+to\s+"
    r"|(?:go\s+ahead\s+and|help\s+me)\s+"
    r"|let'?s\s+)",
    re.I,
)
_TRAIL: Final = re.compile(r"(?:[\s,]+(?:please|pls|thanks|thank\s+you|thx|asap|for\s+me))+[\s.!?]*$", re.I)

NUMBER_WORDS: Final[dict[str, float]] = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15,
    "twenty": 20, "thirty": 30, "forty": 40, "forty-five": 45, "fortyfive": 45, "fifty": 50,
    "sixty": 60, "ninety": 90, "a couple of": 2, "a couple": 2, "couple of": 2, "a few": 3,
    "few": 3, "several": 3, "half an": 0.5, "half a": 0.5,
}
"""Cardinal words (and a few idioms) the grammar accepts wherever a number may stand."""

ORDINAL_WORDS: Final[dict[str, int]] = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13,
    "fourteenth": 14, "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18,
    "nineteenth": 19, "twentieth": 20,
}
"""Ordinal words for positional references ("the third one")."""


def normalize(request: str) -> str:
    """The request with typos repaired, framing stripped and whitespace collapsed."""
    text = request.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    text = re.sub(r"\s+", " ", text).strip()
    text = repair(_TYPO_RE.sub(lambda m: _TYPOS[m.group(1).lower()], text))
    previous = None
    while previous != text:
        previous = text
        text = _LEAD.sub("", text).strip()
    text = _TRAIL.sub("", text).strip()
    return text


def number_of(word: str) -> float | None:
    """The value of a numeral or number word (``"3"``, ``"three"``, ``"half an"``), else ``None``."""
    word = word.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", word):
        return float(word)
    return NUMBER_WORDS.get(re.sub(r"\s+", " ", word))


def clean_fragment(text: str, *, articles: bool = True) -> str:
    """A fragment trimmed of surrounding punctuation, quotes and dangling connectives.

    With ``articles`` a leading "the"/"a"/"an" goes too ("a meeting with Bob" -> "meeting with Bob").
    """
    text = re.sub(r"\s+", " ", text).strip(" \t,;:.-\"'")
    lead = r"^(?:to|that|about|for|of|and|then|so|the|a|an)\s+" if articles else r"^(?:to|that|about|for|of|and|then|so)\s+"
    previous = None
    while previous != text:
        previous = text
        text = re.sub(lead, "", text, flags=re.I)
        text = re.sub(r"\s+(?:at|on|by|in|for|from|to|and|starting|due|due on|until)$", "", text, flags=re.I)
        text = text.strip(" \t,;:.-\"'")
    return text
