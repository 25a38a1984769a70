"""Moods: requests that mention a write without asking for one.

"Did I cancel the standup?", "should I cancel it?", "don't send it", "if it rains, cancel the
picnic", "Sam asked me to cancel it": each contains a write verb, and none of them asks for the
write. :func:`mood_of` splits such a request into its mood and its core clause; the picker
routes the core as usual and then :func:`nodes.offline.intents.decide` downgrades any write
to a read (past questions) or a plain reply (everything else).
"""

from __future__ import annotations

import re
from typing import Final, Literal

__all__ = ["Mood", "is_standalone_no", "is_yes", "mood_of", "small_talk_reply"]

Mood = Literal["past", "hypothetical", "negated", "statement", "reported", "conditional"]
"""Why a write mentioned in a request must not be emitted."""

_MOODS: Final[tuple[tuple[Mood, re.Pattern[str]], ...]] = (
    ("past", re.compile(r"^(?:did|have|has|had)\s+(?:i|you|we)\s+(?:already\s+|actually\s+|ever\s+|really\s+)?", re.I)),
    ("past", re.compile(r"^(?:why|when|where|how)\s+(?:did|have)\s+(?:i|you|we)\s+", re.I)),
    (
        "past",
        re.compile(
            r"^(?:is|are|was|were|has|have|had)\s+(?!(?:i|you|we)\b)"
            r"(?=.*\b(?:cancell?ed|sent|deleted|trashed|done|completed|finished|moved|rescheduled|snoozed|booked|marked|created|added)\b)",
            re.I,
        ),
    ),
    ("hypothetical", re.compile(r"^(?:should|shall|must|ought)\s+(?:i|we)\s+(?:to\s+)?(?:really\s+|just\s+)?", re.I)),
    (
        "hypothetical",
        re.compile(
            r"^(?:what\s+(?:if|happens\s+if|would\s+happen\s+if)\s+(?:i|we|you)\s+|is\s+it\s+(?:ok|okay|wise|safe|a\s+good\s+idea|worth\s+it|possible)\s+to\s+"
            r"|(?:would|will)\s+it\s+be\s+(?:ok|okay|wise|bad|rude|better|a\s+(?:good|bad)\s+idea)\s+(?:for\s+me\s+)?to\s+"
            r"|do\s+you\s+think\s+(?:i|we)\s+should\s+|i(?:'m|\s+am)\s+(?:thinking|wondering)\s+(?:about|of|whether\s+to|if\s+i\s+should)\s+"
            r"|(?:i'?m\s+)?not\s+sure\s+(?:if|whether)\s+(?:i|we)\s+(?:should\s+)?|i\s+wonder\s+(?:if|whether)\s+(?:i|we)\s+(?:should\s+)?"
            r"|i\s+(?:might|may)\s+(?:want\s+to\s+)?|maybe\s+i\s+should\s+|how\s+(?:do|can|would|should)\s+(?:i|you|one)\s+"
            r"|hypothetically,?\s+(?:if\s+i\s+)?|in\s+theory,?\s+(?:could|can)\s+(?:you|i)\s+|would\s+you\s+(?:be\s+able\s+to\s+)?(?=.*\bif\b))",
            re.I,
        ),
    ),
    (
        "negated",
        re.compile(
            r"^(?:(?:please\s+)?(?:don't|do\s+not|dont)(?!\s+(?:let\s+me\s+)?forget)(?:\s+(?:you\s+)?(?:dare|ever))?|never|no\s+need\s+to|you\s+don't\s+(?:need|have)\s+to"
            r"|there's\s+no\s+need\s+to|i\s+(?:don't|do\s+not)\s+want\s+(?:you\s+)?to|hold\s+off\s+on|not\s+now,?|no,?\s+(?:don't|do\s+not))\s+",
            re.I,
        ),
    ),
    ("statement", re.compile(r"^i\s+(?:already\s+|just\s+)(?=\w+ed\b|sent\b)|^i\s+(?=(?:cancell?ed|sent|deleted|trashed|scheduled|moved|booked|e-?mailed|snoozed|rescheduled)\b)", re.I)),
    ("conditional", re.compile(r"^(?:if|unless|in\s+case|once|whenever)\b[^,]*,\s*(?:then\s+)?", re.I)),
)
# Checked only when the request does not open with an action verb ("remind me to reply to Ana,
# she asked me to" is a reminder, not reported speech).
_LOOSE_MOODS: Final[tuple[tuple[Mood, re.Pattern[str]], ...]] = (
    ("reported", re.compile(r"^.*?\b(?:asked|told|wants|wanted|said|says|suggested)\s+(?:me\s+|us\s+|you\s+)?(?:to|that\s+(?:i|we|you)\s+should)\s+", re.I)),
    ("conditional", re.compile(r"^(?=.*\b(?:if|unless)\s+(?:it|he|she|they|there|the|sam|bob)\b)", re.I)),
)

