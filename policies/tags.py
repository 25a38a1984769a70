"""App tags: ``#mail``, ``#calendar`` in the user's own words narrow the menu, never widen it.

Tags are matched against tool names and a few aliases; an unknown tag falls open (it is
ignored, and the menu stays as it was). The tier gate still decides what runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["TagVerdict", "read_tags"]

_TAG: Final = re.compile(r"(?<![\w#])#([a-z][a-z0-9_-]{1,30})\b", re.I)
_ALIASES: Final = {
    "email": "mail", "emails": "mail", "inbox": "mail", "cal": "calendar", "events": "calendar",
    "todo": "tasks", "todos": "tasks", "task": "tasks", "reminder": "reminders",
}


@dataclass(frozen=True, slots=True)
class TagVerdict:
    """Which tools the tags select, and which tags were ignored."""

    tools: frozenset[str]
    """Tools selected by known tags (empty: no narrowing)."""
    applied: tuple[str, ...]
    """The tags that applied, as typed."""
    ignored: tuple[str, ...]
    """Unknown tags (they fall open)."""


def read_tags(text: str, tool_names: Iterable[str]) -> TagVerdict:
    """Read the ``#tags`` of ``text`` against the enabled ``tool_names``."""
    names = set(tool_names)
    selected: set[str] = set()
    applied: list[str] = []
    ignored: list[str] = []
    for match in _TAG.finditer(text):
        tag = match.group(1).lower()
        tool = tag if tag in names else _ALIASES.get(tag)
        if tool is not None and tool in names:
            selected.add(tool)
            applied.append(tag)
        else:
            ignored.append(tag)
    return TagVerdict(frozenset(selected), tuple(applied), tuple(ignored))
