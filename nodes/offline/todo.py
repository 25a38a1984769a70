"""Task requests: list, create (with an optional due date) and complete (reversible)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Final

from tollgate.nodes.offline.plan import Call, Plan, Turn, clarify
from tollgate.nodes.offline.refs import find_count, match_rows
from tollgate.nodes.offline.select import cut, pick_ids
from tollgate.nodes.offline.text import clean_fragment

__all__ = ["add_it", "complete_task", "create_task", "finished_task", "list_tasks"]

_CREATE_HEAD: Final = re.compile(
    r"^(?:(?:add|create|make|put|new|jot\s+down|note\s+down|write\s+down|note|track|log)\b(?:\s+(?:a|an|the|me|some)\b)?(?:\s+new)?"
    r"(?:\s+(?:task|todo|to\s+do|item|entry))?\s*(?:to\s+(?!my\b|the\b)|:|-|for|called|named|titled|that\s+says)?"
    r"|(?:task|todo)\s*[:-]?)",
    re.I,
)
_LIST_TAIL: Final = re.compile(
    r"\b(?:to|on|onto|in|into)\s+(?:my|the)\s+(?:todo|task|tasks|to\s+do|shopping|grocery)?\s*(?:list|tasks|todos?)\b"
    r"|\bas\s+(?:a|an|my)\s+(?:new\s+)?(?:task|todo|to\s+do)\b", re.I
)
_DUE_WORD: Final = re.compile(r"\b(?:due(?:\s+(?:on|by))?|deadline(?:\s+is)?)\s*$", re.I)


def list_tasks(turn: Turn, text: str | None = None) -> Plan:
    """``tasks.list``: open (default), done or all tasks, and a count."""
    text = turn.text if text is None else text
    args: dict[str, Any] = {}
    if re.search(r"\b(?:overdue|past\s+(?:their\s+)?due|late\s+(?:on|with)|behind\s+on)\b", text, re.I):
        args["status"] = "overdue"
    elif re.search(r"\b(?:all(?:\s+(?:of\s+)?my)?\s+(?:tasks|todos?)|including\s+(?:the\s+)?(?:done|completed|finished)|everything\s+on|every\s+task)\b", text, re.I):
        args["status"] = "all"
    elif re.search(r"\b(?:done|complete[d]?|finish(?:ed)?|closed|ticked\s+off|checked\s+off|crossed\s+off)\b", text, re.I) and not re.search(r"\bnot\s+(?:yet\s+)?(?:done|completed|finished)\b", text, re.I):
        args["status"] = "done"
    else:
        args["status"] = "open"
    count = find_count(text)
    if count is not None:
        args["limit"] = min(max(count, 1), 50)
    return Call(("tasks", "list"), args)


def create_task(turn: Turn) -> Plan:
    """``tasks.create``: the title, and a due date when the request names a day."""
    text = turn.text
    spans: list[tuple[int, int]] = []
    due: str | None = None
    if turn.now is not None and turn.tz is not None:
        when = turn.when(text)
        if when is not None:
            if when.day < turn.now.date():
                return clarify("That date has already passed. When is it due?")
            due = when.day.isoformat()
            spans.extend(when.spans)
    rest = cut(text, spans)
    rest = re.sub(r"\s+", " ", rest).strip(" ,")
    head = _CREATE_HEAD.search(rest)
    if head is not None:
        rest = rest[head.end() :]
    rest = _LIST_TAIL.sub(" ", rest)
    rest = re.sub(r"\s+", " ", rest).strip()
    rest = _DUE_WORD.sub("", rest)
    title = clean_fragment(rest).strip("\"'")
    if not title:
        return clarify("What's the task?")
    if re.fullmatch(r"(?:for\s+)?(?:it|that|this|them|those|these)(?:\s+one)?", title, re.I):
        return clarify("What should the task say? Tell me in a few words, like “add a task to call the plumber”.")
    args: dict[str, Any] = {"title": (title[:1].upper() + title[1:])[:200]}
    if due is not None:
        args["due_date"] = due
    return Call(("tasks", "create"), args)


_DONE_WORDS: Final = re.compile(
    r"\b(?:mark(?:ed)?|set|tick(?:ed)?\s+off|check(?:ed)?\s+off|cross(?:ed)?\s+off|complete[d]?|finish(?:ed)?|did|done|close[d]?|"
    r"as\s+(?:done|complete[d]?|finished)|i'?m|i\s+am|i(?:'ve|\s+have)?|with|off)\b",
    re.I,
)


def complete_task(turn: Turn) -> Plan:
    """``tasks.complete`` of one task from the latest list."""
    target = _DONE_WORDS.sub(" ", turn.text)
    picked = pick_ids(turn, "tasks", target, bulk=False)
    if not isinstance(picked, list):
        return picked
    return Call(("tasks", "complete"), {"task_id": picked[0]})


_ADD_IT_RE: Final = re.compile(
    r"^(?:i\s+(?:need|have|must|should|want)\s+to\s+|i\s+gotta\s+|need\s+to\s+)?(?P<t>.+?)[,;.]?\s+(?:so\s+)?(?:please\s+)?(?:add|put)\s+(?:it|that|this)\s+"
    r"(?:to|on)\s+(?:my|the)\s+(?:todo\s+|to\s+do\s+|task\s+|shopping\s+)?(?:list|tasks|todos?)\b",
    re.I,
)
_DID_RE: Final = re.compile(r"^i\s+(?:just\s+|finally\s+|already\s+)?(?P<v>[a-z]+ed|did|made|paid|bought|sent|wrote)\s+(?P<rest>.+)$", re.I)
_IRREGULAR: Final = {"did": "do", "made": "make", "paid": "pay", "bought": "buy", "sent": "send", "wrote": "write"}


def finished_task(turn: Turn) -> Plan | None:
    """"I called the plumber" when "Call the plumber" is in the latest task list: complete it."""
    match = _DID_RE.search(turn.text)
    rows = turn.recent.get("tasks")
    if match is None or not rows:
        return None
    verb = match.group("v").lower()
    base = _IRREGULAR.get(verb) or re.sub(r"(?:ied)$", "y", verb)
    if base == verb:
        base = verb[:-2] if verb.endswith("ed") else verb
    found = [
        r for r in (match_rows(match.group("rest"), rows) or [])
        if str(r.get("label", "")).lower().startswith(base[: max(3, len(base) - 1)])
    ]
    if len(found) != 1:
        return None
    return Call(("tasks", "complete"), {"task_id": str(found[0]["id"])})


_NEED_RE: Final = re.compile(
    r"^i\s+(?:really\s+)?(?:need|have|must|gotta|got)\s+(?:to\s+)?(?P<t>.+?)\s+(?P<by>by|before|until)\s+(?P<w>.+)$", re.I)


def obligation(turn: Turn) -> Plan | None:
    """"I need to pay the electricity bill by thursday": a task due that day (a day must be named)."""
    match = _NEED_RE.search(turn.text)
    if match is None:
        return None
    when = turn.when(match.group("w"))
    if when is None or not when.day_given:
        return None
    return create_task(replace(turn, text=f"add {match.group('t')} by {match.group('w')}"))


def add_it(turn: Turn) -> Plan | None:
    """"I need to pick up the dry cleaning, add it to my list": a task from the first clause."""
    match = _ADD_IT_RE.search(turn.text)
    if match is None:
        return None
    return create_task(replace(turn, text="add " + match.group("t")))
