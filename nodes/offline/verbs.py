"""The action verb that opens a request: it decides what the request asks for.

Politeness is already stripped ("could you please cancel..." -> "cancel..."), so the verb is
the first word or phrase. A leading time phrase is skipped ("in 20 minutes remind me to ...").
"""

from __future__ import annotations

import re
from typing import Final

from tollgate.nodes.offline import mail
from tollgate.nodes.offline.plan import Turn

__all__ = ["head_verb", "verb_after_time"]

_HEADS: Final[tuple[tuple[str, re.Pattern[str]], ...]] = tuple(
    (name, re.compile(pattern, re.I))
    for name, pattern in (
        ("snooze", r"^(?:snooze|remind\s+me\s+(?:again|later)|re-?remind)\b"),
        ("remind", r"^(?:don't\s+(?:let\s+me\s+)?forget|remind\s+(?:me|us)\b|(?:set|create|add|make|schedule|put\s+in)\s+(?:up\s+)?(?:me\s+)?(?:a|an|the|that)?\s*(?:new\s+)?reminder\b"
                   r"|new\s+reminder\b|reminder\s*(?::|-|to\b|for\b|about\b|at\b|tomorrow|tonight|in\b|on\b|next\b)|(?:ping|nudge|alert)\s+me\b)"),
        ("forward", r"^(?:forward|fwd|reply|respond|answer|write\s+back)\b"),
        ("mark", r"^(?:mark|flag)\b"),
        ("complete", r"^(?:complete|finish(?:ed)?|tick\s+off|check\s+off|cross\s+off|done\s+with|i(?:'ve|\s+have)?\s+(?:just\s+)?(?:finished|completed|done)\b|i'?m\s+(?:done|finished)\s+with|i\s+did)\b"),
        ("trash", r"^(?:delete|trash|remove|bin|discard|throw\s+(?:away|out)|get\s+rid\s+of|erase|junk|clear\s+out)\b|^move\b(?=.*\b(?:to|in|into)\s+(?:the\s+)?(?:trash|bin)\b)"),
        ("cancel", r"^(?:cancel|call\s+off|scrap|drop|axe|abort|kill|turn\s+off|stop\s+reminding)\b|^(?:stop|turn\s+off|silence)\b(?=.*\breminders?\b)|^i\s+(?:don't|do\s+not|no\s+longer)\s+need\b"),
        ("event", r"^(?:schedule|book|set\s+up|arrange|organi[sz]e|pencil|block)\b"),
        ("add", r"^(?:add|create|put|make\s+(?:a|an|me\s+a)|new|insert|jot|note|write\s+down|track|log|todo\s*:|task\s*:)\b|^(?:todo|task)\s*[:-]|^todo\s+(?!lists?\b|items?\b)(?=[a-z])"),
        ("update", r"^(?:move|reschedule|shift|push|postpone|delay|bump|bring|pull|change|rename|retitle|update|edit|extend|shorten|lengthen|make|switch)\b"),
        ("read", r"^(?:read|open|view|display|pull\s+up|bring\s+up|expand|tell\s+me\s+(?:more\s+)?about|more\s+(?:about|on|details)|details?\b|what\s+(?:does|did)\s+.+\s+(?:say|write|want|send)|(?:when|where|what\s+time)(?:\s+is|'s)\b)"),
    )
)


def head_verb(text: str) -> str | None:
    """The action verb that opens ``text`` (``"cancel"``, ``"send"``...), or ``None``."""
    if mail.is_send(text) and not re.match(r"write\s+back\b", text, re.I):  # "write back to ana" replies
        return "send"
    for name, pattern in _HEADS:
        if pattern.search(text):
            return name
    return None


def verb_after_time(turn: Turn, text: str) -> str | None:
    """The verb of "in 20 minutes remind me to ...": the one right after a leading time phrase."""
    if turn.now is None or turn.tz is None:
        return None
    when = turn.when(text)
    if when is None or when.spans[0][0] > 0:
        return None
    rest = text[max(end for _, end in when.spans) :].lstrip(" ,")
    return head_verb(rest) if rest else None
