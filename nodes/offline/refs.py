"""References to rows of a recent list: positions ("the 2nd one"), labels ("the standup"), counts.

Positions are emitted as ``"#N"``; the server's id validation resolves them against its own
list, so a wrong guess here can only fail closed. Label matches emit the row's own id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, Final, Literal

from tollgate.nodes.offline.text import ORDINAL_WORDS, number_of

__all__ = ["Positions", "Row", "find_count", "find_positions", "match_rows", "names_an_item", "resolve_positions", "tokens"]

Row = Mapping[str, Any]
"""One context row: ``{"position": int, "id": str, "label": str}``."""

_ORD: Final = "|".join(sorted(ORDINAL_WORDS, key=len, reverse=True))
_ONE: Final = rf"(?:(?P<w>{_ORD})|(?P<n>\d{{1,2}})(?:st|nd|rd|th)|#\s*(?P<h>\d{{1,2}})|(?:number|no\.?|item|position)\s*(?P<k>\d{{1,2}}))"
_ONE_RE: Final = re.compile(rf"(?<!\w){_ONE}(?!\w)", re.I)
_NOUN: Final = r"(?:e-?mails?|mails?|messages?|events?|meetings?|appointments?|tasks?|todos?|reminders?|items?|ones?|entries|entry)"
_NOUN_NUM_RE: Final = re.compile(rf"\b{_NOUN}\s+(?:#\s*)?(?P<k>\d{{1,2}})\b(?!\s*(?:am|pm|:|minutes?|hours?|days?))", re.I)
_BARE_NUM_RE: Final = re.compile(
    r"^(?:mark|read|open|show|view|cancel|delete|trash|remove|bin|snooze|complete|finish|tick\s+off|check\s+off)\s+"
    r"(?P<nums>\d{1,2}(?:\s*(?:,|and|&)\s*\d{1,2})*)\b(?!\s*(?:am|pm|:|minutes?|mins?|hours?|days?|weeks?|%))",
    re.I,
)
_RANGE_RE: Final = re.compile(
    r"\b(?P<side>first|top|last|bottom|latest|newest|oldest)\s+(?P<n>\d{1,2}|two|three|four|five|six|seven|eight|nine|ten|couple(?:\s+of)?|few)\b"
    r"(?!\s*(?:am|pm|minutes?|hours?|days?|weeks?))",
    re.I,
)
_ALL_RE: Final = re.compile(
    rf"\b(?:them|these|those|all\s+(?:of\s+)?(?:them|these|those|(?:the|my|these|those)\s+{_NOUN}|{_NOUN})|(?:them|these|those)\s+all|all\b(?!\s+(?:day|week|night))|every\s*(?:one|thing|{_NOUN})|everything|each\s+(?:one|of\s+them))",
    re.I,
)
_LAST_RE: Final = re.compile(r"\b(?P<pen>second[\s-]+to[\s-]+last|penultimate|next[\s-]+to[\s-]+last)\b|\b(?:the\s+)?last(?:\s+" + _NOUN + r")?\b(?!\s+(?:week|night|month|year|time))", re.I)
_THAT_RE: Final = re.compile(
    r"\b(?:that|it|this|this\s+one|that\s+one|the\s+one)\b"
    r"(?!\s+(?:week|weekend|morning|afternoon|evening|month|year|time|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b)",
    re.I,
)
_COUNT_RE: Final = re.compile(
    r"\b(?:first|top|last|latest|newest|recent|next|up\s+to|max(?:imum)?|only)\s+(?P<a>\d{1,3}|[a-z]+)\b"
    r"|\b(?P<b>\d{1,3}|two|three|four|five|six|seven|eight|nine|ten|twenty|fifteen|twelve)\s+(?:most\s+recent\s+|latest\s+|newest\s+|recent\s+|unread\s+|new\s+|upcoming\s+|open\s+|next\s+|more\s+)*"
    rf"{_NOUN}",
    re.I,
)
_STOP: Final = frozenset(
    # articles, pronouns, connectives, and the command and question words: they say what to do,
    # never which item
    "the a an my our your this that these those one ones from to for with about of on at in and me i it "
    "its please re fw fwd by is are was were be called named titled subject thing stuff them all both "
    "every everything each as just again now too also actually can you could would will up out off read "
    "open show view display tell more details detail info say says does do did what whats when where "
    "which how cancel cancelled canceled cancelling delete deleted remove removed trash trashed bin mark "
    "marked move moved reschedule snooze snoozed complete completed finish finished done check tick cross "
    "get rid sent send want need don't dont not no still anymore time scrap drop axe abort kill erase "
    "junk discard postpone push delay shift bump rename change update edit set make add create schedule "
    "book remind ping put throw away rid been be being has have had got write wrote written wants".split()
)
_PHRASAL: Final = re.compile(
    r"\b(?:call(?:ed)?\s+off|get\s+rid\s+of|tick(?:ed)?\s+off|check(?:ed)?\s+off|cross(?:ed)?\s+off|push(?:ed)?\s+back|"
    r"throw\s+(?:away|out)|turn\s+off|take\s+a\s+look\s+at|look\s+at)\b",
    re.I,
)
_KIND_WORDS: Final = frozenset(
    "email emails mail mails message messages inbox event events meeting meetings appointment appointments "
    "task tasks todo todos reminder reminders item items entry entries calendar list".split()
)


@dataclass(frozen=True, slots=True)
class Positions:
    """Which rows a request points at, before the list is known."""

    mode: Literal["items", "first", "last", "all", "that"]
    """Explicit items, the first/last N, every row, or a bare "that"/"it"."""
    items: tuple[int, ...] = ()
    """For ``items``: 1-based positions, negative counting from the end (-1 = last)."""
    count: int = 0
    """For ``first`` / ``last``: how many rows."""


def _one_value(match: re.Match[str]) -> int | None:
    if match.group("w"):
        return ORDINAL_WORDS[match.group("w").lower()]
    for key in ("n", "h", "k"):
        if match.group(key):
            return int(match.group(key))
    return None


def find_positions(text: str) -> Positions | None:
    """The positional reference in ``text``, if any (``None`` when it names no position)."""
    ranged = _RANGE_RE.search(text)
    if ranged is not None:
        n = number_of(ranged.group("n")) or (2 if ranged.group("n").lower().startswith("couple") else 3)
        side = "last" if ranged.group("side").lower() in {"last", "bottom", "oldest"} else "first"
        return Positions(side, count=int(n))
    last = _LAST_RE.search(text)
    if last is not None and last.group("pen"):
        return Positions("items", items=(-2,))
    items: list[int] = []
    for match in _ONE_RE.finditer(text):
        value = _one_value(match)
        if value is not None and value not in items:
            items.append(value)
    bare = _BARE_NUM_RE.search(text)
    if bare is not None:
        items.extend(int(n) for n in re.findall(r"\d+", bare.group("nums")) if int(n) not in items)
    for match in _NOUN_NUM_RE.finditer(text):
        value = int(match.group("k"))
        if value not in items:
            items.append(value)
    if last is not None:
        items.append(-1)
    if items:
        return Positions("items", items=tuple(items))
    if _ALL_RE.search(text):
        return Positions("all")
    if _THAT_RE.search(text):
        return Positions("that")
    return None


def resolve_positions(positions: Positions, size: int) -> list[int] | None:
    """Concrete 1-based positions in a list of ``size`` rows, or ``None`` if any is out of range."""
    if size <= 0:
        return None
    if positions.mode == "all":
        return list(range(1, size + 1))
    if positions.mode == "that":
        return [1] if size == 1 else None
    if positions.mode == "first":
        return list(range(1, positions.count + 1)) if 0 < positions.count <= size else None
    if positions.mode == "last":
        return list(range(size - positions.count + 1, size + 1)) if 0 < positions.count <= size else None
    out: list[int] = []
    for item in positions.items:
        value = size + 1 + item if item < 0 else item
        if not 1 <= value <= size:
            return None
        if value not in out:
            out.append(value)
    return out


def tokens(text: str) -> list[str]:
    """Lowercase word tokens, hyphens and apostrophes folded ("Stand-up" -> "standup")."""
    text = re.sub(r"'s\b", "", text.lower().replace("\u2019", "'"))
    text = re.sub(r"(?<=\w)[-'](?=\w)", "", text)
    return [t for t in re.split(r"[^\w@.]+|(?<=\w)\.(?=\s|$)", text) if t and t.strip(".")]


def _stem(word: str) -> str:
    """A crude English stem, enough for "failed"/"failure"/"fails" or "meetings"/"meeting"."""
    word = word.strip(".")
    for suffix in ("ies", "ing", "ed", "ure", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    if len(word) > 4 and word[-1] == word[-2]:
        word = word[:-1]  # "cancell(ed)" -> "cancel", "call(ed)" stays "call" (too short)
    return word


def _token_hits(query: str, label_tokens: Sequence[str]) -> bool:
    q = _stem(query)
    for raw in label_tokens:
        t = _stem(raw)
        if q == t or (len(q) >= 3 and (t.startswith(q) or q in t.split("@")[0].split("."))):
            return True
        if "@" in raw and q in re.split(r"[@.]", raw):
            return True
        if len(q) >= 5 and SequenceMatcher(None, q, t).ratio() >= 0.85:
            return True
    return False


def names_an_item(query: str) -> bool:
    """Whether ``query`` has a content word that could match a label ("the standup", not "the 2nd one")."""
    return any(w not in _STOP and w not in _KIND_WORDS for w in tokens(_PHRASAL.sub(" ", query)))


def match_rows(query: str, rows: Sequence[Row], *, kind_words: bool = True) -> list[Row] | None:
    """Rows whose label contains every content word of ``query``; ``None`` if it has none.

    Kind nouns ("email", "meeting") are only required when nothing else names the item, and
    not at all without ``kind_words``.
    """
    query = _PHRASAL.sub(" ", query)
    words = [w for w in tokens(query) if w not in _STOP]
    required = [w for w in words if w not in _KIND_WORDS] or (words if kind_words else [])
    if not required:
        return None
    out = [row for row in rows if all(_token_hits(w, tokens(str(row.get("label", "")))) for w in required)]
    return out


def find_count(text: str) -> int | None:
    """A requested number of rows ("top 5", "last three", "10 emails"), or ``None``."""
    for match in _COUNT_RE.finditer(text):
        word = match.group("a") or match.group("b")
        value = number_of(word)
        if value is not None and value >= 1 and float(value).is_integer():
            return int(value)
    return None