_SMALL_TALK: Final = re.compile(
    r"^(?:(?:hi|hello|hey|yo)(?:\s+(?:there|you|all))?|good\s+(?:morning|afternoon|evening|night)|thanks?(?:\s+you)?(?:\s+(?:so\s+much|a\s+lot|again))?|thx|ty|cheers"
    r"|(?:ok(?:ay)?\s+)?(?:great|cool|nice|awesome|perfect)|ok(?:ay)?|got\s+it|bye|goodbye|see\s+you|good\s*night|how\s+are\s+you(?:\s+doing)?"
    r"|who\s+are\s+you|what(?:'s|\s+is)\s+your\s+name|lol|haha|you'?re\s+(?:great|awesome|the\s+best)|that'?s\s+(?:all|it|great|perfect))"
    r"(?:[\s!.,?]+(?:thanks?|thank\s+you|that's\s+all|all\s+good|so\s+much|a\s+lot|again))*[\s!.,?:)]*$",
    re.I,
)
_NO: Final = re.compile(
    r"(?:^|[\s,.!])(?:never\s*mind|nvm|forget\s+(?:it|that|about\s+it)|scratch\s+that|ignore\s+that|no\s+thanks|nope|nah"
    r"|(?:no|wait|actually)[\s,!]+(?:don't|do\s+not|stop)(?:\s+do\s+(?:it|that))?|don't(?:\s+do\s+(?:it|that|anything))?[\s.!]*$"
    r"|(?:don't|do\s+not)\s+(?:send|cancel|delete|trash|do|schedule|book|mark|snooze|remove|move)\s+(?:it|that|them|anything)[\s.!]*$"
    r"|^no[\s.!]*$|^stop[\s.!]*$|^not\s+now[\s.!]*$|^(?:leave|let)\s+it[\s.!]*$|^cancel\s+that\s+request)",
    re.I,
)
_YES: Final = re.compile(r"^(?:yes|yep|yeah|yup|sure|go\s+ahead|do\s+it|confirm(?:ed)?|approved?|sounds\s+good|please\s+do)[\s!.,]*(?:please|thanks)?[\s!.]*$", re.I)


def mood_of(text: str, *, opens_with_verb: bool) -> tuple[Mood | None, str]:
    """The mood of ``text`` and its core clause (``text`` itself when no mood applies)."""
    for mood, pattern in _MOODS if opens_with_verb else _MOODS + _LOOSE_MOODS:
        match = pattern.search(text)
        if match is not None:
            return mood, text[match.end() :].strip() or text
    return None, text


def small_talk_reply(raw: str) -> str | None:
    """The answer to a greeting, thanks or goodbye with no request in it, else ``None``."""
    text = raw.strip()
    if _SMALL_TALK.search(text) is None:
        return None
    if re.search(r"\b(?:thanks?|thank\s+you|thx|ty|cheers|great|cool|nice|awesome|perfect|got\s+it|that'?s\s+(?:all|it))\b", text, re.I):
        return "You're welcome! Anything else I can do?"
    if re.search(r"\b(?:bye|goodbye|see\s+you|good\s*night)\b", text, re.I):
        return "Bye for now!"
    return "Hi! I can help with your mail, calendar, tasks and reminders. What would you like to do?"


def is_standalone_no(text: str) -> bool:
    """"Never mind", "don't send it", "no": a request to do nothing."""
    return _NO.search(text) is not None


def is_yes(text: str) -> bool:
    """"Yes", "go ahead": a confirmation (approvals happen on the approval card, not in chat)."""
    return _YES.search(text) is not None
