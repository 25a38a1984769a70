"""The turn a piece of work belongs to, for log lines and spans.

A run of the turn graph opens a :class:`Scope` (:func:`open_scope`); the nodes it runs, in tasks
LangGraph starts inside it, see the same object and fill in what they learn (the turn id is
made by the picker, the approval id by propose). Contextvars carry it: a task copies its
context when it starts, so the object is shared, never copied.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["Scope", "current", "open_scope"]


@dataclass(slots=True)
class Scope:
    """Ids of the work under way (empty when not known); never content, never a credential."""

    owner: str = ""
    thread: str = ""
    turn: str = ""
    approval: str = ""
    outcome: str = ""
    """How the run ended, as the node that ended it said (``read``, ``executed``, ...)."""

    def fields(self) -> dict[str, str]:
        """The ids that are known, by name (``owner_id``, ``thread_id``, ``turn_id``, ``approval_id``)."""
        pairs = (("owner_id", self.owner), ("thread_id", self.thread), ("turn_id", self.turn),
                 ("approval_id", self.approval))
        return {k: v for k, v in pairs if v}


_CURRENT: ContextVar[Scope | None] = ContextVar("tollgate_scope", default=None)


def current() -> Scope | None:
    """The scope of the work running now, if any."""
    return _CURRENT.get()


@contextmanager
def open_scope(scope: Scope) -> Iterator[Scope]:
    """Make ``scope`` current for the block (and every task started in it)."""
    token = _CURRENT.set(scope)
    try:
        yield scope
    finally:
        try:
            _CURRENT.reset(token)
        except ValueError:
            # An async generator closed from another task than the one that iterated it: that
            # context is not ours to reset, and it ends with its task.
            pass
