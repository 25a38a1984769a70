"""The compiled turn graph as Studio draws it: every designed edge, and no other."""

from __future__ import annotations

import graph._env  # noqa: F401
from graph.studio import graph


def test_the_drawn_graph_has_exactly_the_designed_edges() -> None:
    edges = {(e.source, e.target) for e in graph.get_graph().edges}
    assert edges == {
        ("__start__", "picker"),
        ("picker", "tier_gate"), ("picker", "naturalize"),
        ("tier_gate", "id_validation"), ("tier_gate", "naturalize"),
        ("id_validation", "execute"), ("id_validation", "propose"), ("id_validation", "naturalize"),
        ("propose", "approval"), ("propose", "naturalize"),
        ("approval", "execute"), ("approval", "naturalize"),
        ("execute", "picker"), ("execute", "offer"), ("execute", "naturalize"),
        ("offer", "propose"), ("offer", "naturalize"),
        ("naturalize", "__end__"),
    }
