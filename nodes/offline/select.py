"""Which kind of item a request is about, and which rows of its recent list it points at."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from tollgate.nodes.offline.plan import Reply, Turn, clarify
from tollgate.nodes.offline.refs import Row, find_positions, match_rows, resolve_positions
from tollgate.nodes.offline.times import Span

__all__ = ["KINDS", "NOUNS", "cut", "kind_named", "kinds_named", "pick_ids", "without_times"]

KINDS: Final = ("mail", "calendar", "tasks", "reminders")
"""The recent-list kinds the built-in tools maintain."""

NOUNS: Final[dict[str, tuple[str, str]]] = {
    "mail": ("email", "emails"),
    "calendar": ("event", "events"),
    "tasks": ("task", "tasks"),
    "reminders": ("reminder", "reminders"),
}
"""How to name one item and several items of a kind in replies."""

_KIND_RES: Final[dict[str, re.Pattern[str]]] = {
    "reminders": re.compile(r"\breminders?\b", re.I),
    "tasks": re.compile(r"\b(?:tasks?|todos?|to\s+do\s+list|chores?)\b", re.I),
    "mail": re.compile(
        r"\b(?:e-?mails?|mails?|messages?|inbox|mailbox|newsletters?|outbox|sent\s+(?:folder|items|box)|(?:my|the)\s+(?:trash|bin|spam))\b",
        re.I,
    ),
    "calendar": re.compile(
        r"\b(?:calendar|events?|meetings?|appointments?|agenda|diary|schedule)\b|\bmy\s+(?:week|day|weekend|morning|afternoon|evening)\b",
        re.I,
    ),
}


def kinds_named(text: str) -> list[str]:
    """The kinds whose nouns ``text`` uses, in order of first appearance."""
    found = [(m.start(), kind) for kind, rx in _KIND_RES.items() if (m := rx.search(text))]
    return [kind for _, kind in sorted(found)]


def kind_named(text: str) -> str | None:
    """The first kind ``text`` names explicitly, or ``None``."""
    kinds = kinds_named(text)
    return kinds[0] if kinds else None


def cut(text: str, spans: Sequence[Span]) -> str:
    """``text`` with ``spans`` blanked out (positions of the rest are kept)."""
    chars = list(text)
    for start, end in spans:
        for i in range(max(start, 0), min(end, len(chars))):
            chars[i] = " "
    return "".join(chars)


def _rows_of(turn: Turn, kind: str) -> Sequence[Row]:
    return turn.recent.get(kind) or ()


def _label_clip(label: str) -> str:
    return label if len(label) <= 60 else label[:59] + "…"


def _on_named_day(turn: Turn, target: str, rows: Sequence[Row]) -> tuple[str, list[Row]] | None:
    """For "tomorrow's lunch": the target without its day, and the rows on that day."""
    if turn.now is None or turn.tz is None:
        return None
    when = turn.when(target)
    if when is None or not when.day_given:
        return None
    on_day = []
    for row in rows:
        label_when = turn.when(str(row.get("label", "")))
        if label_when is not None and label_when.day == when.day:
            on_day.append(row)
    return cut(target, when.spans), on_day


def _each_part(target: str, rows: Sequence[Row]) -> list[Row]:
    """"the github and newsletter emails": every part must match; the union of their rows."""
    parts = [p for p in re.split(r"\s*(?:,|\band\b|&|\bplus\b)\s*", target) if p.strip()]
    if len(parts) < 2:
        return []
    found: list[Row] = []
    for part in parts:
        matches = match_rows(part, rows, kind_words=False)
        if matches is None:
            continue
        if not matches:
            return []
        found.extend(r for r in matches if r not in found)
    return found


def without_times(turn: Turn, text: str) -> str:
    """``text`` with its time phrase blanked out (for label matching)."""
    if turn.now is None or turn.tz is None:
        return text
    when = turn.when(text)
    return cut(text, when.spans) if when is not None else text


def pick_ids(
    turn: Turn, kind: str, target: str, *, bulk: bool, implicit_that: bool = False, by_day: bool = False
) -> list[str] | Reply:
    """Ids (``"#N"`` positions or label-matched row ids) that ``target`` points at, or a question.

    ``target`` is the part of the request that names the item(s).
    With ``implicit_that``, a target naming nothing at all ("snooze") means "that"; with
    ``by_day``, a day in the target ("tomorrow's lunch") narrows the rows to that day.
    Fails closed: no recent list, a position past its end, an unknown label or an ambiguous
    single reference all become a clarifying question, never a guess.
    """
    one, many = NOUNS.get(kind, ("item", "items"))
    rows = _rows_of(turn, kind)
    if by_day and rows:
        dated = _on_named_day(turn, target, rows)
        if dated is not None:
            target, day_rows = dated
            matches = match_rows(target, day_rows, kind_words=False)
            found = day_rows if matches is None else matches
            if len(found) == 1 or (bulk and found):
                return [str(r["id"]) for r in found]
            if not found:
                return clarify(f"I don't see that {one} on that day in your latest list. Which one do you mean?")
    positions = find_positions(target)
    if positions is not None and positions.mode == "all" and rows:
        if match_rows(target, rows, kind_words=False) is not None:
            positions = None  # "all the emails from GitHub": the label narrows "all"
    shown = NOUNS.get(turn.latest_kind or "", ("", ""))[1] if turn.latest_kind != kind else ""
    # After another kind's list, say which list the thread has: "no recent list" alone misleads.
    no_list = clarify(
        f"Which {one} do you mean? The latest list here is of your {shown}, not your {many} — ask me to list your {many} first."
        if shown else f"Which {one} do you mean? I don't have a recent list of your {many} — ask me to list them first.")
    if positions is not None and positions.mode != "that":
        if not rows:
            return no_list
        resolved = resolve_positions(positions, len(rows))
        if resolved is None:
            size = f"{len(rows)} {one if len(rows) == 1 else many}"
            return clarify(f"Your latest list has {size}. Which one do you mean?")
        if not bulk and len(resolved) > 1:
            return clarify(f"I can only do that to one {one} at a time. Which one?")
        return [f"#{p}" for p in resolved]
    matches = match_rows(target, rows) if rows else None
    if positions is None and matches is None and implicit_that:
        positions = find_positions("that")
    if matches is None and positions is not None and rows:  # a bare "that" / "it"
        resolved = resolve_positions(positions, len(rows))
        if resolved is not None:
            return [f"#{p}" for p in resolved]
        return clarify(f"Which {one} do you mean? Say its number from the list, like “the 2nd one”.")
    if not rows:
        return no_list
    if matches is None:
        return clarify(f"Which {one} do you mean? Say its number from the list, like “the 2nd one”.")
    if not matches and bulk:
        matches = _each_part(target, rows)
    if not matches:
        return clarify(f"I couldn't find that in your latest list of {many}. Which one do you mean?")
    if len(matches) > 1 and not bulk:
        options = "; ".join(f"#{r['position']} {_label_clip(str(r.get('label', '')))}" for r in matches[:5])
        return clarify(f"More than one {one} matches: {options}. Which one?")
    return [str(r["id"]) for r in matches]
