"""One line of the results table."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Row"]


@dataclass(frozen=True)
class Row:
    """One line of the results table."""

    id: str
    """The benchmark (``P1`` ... ``P7``)."""
    what: str
    """What is measured."""
    value: str
    """The measurement, with the numbers it comes from."""
    goal: str
    """The goal from issue 7 (``-`` for context rows)."""
    ok: bool | None
    """Whether the goal is met (``None``: no goal)."""
    counted: bool = False
    """The goal is on counts (round trips, bytes, runs), not timings: a smoke run holds it too.

    A smoke run's timings are not results (tiny counts, its benchmarks run at once), so it
    judges only these rows, and fails when one misses.
    """
