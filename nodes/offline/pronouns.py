"""What "it", "that", "my 3pm" and "the one after lunch" stand for: an item of the thread, named
by its title instead.

"Cancel it" after "tell me about the dentist", "snooze that" after asking about the stretch
reminder, "my 3pm" with the day's events listed: the reference is rewritten to the title of the
one row it can mean, and the grammar then matches that title like any other. The row is looked
for in the latest list of each kind, first among those the request itself or the previous
request names; a reference that could mean two rows, or none, is left for the grammar to ask about.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from tollgate.nodes.offline.plan import Turn
from tollgate.nodes.offline.refs import Row

__all__ = ["resolve_references"]

_PRONOUN: Final = re.compile(r"\b(?:it|that(?:\s+one)?|this(?:\s+one)?)\b(?!\s+(?:is|was|'s|the|i|you|we|they|he|she)\b)", re.I)
_CLOCK_REF: Final = re.compile(r"\b(?:my|the)\s+(?P<h>\d{1,2})(?::(?P<m>[0-5]\d))?\s*(?P<ap>am|pm)\b(?:\s+(?:one|meeting|event|appointment))?", re.I)
_WORD: Final = re.compile(r"\w+")
_NEIGHBOUR: Final = re.compile(
    r"\bthe\s+one\s+(?P<side>after|before)\s+(?:the\s+|my\s+)?(?P<what>.+?)(?=\s+(?:to|at|on|by|for|until)\b|[?.!,]|$)", re.I)


def _title(row: Row) -> str:
    return str(row.get("label", "")).split(" — ")[0].strip()


_COMMON: Final = frozenset(
    "the a an my me to of for in on at is are be it this that and or from with about what when where whats "
    "open read show tell email mail message event meeting task reminder note due".split())


def _named_in(text: str, rows: Sequence[Row]) -> list[Row]:
    """The rows ``text`` names: by their whole title, else by a word only one row's label has."""
    words = set(_WORD.findall(text.lower()))
    whole = [r for r in rows if (title := _WORD.findall(_title(r).lower())) and set(title) <= words]
    if whole:
        return whole
    labels = [set(_WORD.findall(str(r.get("label", "")).lower())) for r in rows]
    hits: list[Row] = []
    for word in words - _COMMON:
        owners = [r for r, label in zip(rows, labels, strict=True) if len(word) >= 3 and word in label]
        if len(owners) == 1 and owners[0] not in hits:
            hits.append(owners[0])
    return hits


def _starting_at(rows: Sequence[Row], hour: int, minute: int) -> list[Row]:
    clock = f"{hour:02d}:{minute:02d}"
    return [r for r in rows if re.search(rf",\s{clock}(?:–|\b)", str(r.get("label", "")))]


def resolve_references(turn: Turn) -> str:
    """``turn.text`` with one reference replaced by the title of the single row it means, if there is one."""
    text = turn.text
    clock = _CLOCK_REF.search(text)
    if clock is not None:
        hour = int(clock.group("h")) % 12 + (12 if clock.group("ap").lower() == "pm" else 0)
        hits = _starting_at(turn.recent.get("calendar") or (), hour, int(clock.group("m") or 0))
        if len(hits) == 1:
            if re.fullmatch(r"(?:what'?s|what\s+is|when\s+is|where\s+is)\s*", text[:clock.start()], re.I):
                return f"details of the {_title(hits[0])}"  # "what's my 3pm?" asks about the event
            return f"{text[:clock.start()]}the {_title(hits[0])}{text[clock.end():]}"
        return text
    neighbour = _NEIGHBOUR.search(text)
    if neighbour is not None:
        # "the one after lunch": the row next to the one the phrase names, in the latest list's order.
        rows = list(turn.recent.get(turn.latest_kind or "calendar") or ())
        named = _named_in(neighbour.group("what"), rows)
        if len(named) == 1:
            at = rows.index(named[0]) + (1 if neighbour.group("side").lower() == "after" else -1)
            if 0 <= at < len(rows):
                return f"{text[:neighbour.start()]}the {_title(rows[at])}{text[neighbour.end():]}"
        return text
    pronoun = _PRONOUN.search(text)
    if pronoun is None or re.search(r"#\d|\b\d+(?:st|nd|rd|th)\b", text):
        return text
    kinds = [turn.latest_kind] if turn.latest_kind else list(turn.recent)
    for source in (text[: pronoun.start()], turn.prior[-1] if turn.prior else ""):
        if not source:
            continue
        hits = [row for kind in kinds for row in _named_in(source, turn.recent.get(kind) or ())]
        if len(hits) == 1 and len(turn.recent.get(turn.latest_kind or "", ())) != 1:
            return f"{text[:pronoun.start()]}the {_title(hits[0])}{text[pronoun.end():]}"
        if hits:
            return text
    return text
