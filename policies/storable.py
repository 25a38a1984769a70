"""Making a tool's result storable: third-party content must never be able to crash a turn.

A page, a mail or a search result may hold characters PostgreSQL cannot store in text (NUL),
strings Python cannot encode as UTF-8 (lone surrogates), or simply be huge. :func:`storable`
returns a copy of a JSON value with those characters replaced by U+FFFD, strings clipped,
nesting bounded and lists cut to fit a total budget, and says whether it had to change
anything. Pure: no I/O, no mutation of the input.

It also makes bidirectional controls visible (:func:`visible_controls`): a title written
``Pay \u202egnp.exe\u202c invoice`` would render as "Pay exe.png invoice" on an approval card,
in a list or in a reply; it shows as ``Pay [U+202E]gnp.exe[U+202C] invoice`` instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["BIDI_CONTROLS", "MAX_DEPTH", "Storable", "depth_of", "storable", "unstorable", "visible_controls"]

MAX_DEPTH: Final = 32
"""Deepest nesting of a value Tollgate stores or accepts as arguments."""
_UNSTORABLE: Final = re.compile(r"[\x00\ud800-\udfff]")
_REPLACEMENT: Final = "\ufffd"
BIDI_CONTROLS: Final = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Bidirectional formatting characters (Unicode TR9 explicit formatting; CVE-2021-42574)."""
_BIDI: Final = re.compile("[" + "".join(sorted(BIDI_CONTROLS)) + "]")


def visible_controls(text: str) -> str:
    """``text`` with each bidi control shown as ``[U+XXXX]``, so it cannot reorder what a reader sees."""
    return _BIDI.sub(lambda m: f"[U+{ord(m.group()):04X}]", text) if _BIDI.search(text) else text


@dataclass(frozen=True, slots=True)
class Storable:
    """A value made storable, and whether anything had to change."""

    value: Any
    """The cleaned copy."""
    changed: bool
    """Whether a character was replaced, a string clipped, a level or an item dropped."""


def unstorable(text: str) -> bool:
    """Whether ``text`` holds a character PostgreSQL text or UTF-8 cannot carry (NUL, a lone surrogate)."""
    return _UNSTORABLE.search(text) is not None


def depth_of(value: object, *, limit: int = MAX_DEPTH + 1) -> int:
    """How deeply ``value`` nests (a scalar is 0); stops counting at ``limit`` (no recursion)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, (list, tuple)):
            children = list(item)
        else:
            continue
        deepest = max(deepest, level + 1)
        if deepest >= limit:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def storable(value: Any, *, max_chars: int = 20_000, budget: int = 200_000, max_depth: int = MAX_DEPTH) -> Storable:
    """A copy of the JSON ``value`` that PostgreSQL can store and a turn can carry.

    Strings lose NUL and lone surrogates (replaced), show bidi controls, and are clipped to ``max_chars``
    (ending with a note of how many characters were cut); nesting
    deeper than ``max_depth`` is dropped; once ``budget`` characters of strings are spent, the
    remaining items of lists are dropped. Keys are cleaned like strings.
    """
    changed = False
    spent = 0

    def clean(text: str) -> str:
        nonlocal changed, spent
        fixed = visible_controls(_UNSTORABLE.sub(_REPLACEMENT, text))
        if len(fixed) > max_chars:
            # Said in the text itself, so the model (and a card quoting it) knows the rest is missing.
            fixed = fixed[:max_chars] + f"… [cut here: {len(fixed) - max_chars:,} more characters not kept]"
        if fixed != text:
            changed = True
        spent += len(fixed)
        return fixed

    def walk(item: Any, depth: int) -> Any:
        nonlocal changed
        if isinstance(item, str):
            return clean(item)
        if isinstance(item, (dict, list, tuple)) and depth >= max_depth:
            changed = True
            return None
        if isinstance(item, dict):
            return {clean(str(k)): walk(v, depth + 1) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            out = []
            for element in item:
                if spent >= budget:
                    changed = True
                    break
                out.append(walk(element, depth + 1))
            return out
        return item

    return Storable(walk(value, 0), changed)
