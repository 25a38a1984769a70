"""Id membership: the injection boundary.

A model may only bind ids the server itself returned in the most recent list of that kind in
this thread. Positional references ("#2", "2") are resolved here, from that list. Fail
closed: no list, a blank reference, a position out of range, a duplicate or any non-member
refuses the whole set, so a bulk action with one bad id binds none of them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["IdBinding", "IdRefusal", "bind_ids"]

IdRefusal = Literal["no_list", "blank", "position_out_of_range", "not_in_latest_list", "duplicate", "empty"]
"""Why a set of references was refused."""

_POSITION: Final = re.compile(r"^#?([0-9]{1,3})$")


@dataclass(frozen=True, slots=True)
class IdBinding:
    """The result of binding references against a recent list."""

    ids: tuple[str, ...]
    """The bound store ids, in the order given (empty when refused)."""
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


def bind_ids(refs: Sequence[str], recent_ids: Sequence[str]) -> IdBinding:
    """Resolve ``refs`` (ids or positions) against ``recent_ids`` (display order). Fail closed."""
    if not refs:
        return IdBinding.refuse("empty")
    if not recent_ids:
        return IdBinding.refuse("no_list")
    members = {i.strip() for i in recent_ids if i and i.strip()}
    bound: list[str] = []
    for ref in refs:
        candidate = ref.strip() if isinstance(ref, str) else ""
        if not candidate:
            return IdBinding.refuse("blank")
        position = _POSITION.match(candidate)
        if position:
            index = int(position.group(1))
            if not 1 <= index <= len(recent_ids):
                return IdBinding.refuse("position_out_of_range")
            candidate = recent_ids[index - 1].strip()
        if candidate not in members:
            return IdBinding.refuse("not_in_latest_list")
        if candidate in bound:
            return IdBinding.refuse("duplicate")
        bound.append(candidate)
    return IdBinding(tuple(bound))
