"""The event contract, as an executable checker.

One *run* is the event stream of one graph invocation (a new turn, or the resume of an
interrupted one). The contract:

* every event has a known type; within a turn, ``seq`` strictly increases across runs;
* every ``tool_start`` has exactly one ``tool_end`` with the same ``call_id`` in the same run;
* a run ends with exactly one terminal event, ``message_complete`` or ``approval_required``,
  and nothing follows it;
* a run that resumes a turn follows a run of that turn that ended in ``approval_required``,
  and its first event is ``approval_decided`` (approval events pair with resumes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tollgate.graph.events import EVENT_TYPES, TurnEvent

__all__ = ["ContractViolation", "EventContract"]

_TERMINAL = frozenset({"message_complete", "approval_required"})


class ContractViolation(AssertionError):
    """The event stream broke the contract."""


@dataclass
class EventContract:
    """Checks runs as they complete; keeps the per-turn state needed across resumes."""

    _last_seq: dict[str, int] = field(default_factory=dict)
    _awaiting: set[str] = field(default_factory=set)
    runs_checked: int = 0
    """How many runs passed."""

    def check_run(self, events: Sequence[TurnEvent], *, resume: bool = False) -> None:
        """Check one run's events; raise :class:`ContractViolation` on the first breach."""
        if not events:
            raise ContractViolation("a run emitted no events")
        turn_id = events[0]["turn_id"]
        if resume:
            if turn_id not in self._awaiting:
                raise ContractViolation(f"resume of turn {turn_id!r} that is not awaiting approval")
            if events[0]["type"] != "approval_decided":
                raise ContractViolation("a resumed run must start with approval_decided")
            self._awaiting.discard(turn_id)
        elif events[0]["type"] == "approval_decided":
            raise ContractViolation("approval_decided outside a resume")
        last = self._last_seq.get(turn_id, 0)
        open_calls: dict[str, str] = {}
        for index, event in enumerate(events):
            if event["type"] not in EVENT_TYPES:
                raise ContractViolation(f"unknown event type {event['type']!r}")
            if event["turn_id"] != turn_id:
                raise ContractViolation("events of two turns in one run")
            if event["seq"] <= last:
                raise ContractViolation(f"seq {event['seq']} after {last} in turn {turn_id!r}")
            last = event["seq"]
            kind = event["type"]
            if kind == "tool_start":
                call = str(event["data"].get("call_id"))
                if call in open_calls:
                    raise ContractViolation(f"tool_start twice for call {call!r}")
                open_calls[call] = kind
            elif kind in ("tool_end", "tool_progress"):
                call = str(event["data"].get("call_id"))
                if call not in open_calls:
                    raise ContractViolation(f"{kind} without tool_start for call {call!r}")
                if kind == "tool_end":
                    del open_calls[call]
            if kind in _TERMINAL and index != len(events) - 1:
                raise ContractViolation(f"{kind} is not the last event of its run")
        if open_calls:
            raise ContractViolation(f"tool_start without tool_end: {sorted(open_calls)!r}")
        terminal = events[-1]["type"]
        if terminal not in _TERMINAL:
            raise ContractViolation(f"run ended with {terminal!r}, not message_complete or approval_required")
        if terminal == "approval_required":
            self._awaiting.add(turn_id)
        self._last_seq[turn_id] = last
        self.runs_checked += 1
