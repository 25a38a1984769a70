"""Typed turn events, written through LangGraph's custom stream with a per-turn sequence."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from typing_extensions import NotRequired, TypedDict  # pydantic needs these on Python < 3.12

__all__ = ["EVENT_TYPES", "EventSink", "EventType", "TurnEvent"]

EventType = Literal[
    "planner_decision",
    "tool_start",
    "tool_progress",
    "tool_end",
    "approval_required",
    "approval_decided",
    "token_delta",
    "reasoning_delta",
    "model_fallback",
    "message_complete",
    "error",
]
EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))


class TurnEvent(TypedDict):
    """One event of a turn. ``data`` depends on ``type``; it never carries secrets or tokens."""

    type: EventType
    """The event kind."""
    seq: int
    """Strictly increasing within a turn, across its interrupt and resume."""
    turn_id: str
    """The turn this belongs to."""
    ts: str
    """Server time, ISO 8601 UTC."""
    data: dict[str, Any]
    """Kind-specific payload."""
    thread_id: NotRequired[str]
    """Added by the runner for transports."""
    id: NotRequired[int]
    """The event's id in the event log (global, increasing): its SSE id, added once it is recorded."""


class EventSink:
    """Emits a turn's events to the stream writer, numbering them from the state's ``seq``."""

    def __init__(self, writer: Callable[[Any], None], turn_id: str, seq: int) -> None:
        self._writer = writer
        self.turn_id = turn_id
        self.seq = seq

    def emit(self, type_: EventType, **data: Any) -> TurnEvent:
        """Write one event and return it."""
        self.seq += 1
        event = TurnEvent(
            type=type_, seq=self.seq, turn_id=self.turn_id, ts=datetime.now(UTC).isoformat(), data=data
        )
        self._writer({"tollgate_event": event})
        return event
