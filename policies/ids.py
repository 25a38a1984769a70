"""Id membership: the injection boundary.

A model may only bind ids the server itself returned in this thread: the rows of a list, an
item it read, an item a write created. Each kind of id keeps a bounded set of them; a position
(``"#2"``, the only way positions are written) means that row of the latest list of its kind.
A bare number is never a position: for a tool whose ids are numbers, ``"11"`` is the id 11.

Fail closed: no such id, a blank or malformed reference, a position out of range, a duplicate:
the whole set is refused, so a bulk action with one bad id binds none of them. Nothing is
normalized: a reference binds only as exactly the id the server returned.

Id fields are paths into the arguments: ``event_id``; ``message_ids`` (a list: every element);
``share.file_id`` (a nested object); ``items[].file_id`` (a field of every element of a list).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "IdBinding",
    "IdRefusal",
    "bind_ids",
    "check_id_path",
    "id_refs",
    "is_position",
    "with_ids",
]

IdRefusal = Literal["no_list", "blank", "bad_id", "position_out_of_range", "not_returned", "duplicate", "empty",
                    "ambiguous_list"]
"""Why a set of references was refused."""

_POSITION: Final = re.compile(r"^#([0-9]{1,3})$")
_PATH_PART: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[\])?$")

Location = tuple[str | int, ...]
"""Where a reference sits in the arguments: keys and list indexes."""


def is_position(ref: str) -> bool:
    """Whether ``ref`` is written as a position (``"#2"``)."""
    return bool(_POSITION.match(ref))


@dataclass(frozen=True, slots=True)
class IdBinding:
    """The result of binding references."""

    ids: tuple[str, ...]
    """The bound ids, in the order given (empty when refused)."""
    refusal: IdRefusal | None = None
    """Why nothing was bound, or ``None`` on success."""

    @property
    def ok(self) -> bool:
        """Whether every reference was bound."""
        return self.refusal is None

    @classmethod
    def refuse(cls, reason: IdRefusal) -> IdBinding:
        """A refusal that binds nothing."""
        return cls((), reason)


def bind_ids(
    refs: Sequence[object],
    latest: Sequence[str],
    known: Collection[str],
    *,
    accepts: Callable[[str], bool],
    positions: bool = True,
    ambiguous: bool = False,
) -> IdBinding:
    """Resolve ``refs`` against the ids the server returned. Fail closed.

    ``latest`` is the latest list of the kind (display order: what ``"#2"`` means), ``known``
    every id of the kind the server returned in the thread (``latest`` included; an integer
    reference is compared as its digits), ``accepts``
    the kind's own check of an id's shape. With ``positions`` off, ``"#2"`` is only ever an id.
    With ``ambiguous`` (the latest list of the kind came as two lists at once), a position is
    refused: "#2" could mean either list's row; ids still bind.
    """
    if not refs:
        return IdBinding.refuse("empty")
    bound: list[str] = []
    for ref in refs:
        if isinstance(ref, int) and not isinstance(ref, bool):
            ref = str(ref)  # an integer id is compared as its digits, as the thread keeps it
        if not isinstance(ref, str) or not ref.strip():
            return IdBinding.refuse("blank")
        candidate = ref
        if candidate not in known and positions and is_position(candidate):
            if ambiguous:
                return IdBinding.refuse("ambiguous_list")
            if not latest:
                return IdBinding.refuse("no_list")
            index = int(candidate[1:])
            if not 1 <= index <= len(latest):
                return IdBinding.refuse("position_out_of_range")
            candidate = latest[index - 1]
        elif candidate not in known:
            if not accepts(candidate):
                return IdBinding.refuse("bad_id")
            return IdBinding.refuse("not_returned" if known else "no_list")
        if candidate in bound:
            return IdBinding.refuse("duplicate")
        bound.append(candidate)
    return IdBinding(tuple(bound))


def check_id_path(path: str) -> tuple[str, ...]:
    """The parts of an id-field path (``items[].file_id`` -> ``("items[]", "file_id")``); ``ValueError`` if malformed."""
    parts = tuple(path.split("."))
    if not path or not all(_PATH_PART.match(p) for p in parts):
        raise ValueError(f"id field path {path!r} must be names joined by '.', each optionally followed by '[]'")
    return parts


def id_refs(args: dict[str, Any], path: str) -> list[tuple[Location, object]]:
    """Every reference at ``path`` in ``args``, with its location. A missing or null value has none.

    A value that is a list at the end of the path contributes each element.
    """
    return list(_walk(args, check_id_path(path), ()))


def _walk(node: object, parts: tuple[str, ...], at: Location) -> Iterator[tuple[Location, object]]:
    if not parts:
        if isinstance(node, list):
            for index, element in enumerate(node):
                yield (*at, index), element
        elif node is not None:
            yield at, node
        return
    head, rest = parts[0], parts[1:]
    each = head.endswith("[]")
    key = head[:-2] if each else head
    if not isinstance(node, dict) or node.get(key) is None:
        return
    value = node[key]
    if each:
        if not isinstance(value, list):
            yield (*at, key), value  # not a list where one is declared: refused as a malformed reference
            return
        for index, element in enumerate(value):
            yield from _walk(element, rest, (*at, key, index))
    else:
        yield from _walk(value, rest, (*at, key))


def with_ids(args: dict[str, Any], bound: Sequence[tuple[Location, str]]) -> dict[str, Any]:
    """A copy of ``args`` with each location set to its bound id (the input is not changed)."""
    out: Any = copy.deepcopy(args)
    for location, value in bound:
        node = out
        for step in location[:-1]:
            node = node[step]
        node[location[-1]] = value
    return out

