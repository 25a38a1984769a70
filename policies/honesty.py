"""The honesty gate: a reply may not claim an action that did not happen.

The gate knows the turn's real outcome (from the graph, never from the model). A reply that
claims a completed change while the outcome is anything but ``executed`` is replaced by an
honest one; the verdict records that it was rewritten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["HonestyVerdict", "Outcome", "claims_action", "honest_reply"]

Outcome = Literal["executed", "read", "proposed", "rejected", "expired", "refused", "clarify", "failed", "reply"]
"""What really happened in the turn."""

_VERBS: Final = (
    r"cancel(?:l)?ed|sent|created|scheduled|deleted|removed|trashed|moved|updated|completed|"
    r"marked|snoozed|added|booked|forwarded|archived|rescheduled|emailed|replied|set up|set"
)
_CLAIMS: Final = (
    re.compile(rf"\bI(?:'ve| have|'ll have| just)?\s+(?:now\s+|successfully\s+|already\s+)?(?:{_VERBS})\b", re.I),
    re.compile(rf"\b(?:has|have|was|were|is|are)\s+(?:now\s+|been\s+|successfully\s+)+(?:{_VERBS})\b", re.I),
    re.compile(r"^\s*(?:done|all set|all done|success(?:fully)?)\b", re.I),
    re.compile(rf"(?:^|[.!?]\s+)(?:{_VERBS})\b", re.I | re.M),
    re.compile(r"\bsuccessfully\b", re.I),
)

_HONEST: Final[dict[str, str]] = {
    "proposed": "Nothing has changed yet: {what} is waiting for your approval.",
    "rejected": "OK, I did not {verb}; nothing was changed.",
    "expired": "That approval expired, so I did not {verb}; nothing was changed.",
    "refused": "I can't do that here, so nothing was changed.",
    "clarify": "I haven't changed anything; I need a little more detail first.",
    "failed": "That didn't go through, so nothing was changed.",
    "read": "I only looked things up; nothing was changed.",
    "reply": "I haven't changed anything.",
}


def claims_action(reply: str) -> bool:
    """Whether ``reply`` claims that a change was made."""
    return any(p.search(reply) for p in _CLAIMS)


@dataclass(frozen=True, slots=True)
class HonestyVerdict:
    """The reply to send and whether the gate rewrote it."""

    text: str
    """The reply."""
    rewritten: bool
    """Whether the original claimed an action that did not happen."""


def honest_reply(reply: str, *, outcome: Outcome, what: str = "this change", verb: str = "do it") -> HonestyVerdict:
    """Return ``reply`` unless it claims a change the outcome does not back; then an honest one."""
    if outcome == "executed" or not claims_action(reply):
        return HonestyVerdict(reply, False)
    template = _HONEST.get(outcome, _HONEST["reply"])
    return HonestyVerdict(template.format(what=what, verb=verb), True)
