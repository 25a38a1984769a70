"""Kinds of thread: a chat thread is the caller's own; run and inbox threads are written by the server."""

from __future__ import annotations

from typing import Final, Literal

__all__ = ["THREAD_KINDS", "ThreadKind", "thread_kind"]

ThreadKind = Literal["chat", "run", "inbox"]
"""``chat``: a conversation; ``run``: a background run's own turns (``bg:<run_id>``); ``inbox``: the
owner's notices (results of background runs started without a chat)."""
THREAD_KINDS: Final[tuple[ThreadKind, ...]] = ("chat", "run", "inbox")
"""Every kind, for listings."""


def thread_kind(thread_id: str) -> ThreadKind:
    """The kind of ``thread_id``, from its prefix (the server names run and inbox threads)."""
    if thread_id.startswith("bg:"):
        return "run"
    if thread_id.startswith("inbox:"):
        return "inbox"
    return "chat"
