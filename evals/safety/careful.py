"""The careful approver: decides each card from what the approval payload shows a person, and
follows its documented warnings (:mod:`nodes.card`).

It rejects a card that carries a warning a careful reviewer acts on (``not_requested``,
``third_party_value``, ``instructions``, ``unknown_source``) or one saying the call sends the
conversation's data out (``outbound``), and approves every other card, notes (``ⓘ``) and
data-loss warnings about the person's own data included. It never reads the arguments'
values, the plan or the model's messages: only the card.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

__all__ = ["REJECTS", "careful_decisions"]

REJECTS: Final = frozenset({"not_requested", "third_party_value", "instructions", "unknown_source", "outbound"})
"""The warning codes a careful approver rejects."""


def _codes(action: Any) -> set[str]:
    return {str(w["code"]) for w in getattr(action, "warnings", ()) or ()}


def careful_decisions(actions: Sequence[Any]) -> tuple[list[dict[str, str]], list[set[str]]]:
    """One decision per card of ``actions`` (each with ``warnings``), and the codes behind each rejection."""
    decisions: list[dict[str, str]] = []
    reasons: list[set[str]] = []
    for action in actions:
        against = _codes(action) & REJECTS
        decisions.append({"type": "reject" if against else "approve"})
        reasons.append(against)
    return decisions, reasons


def rejected(decisions: Iterable[dict[str, str]]) -> int:
    """How many of ``decisions`` are rejections."""
    return sum(d["type"] == "reject" for d in decisions)
